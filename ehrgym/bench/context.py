"""How the admission came and went, as a clinician mentions it: true context for patient questions.

Clinicians introduce a case by its course ("transferred from an outside hospital, discharged to
a skilled nursing facility", "a planned admission"). MIMIC-IV records that course in
``admissions`` (``admission_location``, ``discharge_location``, ``admission_type``), so a question
about a patient's admission or ICU stay may carry one sentence of it. Every sentence is read from
the admission's own row and is true of it; it does not change what the question asks (the gold
SQL is the same with or without it).

Every eligible question carries it; its wording is drawn per entity, whatever the noise, and
both twins of a pair show the same sentence. It matters for validity: out-of-scope twins ask for data from the places
and times this vocabulary names (the referring hospital, home, the nursing facility, after
discharge — :mod:`ehrgym.bench.noise.scope`), and real clean questions use the same words for what
the record does hold. Without it, those words occurred only in out-of-scope twins and a text-only
probe recognised them (`paper` build: out of scope 0.89, query level 0.65).

Templates whose answer reads one of these columns get no context (it would give the answer away).

A population question tells its cohort's course the same way, in the plural ("Some of these
patients were outside hospital transfers, and some went to hospice after discharge."): the
places are read from the admissions of the question's evidence rows on the clean database, so the
sentence is true of the cohort the clean question asks about. Without it a population question had
no words an out-of-scope twin could reuse, and the text probe caught 48 of 51 such twins (`paper`
build, 1k patients). Population templates whose answer reads the arrival or discharge location get
none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

LOCATION_COLUMNS = ("admission_location", "discharge_location")
CONTEXT_COLUMNS = LOCATION_COLUMNS + ("admission_type",)

# MIMIC-IV codes -> (verb phrase of "The patient ...", the place it names or None); each phrase is
# true of its code (reviewed). A named place is somewhere this database holds no data from (another
# hospital, a nursing or rehab facility, home, hospice): out-of-scope twins ask about it. Every place
# is followed by a word ("went home after discharge", not "was discharged home."), as in the twins
# that ask about it ("home furosemide"): a place only ever seen before a full stop is a cue to a
# character-level reader.
Phrase = tuple[str, str | None]
ARRIVAL: dict[str, tuple[Phrase, ...]] = {
    "TRANSFER FROM HOSPITAL": (("was an outside hospital transfer", "outside hospital"),
                               ("came from a referring hospital by transfer", "referring hospital"),
                               ("was sent by the transferring hospital for admission", "transferring hospital")),
    "TRANSFER FROM SKILLED NURSING FACILITY": (("came from a skilled nursing facility by transfer",
                                                "skilled nursing facility"),
                                               ("was a nursing home transfer", "nursing home")),
    "PHYSICIAN REFERRAL": (("was referred by a physician", None), ("came on a physician referral", None)),
    "CLINIC REFERRAL": (("was referred from an outpatient clinic", None), ("came on a clinic referral", None)),
    "WALK-IN/SELF REFERRAL": (("walked in (self-referral)", None),),
    "EMERGENCY ROOM": (("came in through the emergency room", None), ("was admitted from the emergency room", None)),
}
DEPARTURE: dict[str, tuple[Phrase, ...]] = {
    "HOME": (("went home after the stay", "home"), ("went home after discharge", "home")),
    "HOME HEALTH CARE": (("was discharged home with home health care", "home"),
                         ("went home with home care services", "home")),
    "SKILLED NURSING FACILITY": (("left for a skilled nursing facility after the stay", "skilled nursing facility"),
                                 ("went to a skilled nursing facility after discharge", "skilled nursing facility")),
    "REHAB": (("left for a rehab facility after the stay", "rehab facility"),
              ("went to a rehab facility after discharge", "rehab facility")),
    "HOSPICE": (("went to hospice after discharge", "hospice"),),
    "CHRONIC/LONG TERM ACUTE CARE": (("went to a long-term acute care hospital after discharge",
                                      "long-term acute care hospital"),),
    "AGAINST ADVICE": (("left against medical advice", None),),
}
KIND: dict[str, tuple[str, ...]] = {
    "ELECTIVE": ("It was a planned (elective) admission.", "The admission was planned."),
    "SURGICAL SAME DAY ADMISSION": ("It was a planned same-day surgical admission.",),
    "URGENT": ("It was an urgent admission.",),
}


# Population questions: the same places in the plural ("Some of these patients ..."); only codes
# that name a place, since the sentence exists to tell where the cohort came from or went; every
# place is followed by a word, as above.
COHORT_ARRIVAL: dict[str, tuple[Phrase, ...]] = {
    "TRANSFER FROM HOSPITAL": (("were outside hospital transfers", "outside hospital"),
                               ("came in as referring hospital transfers", "referring hospital"),
                               ("came from a transferring hospital by transfer", "transferring hospital")),
    "TRANSFER FROM SKILLED NURSING FACILITY": (("came from a skilled nursing facility by transfer",
                                                "skilled nursing facility"),
                                               ("were nursing home transfers", "nursing home")),
}
COHORT_DEPARTURE: dict[str, tuple[Phrase, ...]] = {
    "HOME": (("went home after the stay", "home"), ("went home after discharge", "home")),
    "HOME HEALTH CARE": (("went home with home health care", "home"),),
    "SKILLED NURSING FACILITY": (("left for a skilled nursing facility after the stay", "skilled nursing facility"),
                                 ("went to a skilled nursing facility after discharge", "skilled nursing facility")),
    "REHAB": (("left for a rehab facility after the stay", "rehab facility"),
              ("went to a rehab facility after discharge", "rehab facility")),
    "HOSPICE": (("went to hospice after discharge", "hospice"),),
    "CHRONIC/LONG TERM ACUTE CARE": (("went to a long-term acute care hospital after discharge",
                                      "long-term acute care hospital"),),
}
COHORT_SUBJECT = "Some of these patients "


def eligible(template: Any, params: dict[str, Any]) -> bool:
    """A patient-level question naming an admission or ICU stay whose answer reads none of the
    context columns (nothing it says may give the answer away)."""
    if template.level != "patient" or not ({"hadm_id", "stay_id"} & set(params)):
        return False
    text = (template.gold_sql + " " + template.sampler_sql).lower()
    return not any(c in text for c in CONTEXT_COLUMNS)


def admission_row(con: Any, params: dict[str, Any]) -> tuple[str | None, str | None, str | None] | None:
    """(admission_location, discharge_location, admission_type) of the entity's admission."""
    if "hadm_id" in params:
        where = f"a.hadm_id = {int(params['hadm_id'])}"
        source = "mimiciv_hosp.admissions a"
    else:
        where = f"i.stay_id = {int(params['stay_id'])}"
        source = "mimiciv_icu.icustays i JOIN mimiciv_hosp.admissions a ON a.hadm_id = i.hadm_id"
    rows = con.execute(f"SELECT a.admission_location, a.discharge_location, a.admission_type "
                       f"FROM {source} WHERE {where} LIMIT 1").fetchall()
    return (rows[0][0], rows[0][1], rows[0][2]) if rows else None


