"""A digest of some of the kit's own source files: what a stored artifact records (or is filed under) to say which
code made it — a benchmark's ``builder_code_hash``, a shared result store's namespace."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parent


@lru_cache(maxsize=None)
def source_digest(sources: tuple[str, ...]) -> str:
    """sha256 over the ``.py`` files of ``sources`` (packages or single files, relative to the ``ehrgym`` package),
    each as its path and bytes; computed once per process."""
    files = sorted(f for s in sources for f in ((KIT_ROOT / s).rglob("*.py") if (KIT_ROOT / s).is_dir()
                                                 else [KIT_ROOT / s]))
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.relative_to(KIT_ROOT).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return digest.hexdigest()
