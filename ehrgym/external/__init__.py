"""External EHR benchmarks run through the kit's agents, with their official metrics (``ehrgym external``)."""

from ehrgym.external.base import ADAPTERS, BuildResult, ExternalAdapter, ExternalDataError, build_external

__all__ = ["ADAPTERS", "BuildResult", "ExternalAdapter", "ExternalDataError", "build_external"]
