"""Reference facts shipped with the kit (MIMIC-IV schema, row counts, item dictionary)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def resource_path(name: str) -> Path:
    """Path of a file shipped in ``ehrgym/resources``."""
    return Path(str(resources.files(__package__).joinpath(name)))
