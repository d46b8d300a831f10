"""Exception hierarchy: every message says what the user can do about it."""


class EhrGymError(Exception):
    """Base class of all errors the kit raises on purpose."""


class SchemaError(EhrGymError):
    """A database does not have the MIMIC-IV schema the kit expects."""


class DatabaseError(EhrGymError):
    """A database file is missing, unreadable or was not built by the kit."""


class LoaderError(EhrGymError):
    """A MIMIC-IV directory cannot be loaded (wrong layout, missing or corrupt files)."""


class OverlayError(EhrGymError):
    """An overlay is malformed or does not fit the database it is applied to."""


class TaskFormatError(EhrGymError):
    """A task file or record is malformed."""


class BenchmarkError(EhrGymError):
    """A benchmark cannot be built or loaded."""


class GateRejection(EhrGymError):
    """The SQL gate refused a query; the message says what is allowed."""


class EnvironmentStateError(EhrGymError):
    """An episode was used out of order (step before reset, step after done)."""


class AgentError(EhrGymError):
    """An agent failed to produce an action."""


class InfrastructureError(EhrGymError):
    """A model server or other infrastructure failed after retries (not a wrong answer)."""


class ResultsError(EhrGymError):
    """Run directories cannot be read as results (missing ``episodes.jsonl``, bad records)."""
