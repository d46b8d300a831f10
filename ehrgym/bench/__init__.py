"""Benchmark: tasks, templates, noise injectors, the Clean–Noise pair builder.

Entry points: :func:`ehrgym.bench.build.build_benchmark` (``ehrgym bench build``) and
:func:`ehrgym.bench.dataset.load_benchmark`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["build_benchmark", "load_benchmark", "Benchmark"]


def __getattr__(name: str) -> Any:  # lazy: importing ehrgym.bench stays cheap
    if name == "build_benchmark":
        from ehrgym.bench.build import build_benchmark

        return build_benchmark
    if name in ("load_benchmark", "Benchmark"):
        from ehrgym.bench import dataset

        return getattr(dataset, name)
    raise AttributeError(name)
