"""Out-of-scope questions made from a clean question: same patient, same topic, same sentence.

A MIMIC-IV-shaped database (hosp + icu modules) holds structured orders, results, charted values,
billing codes and stays. It holds no note text (discharge summaries, radiology reports), no
imaging, ECG or echo findings, no family or social history, nothing after the hospital episode
(follow-up, recovery) and no clinician's intent (goals, reasons, plans). An out-of-scope twin
asks for one of these about the clean question's own entity and topic:

a template whose question names a measured thing (its ``lexical`` parameter: a lab, vital,
drug, diagnosis, specimen …) keeps its own paraphrase and swaps that thing for an unrecordable
one of the same kind — a qualified form of the same name ("target potassium", "pre-hospital
heart rate", "home furosemide") or a related thing no table holds ("echocardiographic ejection
fraction"). A template whose questions name no such thing gets no out-of-scope twin: anything
asked instead would be another question, not the clean one with its topic made unrecordable.

Every phrase below was written for this purpose and reviewed for whether the schema could hold
it: no family history or smoking status (ICD has codes for those), no "outpatient X" (labevents
holds outpatient results), no later lab or vital sign (labevents and omr hold outpatient values).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# ---------------------------------------------------------------- qualified names and related things


@dataclass(frozen=True)
class Swap:
    """How one kind of measured thing becomes unrecordable.

    ``qualifiers`` are pre-modifiers ("target" + "Potassium", "referring hospital" + "Creatinine") and ``related`` bare noun compounds
    of the same kind ("echocardiographic ejection fraction"): both read in any sentence slot.
    ``post`` are phrases (with ``{x}``, the clean name, or an article) that only read well at the
    end of a clause.
    """

    qualifiers: tuple[str, ...]
    related: tuple[str, ...] = ()
    post: tuple[str, ...] = ()


# Qualifier pools (reviewed: each qualified name is data a clinician could want that this schema
# cannot hold, and reads as clinical English before that kind of name: "target INR", "prehospital
# heart rate", "preadmission furosemide", "cancelled blood culture"). Many distinct, individually
# rare qualifiers: real out-of-scope questions are as varied as clinicians, and no single cue word
# marks them. Words that made ungrammatical phrases ("hoped vancomycin", "advised urine culture",
# "family's band count", "desired propofol") are in no pool. No phrase has a hyphen ("patient reported", not
# "patient-reported"): to a text reader a hyphen is a word, which clean questions have only in dates and ranges.
# "home" is in no pool: a question says "home" only where its own context names it (``LINKED_PLACES``), so the
# word is as common in clean twins as in noisy ones (in the pools it was the probe's strongest cue)
ELSEWHERE = ("referring hospital", "transferring hospital", "sending facility", "outside hospital", "urgent care",
             "primary care", "community clinic", "dialysis center", "rehab facility")
# results and specimens from clinics may be the hospital's own outpatient ones (labevents, microbiologyevents and
# omr hold those): measurements take only places whose records this database cannot hold
OUTSIDE = ("referring hospital", "transferring hospital", "sending facility", "outside hospital", "dialysis center")
PLANNED = ("intended", "planned", "recommended")
DEVICES = ("patient measured", "smartwatch", "wearable")
SWAPS: dict[str, Swap] = {
    "lab": Swap(
        qualifiers=("target", "goal", "pretransfer") + OUTSIDE,
        related=("echocardiographic ejection fraction", "QTc interval", "cardiac MRI ejection fraction",
                 "DEXA bone density", "CT liver attenuation"),
        post=("{x} quoted in the discharge summary", "{x} the team was aiming for", "{x} reported by the referring "
              "hospital"),
    ),
    "vital": Swap(
        qualifiers=("target", "goal", "prehospital", "paramedic", "ambulance") + DEVICES + OUTSIDE + ("rehab facility",),
        related=("echocardiographic ejection fraction", "QRS duration", "patient rated pain score", "smartwatch step count"),
        post=("{x} quoted in the discharge summary", "{x} the team was aiming for", "{x} measured by the paramedics"),
    ),
    "output": Swap(
        qualifiers=("target", "goal", "prehospital") + OUTSIDE[3:] + ("rehab facility",),
        related=("post discharge drain output",),
        post=("{x} the nurses estimated in their notes", "{x} the team was aiming for"),
    ),
    "drip": Swap(
        qualifiers=PLANNED + ELSEWHERE[:5] + ("ambulance", "prehospital", "infusion center"),
        related=("outside hospital sedative", "prehospital epinephrine"),
        post=("{x} the team intended to give", "{x} started by the paramedics"),
    ),
    "drug": Swap(
        qualifiers=PLANNED + ELSEWHERE + ("post discharge", "preadmission", "over the counter", "previously declined"),
        related=("herbal supplement", "nonprescription pain reliever", "rescue inhaler"),
        post=("{x} the patient took before admission", "{x} the team planned for after discharge",
              "{x} the patient declined"),
    ),
    "diagnosis": Swap(
        # a diagnosis reads with a reporter before it, not a place or a time ("urgent care cirrhosis", "six week
        # atrial fibrillation" were drawn before); where the diagnosis was made goes after it (``post``)
        qualifiers=("patient reported", "family described", "caregiver mentioned", "radiographically suspected",
                    "clinically suspected", "presumed", "self diagnosed"),
        post=("{x} mentioned only in the discharge summary", "{x} that the attending suspected",
              "{x} diagnosed at the clinic visit after discharge", "{x} diagnosed at an outside hospital",
              "{x} diagnosed in primary care",
              "a condition seen on the chest CT", "the admitting physician's working diagnosis"),
    ),
    "procedure": Swap(
        qualifiers=PLANNED + ("deferred", "declined", "cancelled", "previously scheduled"),
        post=("{x} the team planned but did not do", "{x} done at another hospital",
              "the operation the surgeon recommended", "an outpatient colonoscopy after discharge"),
    ),
    "specimen": Swap(
        qualifiers=PLANNED[1:] + OUTSIDE + ("cancelled", "pretransfer", "patient collected"),
        related=("outside hospital swab",),
        post=("{x} sent at the referring hospital", "{x} the team planned to send"),
    ),
    "organism": Swap(
        qualifiers=OUTSIDE + ("suspected", "presumed", "previously colonising", "empirically covered",
                                "radiology suspected", "clinically suspected"),
        post=("{x} reported by the referring hospital", "{x} that the team suspected",
              "the organism the infectious disease team suspected"),
    ),
    # the antibiotic of a susceptibility result ("the vancomycin MIC"): a result another laboratory reported, or the
    # MIC of a drug chosen by an intent; not "planned vancomycin MIC" or "vancomycin taken before admission", which
    # name no susceptibility result at all
    "antibiotic": Swap(
        qualifiers=OUTSIDE + ("pretransfer", "preadmission"),
        post=("{x} the team planned to switch to", "the antibiotic the ID consultant recommended"),
    ),
    "admission_type": Swap(
        qualifiers=("cancelled", "patient requested", "declined", "deferred") + ELSEWHERE[:4],
        post=("{x} admissions the patients had asked to postpone",),
    ),
    "careunit": Swap(
        qualifiers=("requested", "preferred", "originally planned", "declined") + ELSEWHERE[:4],
        post=("{x} the team would have preferred",),
    ),
}


def slot_kind(param: str, evidence_table: str) -> str | None:
    """The kind of measured thing a question parameter names (``None``: no swappable name)."""
    if param == "label":
        return {"labevents": "lab", "chartevents": "vital", "outputevents": "output",
                "inputevents": "drip"}.get(evidence_table)
    if param == "title":
        return "procedure" if evidence_table == "procedures_icd" else "diagnosis"
    return {"drug": "drug", "description": "diagnosis", "cohort": "diagnosis", "specimen": "specimen",
            "organism": "organism", "antibiotic": "antibiotic", "admission_type": "admission_type",
            "first_careunit": "careunit", "careunit": "careunit"}.get(param)


_END = re.compile(r"[?.,;:]")


def ends_clause(paraphrase: str, param: str) -> bool:
    """Whether ``{param}`` is followed by punctuation (a post-modified phrase reads well there)."""
    i = paraphrase.find("{" + param + "}")
    j = i + len(param) + 2
    return i >= 0 and j < len(paraphrase) and bool(_END.match(paraphrase[j]))


def swap_phrases(kind: str, name: str, at_clause_end: bool) -> list[str]:
    """Unrecordable phrases replacing the name ``name`` of kind ``kind`` (deterministic order); the
    name keeps the spelling the clean question shows, so only the qualifier differs."""
    swap = SWAPS[kind]
    out = [f"{q} {name}" for q in swap.qualifiers] + list(swap.related)
    if at_clause_end:
        out += [p.format(x=name) for p in swap.post]
    return out


# ---------------------------------------------------------------- the time beyond the admission's course

# Kinds of measured thing recorded with a time (a result, a charted value, a dose, a specimen, a procedure's date):
# a question about them may open with a clause of the admission's course (``ehrgym.bench.context.with_clause``),
# which its out-of-scope twin turns to the time before the patient came or after they left. A twin of such a kind
# always takes that form when its admission's course can be told (a population question's cohort: the hospital's
# own doors); a diagnosis, an admission type or a care unit carries no time a clause could bound.
CLAUSE_KINDS = frozenset({"lab", "vital", "output", "drip", "drug", "specimen", "organism", "antibiotic",
                          "procedure"})


# ---------------------------------------------------------------- the places the question's context names

# A patient question may carry its admission's course (:mod:`ehrgym.bench.context`: "The patient
# was an outside hospital transfer and went to a skilled nursing facility after discharge."),
# and both twins show it. Where it names a place this database holds no data from, the
# out-of-scope twin asks about that place in the context's own words wherever one fits its kind and
# slot ("the outside hospital potassium", "the home heart rate", "furosemide given by the skilled
# nursing facility staff"): a text-only reader then finds the place in the clean twin as well (once
# there, twice in the twin: see ``query.OutOfScope.inject``). Reviewed per kind: nothing
# measured or given at another hospital, a nursing or rehab facility, home or hospice is in
# MIMIC-IV's hosp or icu module. Labs and specimens take no "home" (a home-health draw may be
# resulted by the hospital's own lab, which labevents holds as an outpatient result).
HOSPITALS = ("outside hospital", "referring hospital", "transferring hospital", "long-term acute care hospital")
FACILITIES = ("skilled nursing facility", "nursing home", "rehab facility", "hospice")
LINKED_PLACES: dict[str, tuple[str, ...]] = {
    "lab": HOSPITALS + FACILITIES, "specimen": HOSPITALS + FACILITIES, "organism": HOSPITALS + FACILITIES,
    "vital": HOSPITALS + FACILITIES + ("home",), "output": HOSPITALS + FACILITIES + ("home",),
    "drip": HOSPITALS + FACILITIES, "drug": HOSPITALS + FACILITIES + ("home",),
    # a susceptibility result reported by another laboratory; no "home vancomycin MIC"
    "antibiotic": HOSPITALS + FACILITIES, "diagnosis": HOSPITALS + FACILITIES,
    "procedure": HOSPITALS + FACILITIES,
}
# the place is followed by a word here too, as in every context sentence ("… by the hospice staff", not "… at the
# hospice?"); "home" is only ever a place after discharge (no arrival code names it)
LINKED_POST: dict[str, tuple[str, ...]] = {
    "diagnosis": ("{x} diagnosed by the {p} team", "{x} recorded in the {p} chart"),
    "procedure": ("{x} done by the {p} team",),
    "drug": ("{x} given by the {p} staff",),
    "lab": ("{x} measured by the {p} staff",), "vital": ("{x} measured by the {p} staff",),
}
HOME_POST: dict[str, tuple[str, ...]] = {
    "drug": ("{x} taken at home after discharge",), "vital": ("{x} measured at home after discharge",),
}


# kinds whose names read with a place before them ("outside hospital potassium", "home furosemide");
# a diagnosis or procedure does not ("rehab facility esophagectomy"): the place goes after it
PLACE_BEFORE = frozenset({"lab", "specimen", "organism", "vital", "output", "drip", "drug", "antibiotic"})


def linked_phrases(kind: str, name: str, at_clause_end: bool, places: tuple[str, ...]) -> list[str]:
    """Unrecordable phrases about ``name`` at the places the question's context names (empty: none
    fits this kind and slot)."""
    usable = [p for p in places if p in LINKED_PLACES.get(kind, ())]
    out = [f"{p} {name}" for p in usable] if kind in PLACE_BEFORE else []
    if at_clause_end:
        out += [f.format(x=name, p=p) for p in usable
                for f in (HOME_POST.get(kind, ()) if p == "home" else LINKED_POST.get(kind, ()))]
    return out
