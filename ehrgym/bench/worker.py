"""A build worker process: ``python -m ehrgym.bench.worker`` reads a pickled job on stdin and writes
the pickled result on stdout (see ``Builder._fill_parallel``). A job ``({"call": fn, "args": (...)},
progress_file)`` runs a module-level function instead (the validity report's text probes).

A plain subprocess rather than ``multiprocessing`` so that building never re-imports the caller's
``__main__`` (scripts without a ``__name__ == "__main__"`` guard, notebooks) and never forks a
process that holds DuckDB threads.
"""

from __future__ import annotations

import pickle
import sys


def main() -> None:
    from ehrgym.bench.builder import _fill_worker
    from ehrgym.bench.templates.registry import all_templates

    # Template modules register lexicon variants and unit conversions at import; a worker must see
    # the same registries as the parent, whatever the pickled job happens to import.
    all_templates()

    job = pickle.load(sys.stdin.buffer)
    if isinstance(job[0], dict) and "serve" in job[0]:
        from ehrgym.bench.builder import serve_couples

        serve_couples(job[0]["serve"], sys.stdin.buffer, sys.stdout.buffer)
        return
    if isinstance(job[0], dict) and "call" in job[0]:
        result = job[0]["call"](*job[0]["args"])
    else:
        result = _fill_worker(job)
    pickle.dump(result, sys.stdout.buffer, protocol=pickle.HIGHEST_PROTOCOL)
    sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()
