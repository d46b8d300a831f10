"""``ehrgym db info`` and ``ehrgym db load-mimic`` through the command line."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from ehrgym.cli import cli
from ehrgym.db.mimic import MimicLoadWarning, load_mimic
from ehrgym.db.schema import mimic_schema
from ehrgym.errors import DatabaseError, LoaderError

from mimic_fakes import make_source

REPO = Path(__file__).resolve().parents[1]
ROWS = {"patients": 3, "admissions": 4, "labevents": 5}


@pytest.fixture()
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture()
def fake_db(tmp_path: Path) -> Path:
    out = tmp_path / "fake.duckdb"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MimicLoadWarning)
        load_mimic(make_source(tmp_path / "src", rows=ROWS), out, progress=False)
    return out


def _table_line(output: str, qualified: str) -> str:
    return next(line for line in output.splitlines() if line.startswith(qualified + " "))


def test_info_prints_bookkeeping_and_row_counts(runner, fake_db):
    result = runner.invoke(cli, ["db", "info", str(fake_db)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "source        mimic-iv" in out and "release       unknown" in out
    assert "seed          -" in out and "patients      3" in out
    assert "validated     no (release not recognised)" in out
    assert _table_line(out, "mimiciv_hosp.labevents").split()[-1] == "5"
    assert _table_line(out, "mimiciv_icu.chartevents").split()[-1] == "0"
    assert sum(1 for spec in mimic_schema().values() if _table_line(out, spec.qualified)) == 31
    assert out.splitlines()[-1].split() == ["total", "12"]


def test_info_json(runner, fake_db):
    result = runner.invoke(cli, ["db", "info", "--json", str(fake_db)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["source"] == "mimic-iv" and data["patients"] == 3
    assert data["row_counts"] == data["table_rows"]
    assert len(data["content_hash"]) == 64


def test_info_on_the_demo(runner, demo_db):
    result = runner.invoke(cli, ["db", "info", str(demo_db)])
    assert result.exit_code == 0, result.output
    assert "source        mimic-iv-demo" in result.output and "release       2.2" in result.output
    assert "missing       chartevents (created empty)" in result.output
    assert _table_line(result.output, "mimiciv_hosp.labevents").split()[-1] == "107,727"


def test_info_missing_file(runner, tmp_path):
    result = runner.invoke(cli, ["db", "info", str(tmp_path / "missing.duckdb")])
    assert result.exit_code != 0
    assert isinstance(result.exception, DatabaseError)
    assert "does not exist" in str(result.exception) and "ehrgym db synth" in str(result.exception)


def test_info_missing_file_through_the_entry_point(tmp_path):
    """The installed entry point turns kit errors into one line on stderr and exit status 2."""
    proc = subprocess.run([sys.executable, "-c", "from ehrgym.cli import main; main()", "db", "info",
                           str(tmp_path / "missing.duckdb")], capture_output=True, text=True, cwd=REPO,
                          timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: database ") and "does not exist" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_load_mimic_command(runner, tmp_path):
    src = make_source(tmp_path / "src", rows=ROWS, demo=True, skip=("chartevents",))
    out = tmp_path / "data" / "loaded.duckdb"
    result = runner.invoke(cli, ["db", "load-mimic", str(src), "--out", str(out), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert out.is_file()
    assert "source        mimic-iv-demo" in result.output
    assert "missing       chartevents (created empty)" in result.output
    assert _table_line(result.output, "mimiciv_hosp.admissions").split()[-1] == "4"
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warned) == 2
    assert any("release not recognised" in w for w in warned)
    assert any("no icu/chartevents.csv.gz; created mimiciv_icu.chartevents empty" in w for w in warned)


def test_load_mimic_refuses_to_overwrite_without_force(runner, tmp_path, fake_db):
    src = make_source(tmp_path / "src2", rows={"patients": 1})
    before = fake_db.read_bytes()
    result = runner.invoke(cli, ["db", "load-mimic", str(src), "--out", str(fake_db), "--no-progress"])
    assert isinstance(result.exception, DatabaseError) and "--force" in str(result.exception)
    assert fake_db.read_bytes() == before
    result = runner.invoke(cli, ["db", "load-mimic", str(src), "--out", str(fake_db), "--no-progress", "--force"])
    assert result.exit_code == 0, result.output
    assert "patients      1" in result.output


def test_load_mimic_missing_table_file(runner, tmp_path):
    src = make_source(tmp_path / "src", rows=ROWS, skip=("labevents",))
    out = tmp_path / "x.duckdb"
    result = runner.invoke(cli, ["db", "load-mimic", str(src), "--out", str(out), "--no-progress"])
    assert isinstance(result.exception, LoaderError)
    assert "hosp/labevents.csv.gz" in str(result.exception)
    assert not out.exists()


def test_load_mimic_wrong_directory_through_the_entry_point(tmp_path):
    src = make_source(tmp_path / "src", rows=ROWS)
    proc = subprocess.run([sys.executable, "-c", "from ehrgym.cli import main; main()", "db", "load-mimic",
                           str(src / "icu"), "--out", str(tmp_path / "x.duckdb"), "--no-progress"],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 2
    assert "'icu' module folder" in proc.stderr and f"load-mimic {src}" in proc.stderr
