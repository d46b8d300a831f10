"""The 10k-patient synthetic database the build benchmarks share (``data/bench/synth10k.duckdb``)."""

from __future__ import annotations

import time
from pathlib import Path


def ensure_synthetic(db: Path, patients: int, seed: int = 1) -> bool:
    """Build ``db`` when it is missing, or rebuild it when it is a synthetic database of another generator release
    (``ehrgym.db.synth.RELEASE``), so that timings are measured on the data the kit builds today; a database of
    another source (MIMIC-IV) is used as it is. Returns whether it was (re)built."""
    import duckdb

    from ehrgym.db.connect import read_meta
    from ehrgym.db.synth import RELEASE, build_synthetic_database
    from ehrgym.errors import DatabaseError

    if db.exists():
        try:
            with duckdb.connect(str(db), read_only=True) as con:
                meta = read_meta(con)
        except (duckdb.Error, DatabaseError):
            return False  # not ours to replace
        if meta.get("source") != "synthetic" or meta.get("release") == RELEASE:
            return False
        print(f"{db} was built by generator {meta.get('release')}, not {RELEASE}: rebuilding it")
    db.parent.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    build_synthetic_database(db, patients=patients, seed=seed, progress=True, overwrite=True)
    print(f"built {db} ({patients} patients) in {time.perf_counter() - t:.1f} s")
    return True
