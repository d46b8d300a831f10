"""Orchestration: generate every table, write them in bulk to a temporary DuckDB file, record the
bookkeeping, then move the file into place (no half-written database is ever left behind)."""

from __future__ import annotations

import os
import queue
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from ehrgym.db.connect import content_hash, table_row_counts, write_meta
from ehrgym.db.schema import create_mimic_schema, mimic_schema
from ehrgym.db.synth.timeline import Cohort, build_cohort
from ehrgym.db.synth.writer import TableData, insert
from ehrgym.errors import DatabaseError

RELEASE = "ehrgym-synth-6"
"""Generator version: bumped whenever the data of a given ``(patients, seed)`` change (2: denser chartevents; 3: the
demo catalog's breadth, MIMIC-IV volumes, outpatient rows and text results, calmer vitals; 4: reference lab items'
results without a number; 5: numbers stored only as text in lab and chart rows, chart rows without a number,
susceptibilities without an MIC; 6: cultures repeated during a stay, single-bottle blood sets), so
that a cached database of an older generator is rebuilt, not reused."""
COMMIT_ROWS = 500_000
"""Rows per transaction: each commit costs an fsync and a checkpoint, but an open transaction holds
memory (a single transaction for a 10k-patient build peaks ~25% higher)."""


def _rng(seed: int, stream: str) -> np.random.Generator:
    """An independent generator per stream, so that changing one generator never shifts another."""
    return np.random.default_rng(np.random.SeedSequence([seed & 0xFFFFFFFF, seed >> 32 & 0xFFFFFFFF,
                                                         zlib.crc32(stream.encode())]))


@dataclass
class Context:
    """What generators share: the cohort and intermediate results of earlier stages."""
    cohort: Cohort
    seed: int
    shared: dict[str, Any]

    def rng(self, stream: str) -> np.random.Generator:
        return _rng(self.seed, stream)


Stage = Callable[[Context], Iterable[TableData]]


def _stages() -> list[tuple[str, Stage]]:
    from ehrgym.db.synth import coding, icu, labs, meds, micro, orders, outpatient, timeline

    def encounters(ctx: Context) -> list[TableData]:
        c = ctx.cohort
        return [timeline.patients_table(c), timeline.admissions_table(c),
                timeline.transfers_table(ctx.rng("transfers"), c), timeline.services_table(c),
                timeline.icustays_table(c), timeline.provider_table(c), timeline.caregiver_table(c)]

    def laboratory(ctx: Context) -> Iterator[TableData]:
        visits = outpatient.clinic_visits(ctx.rng("clinic"), ctx.cohort)
        ctx.shared["clinic_visits"] = visits
        draws: list[tuple[np.ndarray, np.ndarray]] = []
        yield from labs.generate(ctx.rng("labs"), ctx.cohort, visits, draws)
        ctx.shared["lab_draws"] = (np.concatenate([d[0] for d in draws]), np.concatenate([d[1] for d in draws]))

    def medications(ctx: Context) -> list[TableData]:
        plan = meds.plan(ctx.rng("med-plan"), ctx.cohort)
        order_tables, poe_seq = orders.generate(ctx.rng("orders"), ctx.cohort, plan, ctx.shared.pop("lab_draws"))
        return order_tables + meds.generate(ctx.rng("meds"), ctx.cohort, plan, poe_seq)

    # Every stage draws from its own streams, so the order only schedules the work: the ICU stage first, as
    # its chartevents chunks are quick to make and long to write, so DuckDB writes them while numpy makes the
    # labs (the slowest generator), and so on.
    return [
        ("encounters", encounters),
        ("icu", lambda ctx: icu.generate(ctx.rng("icu"), ctx.cohort, ctx.rng("chartevents"))),
        ("labs", laboratory),
        ("coding", lambda ctx: coding.generate(ctx.rng("coding"), ctx.cohort)),
        ("micro", lambda ctx: micro.generate(ctx.rng("micro"), ctx.cohort, ctx.shared["clinic_visits"])),
        ("medications", medications),
    ]


