"""One small registry type for every pluggable concept (agents, noise injectors, templates, report
tables and figures, data sources …).

A registry maps names to objects. Built-in entries register themselves when their module is
imported; a registry can name such modules up front (``builtin_modules``) so they are imported
only when first needed. Other packages plug in through a Python entry-point group
(``[project.entry-points."ehrgym.agents"]`` in their ``pyproject.toml``): each entry point names a
module (imported, so its decorators register) or an object (registered under the entry point's
name). Plugins are discovered once, the first time a name is looked up or the names are listed.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from importlib.metadata import entry_points
from types import ModuleType
from typing import Generic, TypeVar

from ehrgym.errors import EhrGymError

T = TypeVar("T")
_MISSING = object()

ENTRY_POINT_PREFIX = "ehrgym."


class RegistryError(EhrGymError, LookupError):
    """An unknown name, a name registered twice, or a plugin that fails to load."""


class Registry(Mapping[str, T], Generic[T]):
    """Name → object, in registration order, open to entry-point plugins.

    ``kind`` names the concept in messages ("agent", "noise injector"); ``group`` is the
    entry-point group plugins use (default ``ehrgym.<kind>s`` with spaces as underscores);
    ``error`` is the exception type raised for unknown names (a :class:`RegistryError` subclass or
    any kit error type, so callers keep their own error hierarchy); ``adapt`` turns an object a
    plugin's entry point names into a registry entry (e.g. an agent class into its entry).
    """

    def __init__(self, kind: str, *, group: str | None = None, builtin_modules: Mapping[str, str] | None = None,
                 error: type[Exception] = RegistryError,
                 adapt: Callable[[str, object], T] | None = None) -> None:
        self.kind = kind
        self.adapt = adapt  # turns an object named by a plugin entry point into an entry
        self.group = group or ENTRY_POINT_PREFIX + kind.replace(" ", "_") + "s"
        self.builtin_modules = dict(builtin_modules or {})
        self.error = error
        self._entries: dict[str, T] = {}
        self._plugins_loaded = False

    # -- registering --------------------------------------------------------------------------
    def add(self, name: str, obj: T, *, same: Callable[[T, T], bool] | None = None) -> T:
        """Register ``obj`` under ``name``; registering an equal object again is a no-op (reimports)."""
        if name in self._entries:
            prev = self._entries[name]
            equal = same(prev, obj) if same else (prev is obj or prev == obj)
            if not equal:
                raise self.error(f"{self.kind} {name!r} is registered twice ({prev!r} and {obj!r})")
            return prev
        self._entries[name] = obj
        return obj

    def decorator(self, name: str) -> Callable[[T], T]:
        """``@registry.decorator("name")`` registers the decorated object."""
        def deco(obj: T) -> T:
            self.add(name, obj)
            return obj
        return deco

    # -- looking up ---------------------------------------------------------------------------
    def get(self, name: str, default: object = _MISSING) -> T:  # type: ignore[override]
        """The entry ``name`` (importing its built-in module or plugins when needed); an unknown
        name raises ``error`` unless a ``default`` is given."""
        if default is not _MISSING and name not in self._entries and name not in self.builtin_modules:
            self.load_plugins()
            return self._entries.get(name, default)  # type: ignore[return-value]
        if name not in self._entries and name in self.builtin_modules:
            importlib.import_module(self.builtin_modules[name])
        if name not in self._entries:
            self.load_plugins()
        try:
            return self._entries[name]
        except KeyError:
            raise self.error(f"unknown {self.kind} {name!r}; choose one of {self.names()} (plugins register "
                             f"through the entry-point group {self.group!r})") from None

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def names(self) -> list[str]:
        """Every known name, built-in (imported or not) and plugin, sorted."""
        self.load_plugins()
        return sorted(set(self.builtin_modules) | set(self._entries))

    def loaded(self) -> dict[str, T]:
        """The registered entries, in registration order (nothing is imported)."""
        return dict(self._entries)

    def load_all(self) -> dict[str, T]:
        """Import every built-in module and plugin, then return the entries in registration order."""
        for module in dict.fromkeys(self.builtin_modules.values()):
            importlib.import_module(module)
        self.load_plugins()
        return dict(self._entries)

    def __iter__(self) -> Iterator[str]:
        self.load_plugins()
        return iter(list(self._entries))

    def __len__(self) -> int:
        self.load_plugins()
        return len(self._entries)

    # -- plugins ------------------------------------------------------------------------------
    def load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        for ep in sorted(entry_points(group=self.group), key=lambda e: (e.name, e.value)):
            try:
                loaded = ep.load()
            except Exception as exc:  # a broken plugin must say which one it is
                raise self.error(f"{self.kind} plugin {ep.name!r} ({ep.value}) from entry-point group "
                                 f"{self.group!r} failed to load: {type(exc).__name__}: {exc}") from exc
            if not isinstance(loaded, ModuleType) and ep.name not in self._entries:
                self.add(ep.name, self.adapt(ep.name, loaded) if self.adapt else loaded)  # type: ignore[arg-type]

    def reset_plugins(self) -> None:
        """Look for plugins again on the next lookup (after installing one at run time)."""
        self._plugins_loaded = False
