"""The Charlson comorbidity index of an admission, as the MIMIC code repository computes it
(``mimic-iv/concepts/comorbidity/charlson.sql``): Quan et al. (Med Care 2005) ICD-9-CM and ICD-10
coding of the 17 Charlson conditions, the original weights (Charlson 1987), and age points
(``mimic-iv/concepts/demographics/age.sql``: anchor age plus the years from the anchor year).

The coding rules are data: one row ``(condition, icd_version, lo, hi)`` per rule, matching a code
whose first ``length(lo)`` characters lie between ``lo`` and ``hi`` (string order, as the
repository's ``SUBSTR(code, 1, n) BETWEEN lo AND hi`` / ``IN (...)``). Conditions of one family
count once at the higher weight (mild vs moderate/severe liver disease, diabetes without vs with
chronic complication, malignancy vs metastatic solid tumour), as ``GREATEST(...)`` does there.
The repository's ``'E10l'`` (a letter l, matching nothing) is read as ``E101`` (Quan's E10.1).
"""

from __future__ import annotations

from ehrgym.bench.answers import AnswerSpec
from ehrgym.bench.templates.base import Evidence, Template
from ehrgym.bench.templates.registry import register



def _codes(text: str) -> tuple[str, ...]:
    return tuple(text.split())


# condition -> (family, weight, {icd_version: (exact prefixes, ((lo, hi) ranges))})
CHARLSON: dict[str, tuple[str, int, dict[int, tuple[tuple[str, ...], tuple[tuple[str, str], ...]]]]] = {
    "myocardial infarction": ("myocardial infarction", 1, {
        9: (_codes("410 412"), ()),
        10: (_codes("I21 I22 I252"), ())}),
    "congestive heart failure": ("congestive heart failure", 1, {
        9: (_codes("428 39891 40201 40211 40291 40401 40403 40411 40413 40491 40493"), (("4254", "4259"),)),
        10: (_codes("I43 I50 I099 I110 I130 I132 I255 I420 I425 I426 I427 I428 I429 P290"), ())}),
    "peripheral vascular disease": ("peripheral vascular disease", 1, {
        9: (_codes("440 441 0930 4373 4471 5571 5579 V434"), (("4431", "4439"),)),
        10: (_codes("I70 I71 I731 I738 I739 I771 I790 I792 K551 K558 K559 Z958 Z959"), ())}),
    "cerebrovascular disease": ("cerebrovascular disease", 1, {
        9: (_codes("36234"), (("430", "438"),)),
        10: (_codes("G45 G46 H340"), (("I60", "I69"),))}),
    "dementia": ("dementia", 1, {
        9: (_codes("290 2941 3312"), ()),
        10: (_codes("F00 F01 F02 F03 G30 F051 G311"), ())}),
    "chronic pulmonary disease": ("chronic pulmonary disease", 1, {
        9: (_codes("4168 4169 5064 5081 5088"), (("490", "505"),)),
        10: (_codes("I278 I279 J684 J701 J703"), (("J40", "J47"), ("J60", "J67")))}),
    "rheumatic disease": ("rheumatic disease", 1, {
        9: (_codes("725 4465 7100 7101 7102 7103 7104 7140 7141 7142 7148"), ()),
        10: (_codes("M05 M06 M32 M33 M34 M315 M351 M353 M360"), ())}),
    "peptic ulcer disease": ("peptic ulcer disease", 1, {
        9: (_codes("531 532 533 534"), ()),
        10: (_codes("K25 K26 K27 K28"), ())}),
    "mild liver disease": ("liver disease", 1, {
        9: (_codes("570 571 0706 0709 5733 5734 5738 5739 V427 07022 07023 07032 07033 07044 07054"), ()),
        10: (_codes("B18 K73 K74 K700 K701 K702 K703 K709 K713 K714 K715 K717 K760 K762 K763 K764 K768 K769 "
                    "Z944"), ())}),
    "diabetes without chronic complication": ("diabetes", 1, {
        9: (_codes("2500 2501 2502 2503 2508 2509"), ()),
        10: (_codes("E100 E101 E106 E108 E109 E110 E111 E116 E118 E119 E120 E121 E126 E128 E129 E130 E131 E136 "
                    "E138 E139 E140 E141 E146 E148 E149"), ())}),
    "diabetes with chronic complication": ("diabetes", 2, {
        9: (_codes("2504 2505 2506 2507"), ()),
        10: (_codes("E102 E103 E104 E105 E107 E112 E113 E114 E115 E117 E122 E123 E124 E125 E127 E132 E133 E134 "
                    "E135 E137 E142 E143 E144 E145 E147"), ())}),
    "hemiplegia or paraplegia": ("hemiplegia or paraplegia", 2, {
        9: (_codes("342 343 3341 3440 3441 3442 3443 3444 3445 3446 3449"), ()),
        10: (_codes("G81 G82 G041 G114 G801 G802 G830 G831 G832 G833 G834 G839"), ())}),
    "renal disease": ("renal disease", 2, {
        9: (_codes("582 585 586 V56 5880 V420 V451 40301 40311 40391 40402 40403 40412 40413 40492 40493"),
            (("5830", "5837"),)),
        10: (_codes("N18 N19 I120 I131 N032 N033 N034 N035 N036 N037 N052 N053 N054 N055 N056 N057 N250 Z490 "
                    "Z491 Z492 Z940 Z992"), ())}),
    "malignancy": ("malignancy", 2, {
        9: (_codes("2386"), (("140", "172"), ("1740", "1958"), ("200", "208"))),
        10: (_codes("C43 C88"), (("C00", "C26"), ("C30", "C34"), ("C37", "C41"), ("C45", "C58"), ("C60", "C76"),
                                 ("C81", "C85"), ("C90", "C97")))}),
    "moderate or severe liver disease": ("liver disease", 3, {
        9: (_codes("4560 4561 4562"), (("5722", "5728"),)),
        10: (_codes("I850 I859 I864 I982 K704 K711 K721 K729 K765 K766 K767"), ())}),
    "metastatic solid tumor": ("malignancy", 6, {
        9: (_codes("196 197 198 199"), ()),
        10: (_codes("C77 C78 C79 C80"), ())}),
    "AIDS/HIV": ("AIDS/HIV", 6, {
        9: (_codes("042 043 044"), ()),
        10: (_codes("B20 B21 B22 B24"), ())}),
}
AGE_POINTS = ((50, 0), (60, 1), (70, 2), (80, 3))  # age <= bound -> points; older: 4


