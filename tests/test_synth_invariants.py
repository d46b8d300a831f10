"""Every coherence rule of the synthetic hospital, as an SQL query that must find no violation.

Each query returns the number of violating rows (0 = rule holds) on the 200-patient fixture.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from ehrgym.db.connect import open_database
from ehrgym.db.items import item_reference, official_row_counts
from ehrgym.db.schema import mimic_schema

REF_LABS = ", ".join(str(i) for i, r in item_reference().items() if r.table == "labevents")
MIMIC_PATIENTS = 364_627

VIOLATIONS: dict[str, str] = {
    # ---------------- encounters
    "admission ends after it starts": "SELECT count(*) FROM admissions WHERE dischtime <= admittime",
    "admissions of a patient do not overlap": """
        SELECT count(*) FROM (SELECT admittime, lag(dischtime) OVER (PARTITION BY subject_id ORDER BY admittime) AS prev
                              FROM admissions) WHERE prev >= admittime""",
    "ED registration brackets the admission time": """
        SELECT count(*) FROM admissions WHERE (edregtime IS NULL) <> (edouttime IS NULL)
            OR edregtime > admittime OR edouttime < admittime OR edouttime >= dischtime""",
    "deathtime is dischtime exactly when the patient died in hospital": """
        SELECT count(*) FROM admissions WHERE (hospital_expire_flag = 1) <> (deathtime IS NOT NULL)
            OR deathtime <> dischtime OR (hospital_expire_flag = 1) <> (discharge_location = 'DIED')""",
    "only the last admission can end in death": """
        SELECT count(*) FROM admissions a JOIN admissions b USING (subject_id)
        WHERE a.hospital_expire_flag = 1 AND b.admittime > a.admittime""",
    "dod on or after the last discharge, within a year": """
        SELECT count(*) FROM patients p JOIN (SELECT subject_id, max(dischtime) AS last_out FROM admissions
                                              GROUP BY 1) a USING (subject_id)
        WHERE p.dod < CAST(a.last_out AS DATE) OR p.dod > CAST(a.last_out AS DATE) + 366""",
    "in-hospital deaths have dod = date of death": """
        SELECT count(*) FROM admissions a JOIN patients p USING (subject_id)
        WHERE a.hospital_expire_flag = 1 AND (p.dod IS NULL OR p.dod <> CAST(a.deathtime AS DATE))""",
    "anchor year shifted into the 22nd century, age at anchor year plausible": """
        SELECT count(*) FROM patients WHERE anchor_year NOT BETWEEN 2110 AND 2210 OR anchor_age NOT BETWEEN 18 AND 91
            OR NOT regexp_full_match(anchor_year_group, '20[0-2][0-9] - 20[0-2][0-9]')
            OR CAST(right(anchor_year_group, 4) AS INT) - CAST(left(anchor_year_group, 4) AS INT) <> 2""",
    "anchor_year is the year of the first admission": """
        SELECT count(*) FROM patients p JOIN (SELECT subject_id, min(admittime) AS first_in FROM admissions GROUP BY 1)
        USING (subject_id) WHERE year(first_in) <> p.anchor_year""",
    "every patient has an admission, every admission a patient": """
        SELECT (SELECT count(*) FROM patients WHERE subject_id NOT IN (SELECT subject_id FROM admissions))
             + (SELECT count(*) FROM admissions WHERE subject_id NOT IN (SELECT subject_id FROM patients))""",
    "transfers form a contiguous chain from arrival to discharge": """
        WITH t AS (SELECT *, row_number() OVER w AS k, count(*) OVER (PARTITION BY hadm_id) AS n,
                          lead(intime) OVER w AS next_in
                   FROM transfers WINDOW w AS (PARTITION BY hadm_id ORDER BY intime, eventtype = 'discharge'))
        SELECT count(*) FROM t JOIN admissions a USING (hadm_id, subject_id)
        WHERE (k = 1 AND intime <> coalesce(a.edregtime, a.admittime))
           OR (k < n AND (outtime <> next_in OR eventtype = 'discharge' OR careunit IS NULL))
           OR (k = n AND (eventtype <> 'discharge' OR intime <> a.dischtime OR outtime IS NOT NULL))
           OR (eventtype = 'ED') <> (careunit = 'Emergency Department')""",
    "ED visits without admission: one ED row outside every stay of the patient, before death": """
        SELECT (SELECT count(*) FROM transfers WHERE hadm_id IS NULL
                AND (eventtype <> 'ED' OR careunit <> 'Emergency Department' OR outtime <= intime))
             + (SELECT count(*) FROM transfers t JOIN admissions a USING (subject_id) WHERE t.hadm_id IS NULL
                AND t.outtime >= coalesce(a.edregtime, a.admittime) AND t.intime <= a.dischtime)
             + (SELECT count(*) FROM transfers t JOIN patients p USING (subject_id) WHERE t.hadm_id IS NULL
                AND CAST(t.outtime AS DATE) >= p.dod)""",
    "no empty transfer segment": """
        SELECT count(*) FROM transfers WHERE eventtype <> 'discharge' AND outtime <= intime""",
    "every admission has transfers and services": """
        SELECT count(*) FROM admissions WHERE hadm_id NOT IN (SELECT hadm_id FROM transfers)
            OR hadm_id NOT IN (SELECT hadm_id FROM services)""",
    "services start at admission and stay inside it": """
        SELECT count(*) FROM services s JOIN admissions a USING (hadm_id, subject_id)
        WHERE s.transfertime < a.admittime OR s.transfertime > a.dischtime
           OR (s.prev_service IS NULL) <> (s.transfertime = a.admittime)""",
    "ICU stays lie inside their admission and match an ICU transfer": """
        SELECT count(*) FROM icustays i JOIN admissions a USING (hadm_id, subject_id)
        WHERE i.intime < a.admittime OR i.outtime > a.dischtime OR i.outtime <= i.intime
           OR abs(i.los - epoch(i.outtime - i.intime) / 86400) > 1e-9
           OR NOT EXISTS (SELECT 1 FROM transfers t WHERE t.hadm_id = i.hadm_id AND t.intime = i.intime
                          AND t.outtime = i.outtime AND t.careunit = i.first_careunit)""",
    # ---------------- events inside their admission / stay
    "labs inside their admission": """
        SELECT count(*) FROM labevents e JOIN admissions a USING (hadm_id, subject_id)
        WHERE e.charttime NOT BETWEEN a.admittime AND a.dischtime OR e.storetime < e.charttime
           OR e.storetime > a.dischtime""",
    "every inpatient lab row belongs to an admission": """
        SELECT count(*) FROM labevents WHERE hadm_id NOT IN (SELECT hadm_id FROM admissions)""",
    # outpatient rows (MIMIC-IV's rows without hadm_id) are clinic visits: never during a stay (ED included)
    "outpatient labs and cultures lie outside every stay of their patient": """
        SELECT (SELECT count(*) FROM labevents e JOIN admissions a USING (subject_id)
                WHERE e.hadm_id IS NULL AND e.charttime BETWEEN coalesce(a.edregtime, a.admittime) AND a.dischtime)
             + (SELECT count(*) FROM microbiologyevents e JOIN admissions a USING (subject_id)
                WHERE e.hadm_id IS NULL AND e.charttime BETWEEN coalesce(a.edregtime, a.admittime) AND a.dischtime)
             + (SELECT count(*) FROM labevents e ANTI JOIN patients p USING (subject_id))
             + (SELECT count(*) FROM labevents e JOIN patients p USING (subject_id)
                WHERE e.hadm_id IS NULL AND (e.charttime >= p.dod OR e.storetime < e.charttime))
             + (SELECT count(*) FROM microbiologyevents e JOIN patients p USING (subject_id)
                WHERE e.hadm_id IS NULL AND (e.charttime >= p.dod OR e.storetime < e.charttime
                                              OR e.org_itemid IS NOT NULL))""",
    "cultures inside their admission": """
        SELECT count(*) FROM microbiologyevents e JOIN admissions a USING (hadm_id, subject_id)
        WHERE e.charttime NOT BETWEEN a.admittime AND a.dischtime OR e.chartdate <> date_trunc('day', e.charttime)
           OR e.storetime < e.charttime OR e.storetime > a.dischtime""",
    "every inpatient culture belongs to an admission": """
        SELECT count(*) FROM microbiologyevents WHERE hadm_id NOT IN (SELECT hadm_id FROM admissions)""",
    "prescriptions and pharmacy inside their admission": """
        SELECT (SELECT count(*) FROM prescriptions e JOIN admissions a USING (hadm_id, subject_id)
                WHERE e.starttime < a.admittime OR e.stoptime > a.dischtime OR e.stoptime <= e.starttime)
             + (SELECT count(*) FROM pharmacy e JOIN admissions a USING (hadm_id, subject_id)
                WHERE e.starttime < a.admittime OR e.stoptime > a.dischtime OR e.entertime < a.admittime
                   OR e.entertime > e.starttime OR e.verifiedtime < e.entertime)""",
    "eMAR administrations inside their order": """
        SELECT count(*) FROM emar e JOIN pharmacy p USING (pharmacy_id, subject_id, hadm_id, poe_id)
        WHERE e.charttime NOT BETWEEN p.starttime AND p.stoptime OR e.storetime < e.charttime""",
    "every eMAR row has its order": "SELECT count(*) FROM emar WHERE poe_id NOT IN (SELECT poe_id FROM poe) OR pharmacy_id NOT IN (SELECT pharmacy_id FROM pharmacy)",
    "eMAR detail rows belong to an eMAR row": "SELECT count(*) FROM emar_detail WHERE emar_id NOT IN (SELECT emar_id FROM emar)",
    "orders inside their admission": """
        SELECT count(*) FROM poe e JOIN admissions a USING (hadm_id, subject_id)
        WHERE e.ordertime NOT BETWEEN a.admittime AND a.dischtime""",
    "prescriptions point at a medication order": """
        SELECT count(*) FROM prescriptions r LEFT JOIN poe o USING (poe_id, subject_id, hadm_id)
        WHERE o.order_type IS DISTINCT FROM 'Medications' OR r.poe_seq <> o.poe_seq""",
    "poe_detail rows belong to an order": "SELECT count(*) FROM poe_detail WHERE poe_id NOT IN (SELECT poe_id FROM poe)",
    "procedure and HCPCS dates inside their admission": """
        SELECT (SELECT count(*) FROM procedures_icd e JOIN admissions a USING (hadm_id, subject_id)
                WHERE e.chartdate NOT BETWEEN CAST(a.admittime AS DATE) AND CAST(a.dischtime AS DATE))
             + (SELECT count(*) FROM hcpcsevents e JOIN admissions a USING (hadm_id, subject_id)
                WHERE e.chartdate NOT BETWEEN CAST(a.admittime AS DATE) AND CAST(a.dischtime AS DATE))""",
    "OMR dates near the patient's hospital history and not after death": """
        SELECT count(*) FROM omr o JOIN patients p USING (subject_id)
        JOIN (SELECT subject_id, min(admittime) AS f, max(dischtime) AS l FROM admissions GROUP BY 1) a USING (subject_id)
        WHERE o.chartdate < CAST(a.f AS DATE) - 731 OR o.chartdate > CAST(a.l AS DATE) + 366 OR o.chartdate > p.dod""",
    "chart, output and date-time events inside their ICU stay": """
        SELECT (SELECT count(*) FROM chartevents e JOIN icustays i USING (stay_id, hadm_id, subject_id)
                WHERE e.charttime NOT BETWEEN i.intime AND i.outtime OR e.storetime NOT BETWEEN e.charttime AND i.outtime)
             + (SELECT count(*) FROM outputevents e JOIN icustays i USING (stay_id, hadm_id, subject_id)
                WHERE e.charttime NOT BETWEEN i.intime AND i.outtime)
             + (SELECT count(*) FROM datetimeevents e JOIN icustays i USING (stay_id, hadm_id, subject_id)
                WHERE e.charttime NOT BETWEEN i.intime AND i.outtime OR e.value NOT BETWEEN i.intime AND e.charttime)""",
    "input, ingredient and procedure events inside their ICU stay": """
        SELECT (SELECT count(*) FROM inputevents e JOIN icustays i USING (stay_id, hadm_id, subject_id)
                WHERE e.starttime < i.intime OR e.endtime > i.outtime OR e.endtime <= e.starttime)
             + (SELECT count(*) FROM ingredientevents e JOIN icustays i USING (stay_id, hadm_id, subject_id)
                WHERE e.starttime < i.intime OR e.endtime > i.outtime OR e.endtime <= e.starttime)
             + (SELECT count(*) FROM procedureevents e JOIN icustays i USING (stay_id, hadm_id, subject_id)
                WHERE e.starttime < i.intime OR e.endtime > i.outtime OR e.endtime <= e.starttime)""",
    "every ICU event row belongs to a stay": """
        SELECT sum(n) FROM (
            SELECT count(*) AS n FROM chartevents WHERE stay_id NOT IN (SELECT stay_id FROM icustays) UNION ALL
            SELECT count(*) FROM inputevents WHERE stay_id NOT IN (SELECT stay_id FROM icustays) UNION ALL
            SELECT count(*) FROM ingredientevents WHERE stay_id NOT IN (SELECT stay_id FROM icustays) UNION ALL
            SELECT count(*) FROM outputevents WHERE stay_id NOT IN (SELECT stay_id FROM icustays) UNION ALL
            SELECT count(*) FROM procedureevents WHERE stay_id NOT IN (SELECT stay_id FROM icustays) UNION ALL
            SELECT count(*) FROM datetimeevents WHERE stay_id NOT IN (SELECT stay_id FROM icustays))""",
    "ingredients belong to an input order": """
        SELECT count(*) FROM ingredientevents g WHERE NOT EXISTS (
            SELECT 1 FROM inputevents i WHERE i.orderid = g.orderid AND i.stay_id = g.stay_id
            AND i.starttime = g.starttime AND i.endtime = g.endtime)""",
    # charting is stamped to the minute; order entry (poe.ordertime, pharmacy.entertime) to the second
    "timestamps at whole minutes": """
        SELECT (SELECT count(*) FROM admissions WHERE second(admittime) <> 0 OR second(dischtime) <> 0)
             + (SELECT count(*) FROM labevents WHERE second(charttime) <> 0)
             + (SELECT count(*) FROM chartevents WHERE second(charttime) <> 0)
             + (SELECT count(*) FROM inputevents WHERE second(starttime) <> 0 OR second(endtime) <> 0)
             + (SELECT count(*) FROM emar WHERE second(charttime) <> 0)
             + (SELECT count(*) FROM transfers WHERE second(intime) <> 0)
             + (SELECT count(*) FROM prescriptions WHERE second(starttime) <> 0)""",
    "order entry stamped to the second like MIMIC-IV": """
        SELECT (SELECT count(*) FILTER (WHERE second(ordertime) = 0) > 0.2 * count(*) FROM poe)::INT
             + (SELECT count(*) FILTER (WHERE second(entertime) = 0) > 0.2 * count(*) FROM pharmacy)::INT
             + (SELECT count(*) FROM pharmacy p JOIN poe o USING (poe_id) WHERE p.entertime <> o.ordertime)""",
    # ---------------- codes and items
    "diagnosis codes exist in the dictionary": """
        SELECT count(*) FROM diagnoses_icd d ANTI JOIN d_icd_diagnoses k USING (icd_code, icd_version)""",
    "procedure codes exist in the dictionary": """
        SELECT count(*) FROM procedures_icd d ANTI JOIN d_icd_procedures k USING (icd_code, icd_version)""",
    "HCPCS codes exist in the dictionary": "SELECT count(*) FROM hcpcsevents e ANTI JOIN d_hcpcs k ON k.code = e.hcpcs_cd",
    "one ICD version per admission, ICD-9 before ICD-10 for a patient": """
        SELECT (SELECT count(*) FROM (SELECT hadm_id FROM diagnoses_icd GROUP BY 1 HAVING count(DISTINCT icd_version) > 1))
             + (SELECT count(*) FROM (SELECT hadm_id FROM procedures_icd GROUP BY 1 HAVING count(DISTINCT icd_version) > 1))
             + (SELECT count(*) FROM (SELECT d.subject_id, a.admittime, max(d.icd_version) AS v,
                                             lag(max(d.icd_version)) OVER (PARTITION BY d.subject_id ORDER BY a.admittime) AS pv
                                      FROM diagnoses_icd d JOIN admissions a USING (hadm_id) GROUP BY 1, 2) WHERE pv > v)""",
    "ICD code shapes (no dots)": """
        SELECT count(*) FROM (SELECT icd_code, icd_version FROM d_icd_diagnoses) WHERE NOT CASE icd_version
            WHEN 10 THEN regexp_full_match(icd_code, '[A-Z][0-9][0-9A-Z]{1,5}')
            ELSE regexp_full_match(icd_code, '(V[0-9]{2,4}|E[0-9]{3,4}|[0-9]{3,5})') END""",
    "ICD procedure code shapes": """
        SELECT count(*) FROM d_icd_procedures WHERE NOT CASE icd_version
            WHEN 10 THEN regexp_full_match(icd_code, '[0-9A-HJ-NP-Z]{7}') ELSE regexp_full_match(icd_code, '[0-9]{3,4}') END""",
    "diagnosis sequence numbers are 1..n without repeats": """
        SELECT count(*) FROM (SELECT hadm_id, count(*) AS n, max(seq_num) AS mx, count(DISTINCT seq_num) AS d,
                                     count(DISTINCT icd_code) AS c FROM diagnoses_icd GROUP BY 1)
        WHERE n <> mx OR n <> d OR n <> c""",
    "every admission has diagnoses and a DRG": """
        SELECT count(*) FROM admissions WHERE hadm_id NOT IN (SELECT hadm_id FROM diagnoses_icd)
            OR hadm_id NOT IN (SELECT hadm_id FROM drgcodes WHERE drg_type = 'HCFA')""",
    "lab items exist in d_labitems": "SELECT count(*) FROM labevents e ANTI JOIN d_labitems d USING (itemid)",
    "ICU items exist in d_items with the right linksto": """
        SELECT sum(n) FROM (
            SELECT count(*) AS n FROM chartevents e ANTI JOIN (SELECT itemid FROM d_items WHERE linksto = 'chartevents') USING (itemid) UNION ALL
            SELECT count(*) FROM inputevents e ANTI JOIN (SELECT itemid FROM d_items WHERE linksto = 'inputevents') USING (itemid) UNION ALL
            SELECT count(*) FROM outputevents e ANTI JOIN (SELECT itemid FROM d_items WHERE linksto = 'outputevents') USING (itemid) UNION ALL
            SELECT count(*) FROM procedureevents e ANTI JOIN (SELECT itemid FROM d_items WHERE linksto = 'procedureevents') USING (itemid) UNION ALL
            SELECT count(*) FROM datetimeevents e ANTI JOIN (SELECT itemid FROM d_items WHERE linksto = 'datetimeevents') USING (itemid) UNION ALL
            SELECT count(*) FROM ingredientevents e ANTI JOIN (SELECT itemid FROM d_items WHERE linksto = 'ingredientevents') USING (itemid))""",
    "staff ids exist": """
        SELECT (SELECT count(*) FROM chartevents WHERE caregiver_id NOT IN (SELECT caregiver_id FROM caregiver))
             + (SELECT count(*) FROM inputevents WHERE caregiver_id NOT IN (SELECT caregiver_id FROM caregiver))
             + (SELECT count(*) FROM admissions WHERE admit_provider_id NOT IN (SELECT provider_id FROM provider))
             + (SELECT count(*) FROM labevents WHERE order_provider_id NOT IN (SELECT provider_id FROM provider))
             + (SELECT count(*) FROM poe WHERE order_provider_id NOT IN (SELECT provider_id FROM provider))""",
    # ---------------- values and units
    # text results (NULL valuenum, as MIMIC-IV stores 'NEG', '___' or a comment) carry no number and no flag;
    # those of background items no unit or range either, those of the reference items the benchmark asks about
    # (a few per thousand, as in the demo) keep the item's unit and range and put the reason in comments
    "lab value text matches valuenum; text results have text and nothing numeric": f"""
        SELECT count(*) FROM labevents
        WHERE (valuenum IS NOT NULL AND TRY_CAST(value AS DOUBLE) IS DISTINCT FROM valuenum)
           OR (valuenum IS NULL AND ((value IS NULL AND comments IS NULL) OR flag IS NOT NULL
                                     OR (TRY_CAST(value AS DOUBLE) IS NOT NULL AND itemid NOT IN ({REF_LABS}))
                                     OR (itemid NOT IN ({REF_LABS}) AND (valueuom IS NOT NULL
                                                                         OR ref_range_lower IS NOT NULL))
                                     OR (itemid IN ({REF_LABS}) AND ref_range_lower IS NULL)))""",
    # ... and a few keep their number only in value (MIMIC-IV's numbers left in text, ehrgym.db.synth.labs)
    "reference lab items keep a number only as text in about 0.2 % of results": f"""
        SELECT count(*) FROM (SELECT avg((valuenum IS NULL AND TRY_CAST(value AS DOUBLE) IS NOT NULL)::INT) AS p
                              FROM labevents WHERE itemid IN ({REF_LABS}))
        WHERE p NOT BETWEEN 0.0005 AND 0.005""",
    "reference lab items have results without a number at about the demo's rate (0.4 %)": f"""
        SELECT count(*) FROM (SELECT avg((valuenum IS NULL)::INT) AS p FROM labevents WHERE itemid IN ({REF_LABS}))
        WHERE p NOT BETWEEN 0.001 AND 0.02""",
    "lab flag is 'abnormal' exactly outside the reference range (no range, no flag)": """
        SELECT count(*) FROM labevents WHERE coalesce(flag = 'abnormal', false)
            <> coalesce(valuenum < ref_range_lower OR valuenum > ref_range_upper, false) OR flag <> 'abnormal'
            OR (ref_range_lower IS NULL) <> (ref_range_upper IS NULL)""",
    "numeric chart items have valuenum and matching text": """
        SELECT count(*) FROM chartevents c JOIN d_items d USING (itemid)
        WHERE d.param_type = 'Numeric' AND CASE WHEN c.valuenum IS NULL
            -- a charted row without a number, or with its number only in value (ehrgym.db.synth.icu)
            THEN c.value IS NOT NULL AND TRY_CAST(c.value AS DOUBLE) IS NULL
            ELSE TRY_CAST(c.value AS DOUBLE) IS DISTINCT FROM c.valuenum END""",
    "numeric chart items rarely lack a parsed number (0.2 %)": """
        SELECT count(*) FROM (SELECT avg((c.valuenum IS NULL)::INT) AS p FROM chartevents c JOIN d_items d USING (itemid)
                              WHERE d.param_type = 'Numeric') WHERE p NOT BETWEEN 0.0005 AND 0.005""",
    "text chart items have text": """
        SELECT count(*) FROM chartevents c JOIN d_items d USING (itemid) WHERE d.param_type <> 'Numeric' AND value IS NULL""",
    "one unit per item": """
        SELECT sum(n) FROM (
            SELECT count(*) AS n FROM (SELECT itemid FROM labevents WHERE valuenum IS NOT NULL GROUP BY 1
                                       HAVING count(DISTINCT coalesce(valueuom, '~')) > 1) UNION ALL
            SELECT count(*) FROM (SELECT itemid FROM chartevents GROUP BY 1 HAVING count(DISTINCT coalesce(valueuom, '~')) > 1) UNION ALL
            SELECT count(*) FROM (SELECT itemid FROM inputevents GROUP BY 1 HAVING count(DISTINCT amountuom) > 1
                                  OR count(DISTINCT coalesce(rateuom, '~')) > 1) UNION ALL
            SELECT count(*) FROM (SELECT itemid FROM outputevents GROUP BY 1 HAVING count(DISTINCT valueuom) > 1))""",
    "chart units equal d_items.unitname": """
        SELECT count(*) FROM chartevents c JOIN d_items d USING (itemid) WHERE c.valueuom IS DISTINCT FROM d.unitname""",
    "a stay charts temperature in one unit": """
        SELECT count(*) FROM (SELECT stay_id FROM chartevents WHERE itemid IN (223761, 223762) GROUP BY 1
                              HAVING count(DISTINCT itemid) > 1)""",
    "temperatures in the range of their unit": """
        SELECT count(*) FROM chartevents WHERE (itemid = 223761 AND valuenum NOT BETWEEN 93 AND 107)
                                         OR (itemid = 223762 AND valuenum NOT BETWEEN 34 AND 42)""",
    "GCS scores and texts": """
        SELECT count(*) FROM chartevents WHERE itemid IN (220739, 223900, 223901)
            AND (valuenum IS NULL OR valuenum <> round(valuenum) OR valuenum < 1
                 OR valuenum > CASE itemid WHEN 220739 THEN 4 WHEN 223900 THEN 5 ELSE 6 END)""",
    "susceptibilities carry an organism, interpretation and MIC": """
        SELECT count(*) FROM microbiologyevents WHERE ab_itemid IS NOT NULL AND (org_itemid IS NULL
            OR interpretation NOT IN ('S', 'I', 'R') OR CASE WHEN dilution_value IS NULL
            -- an interpretation without an MIC (3.7 % in the demo): no comparison or text either
            THEN dilution_text IS NOT NULL OR dilution_comparison IS NOT NULL
            ELSE dilution_text IS NULL
                 OR NOT starts_with(dilution_text, coalesce(nullif(dilution_comparison, '='), '')) END)""",
    "susceptibilities without an MIC at about the demo's rate (3.7 %)": """
        SELECT count(*) FROM (SELECT avg((dilution_value IS NULL)::INT) AS p FROM microbiologyevents
                              WHERE ab_itemid IS NOT NULL) WHERE p NOT BETWEEN 0.01 AND 0.08""",
    "negative cultures say so": """
        SELECT count(*) FROM microbiologyevents WHERE org_itemid IS NULL AND (comments IS NULL OR ab_itemid IS NOT NULL)""",
    "input amounts and rates are positive": """
        SELECT count(*) FROM inputevents WHERE amount IS NULL OR amount <= 0 OR rate <= 0
            OR (rateuom IS NULL) <> (rate IS NULL) OR patientweight <= 0""",
    "output volumes present": "SELECT count(*) FROM outputevents WHERE value IS NULL OR value < 0",
    # ---------------- uniqueness
    "natural keys are unique": """
        SELECT (SELECT count(*) - count(DISTINCT (subject_id, itemid, charttime)) FROM labevents)
             + (SELECT count(*) - count(DISTINCT (stay_id, itemid, charttime)) FROM chartevents)
             + (SELECT count(*) - count(DISTINCT (stay_id, itemid, charttime)) FROM outputevents)
             + (SELECT count(*) - count(DISTINCT (stay_id, itemid, starttime)) FROM inputevents)
             + (SELECT count(*) - count(DISTINCT (stay_id, itemid, charttime)) FROM datetimeevents)
             + (SELECT count(*) - count(DISTINCT (hadm_id, seq_num)) FROM diagnoses_icd)
             + (SELECT count(*) - count(DISTINCT (hadm_id, seq_num)) FROM procedures_icd)
             + (SELECT count(*) - count(DISTINCT (icd_code, icd_version)) FROM d_icd_diagnoses)
             + (SELECT count(*) - count(DISTINCT (icd_code, icd_version)) FROM d_icd_procedures)
             + (SELECT count(*) - count(DISTINCT (poe_id, field_name)) FROM poe_detail)
             + (SELECT count(*) - count(DISTINCT (emar_id, parent_field_ordinal)) FROM emar_detail)
             + (SELECT count(*) - count(DISTINCT (subject_id, chartdate, result_name, seq_num)) FROM omr)""",
}

UNIQUE_IDS: dict[str, str] = {
    "patients": "subject_id", "admissions": "hadm_id", "icustays": "stay_id", "transfers": "transfer_id",
    "labevents": "labevent_id", "microbiologyevents": "microevent_id", "pharmacy": "pharmacy_id",
    "prescriptions": "pharmacy_id", "emar": "emar_id", "poe": "poe_id", "inputevents": "orderid",
    "procedureevents": "orderid", "provider": "provider_id", "caregiver": "caregiver_id", "d_items": "itemid",
    "d_labitems": "itemid", "d_hcpcs": "code",
}


@pytest.fixture(scope="module")
def con(synth_db: Path) -> duckdb.DuckDBPyConnection:
    return open_database(synth_db)


@pytest.mark.parametrize("rule", list(VIOLATIONS))
def test_invariant(con: duckdb.DuckDBPyConnection, rule: str) -> None:
    violations = con.execute(VIOLATIONS[rule]).fetchone()[0]
    assert violations == 0, f"{rule}: {violations} violating rows"


@pytest.mark.parametrize("table,column", list(UNIQUE_IDS.items()))
def test_ids_unique(con: duckdb.DuckDBPyConnection, table: str, column: str) -> None:
    total, distinct, nulls = con.execute(
        f"SELECT count(*), count(DISTINCT {column}), count(*) - count({column}) FROM {table}").fetchone()
    assert nulls == 0 and distinct == total


@pytest.mark.parametrize("table", list(mimic_schema()))
def test_no_exact_duplicate_rows(con: duckdb.DuckDBPyConnection, table: str) -> None:
    total = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    distinct = con.execute(f"SELECT count(*) FROM (SELECT DISTINCT * FROM {table})").fetchone()[0]
    assert distinct == total


def test_required_columns_not_null(con: duckdb.DuckDBPyConnection) -> None:
    bad = []
    for spec in mimic_schema().values():
        for col in spec.columns:
            if col.required:
                n = con.execute(f'SELECT count(*) FROM {spec.qualified} WHERE "{col.name}" IS NULL').fetchone()[0]
                if n:
                    bad.append(f"{spec.name}.{col.name}: {n}")
    assert bad == []


def test_values_inside_plausible_bounds(con: duckdb.DuckDBPyConnection) -> None:
    value_col = {"labevents": "valuenum", "chartevents": "valuenum", "inputevents": "amount", "outputevents": "value"}
    bad = []
    for ref in item_reference().values():
        col = value_col[ref.table]
        lo, hi, n = con.execute(f"SELECT min({col}), max({col}), count(*) FROM {ref.table} WHERE itemid = ?",
                                [ref.itemid]).fetchone()
        if n and (lo < ref.plausible_min or hi > ref.plausible_max):
            bad.append(f"{ref.table}.{ref.itemid} {ref.label}: [{lo}, {hi}] outside "
                       f"[{ref.plausible_min}, {ref.plausible_max}]")
    assert bad == []


def test_lab_units_are_the_reference_units(con: duckdb.DuckDBPyConnection) -> None:
    got = dict(con.execute("SELECT itemid, any_value(valueuom) FROM labevents GROUP BY 1").fetchall())
    for ref in item_reference().values():
        if ref.table == "labevents":
            assert got[ref.itemid] == (ref.unit or None), ref.label
    assert got[50931] == "mg/dL"


def test_reference_items_are_all_used(con: duckdb.DuckDBPyConnection) -> None:
    used = {t: {r[0] for r in con.execute(f"SELECT DISTINCT itemid FROM {t}").fetchall()}
            for t in ("labevents", "chartevents", "inputevents", "outputevents")}
    missing = [f"{r.table}.{r.itemid}" for r in item_reference().values() if r.itemid not in used[r.table]]
    assert missing == []


def test_labels_and_units_come_from_the_reference(con: duckdb.DuckDBPyConnection) -> None:
    labs = dict(con.execute("SELECT itemid, label FROM d_labitems").fetchall())
    items = dict(con.execute("SELECT itemid, label FROM d_items").fetchall())
    for ref in item_reference().values():
        assert (labs if ref.table == "labevents" else items)[ref.itemid] == ref.label


def test_per_patient_volumes_within_an_order_of_magnitude_of_mimic(con: duckdb.DuckDBPyConnection) -> None:
    patients = con.execute("SELECT count(*) FROM patients").fetchone()[0]
    off = []
    for table, (full, _) in official_row_counts().items():
        if full is None or table.startswith("d_"):
            continue
        ours = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] / patients
        theirs = full / MIMIC_PATIENTS
        if not 0.1 <= ours / theirs <= 10:
            off.append(f"{table}: {ours:.2f}/patient vs MIMIC-IV {theirs:.2f}")
    assert off == []


# Each rule must be able to fail: corrupt a copy of the database and watch the rule catch it.
MUTATIONS: dict[str, tuple[str, str]] = {
    "overlapping admission": ("admissions of a patient do not overlap", """
        UPDATE mimiciv_hosp.admissions SET dischtime = dischtime + INTERVAL 4000 DAY
        WHERE hadm_id = (SELECT hadm_id FROM mimiciv_hosp.admissions a WHERE (SELECT count(*) FROM
                         mimiciv_hosp.admissions b WHERE b.subject_id = a.subject_id) > 1 ORDER BY admittime LIMIT 1)"""),
    "lab outside its admission": ("labs inside their admission", """
        UPDATE mimiciv_hosp.labevents SET charttime = charttime - INTERVAL 30 DAY
        WHERE labevent_id = (SELECT min(labevent_id) FROM mimiciv_hosp.labevents WHERE hadm_id IS NOT NULL)"""),
    "ED visit during a stay": ("ED visits without admission: one ED row outside every stay of the patient, before death", """
        UPDATE mimiciv_hosp.transfers SET hadm_id = NULL
        WHERE transfer_id = (SELECT min(transfer_id) FROM mimiciv_hosp.transfers WHERE eventtype = 'ED'
                             AND hadm_id IS NOT NULL)"""),
    "inpatient lab stripped of its admission": ("outpatient labs and cultures lie outside every stay of their patient", """
        UPDATE mimiciv_hosp.labevents SET hadm_id = NULL
        WHERE labevent_id = (SELECT min(labevent_id) FROM mimiciv_hosp.labevents WHERE hadm_id IS NOT NULL)"""),
    "duplicated lab row": ("natural keys are unique", """
        INSERT INTO mimiciv_hosp.labevents SELECT * REPLACE (labevent_id + 10000000 AS labevent_id)
        FROM mimiciv_hosp.labevents WHERE labevent_id = 5"""),
    "gap in the transfer chain": ("transfers form a contiguous chain from arrival to discharge", """
        UPDATE mimiciv_hosp.transfers SET outtime = outtime - INTERVAL 5 MINUTE
        WHERE transfer_id = (SELECT min(transfer_id) FROM mimiciv_hosp.transfers WHERE eventtype = 'admit')"""),
    "chart value outside its stay": ("chart, output and date-time events inside their ICU stay", """
        UPDATE mimiciv_icu.chartevents SET charttime = charttime + INTERVAL 60 DAY
        WHERE charttime = (SELECT min(charttime) FROM mimiciv_icu.chartevents)"""),
    "unknown diagnosis code": ("diagnosis codes exist in the dictionary", """
        UPDATE mimiciv_hosp.diagnoses_icd SET icd_code = 'Q999' WHERE seq_num = 1
        AND hadm_id = (SELECT min(hadm_id) FROM mimiciv_hosp.diagnoses_icd)"""),
    "second unit for an item": ("one unit per item", """
        UPDATE mimiciv_hosp.labevents SET valueuom = 'umol/L' WHERE itemid = 50912 AND labevent_id IN
            (SELECT min(labevent_id) FROM mimiciv_hosp.labevents WHERE itemid = 50912)"""),
    "nulled lab value": ("lab value text matches valuenum; text results have text and nothing numeric", f"""
        UPDATE mimiciv_hosp.labevents SET valuenum = NULL
        WHERE labevent_id = (SELECT min(labevent_id) FROM mimiciv_hosp.labevents WHERE itemid NOT IN ({REF_LABS})
                             AND valuenum IS NOT NULL)"""),
    "number without its text": ("lab value text matches valuenum; text results have text and nothing numeric", """
        UPDATE mimiciv_hosp.labevents SET value = 'ERROR'
        WHERE labevent_id = (SELECT min(labevent_id) FROM mimiciv_hosp.labevents WHERE valuenum IS NOT NULL)"""),
    "death before discharge": ("dod on or after the last discharge, within a year", """
        UPDATE mimiciv_hosp.patients SET dod = DATE '2100-01-01' WHERE subject_id = (SELECT min(subject_id)
        FROM mimiciv_hosp.patients)"""),
}


@pytest.fixture(scope="module")
def mutable_copy(synth_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    import shutil

    path = tmp_path_factory.mktemp("mutable") / "copy.duckdb"
    shutil.copyfile(synth_db, path)
    return path


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_invariant_catches_corruption(mutable_copy: Path, mutation: str) -> None:
    rule, edit = MUTATIONS[mutation]
    con = open_database(mutable_copy, read_only=False)
    try:
        con.execute("BEGIN TRANSACTION")
        con.execute(edit)
        assert con.execute(VIOLATIONS[rule]).fetchone()[0] > 0, f"{rule!r} missed: {mutation}"
    finally:
        con.execute("ROLLBACK")
        con.close()
