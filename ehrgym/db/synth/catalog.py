"""The vocabulary catalog of the synthetic hospital: readers for ``ehrgym/resources/synth/*.csv.gz``
(derived from the MIMIC-IV demo by :mod:`.derive`, ODbL — see the LICENSE.md next to them).

The generators draw *background* entries from these lists by their demo frequency (long-tailed, as in
MIMIC-IV) on top of the condition-driven entries of :mod:`.conditions`; each reader returns plain
arrays/lists so that the draws stay vectorised.
"""

from __future__ import annotations

import csv
import gzip
import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ehrgym.errors import SchemaError
from ehrgym.resources import resource_path

QUANTILES = ("p01", "p10", "p25", "p50", "p75", "p90", "p99")
QUANTILE_Z = np.array([-2.3263, -1.2816, -0.6745, 0.0, 0.6745, 1.2816, 2.3263])
"""Standard-normal z of each quantile: a value is drawn as the piecewise-linear map of a z-score."""


@lru_cache(maxsize=None)
def rows(name: str) -> tuple[dict[str, str], ...]:
    """The rows of ``resources/synth/<name>.csv.gz`` as dicts of strings ('' = missing)."""
    path = resource_path(f"synth/{name}.csv.gz")
    if not path.exists():
        raise SchemaError(f"synthetic vocabulary {path} is missing; regenerate it with "
                          f"`python -m ehrgym.db.synth.derive DEMO_DIR ehrgym/resources/synth`")
    with gzip.open(path, "rt", newline="") as fh:
        return tuple(csv.DictReader(fh))


def _f(text: str, default: float = np.nan) -> float:
    return float(text) if text.strip() else default


def _s(text: str) -> str | None:
    return text if text != "" else None


# ------------------------------------------------------------------ labs

@dataclass(frozen=True)
class LabCatalog:
    itemid: np.ndarray
    label: list[str]
    fluid: list[str]
    category: list[str]
    unit: list[str | None]
    weight: np.ndarray        # demo rows
    p_text: np.ndarray        # share of results without a number
    p_outpatient: np.ndarray
    p_no_range: np.ndarray
    p_comment: np.ndarray
    decimals: np.ndarray
    ref_lower: np.ndarray     # NaN: the item has no reference range
    ref_upper: np.ndarray
    numeric: np.ndarray       # the item has numeric results (quantiles)
    quantiles: np.ndarray     # (items, 7) p01 … p99

    def value(self, item: np.ndarray, z: np.ndarray) -> np.ndarray:
        """Values of catalog rows ``item`` at z-scores ``z``: the demo quantiles, interpolated."""
        z = np.clip(z, QUANTILE_Z[0], QUANTILE_Z[-1])
        k = np.clip(np.searchsorted(QUANTILE_Z, z, side="right") - 1, 0, QUANTILE_Z.size - 2)
        frac = (z - QUANTILE_Z[k]) / (QUANTILE_Z[k + 1] - QUANTILE_Z[k])
        q = self.quantiles
        return q[item, k] + frac * (q[item, k + 1] - q[item, k])


@lru_cache(maxsize=1)
def labs() -> LabCatalog:
    rs = rows("lab_items")
    return LabCatalog(
        itemid=np.array([int(r["itemid"]) for r in rs]),
        label=[r["label"] for r in rs], fluid=[r["fluid"] for r in rs], category=[r["category"] for r in rs],
        unit=[_s(r["unit"]) for r in rs],
        weight=np.array([_f(r["rows"]) for r in rs]),
        p_text=np.array([_f(r["p_text"], 0.0) for r in rs]),
        p_outpatient=np.array([_f(r["p_outpatient"], 0.0) for r in rs]),
        p_no_range=np.array([_f(r["p_no_range"], 1.0) for r in rs]),
        p_comment=np.array([_f(r["p_comment"], 0.0) for r in rs]),
        decimals=np.array([int(_f(r["decimals"], 0)) for r in rs]),
        ref_lower=np.array([_f(r["ref_lower"]) for r in rs]),
        ref_upper=np.array([_f(r["ref_upper"]) for r in rs]),
        numeric=np.array([int(r["n_numeric"]) > 0 for r in rs]),
        quantiles=np.array([[_f(r[q], 0.0) for q in QUANTILES] for r in rs]),
    )


