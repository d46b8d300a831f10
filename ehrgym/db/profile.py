"""Schema profiles: which tables an episode exposes, under which schemas, and how they are introduced.

The kit's own databases use the 31-table MIMIC-IV profile (:func:`mimic_profile`). A database built
for an external benchmark (``ehrgym external build``) stores its profile in its bookkeeping
(``ehrgym_meta.build_info``, key ``schema_profile``), so every episode connection, the SQL gate and
the first observation follow that benchmark's schema with no option to pass around.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ehrgym.db.schema import EXPOSED_SCHEMAS, ColumnSpec, TableSpec, mimic_schema

META_KEY = "schema_profile"


@dataclass(frozen=True)
class SchemaProfile:
    """The exposed tables (bare name → spec, unique across schemas) and how an agent is told about them."""

    name: str
    tables: tuple[TableSpec, ...]
    description: str = "a MIMIC-IV hospital database"
    current_time: str | None = None   # "now" of the database, told to the agent when set
    # an episode that is not SQL over these tables (a FHIR server: ehrgym.env.fhirtool) names its tools and
    # the text that replaces the table listing in the first observation
    tools: tuple[str, ...] | None = None
    summary: str | None = None

    @property
    def schemas(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(spec.schema for spec in self.tables))

    @property
    def by_name(self) -> dict[str, TableSpec]:
        return {spec.name: spec for spec in self.tables}

    def table_spec(self, name: str) -> TableSpec:
        bare = name.split(".")[-1].lower()
        for spec in self.tables:
            if spec.name == bare:
                return spec
        raise KeyError(f"{name!r} is not a table of the {self.name} schema; known: "
                       f"{', '.join(s.name for s in self.tables)}")

    def search_path_sql(self, catalog: str | None = None) -> str:
        parts = [f"{catalog}.{s}" if catalog else s for s in self.schemas]
        return f"SET search_path = '{','.join(parts)}'"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "description": self.description, "current_time": self.current_time,
                                "tables": [{"schema": spec.module, "name": spec.name,
                                            "columns": [[c.name, c.bigquery_type, c.required] for c in spec.columns]}
                                           for spec in self.tables]}
        if self.tools is not None:
            data["tools"] = list(self.tools)
        if self.summary is not None:
            data["summary"] = self.summary
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SchemaProfile":
        tables = tuple(TableSpec(t["schema"], t["name"], tuple(ColumnSpec(c[0], c[1], bool(c[2])) for c in t["columns"]))
                       for t in data["tables"])
        tools = tuple(str(t) for t in data["tools"]) if data.get("tools") is not None else None
        return cls(str(data["name"]), tables, str(data.get("description") or ""), data.get("current_time"),
                   tools, data.get("summary"))


@lru_cache(maxsize=1)
def mimic_profile() -> SchemaProfile:
    """The kit's default: the 31 MIMIC-IV tables in ``mimiciv_hosp`` and ``mimiciv_icu``."""
    profile = SchemaProfile("mimic-iv", tuple(mimic_schema().values()))
    assert profile.schemas == EXPOSED_SCHEMAS
    return profile


def profile_from_meta(meta: dict[str, Any] | None) -> SchemaProfile:
    """The profile a database's bookkeeping names (MIMIC-IV when it names none)."""
    data = (meta or {}).get(META_KEY)
    return SchemaProfile.from_dict(data) if data else mimic_profile()