def context_sentence(row: tuple[str | None, str | None, str | None] | None,
                     pick: int) -> tuple[str, tuple[str, ...]]:
    """The sentence (``""`` if the row has nothing to say) and the places it names, for an
    admission row and a per-entity draw ``pick``."""
    if row is None:
        return "", ()
    arrival, departure, kind = (ARRIVAL.get(row[0] or "", ()), DEPARTURE.get(row[1] or "", ()),
                                KIND.get(row[2] or "", ()))
    chosen = [p for p in (arrival[pick % len(arrival)] if arrival else None,
                          departure[(pick >> 4) % len(departure)] if departure else None) if p]
    parts = []
    if chosen:
        parts.append("The patient " + " and ".join(p for p, _ in chosen) + ".")
    if kind and (pick >> 12) % 2 == 0:
        parts.append(kind[(pick >> 14) % len(kind)])
    return " ".join(parts), tuple(place for _, place in chosen if place)


def cohort_eligible(template: Any) -> bool:
    """A population question whose evidence rows name their admission and whose answer reads neither
    location column (a question about where patients went gets no sentence saying where some went)."""
    from ehrgym.db.schema import table_spec

    if template.level != "population":
        return False
    text = (template.gold_sql + " " + template.sampler_sql).lower()
    if any(c in text for c in LOCATION_COLUMNS):
        return False
    return "hadm_id" in table_spec(template.evidence.table).column_names


