"""Shared fixtures: the MIMIC-IV demo location and small synthetic databases."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# EHRGYM_DEMO_DIR points elsewhere (e.g. from a git worktree whose parent holds no shared/)
DEMO_DIR = Path(os.environ.get("EHRGYM_DEMO_DIR", REPO.parent / "shared" / "mimic-iv-demo-2.2"))
# external benchmarks' question sets (EHRSQL 2024 …): $EHRGYM_EXTERNAL_DIR, else ../shared/external
EXTERNAL_DIR = Path(os.environ.get("EHRGYM_EXTERNAL_DIR") or REPO.parent / "shared" / "external")


@pytest.fixture(scope="session")
def external_dir() -> Path:
    if not (EXTERNAL_DIR / "ehrsql-2024" / "database").is_dir():
        pytest.skip(f"external benchmark data not found at {EXTERNAL_DIR} (set EHRGYM_EXTERNAL_DIR)")
    return EXTERNAL_DIR


@pytest.fixture(scope="session")
def demo_dir() -> Path:
    if not (DEMO_DIR / "hosp").is_dir():
        pytest.skip(f"MIMIC-IV demo not found at {DEMO_DIR}")
    return DEMO_DIR


@pytest.fixture(scope="session")
def synth_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small synthetic hospital (200 patients, seed 7), built once per test session."""
    from ehrgym.db.synth import build_synthetic_database

    path = tmp_path_factory.mktemp("synth") / "synth200.duckdb"
    build_synthetic_database(path, patients=200, seed=7, progress=False)
    return path


@pytest.fixture(scope="session")
def demo_db(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The MIMIC-IV demo loaded by the kit's loader, once per test session."""
    from ehrgym.db.mimic import load_mimic

    path = tmp_path_factory.mktemp("demo") / "demo.duckdb"
    load_mimic(demo_dir, path, progress=False)
    return path
