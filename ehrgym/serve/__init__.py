"""Episodes over the network: an HTTP/WebSocket episode server, its Python client, an MCP server.

- :mod:`ehrgym.serve.sessions` — ``SessionManager``: live episodes (one :class:`~ehrgym.env.episode.EhrEnv`
  each, over shared warm connection and Python-worker pools), per-session locks, idle reaping,
  capacity limits and idempotent retries by request id. No web framework needed.
- :mod:`ehrgym.serve.http` — the FastAPI app (OpenEnv-shaped ``/reset`` ``/step`` ``/state`` and ``/ws``,
  plus ``/health`` ``/schema`` ``/tasks`` ``/close``); :mod:`ehrgym.serve.client` — ``EpisodeClient``.
- :mod:`ehrgym.serve.mcp` — the same episodes as MCP tools (official ``mcp`` package).

The web and MCP parts need the ``serve`` extra: ``pip install 'ehrgym[serve]'``.
"""