@dataclass(frozen=True)
class Choices:
    """Weighted text choices per owner (a lab item): owner ``i``'s choices are ``start[i]:end[i]``."""
    start: np.ndarray
    end: np.ndarray
    cdf: np.ndarray           # cumulative weight within each owner's block, ending at 1
    labels: list[str | None]
    extra: list[str | None]   # a second text column (comments of text results), or all None

    def draw(self, rng: np.random.Generator, owner: np.ndarray) -> np.ndarray:
        """Index into ``labels`` of one weighted choice per owner (owners must have choices)."""
        u = rng.random(owner.size)
        lo, hi = self.start[owner], self.end[owner]
        # position inside the block: count the block's cdf entries below u (blocks are short)
        pos = lo.copy()
        for step in range(int((hi - lo).max(initial=0))):
            pos += (lo + step < hi - 1) & (self.cdf[np.minimum(lo + step, self.cdf.size - 1)] <= u)
        return pos

    def has(self, owner: np.ndarray) -> np.ndarray:
        return self.end[owner] > self.start[owner]


def _choices(name: str, owners: np.ndarray, label_col: str, extra_col: str | None) -> Choices:
    rs = rows(name)
    pos = {int(o): i for i, o in enumerate(owners)}
    start = np.zeros(owners.size, dtype=np.int64)
    end = np.zeros(owners.size, dtype=np.int64)
    labels: list[str | None] = []
    extra: list[str | None] = []
    weights: list[float] = []
    for _i, r in enumerate(rs):
        o = pos.get(int(r["itemid"]))
        if o is None:
            continue
        if end[o] == 0:
            start[o] = len(labels)
        labels.append(_s(r[label_col]))
        extra.append(_s(r[extra_col]) if extra_col else None)
        weights.append(float(r["rows"]))
        end[o] = len(labels)
    w = np.array(weights)
    cdf = np.zeros(w.size)
    for owner in np.flatnonzero(end > start):
        block = w[start[owner]:end[owner]]
        cdf[start[owner]:end[owner]] = np.cumsum(block) / block.sum()
    return Choices(start, end, cdf, labels, extra)


@lru_cache(maxsize=1)
def lab_texts() -> Choices:
    """Text results (value, comments) of each catalog lab item (indexed like :func:`labs`)."""
    return _choices("lab_text", labs().itemid, "value", "comments")


@lru_cache(maxsize=1)
def lab_comments() -> Choices:
    """Comments on numeric results of each catalog lab item (indexed like :func:`labs`)."""
    return _choices("lab_comments", labs().itemid, "comments", None)


# ------------------------------------------------------------------ codes

@dataclass(frozen=True)
class CodeCatalog:
    code: list[str]
    version: np.ndarray
    title: list[str]
    weight: np.ndarray


def _codes(name: str) -> CodeCatalog:
    rs = rows(name)
    return CodeCatalog([r["icd_code"] for r in rs], np.array([int(r["icd_version"]) for r in rs]),
                       [r["long_title"] for r in rs], np.array([float(r["rows"]) for r in rs]))


@lru_cache(maxsize=1)
def diagnoses() -> CodeCatalog:
    return _codes("diagnoses")


@lru_cache(maxsize=1)
def procedures() -> CodeCatalog:
    return _codes("procedures")


# ------------------------------------------------------------------ drugs, specimens, ICU items

_SPACES = re.compile(r"\s+")


def drug_key(drug: str) -> str:
    """The spelling-insensitive identity of a drug string ('CefTRIAXone' and 'CeftriaXONE' share one)."""
    return _SPACES.sub(" ", drug.strip().lower())


@lru_cache(maxsize=1)
def drugs() -> tuple[dict[str, str], ...]:
    return rows("drugs")


@lru_cache(maxsize=1)
def specimens() -> tuple[dict[str, str], ...]:
    return rows("specimens")


@lru_cache(maxsize=1)
def input_items() -> tuple[dict[str, str], ...]:
    return rows("input_items")


@lru_cache(maxsize=1)
def icu_event_items() -> tuple[dict[str, str], ...]:
    return rows("icu_event_items")
