"""The results store of one run: ``RUNDIR/run.json`` and the append-only ``RUNDIR/episodes.jsonl``.

Durability contract (what makes a long paid run safe to kill):

* every finished episode is one JSON line, written by ONE writer (the runner's main process),
  flushed and ``fsync``'d before the runner counts it as done; earlier lines are never rewritten;
* a crash can only leave a *torn last line* (a partial write without its newline); opening the
  store for appending cuts that partial line off (it was never a finished episode, so it is
  simply run again), and readers ignore it;
* a rerun reads the finished ``(task_id, trial)`` keys and skips them, so nothing is lost and
  nothing is run twice. When the same key does appear twice (only with
  ``retry_errors=True``, which re-runs infrastructure errors), the LAST record wins.

A lock file keeps two runners from appending to the same run directory at once.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any, Iterable, Iterator

from ehrgym.errors import EhrGymError, TaskFormatError
from ehrgym.eval.records import EpisodeRecord

EPISODES_FILE = "episodes.jsonl"
RUN_FILE = "run.json"
LOCK_FILE = ".lock"


class RunStoreError(EhrGymError):
    """A run directory cannot be used (locked by another runner, or holds a different run)."""


def _complete_prefix_length(path: Path) -> int:
    """Byte length of the file up to and including its last newline."""
    size = path.stat().st_size
    if size == 0:
        return 0
    with open(path, "rb") as fh:
        pos = size
        block = 1 << 16
        while pos > 0:
            start = max(0, pos - block)
            fh.seek(start)
            chunk = fh.read(pos - start)
            idx = chunk.rfind(b"\n")
            if idx >= 0:
                return start + idx + 1
            pos = start
    return 0


def iter_episode_dicts(path: str | Path) -> Iterator[dict[str, Any]]:
    """Complete records of an ``episodes.jsonl`` (a torn last line is ignored)."""
    path = Path(path)
    if not path.exists():
        return
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if not raw.endswith(b"\n"):
                return  # torn last line of a crashed writer
            line = raw.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise TaskFormatError(f"{path}:{lineno}: corrupt episode record ({exc.msg}); the store is "
                                      f"append-only, so this line was damaged outside the runner") from exc


class EpisodeStore:
    """Append-only JSONL of :class:`EpisodeRecord` in a run directory."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / EPISODES_FILE
        self._fh: Any = None
        self._lock_fh: Any = None

    # -- reading -----------------------------------------------------------------------------
    def iter_dicts(self) -> Iterator[dict[str, Any]]:
        return iter_episode_dicts(self.path)

    def records(self) -> list[EpisodeRecord]:
        """One record per (task_id, trial): the last one written."""
        latest: dict[tuple[str, int], EpisodeRecord] = {}
        for data in self.iter_dicts():
            rec = EpisodeRecord.from_dict(data)
            latest[rec.key] = rec
        return list(latest.values())

    def finished(self, retry_errors: bool = False) -> dict[tuple[str, int], str]:
        """Finished keys -> termination (infrastructure errors left out when ``retry_errors``)."""
        out: dict[tuple[str, int], str] = {}
        for data in self.iter_dicts():
            key = (str(data["task_id"]), int(data["trial"]))
            out[key] = str(data.get("termination"))
        if retry_errors:
            out = {k: v for k, v in out.items() if v != "infrastructure_error"}
        return out

    # -- writing -----------------------------------------------------------------------------
    def open(self) -> int:
        """Lock the run directory and open for appending; returns the bytes of a torn line cut off."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._lock_fh = open(self.run_dir / LOCK_FILE, "a+")
        try:
            fcntl.flock(self._lock_fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            self._lock_fh.close()
            self._lock_fh = None
            raise RunStoreError(f"{self.run_dir} is being written by another runner; wait for it to finish "
                                f"or use another --out directory") from exc
        dropped = 0
        if self.path.exists():
            size = self.path.stat().st_size
            keep = _complete_prefix_length(self.path)
            if keep < size:
                with open(self.path, "r+b") as fh:
                    fh.truncate(keep)
                    fh.flush()
                    os.fsync(fh.fileno())
                dropped = size - keep
        self._fh = open(self.path, "ab")
        return dropped

    def append(self, records: Iterable[EpisodeRecord | dict[str, Any]]) -> int:
        """Append records as JSON lines, then flush and fsync once; returns how many were written."""
        return self.append_lines([encode_record(rec) for rec in records])

    def append_lines(self, lines: list[str]) -> int:
        """Append pre-encoded records (:func:`encode_record`, e.g. encoded in worker processes)."""
        if self._fh is None:
            raise RunStoreError("store not opened for writing; call open() first")
        if not lines:
            return 0
        if any("\n" in line for line in lines):
            raise RunStoreError("an encoded episode record contains a newline; encode with encode_record()")
        self._fh.write(("\n".join(lines) + "\n").encode("utf-8"))
        self._fh.flush()
        os.fsync(self._fh.fileno())
        return len(lines)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._lock_fh is not None:
            fcntl.flock(self._lock_fh.fileno(), fcntl.LOCK_UN)
            self._lock_fh.close()
            self._lock_fh = None

    def __enter__(self) -> "EpisodeStore":
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def encode_record(rec: EpisodeRecord | dict[str, Any]) -> str:
    """One record as its JSON line (without the newline)."""
    data = rec.to_dict() if isinstance(rec, EpisodeRecord) else rec
    return json.dumps(data, ensure_ascii=False, default=_json_default, separators=(",", ":"))


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def write_run_config(run_dir: str | Path, config: dict[str, Any]) -> None:
    """Write ``run.json`` atomically (temp file + rename)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / (RUN_FILE + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(config, fh, indent=2, sort_keys=True, default=_json_default)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, run_dir / RUN_FILE)


def read_run_config(run_dir: str | Path) -> dict[str, Any] | None:
    path = Path(run_dir) / RUN_FILE
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RunStoreError(f"{path} is not valid JSON ({exc.msg}); delete it to start the run afresh") from exc
