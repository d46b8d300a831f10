"""Benchmark: tasks, templates, noise injectors, the Clean–Noise pair builder."""