def generate_tables(patients: int, seed: int) -> Iterator[TableData]:
    """Yield every synthetic table (as Arrow-backed :class:`TableData`) in build order."""
    if patients < 1:
        raise ValueError(f"patients must be >= 1, got {patients}")
    ctx = Context(build_cohort(_rng(seed, "cohort"), patients), seed, {})
    for _, stage in _stages():
        yield from stage(ctx)


_DONE = object()


def _prefetch(patients: int, seed: int, depth: int = 2) -> Iterator[TableData]:
    """Yield :func:`generate_tables` from a background thread, so that numpy generation of the next
    table overlaps DuckDB's insertion of the current one (both release the GIL). Same order, same data."""
    box: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def offer(item: Any) -> bool:
        while not stop.is_set():
            try:
                box.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for table in generate_tables(patients, seed):
                if not offer(table):
                    return
            offer(_DONE)
        except BaseException as exc:  # handed to the consumer, re-raised there
            offer(exc)

    worker = threading.Thread(target=produce, name="ehrgym-synth-generate", daemon=True)
    worker.start()
    try:
        while True:
            item = box.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        worker.join(timeout=5)


def write_tables(con: duckdb.DuckDBPyConnection, tables: Iterable[TableData],
                 on_written: Callable[[TableData, bool], None] | None = None) -> set[str]:
    """Create the schema and insert ``tables`` (chunks of a table may follow each other) in transactions
    of about ``COMMIT_ROWS`` rows; ``on_written(data, first chunk of its table)`` follows each insert.
    Returns the names of the tables written."""
    con.execute("BEGIN TRANSACTION")
    create_mimic_schema(con)
    written: set[str] = set()
    pending = 0
    for data in tables:
        pending += insert(con, data)
        if pending >= COMMIT_ROWS:
            con.execute("COMMIT")
            con.execute("BEGIN TRANSACTION")
            pending = 0
        first = data.name not in written
        written.add(data.name)
        if on_written is not None:
            on_written(data, first)
    con.execute("COMMIT")
    return written


def build_synthetic_database(out: str | Path, patients: int, seed: int, progress: bool = True,
                             overwrite: bool = False) -> dict[str, Any]:
    """Build the synthetic hospital at ``out`` and return its bookkeeping record.

    Deterministic: the same ``(patients, seed)`` gives the same ``content_hash``.
    """
    from tqdm import tqdm

    out = Path(out)
    if patients < 1:
        raise DatabaseError(f"--patients must be at least 1 (got {patients})")
    if out.exists() and not overwrite:
        raise DatabaseError(f"{out} already exists; pass overwrite=True (CLI: --force) to replace it, "
                            f"or choose another --out path")
    if out.is_dir():
        raise DatabaseError(f"{out} is a directory; --out must be a file path such as data/synth.duckdb")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    for stale in (tmp, tmp.with_name(tmp.name + ".wal")):
        stale.unlink(missing_ok=True)

    started = time.perf_counter()
    try:
        con = duckdb.connect(str(tmp))
        try:
            con.execute("SET enable_progress_bar = false")  # the tqdm bar reports progress
            # Few transactions (write_tables): one commit (fsync + checkpoint) per COMMIT_ROWS rows instead
            # of one per statement; a failed build is discarded with its temporary file anyway.
            bar = tqdm(total=len(mimic_schema()), desc=f"synth {patients} patients", unit="table",
                       disable=not progress)

            def advance(data: TableData, first_chunk: bool) -> None:
                if first_chunk:
                    bar.update(1)
                bar.set_postfix_str(data.name)

            written = write_tables(con, _prefetch(patients, seed), advance)
            bar.close()
            missing = sorted(set(mimic_schema()) - written)
            if missing:
                raise DatabaseError(f"synthetic generator produced no data for {missing} (internal error)")
            counts = table_row_counts(con)
            info: dict[str, Any] = {
                "source": "synthetic",
                "release": RELEASE,
                "seed": int(seed),
                "patients": int(patients),
                "content_hash": content_hash(con),
                "table_rows": counts,
            }
            info["build_seconds"] = round(time.perf_counter() - started, 3)
            write_meta(con, info)
            con.execute("CHECKPOINT")
        finally:
            con.close()
        if out.exists():
            out.unlink()
        os.replace(tmp, out)
    except BaseException:
        for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
            leftover.unlink(missing_ok=True)
        raise
    return info