def cohort_locations_sql(evidence_sql: str) -> str:
    """The distinct (admission_location, discharge_location) of the admissions of some evidence rows."""
    return ("SELECT DISTINCT a.admission_location, a.discharge_location FROM mimiciv_hosp.admissions a\n"
            f"WHERE a.hadm_id IN (SELECT ev.hadm_id FROM ({evidence_sql}) ev)\nORDER BY 1, 2")


def cohort_sentence(locations: Sequence[tuple[str | None, str | None]], pick: int) -> tuple[str, tuple[str, ...]]:
    """The plural sentence of a cohort (``""`` if none of its admissions names a place) and its places:
    one arrival and one departure place that some admission of the cohort has, drawn by ``pick``."""
    arrivals = sorted({a for a, _ in locations if a in COHORT_ARRIVAL})
    departures = sorted({d for _, d in locations if d in COHORT_DEPARTURE})
    chosen: list[Phrase] = []
    if arrivals:
        options = COHORT_ARRIVAL[arrivals[pick % len(arrivals)]]
        chosen.append(options[(pick >> 4) % len(options)])
    if departures:
        options = COHORT_DEPARTURE[departures[(pick >> 8) % len(departures)]]
        chosen.append(options[(pick >> 12) % len(options)])
    if not chosen:
        return "", ()
    sentence = COHORT_SUBJECT + ", and some ".join(p for p, _ in chosen) + "."
    return sentence, tuple(place for _, place in chosen if place)


def with_context(question: str, sentence: str) -> str:
    return f"{question} {sentence}" if sentence else question


def places_named(sentence: str) -> tuple[str, ...]:
    """The places a context sentence names (as :func:`context_sentence` and :func:`cohort_sentence` return them)."""
    found = []  # (where the phrase is, its place): the places in the sentence's order
    for table in (ARRIVAL, DEPARTURE, COHORT_ARRIVAL, COHORT_DEPARTURE):
        for phrases in table.values():
            found += [(f" {sentence}".find(f" {phrase}"), place) for phrase, place in phrases
                      if place and f" {phrase}" in f" {sentence}"]
    return tuple(dict.fromkeys(place for _, place in sorted(found)))


# ---------------------------------------------------------------- the course as a clause of the question

# An out-of-scope twin may ask about the time beyond the record's edges: what was measured or given
# before the patient came from another place, or after they left for one ("After the patient left for
# the skilled nursing facility, …"). Its clean twin carries the same clause the other way round, which
# is true of every row of the admission and changes nothing the gold SQL reads ("… before the patient
# left for the skilled nursing facility": an admission's rows lie between its arrival and its
# departure). The twins then differ in one word, "before" against "after", and which one is
# unrecordable depends on the clause's side (arrival or departure) named words away: the same words
# in the same counts on both sides, a difference no reader of words and word pairs can weigh.
# Appending a place-qualified name instead ("the home potassium") left the place named twice in the
# twin and once in its clean question, and put it where no clean question ever names a place.
@dataclass(frozen=True)
class CourseClause:
    """One edge of an admission (or of every admission of a cohort) in clause form: ``text`` follows "before" or
    "after"."""

    side: str  # "arrival" or "departure"
    text: str

    @property
    def recordable(self) -> str:
        """The preposition under which the clause covers the admission's own rows."""
        return "after" if self.side == "arrival" else "before"

    @property
    def unrecordable(self) -> str:
        """The preposition under which it asks for what lies beyond the record (before the patient came,
        after they left)."""
        return "before" if self.side == "arrival" else "after"


