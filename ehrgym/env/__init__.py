"""Episode environment: overlays, SQL gate, Python worker, verifier, trajectories, Gymnasium.

- :mod:`ehrgym.env.episode` — ``EhrEnv(db_path, EnvConfig())``: ``reset(task)``, ``step(action)``.
- :mod:`ehrgym.env.gate` — ``SqlGate``: the read-only allow-list (sqlglot + DuckDB's own parser).
- :mod:`ehrgym.env.pool` — warm episode connections (``ConnectionPool``).
- :mod:`ehrgym.env.engine` — one episode connection: hardened settings, query execution with row and
  byte caps, the query watchdog, catalog restore; :mod:`ehrgym.env.sqlserver` — the same connection
  in a child process that is killed above its memory cap or past its time limit (the default).
- :mod:`ehrgym.env.sqltool` — one query: limits, row cap, previews, agent-readable errors.
- :mod:`ehrgym.env.pyworker` — the isolated per-episode Python worker.
- :mod:`ehrgym.env.protocol` — answer protocol text and parsers; :mod:`ehrgym.env.tools` — tool schemas.
- :mod:`ehrgym.env.fhirtool` — the ``fhir_get`` / ``fhir_post`` tools of an episode on a FHIR server
  (MedAgentBench), offered when the database's schema profile names them.
- :mod:`ehrgym.env.verifier` — ``verify(task, answer) -> Verdict``; :mod:`ehrgym.env.trajectory`.
- :mod:`ehrgym.env.gym` — Gymnasium wrapper registered as ``EHRRobustGym-v0``.

Submodules are imported on demand so that ``import ehrgym.env.actions`` stays light.
"""
