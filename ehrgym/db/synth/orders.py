"""Provider order entry: ``poe`` and ``poe_detail``.

Orders come from the medication plan (one per prescription), the lab draws (one per draw), the
admission's movements (ADT orders) and its care (general care, nutrition, imaging, respiratory,
blood bank, consults, ECG). ``poe_seq`` numbers a patient's orders chronologically; prescriptions,
pharmacy and eMAR refer to their order through ``poe_id = subject_id-poe_seq``.
"""

from __future__ import annotations

import numpy as np

from ehrgym.db.synth import dictionaries as D
from ehrgym.db.synth.common import DAY, HOUR, MINUTE, NAT, expand, lexorder, rank_within, uniform_int
from ehrgym.db.synth.meds import MedPlan
from ehrgym.db.synth.timeline import Cohort
from ehrgym.db.synth.writer import TableData, cat, ints, ts

# (order_type, order_subtype)
KINDS: tuple[tuple[str, str | None], ...] = (
    ("Medications", None), ("Lab", None), ("ADT orders", "Admit"), ("ADT orders", "Transfer"),
    ("ADT orders", "Discharge"), ("General Care", "Vitals/Monitoring"), ("General Care", "Activity"),
    ("General Care", "Other"), ("General Care", "Tubes/Drains"), ("General Care", "Code status"),
    ("Nutrition", "Diet Order"), ("IV therapy", "IV access"), ("IV therapy", "IV fluids"),
    ("Radiology", "General Xray"), ("Radiology", "CT Scan"), ("Respiratory", "Mechanical Ventilation"),
    ("Respiratory", "Oxygen Therapy"), ("Blood Bank", "Red Cell Product Order"), ("Consults", "Physical Therapy"),
    ("Cardiology", "ECG"),
)
K = {kind: i for i, kind in enumerate(KINDS)}

SERVICE_NAMES = {"MED": "Medicine", "CMED": "Cardiology", "NMED": "Neurology", "OMED": "Oncology",
                 "SURG": "Surgery"}


def _kind(order_type: str, subtype: str | None) -> int:
    return K[(order_type, subtype)]


