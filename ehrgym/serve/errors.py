"""Errors of the episode server, each with the HTTP status it is answered with."""

from __future__ import annotations

from ehrgym.errors import EhrGymError, EnvironmentStateError, InfrastructureError


class ServeError(EhrGymError):
    """A request the episode server refuses; ``status`` is its HTTP status, ``code`` a stable name."""

    status = 400
    code = "bad_request"

    def __init__(self, message: str, **extra: object) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra

    def to_dict(self) -> dict[str, object]:
        return {"error": self.code, "detail": self.message, **self.extra}


class BadRequest(ServeError):
    status, code = 400, "bad_request"


class UnknownTask(ServeError):
    status, code = 404, "unknown_task"


class SessionNotFound(ServeError):
    """The session is gone: closed, reaped when idle, or lost when the server restarted."""

    status, code = 404, "session_not_found"


class EpisodeOver(ServeError, EnvironmentStateError):
    status, code = 409, "episode_over"


class ServerFull(ServeError):
    status, code = 429, "server_full"


class PayloadTooLarge(ServeError):
    status, code = 413, "payload_too_large"


class ServerUnavailable(InfrastructureError):
    """The client could not reach the server (after its retries) or the server failed (5xx)."""


ERRORS: dict[str, type[ServeError]] = {cls.code: cls for cls in (BadRequest, UnknownTask, SessionNotFound,
                                                                   EpisodeOver, ServerFull, PayloadTooLarge)}
