"""Installs: environment.yml agrees with pyproject.toml, and the lock satisfies the declared ranges."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
CONDA_NAMES = {"python-duckdb": "duckdb"}


def _declared() -> dict[str, Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]]
    return {r.name.lower(): r for r in reqs}


def _lock() -> dict[str, Version]:
    out = {}
    for line in (REPO / "requirements" / "lock.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            out[name.lower().replace("_", "-")] = Version(version)
    return out


def test_environment_yml_lists_the_same_packages_and_floors_as_pyproject() -> None:
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    conda, pip = {}, {}
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            for line in dep["pip"]:
                if not line.startswith("-e"):
                    r = Requirement(line)
                    pip[r.name.lower()] = r
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*(.*)", dep)
        assert m, dep
        name, spec = m.groups()
        if name in ("python", "pip"):
            continue
        conda[CONDA_NAMES.get(name, name).lower()] = spec
    declared = _declared()
    assert set(conda) == set(declared), set(conda) ^ set(declared)
    for name, req in declared.items():
        assert conda[name] == str(req.specifier), (name, conda[name], str(req.specifier))
        if req.extras:  # an extra only pip can give (sqlglot[c])
            assert pip[name].extras == req.extras and pip[name].specifier == req.specifier


def test_lock_pins_every_declared_package_inside_its_range() -> None:
    lock = _lock()
    for name, req in _declared().items():
        assert name in lock, f"{name} is declared but not locked: run `make lock`"
        assert lock[name] in req.specifier, f"{name}=={lock[name]} is outside the declared {req.specifier}"


def test_make_installs_with_the_lock() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert "LOCK := requirements/lock.txt" in makefile and '-c $(LOCK) -e ".[$(EXTRAS)]"' in makefile
    assert "EXTRAS ?= dev" in makefile
