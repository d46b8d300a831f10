"""Unit conversions a careful analyst knows, keyed by the reference item id.

``to_alt(v) = v * scale + offset`` converts the item's reference unit into ``alt_unit``; a row
recorded in the alternative unit carries ``alt_unit`` in the unit column (and ``alt_itemid``
where MIMIC-IV stores the other unit under its own item, as for temperature).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class UnitConversion:
    itemid: int
    unit: str
    alt_unit: str
    scale: float
    offset: float = 0.0
    alt_itemid: int | None = None
    decimals: int = 2  # how a value in the alternative unit is stored

    def to_alt(self, value: float, decimals: int | None = None) -> float:
        """``value`` in the alternative unit, with ``decimals`` (default: the unit's usual precision)."""
        return round(value * self.scale + self.offset, self.decimals if decimals is None else decimals)

    def from_alt_sql(self, column: str) -> str:
        """SQL converting ``column`` (alternative unit) back into the reference unit."""
        if self.offset:
            return f"(({column}) - {self.offset!r}) / {self.scale!r}"
        return f"({column}) / {self.scale!r}"


CONVERSIONS: dict[int, UnitConversion] = {c.itemid: c for c in (
    UnitConversion(50931, "mg/dL", "mmol/L", 1 / 18.016, decimals=3),  # glucose
    UnitConversion(50912, "mg/dL", "µmol/L", 88.4, decimals=1),  # creatinine
    UnitConversion(51006, "mg/dL", "mmol/L", 0.357, decimals=3),  # urea nitrogen
    UnitConversion(51222, "g/dL", "g/L", 10.0, decimals=1),  # hemoglobin
    UnitConversion(50862, "g/dL", "g/L", 10.0, decimals=1),  # albumin
    UnitConversion(50893, "mg/dL", "mmol/L", 0.2495, decimals=4),  # calcium
    UnitConversion(50960, "mg/dL", "mmol/L", 0.4114, decimals=4),  # magnesium
    UnitConversion(50970, "mg/dL", "mmol/L", 0.3229, decimals=4),  # phosphate
    UnitConversion(50885, "mg/dL", "µmol/L", 17.104, decimals=2),  # bilirubin
    UnitConversion(50813, "mmol/L", "mg/dL", 9.008, decimals=3),  # lactate
    UnitConversion(51003, "ng/mL", "ng/L", 1000.0, decimals=1),  # troponin T
    UnitConversion(50889, "mg/L", "mg/dL", 0.1, decimals=3),  # CRP
    UnitConversion(223761, "°F", "°C", 1 / 1.8, -32 / 1.8, alt_itemid=223762, decimals=3),  # temperature
    UnitConversion(223762, "°C", "°F", 1.8, 32.0, alt_itemid=223761, decimals=2),
    UnitConversion(226512, "kg", "lb", 2.20462, decimals=2),  # admission weight
    UnitConversion(224639, "kg", "lb", 2.20462, decimals=2),  # daily weight
)}


def conversion_for(itemid: int | None) -> UnitConversion | None:
    return CONVERSIONS.get(int(itemid)) if itemid is not None else None