def generate(rng: np.random.Generator, c: Cohort, plan: MedPlan, lab_draws: tuple[np.ndarray, np.ndarray]
             ) -> tuple[list[TableData], np.ndarray]:
    """Returns (poe, poe_detail) and the ``poe_seq`` of each medication order of ``plan``."""
    m = c.n_admissions
    adm_p, t_p, kind_p, origin_p = [], [], [], []

    def add(adm: np.ndarray, t: np.ndarray, kind: int, origin: np.ndarray | None = None) -> None:
        """Orders at ``t``; entry is stamped to the second, as in MIMIC-IV (medication orders carry their own
        entry time, shared with pharmacy.entertime)."""
        t = np.clip(t, c.admittime[adm], c.dischtime[adm])
        if origin is None:
            t = np.minimum(t - np.mod(t, MINUTE) + rng.integers(0, 60, t.size), c.dischtime[adm])
        adm_p.append(adm)
        t_p.append(t)
        kind_p.append(np.full(adm.size, kind))
        origin_p.append(np.full(adm.size, -1) if origin is None else origin)

    add(plan.adm, plan.ordertime, _kind("Medications", None), np.arange(plan.adm.size))
    lab_adm, lab_t = lab_draws
    add(lab_adm, lab_t - uniform_int(rng, 0, 30, lab_adm.size) * MINUTE, _kind("Lab", None))
    all_adm = np.arange(m)
    add(all_adm, c.admittime + uniform_int(rng, 0, 30, m) * MINUTE, _kind("ADT orders", "Admit"))
    add(all_adm, c.admittime + uniform_int(rng, 5, 60, m) * MINUTE, _kind("General Care", "Code status"))
    add(all_adm, c.admittime + uniform_int(rng, 10, 90, m) * MINUTE, _kind("IV therapy", "IV access"))
    add(all_adm, c.dischtime - uniform_int(rng, 30, 240, m) * MINUTE, _kind("ADT orders", "Discharge"))
    for when in (c.icu_in, c.icu_out, np.where(c.icu, NAT, c.split)):
        sel = np.flatnonzero(when != NAT)
        add(sel, when[sel] - uniform_int(rng, 10, 120, sel.size) * MINUTE, _kind("ADT orders", "Transfer"))
    # daily care orders
    n_days = np.maximum((c.dischtime - c.admittime) // DAY, 0) + 1
    d_adm, d = expand(n_days)
    day_t = c.admittime[d_adm] + d * DAY
    tubes = (c.icu | (rng.random(m) < 0.3))[d_adm]  # a catheter or drain, re-ordered most days
    everyone = np.ones(d_adm.size, dtype=bool)
    for order_kind, rate, who in ((("General Care", "Vitals/Monitoring"), 1.2, everyone),
                                  (("General Care", "Activity"), 0.8, everyone),
                                  (("General Care", "Other"), 1.5, everyone),
                                  (("Nutrition", "Diet Order"), 0.7, everyone),
                                  (("IV therapy", "IV fluids"), 0.6, everyone),
                                  (("General Care", "Code status"), 0.15, everyone),
                                  (("General Care", "Tubes/Drains"), 0.8, tubes)):
        day_i, _ = expand(np.where(who, rng.poisson(rate, d_adm.size), 0))
        add(d_adm[day_i], day_t[day_i] + uniform_int(rng, 60, 20 * 60, day_i.size) * MINUTE, _kind(*order_kind))
    # condition- and ICU-driven orders
    rules = [
        (("Radiology", "General Xray"), c.has("pneumonia") | c.vent | c.has("heart_failure"), c.admittime + HOUR),
        (("Radiology", "CT Scan"), c.has("stroke") | (rng.random(m) < 0.08), c.admittime + 30 * MINUTE),
        (("Respiratory", "Mechanical Ventilation"), c.vent, c.vent_start),
        (("Respiratory", "Oxygen Therapy"), c.has("copd") | c.has("pneumonia"), c.admittime + 90 * MINUTE),
        (("Blood Bank", "Red Cell Product Order"), c.has("gi_bleed") & (rng.random(m) < 0.7), c.admittime + 2 * HOUR),
        (("Consults", "Physical Therapy"), rng.random(m) < 0.3, c.admittime + DAY),
        (("Cardiology", "ECG"), c.has("heart_failure") | c.has("atrial_fibrillation") | c.has("stroke")
         | (c.principal < 0), c.admittime + 20 * MINUTE),
    ]
    for order_kind, mask, when in rules:
        sel = np.flatnonzero(mask)
        add(sel, when[sel] + uniform_int(rng, 0, 60, sel.size) * MINUTE, _kind(*order_kind))

    adm = np.concatenate(adm_p)
    t = np.concatenate(t_p)
    kind = np.concatenate(kind_p)
    origin = np.concatenate(origin_p)
    subj = c.subject_id[c.pat[adm]]
    order = lexorder((origin, kind, t, subj))
    adm, t, kind, origin, subj = adm[order], t[order], kind[order], origin[order], subj[order]
    seq = rank_within(subj) + 1
    med_seq = np.zeros(plan.adm.size, dtype=np.int64)
    med_seq[origin[origin >= 0]] = seq[origin >= 0]
    n = adm.size
    provider = np.where(origin >= 0, plan.provider[np.maximum(origin, 0)], rng.integers(0, len(c.providers), n))
    poe = TableData("poe", {
        "poe_seq": ints(seq),
        "subject_id": ints(subj),
        "hadm_id": ints(c.hadm_id[adm]),
        "ordertime": ts(t),
        "order_type": cat(kind, [k[0] for k in KINDS]),
        "order_subtype": cat(kind, [k[1] for k in KINDS]),
        "transaction_type": cat(np.zeros(n, dtype=np.int64), ["New"]),
        "order_provider_id": cat(provider, c.providers),
        "order_status": cat(np.zeros(n, dtype=np.int64), ["Inactive"]),
    }, exprs={"poe_id": "CAST(subject_id AS VARCHAR) || '-' || CAST(poe_seq AS VARCHAR)"})

    # poe_detail: (field_name, value) pairs for ADT, code status, tubes, imaging and consult orders
    fields: list[str] = []
    values: list[str] = []

    def label(lst: list[str], text: str) -> int:
        if text not in lst:
            lst.append(text)
        return lst.index(text)

    service_names = [SERVICE_NAMES[s] for s in D.SERVICES]
    d_row, d_field, d_value = [], [], []

    def detail(mask: np.ndarray, field: str, value_idx: np.ndarray) -> None:
        rows = np.flatnonzero(mask)
        d_row.append(rows)
        d_field.append(np.full(rows.size, label(fields, field)))
        d_value.append(value_idx[rows])

    svc_idx = np.array([label(values, s) for s in service_names])
    code_idx = np.array([label(values, s) for s in D.CODE_STATUS])
    dnr = c.expire | (c.age >= 85) & (rng.random(m) < 0.3)
    full = np.zeros(n, dtype=np.int64)
    is_kind = {k: kind == i for k, i in K.items()}
    detail(is_kind[("ADT orders", "Admit")], "Admit to", svc_idx[c.service1[adm]])
    detail(is_kind[("ADT orders", "Admit")], "Admit category", full + label(values, "Admit to inpatient"))
    detail(is_kind[("General Care", "Code status")], "Code status", code_idx[dnr[adm].astype(np.int64)])
    detail(is_kind[("ADT orders", "Transfer")], "Transfer to",
           svc_idx[np.where(c.service2[adm] >= 0, c.service2[adm], c.service1[adm])])
    detail(is_kind[("ADT orders", "Discharge")] | is_kind[("ADT orders", "Transfer")], "Admit category",
           full + label(values, "Admit to inpatient"))
    detail(is_kind[("ADT orders", "Discharge")], "Discharge Planning", full + label(values, "Finalized"))
    detail(is_kind[("ADT orders", "Discharge")], "Discharge When", full + label(values, "Discharge Now"))
    detail(is_kind[("General Care", "Tubes/Drains")], "Tubes & Drains type",
           full + label(values, "Indwelling urinary catheter (IUC) - Foley"))
    urgent = np.where(rng.random(n) < 0.3, label(values, "Urgent (within 4 hours)"),
                      label(values, "Routine (within 24 hours)"))
    detail(is_kind[("Radiology", "General Xray")] | is_kind[("Radiology", "CT Scan")], "Level of Urgency", urgent)
    detail(is_kind[("Consults", "Physical Therapy")], "Consult Status", full + label(values, "Accepted"))
    detail(is_kind[("IV therapy", "IV fluids")] & (rng.random(n) < 0.3), "Indication",
           full + label(values, "Maintenance fluids"))
    rows = np.concatenate(d_row)
    f = np.concatenate(d_field)
    v = np.concatenate(d_value)
    o = lexorder((f, rows))
    rows, f, v = rows[o], f[o], v[o]
    poe_detail = TableData("poe_detail", {
        "poe_seq": ints(seq[rows]),
        "subject_id": ints(subj[rows]),
        "field_name": cat(f, fields),
        "field_value": cat(v, values),
    }, exprs={"poe_id": "CAST(subject_id AS VARCHAR) || '-' || CAST(poe_seq AS VARCHAR)"})
    return [poe, poe_detail], med_seq