# arrival codes whose origin holds its own records (another hospital, a facility, the ambulance before the
# emergency room, the referring physician's office); reviewed for truth of "after …" on every admission row
ARRIVAL_CLAUSES: dict[str, tuple[str, ...]] = {
    "TRANSFER FROM HOSPITAL": ("the patient came from the outside hospital", "the patient arrived from the "
                               "referring hospital", "the transfer from the outside hospital"),
    "TRANSFER FROM SKILLED NURSING FACILITY": ("the patient came from the skilled nursing facility",
                                               "the patient arrived from the nursing home"),
    "EMERGENCY ROOM": ("the patient came in through the emergency room", "the patient arrived in the emergency room"),
    "PHYSICIAN REFERRAL": ("the patient was referred by the physician",),
    "CLINIC REFERRAL": ("the patient was referred from the clinic",),
}
DEPARTURE_CLAUSES: dict[str, tuple[str, ...]] = {
    "HOME": ("the patient went home", "the patient was discharged home"),
    "HOME HEALTH CARE": ("the patient went home with home health care", "the patient was discharged home"),
    "SKILLED NURSING FACILITY": ("the patient left for the skilled nursing facility",
                                 "the patient was discharged to the skilled nursing facility"),
    "REHAB": ("the patient left for the rehab facility", "the patient was discharged to the rehab facility"),
    "HOSPICE": ("the patient went to hospice", "the patient was discharged to hospice"),
    "CHRONIC/LONG TERM ACUTE CARE": ("the patient left for the long-term acute care hospital",),
    "AGAINST ADVICE": ("the patient left against medical advice",),
}


def course_clauses(row: tuple[str | None, str | None, str | None] | None) -> tuple[CourseClause, ...]:
    """The clauses an admission row's arrival and departure can be told in (empty: neither has one)."""
    if row is None:
        return ()
    return (tuple(CourseClause("arrival", t) for t in ARRIVAL_CLAUSES.get(row[0] or "", ()))
            + tuple(CourseClause("departure", t) for t in DEPARTURE_CLAUSES.get(row[1] or "", ())))


# Clean twins of other pairs open with such a clause too, as often as this (drawn per entity, whatever the noise,
# and then in both twins with the preposition that covers the admission): otherwise a clause would mark the pairs
# whose noisy twin is out of scope, and from the noisy question alone a probe would read "abstain" off it.
CLAUSE_SHARE = 0.5


def pick_clause(clauses: Sequence[CourseClause], rng: Any) -> CourseClause:
    """One clause: a side (arrival or departure) uniformly among those told, then one of its wordings, so that
    neither preposition is more often the recordable one."""
    sides = sorted({c.side for c in clauses})
    side = sides[int(rng.integers(0, len(sides)))]
    options = [c for c in clauses if c.side == side]
    return options[int(rng.integers(0, len(options)))]


# a population question's cohort came and went by different routes: its clauses name only the hospital's own
# doors, which every admission of the cohort passed
COHORT_CLAUSES: tuple[CourseClause, ...] = (CourseClause("arrival", "each patient arrived at the hospital"),
                                            CourseClause("arrival", "the patients were admitted"),
                                            CourseClause("departure", "each patient left the hospital"),
                                            CourseClause("departure", "the patients were discharged"))


def with_clause(question: str, preposition: str, clause: CourseClause) -> str:
    """``question`` opened by "<Preposition> <clause>, " (its first word lowercased unless it is an abbreviation or
    a code). At the front the preposition's neighbours are the same words in every question ("… the patient"), so
    no word pair joins it to the template's own wording."""
    first, _, rest = question.partition(" ")
    if first[:1].isupper() and not any(ch.isupper() or ch.isdigit() for ch in first[1:]):
        first = first.lower()
    return f"{preposition.capitalize()} {clause.text}, {first}{' ' + rest if rest else ''}"