def charlson_rules() -> str:
    """``VALUES`` rows (condition, icd_version, lo, hi) of the coding rules."""
    rows = []
    for name, (_, _, versions) in CHARLSON.items():
        for version, (exact, ranges) in sorted(versions.items()):
            rows += [f"('{name}', {version}, '{c}', '{c}')" for c in exact]
            rows += [f"('{name}', {version}, '{lo}', '{hi}')" for lo, hi in ranges]
    return "VALUES " + ", ".join(rows)


def charlson_weights() -> str:
    """``VALUES`` rows (condition, family, points)."""
    return "VALUES " + ", ".join(f"('{n}', '{f}', {w})" for n, (f, w, _) in CHARLSON.items())


RULES_CTE = f"rules(condition, icd_version, lo, hi) AS ({charlson_rules()})"
WEIGHTS_CTE = f"weights(condition, family, points) AS ({charlson_weights()})"
RULE_MATCH = "r.icd_version = e.icd_version AND substr(e.icd_code, 1, length(r.lo)) BETWEEN r.lo AND r.hi"
AGE_CASE = ("CASE " + " ".join(f"WHEN age <= {b} THEN {p}" for b, p in AGE_POINTS) + " ELSE 4 END")

CHARLSON_SAMPLER = f"""WITH {RULES_CTE}
SELECT DISTINCT e.subject_id, e.hadm_id
FROM mimiciv_hosp.diagnoses_icd e
JOIN rules r ON {RULE_MATCH}
JOIN mimiciv_hosp.admissions a ON a.hadm_id = e.hadm_id"""

CHARLSON_GOLD = f"""WITH {RULES_CTE},
{WEIGHTS_CTE},
present AS (
  SELECT DISTINCT r.condition
  FROM {{diagnoses_icd}} e
  JOIN rules r ON {RULE_MATCH}
  WHERE e.subject_id = {{subject_id}} AND e.hadm_id = {{hadm_id}}
), families AS (
  SELECT w.family, max(w.points) AS points
  FROM present p
  JOIN weights w ON w.condition = p.condition
  GROUP BY w.family
), age AS (
  SELECT p.anchor_age + extract(year FROM a.admittime) - p.anchor_year AS age
  FROM mimiciv_hosp.admissions a
  JOIN mimiciv_hosp.patients p ON p.subject_id = a.subject_id
  WHERE a.subject_id = {{subject_id}} AND a.hadm_id = {{hadm_id}}
)
SELECT {AGE_CASE} + coalesce((SELECT sum(points) FROM families), 0)
FROM age"""

CHARLSON_WORDS = ("the Charlson comorbidity index (Quan's ICD-9/ICD-10 coding of the Charlson conditions with the "
                  "original weights, plus age points: 1 for 51-60, 2 for 61-70, 3 for 71-80, 4 above 80 years)")

register(
    Template(
        id="diagnoses.charlson_index", intent="diagnoses", level="patient", tier=3,
        paraphrases=(
            f"What was {CHARLSON_WORDS} of patient {{subject_id}} for hospital admission {{hadm_id}}, from the "
            "diagnoses coded in that admission?",
            "Patient {subject_id}, admission {hadm_id}: compute the age-adjusted Charlson comorbidity index from "
            "the admission's ICD diagnoses (Quan coding algorithm, Charlson 1987 weights: the higher of mild or "
            "moderate/severe liver disease, of diabetes with or without complications, and of malignancy or "
            "metastatic tumour; age points 1-4 for 51-60, 61-70, 71-80, over 80).",
            f"Using the diagnoses coded in admission {{hadm_id}} and the patient's age at admission, what is "
            f"{CHARLSON_WORDS} of patient {{subject_id}}?",
        ),
        sampler_sql=CHARLSON_SAMPLER,
        gold_sql=CHARLSON_GOLD,
        answer=AnswerSpec("integer"),
        evidence=Evidence(table="diagnoses_icd", where="e.hadm_id = {hadm_id}", key=("hadm_id", "seq_num"),
                          category_col="icd_code"),
        noise=("missing_evidence", "nonexistent_entity"),
        entity_ref="hadm_id", description="age-adjusted Charlson comorbidity index of an admission",
    ),
)
