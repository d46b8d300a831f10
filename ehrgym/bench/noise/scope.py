"""Out-of-scope questions made from a clean question: same patient, same topic, same sentence.

A MIMIC-IV-shaped database (hosp + icu modules) holds structured orders, results, charted values,
billing codes and stays. It holds no note text (discharge summaries, radiology reports), no
imaging, ECG or echo findings, no family or social history, nothing after the hospital episode
(follow-up, recovery) and no clinician's intent (goals, reasons, plans). An out-of-scope twin
asks for one of these about the clean question's own entity and topic:

* a template whose question names a measured thing (its ``lexical`` parameter: a lab, vital,
  drug, diagnosis, specimen …) keeps its own paraphrase and swaps that thing for an unrecordable
  one of the same kind — a qualified form of the same name ("target potassium", "pre-hospital
  heart rate", "home furosemide") or a related thing no table holds ("echocardiographic ejection
  fraction");
* a template without such a name gets a question of its intent and level about the same
  entity, written in the vocabulary of that intent's clean questions.

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
# cannot hold). Many distinct, individually rare qualifiers: real out-of-scope questions are as
# varied as clinicians, and no single cue word marks them.
ELSEWHERE = ("referring hospital", "transferring hospital", "sending facility", "outside hospital", "urgent care",
             "primary care", "nursing home", "rehab facility", "community clinic", "dialysis center")
REPORTED = ("recalled", "remembered", "estimated", "family's", "caregiver's", "home", "smartwatch", "wearable")
INTENDED = ("target", "goal", "desired", "intended", "predicted", "anticipated", "hoped", "planned",
            "recommended", "suggested", "advised")
LATER = ("post discharge", "six week", "three month", "one year", "next visit")
SWAPS: dict[str, Swap] = {
    "lab": Swap(
        qualifiers=INTENDED[:7] + REPORTED[:6] + ELSEWHERE,
        related=("echocardiographic ejection fraction", "QTc interval", "cardiac MRI ejection fraction",
                 "bone density T-score", "CT liver attenuation"),
        post=("{x} quoted in the discharge summary", "{x} the team was aiming for", "{x} reported by the referring "
              "hospital"),
    ),
    "vital": Swap(
        qualifiers=INTENDED[:7] + REPORTED + ELSEWHERE + ("prehospital", "paramedic", "ambulance"),
        related=("echocardiographic ejection fraction", "QRS duration", "home pain score", "smartwatch step count"),
        post=("{x} quoted in the discharge summary", "{x} the team was aiming for", "{x} measured by the paramedics"),
    ),
    "output": Swap(
        qualifiers=INTENDED[:6] + REPORTED[:5] + ELSEWHERE[5:] + ("prehospital", "ambulance"),
        related=("home stool", "post discharge drain"),
        post=("{x} the nurses estimated in their notes", "{x} the team was aiming for"),
    ),
    "drip": Swap(
        qualifiers=INTENDED + ELSEWHERE[:5] + ("ambulance", "prehospital", "home infusion", "target dose"),
        related=("outside hospital sedative", "prehospital epinephrine"),
        post=("{x} the team intended to give", "{x} started by the paramedics"),
    ),
    "drug": Swap(
        qualifiers=INTENDED[3:] + REPORTED[:4] + ELSEWHERE + LATER[:1]
        + ("home", "preadmission", "over the counter", "previously declined", "discharge"),
        related=("herbal supplement", "over-the-counter pain reliever", "home inhaler"),
        post=("{x} the patient took at home", "{x} the team planned for after discharge",
              "{x} the patient declined"),
    ),
    "diagnosis": Swap(
        # a diagnosis reads with a reporter before it, not a place or a time ("urgent care cirrhosis", "six week
        # atrial fibrillation" were drawn before); where the diagnosis was made goes after it (``post``)
        qualifiers=("patient-reported", "family-reported", "caregiver-reported", "radiology-reported",
                    "imaging-suggested"),
        post=("{x} mentioned only in the discharge summary", "{x} that the attending suspected",
              "{x} diagnosed at the follow-up visit", "{x} diagnosed at an outside hospital",
              "{x} diagnosed in primary care",
              "a condition seen on the chest CT", "the admitting physician's working diagnosis"),
    ),
    "procedure": Swap(
        qualifiers=INTENDED[3:] + ("deferred", "declined", "cancelled", "previously scheduled"),
        post=("{x} the team planned but did not do", "{x} done at another hospital",
              "the operation the surgeon recommended", "an outpatient colonoscopy after discharge"),
    ),
    "specimen": Swap(
        qualifiers=INTENDED[7:] + ELSEWHERE + ("home collected", "cancelled", "pretransfer", "self collected"),
        related=("home stool", "outside hospital swab"),
        post=("{x} sent at the referring hospital", "{x} the team planned to send"),
    ),
    "organism": Swap(
        qualifiers=ELSEWHERE + ("suspected", "presumed", "previously colonising", "empirically covered",
                                "radiology suspected", "clinically suspected"),
        post=("{x} reported by the referring hospital", "{x} that the team suspected",
              "the organism the infectious-disease team suspected"),
    ),
    "antibiotic": Swap(
        qualifiers=INTENDED[3:] + ELSEWHERE + ("home", "ID recommended", "prophylactic home"),
        post=("{x} the team planned to switch to", "{x} taken at home before admission",
              "the antibiotic the ID consultant recommended"),
    ),
    "admission_type": Swap(
        qualifiers=("cancelled", "patient requested", "declined", "deferred") + ELSEWHERE[:4],
        post=("{x} admissions the patients later regretted",),
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


# ---------------------------------------------------------------- questions for templates without a name

# (intent, level) -> questions about the same entity; placeholders must be parameters of the clean
# question (subject_id, hadm_id, stay_id, year)
FRAMES: dict[tuple[str, str], tuple[str, ...]] = {
    ("encounters", "patient"): (
        "How many days did patient {subject_id} spend in a rehabilitation facility after admission {hadm_id}?",
        "How many hours a week did patient {subject_id} exercise before hospital admission {hadm_id}?",
        "Why did the team move patient {subject_id} to another care unit during admission {hadm_id}?",
        "How many weeks after admission {hadm_id} did patient {subject_id} return to work?",
        "What follow-up plan did the discharge summary of admission {hadm_id} give for patient {subject_id}?",
        "Patient {subject_id}, admission {hadm_id}: what did the patient's family say about the decision to admit?",
        "For patient {subject_id}, how many hours after ICU stay {stay_id} ended did the patient walk unaided?",
        "Why was patient {subject_id} admitted to ICU stay {stay_id} according to the ICU admission note?",
        "What was patient {subject_id}'s functional status three months after ICU stay {stay_id}?",
        "How many days did ICU stay {stay_id} of patient {subject_id} last according to the patient's own diary?",
    ),
    ("encounters", "population"): (
        "What was the mean number of hours a week patients admitted in {year} spent exercising?",
        "Among admissions starting in {year}, what was the mean number of weeks until patients returned to work?",
        "What share (%) of ICU stays that began in {year} were followed by a stay in a rehabilitation facility?",
        "How many cigarettes a day did patients admitted in {year} smoke on average?",
        "What was the mean distance (km) patients admitted in {year} travelled to the hospital?",
        "Which care unit did the most patients admitted in {year} describe as their preferred one?",
    ),
    ("diagnoses", "patient"): (
        "Which diagnosis did the admitting physician suspect first for patient {subject_id} in admission {hadm_id}?",
        "What did the chest CT of patient {subject_id} show during admission {hadm_id}?",
        "Which diagnosis was patient {subject_id} given at the follow-up visit after admission {hadm_id}?",
        "Why did the team decide against surgery for patient {subject_id} during admission {hadm_id}?",
        "What ejection fraction did the echocardiogram of patient {subject_id} report in admission {hadm_id}?",
        "How many pack-years had patient {subject_id} smoked before hospital admission {hadm_id}?",
    ),
    ("diagnoses", "population"): (
        "Which diagnosis did admitting physicians suspect most often in admissions that began in {year}?",
        "What was the most common finding on chest X-rays of admissions that began in {year}?",
        "Among admissions of {year}, which diagnosis did the radiology reports suggest most often?",
        "What was the mean number of pack-years smoked by patients admitted in {year}?",
    ),
    ("medications", "patient"): (
        "How many different antibiotics did patient {subject_id} take at home before admission {hadm_id}?",
        "Why was the antibiotic of patient {subject_id} changed during admission {hadm_id}?",
        "Which antibiotic allergy did patient {subject_id} report during hospital admission {hadm_id}?",
        "How many antibiotics were filled at the pharmacy for patient {subject_id} after admission {hadm_id}?",
        "Patient {subject_id}, admission {hadm_id}: which antibiotic did the ID consultant recommend?",
    ),
    ("medications", "population"): (
        "Which home medication was most common among admissions that began in {year}?",
        "What percentage of admissions starting in {year} reported a penicillin allergy?",
    ),
    ("labs", "patient"): (
        "What did the discharge summary of admission {hadm_id} say about patient {subject_id}'s lab trend?",
        "Which lab value did the team target for patient {subject_id} during admission {hadm_id}?",
    ),
    ("labs", "population"): (
        "Which lab test did physicians most often plan but cancel in admissions that began in {year}?",
    ),
    ("vitals", "patient"): (
        "What blood pressure target did the team set for patient {subject_id} during ICU stay {stay_id}?",
        "What was patient {subject_id}'s resting heart rate at home before ICU stay {stay_id}?",
    ),
    ("vitals", "population"): (
        "What was the mean pre-hospital heart rate of ICU stays that started in {year}?",
    ),
    ("microbiology", "patient"): (
        "Which organism did the infectious-disease team suspect for patient {subject_id} in admission {hadm_id}?",
        "What did the referring hospital's cultures of patient {subject_id} grow before admission {hadm_id}?",
    ),
    ("microbiology", "population"): (
        "Which organism did physicians suspect most often in admissions that began in {year}?",
    ),
}


# ---------------------------------------------------------------- the places the question's context names

# A patient question may carry its admission's course (:mod:`ehrgym.bench.context`: "The patient
# was transferred from an outside hospital and was discharged to a skilled nursing facility."),
# and both twins show it. Where it names a place this database holds no data from, the
# out-of-scope twin asks about that place in the context's own words ("the outside hospital
# potassium", "the home heart rate", "furosemide at the skilled nursing facility"): a text-only
# reader then finds every word of the swap in the clean twin as well. Reviewed per kind: nothing
# measured or given at another hospital, a nursing or rehab facility, home or hospice is in
# MIMIC-IV's hosp or icu module. Labs and specimens take no "home" (a home-health draw may be
# resulted by the hospital's own lab, which labevents holds as an outpatient result).
HOSPITALS = ("outside hospital", "referring hospital", "transferring hospital", "long-term acute care hospital")
FACILITIES = ("skilled nursing facility", "nursing home", "rehab facility", "hospice")
LINKED_PLACES: dict[str, tuple[str, ...]] = {
    "lab": HOSPITALS + FACILITIES, "specimen": HOSPITALS + FACILITIES, "organism": HOSPITALS + FACILITIES,
    "vital": HOSPITALS + FACILITIES + ("home",), "output": HOSPITALS + FACILITIES + ("home",),
    "drip": HOSPITALS + FACILITIES, "drug": HOSPITALS + FACILITIES + ("home",),
    "antibiotic": HOSPITALS + FACILITIES + ("home",), "diagnosis": HOSPITALS + FACILITIES,
    "procedure": HOSPITALS + FACILITIES,
}
LINKED_POST: dict[str, tuple[str, ...]] = {
    "diagnosis": ("{x} diagnosed at the {p}", "{x} recorded by the {p}"),
    "procedure": ("{x} done at the {p}",),
    "drug": ("{x} given at the {p}",), "antibiotic": ("{x} given at the {p}",),
    "lab": ("{x} measured at the {p}",), "vital": ("{x} measured at the {p}",),
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
        out += [f.format(x=name, p=p).replace("at the home", "at home").replace("by the home", "at home")
                for p in usable for f in LINKED_POST.get(kind, ())]
    return out


# questions for templates without a name, about the place the context names ({place} as it names it)
PLACE_FRAMES: dict[str, tuple[str, ...]] = {
    "patient": (
        "How many days did patient {subject_id} spend at the {place} around admission {hadm_id}?",
        "What did the {place} record about patient {subject_id} around admission {hadm_id}?",
        "Which diagnoses did the {place} give patient {subject_id} around admission {hadm_id}?",
        "Which medications did patient {subject_id} get at the {place} around admission {hadm_id}?",
        "How many days did patient {subject_id} spend at the {place} around ICU stay {stay_id}?",
        "What did the {place} record about patient {subject_id} around ICU stay {stay_id}?",
    ),
}
HOME_FRAMES: tuple[str, ...] = (
    "What was patient {subject_id}'s blood pressure at home after admission {hadm_id}?",
    "How well did patient {subject_id} manage at home after admission {hadm_id}?",
    "How many days after admission {hadm_id} did patient {subject_id} need help at home?",
    "What was patient {subject_id}'s blood pressure at home after ICU stay {stay_id}?",
    "How many days after ICU stay {stay_id} did patient {subject_id} need help at home?",
    "What was patient {subject_id}'s heart rate at home around ICU stay {stay_id}?",
    "Which medications did patient {subject_id} take at home around admission {hadm_id}?",
    "Which medications did patient {subject_id} take at home around ICU stay {stay_id}?",
)


def place_frames(places: tuple[str, ...]) -> list[tuple[str, str]]:
    """(question format, place) for the places a context names."""
    out = []
    for p in places:
        frames = HOME_FRAMES if p == "home" else PLACE_FRAMES["patient"]
        out += [(f, p) for f in frames]
    return out
