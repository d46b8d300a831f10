"""Noise injectors, one per subtype of the noise taxonomy (docs/architecture.md §3), in one registry (``INJECTORS``).

Importing this package registers all thirteen. To add a subtype: subclass
:class:`~ehrgym.bench.noise.base.Injector`, set ``subtype``, implement ``inject`` and decorate the
class with :func:`~ehrgym.bench.noise.base.register_injector`.
"""

from ehrgym.bench.noise import query, record, value  # noqa: F401  (registration)
from ehrgym.bench.noise.base import INJECTORS, InjectContext, Injection, Injector, get_injector

__all__ = ["INJECTORS", "InjectContext", "Injection", "Injector", "get_injector"]
