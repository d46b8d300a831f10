"""Recognising a MIMIC-IV release by its row counts and validating the other tables against it.

A release is recognised by its *identity tables* (``patients`` and ``admissions``): when both
hold exactly the published number of rows of a known release, the source is that release and
every other table with a published count must match it too. For the full database a mismatch
means a broken download and is an error; for the demo it is a warning (copies of the demo are
often trimmed on purpose).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ehrgym.db.items import official_row_counts

IDENTITY_TABLES: tuple[str, ...] = ("patients", "admissions")
UNKNOWN_RELEASE = "unknown"


@dataclass(frozen=True)
class KnownRelease:
    """A release whose row counts the kit ships (``ehrgym/resources/mimic_iv_row_counts.csv``)."""

    source: str                       # "mimic-iv" or "mimic-iv-demo"
    release: str                      # "3.1", "2.2"
    counts: tuple[tuple[str, int], ...]
    strict: bool                      # count mismatch -> error (True) or warning (False)

    @property
    def count_map(self) -> dict[str, int]:
        return dict(self.counts)

    def identifies(self, counts: dict[str, int]) -> bool:
        """True when every identity table present in ``counts`` has this release's count."""
        known = self.count_map
        present = [t for t in IDENTITY_TABLES if t in counts and t in known]
        return bool(present) and all(counts[t] == known[t] for t in present)

    def mismatch(self, table: str, rows: int) -> str | None:
        """A sentence when ``rows`` differs from the published count of ``table``, else None."""
        expected = self.count_map.get(table)
        if expected is None or expected == rows:
            return None
        return (f"{table} has {rows:,} rows but {self.label} has {expected:,} "
                f"({rows - expected:+,})")

    @property
    def label(self) -> str:
        name = "MIMIC-IV demo" if self.source == "mimic-iv-demo" else "MIMIC-IV"
        return f"{name} v{self.release}"


@lru_cache(maxsize=1)
def known_releases() -> tuple[KnownRelease, ...]:
    """Releases with published counts: full v3.1 (strict) and demo v2.2 (lenient)."""
    full = tuple((t, f) for t, (f, _) in official_row_counts().items() if f is not None)
    demo = tuple((t, d) for t, (_, d) in official_row_counts().items() if d is not None)
    return (KnownRelease("mimic-iv", "3.1", full, strict=True),
            KnownRelease("mimic-iv-demo", "2.2", demo, strict=False))


def recognise_release(counts: dict[str, int]) -> KnownRelease | None:
    """The known release whose identity-table counts equal ``counts`` (None if none does)."""
    for release in known_releases():
        if release.identifies(counts):
            return release
    return None
