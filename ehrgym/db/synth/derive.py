"""Derive the synthetic hospital's vocabulary resources from the MIMIC-IV Clinical Database Demo.

The resources under ``ehrgym/resources/synth/`` are *derived vocabulary with usage frequencies* (item,
code and drug dictionaries, value quantiles, most common attributes), never demo rows: each file has
one row per vocabulary entry (or per (entry, text value) for lab text results). They are published
under the demo's Open Database License (see ``ehrgym/resources/synth/LICENSE.md``).

Regenerate them (deterministic: same demo, same files) with::

    python -m ehrgym.db.synth.derive /path/to/mimic-iv-demo-2.2 ehrgym/resources/synth
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

import duckdb

from ehrgym.errors import DatabaseError

# One SQL query per resource, over views named after the demo tables. Every query orders its rows
# completely, so that the files are byte-identical across runs.
QUERIES: dict[str, str] = {
    # numeric lab items: frequency, share of text (NULL valuenum) and outpatient rows, unit, decimals of
    # the value text, the most common reference range and the share of rows without one, value quantiles
    "lab_items": r"""
        WITH e AS (SELECT *, length(regexp_extract(value, '\.([0-9]+)$', 1)) AS dec FROM labevents),
        unit AS (SELECT itemid, arg_max(valueuom, n) AS unit FROM (
                     SELECT itemid, valueuom, count(*) AS n FROM e WHERE valueuom IS NOT NULL GROUP BY 1, 2)
                 GROUP BY 1),
        rr AS (SELECT itemid, arg_max(lo, n) AS ref_lower, arg_max(hi, n) AS ref_upper FROM (
                   SELECT itemid, ref_range_lower AS lo, ref_range_upper AS hi, count(*) AS n FROM e
                   WHERE ref_range_lower IS NOT NULL GROUP BY 1, 2, 3 ORDER BY 1, 4 DESC, 2, 3) GROUP BY 1),
        dec AS (SELECT itemid, arg_max(dec, n) AS decimals FROM (
                    SELECT itemid, dec, count(*) AS n FROM e WHERE valuenum IS NOT NULL GROUP BY 1, 2
                    ORDER BY 1, 3 DESC, 2) GROUP BY 1)
        SELECT e.itemid, d.label, d.fluid, d.category, unit.unit, count(*) AS rows,
               round(avg((e.valuenum IS NULL)::INT), 4) AS p_text,
               round(avg((e.hadm_id IS NULL)::INT), 4) AS p_outpatient,
               round(avg((e.ref_range_lower IS NULL)::INT), 4) AS p_no_range,
               round(avg((e.comments IS NOT NULL AND e.valuenum IS NOT NULL)::INT), 4) AS p_comment,
               coalesce(dec.decimals, 0) AS decimals, rr.ref_lower, rr.ref_upper,
               count(e.valuenum) AS n_numeric,
               round(quantile_cont(e.valuenum, 0.01), 4) AS p01, round(quantile_cont(e.valuenum, 0.10), 4) AS p10,
               round(quantile_cont(e.valuenum, 0.25), 4) AS p25, round(quantile_cont(e.valuenum, 0.50), 4) AS p50,
               round(quantile_cont(e.valuenum, 0.75), 4) AS p75, round(quantile_cont(e.valuenum, 0.90), 4) AS p90,
               round(quantile_cont(e.valuenum, 0.99), 4) AS p99
        FROM e JOIN d_labitems d USING (itemid) LEFT JOIN unit USING (itemid) LEFT JOIN rr USING (itemid)
        LEFT JOIN dec USING (itemid)
        GROUP BY e.itemid, d.label, d.fluid, d.category, unit.unit, dec.decimals, rr.ref_lower, rr.ref_upper
        ORDER BY e.itemid""",
    # the text results of lab rows without a number (value and comment as MIMIC stores them), the
    # eight most common per item
    "lab_text": r"""
        SELECT itemid, value, comments, n AS rows FROM (
            SELECT itemid, value, comments, count(*) AS n,
                   row_number() OVER (PARTITION BY itemid ORDER BY count(*) DESC, value NULLS FIRST,
                                      comments NULLS FIRST) AS k
            FROM labevents WHERE valuenum IS NULL AND (value IS NOT NULL OR comments IS NOT NULL)
            GROUP BY 1, 2, 3)
        WHERE k <= 8 ORDER BY itemid, rows DESC, value NULLS FIRST, comments NULLS FIRST""",
    # comments MIMIC attaches to numeric lab results, the three most common per item (seen at least twice)
    "lab_comments": r"""
        SELECT itemid, comments, n AS rows FROM (
            SELECT itemid, comments, count(*) AS n,
                   row_number() OVER (PARTITION BY itemid ORDER BY count(*) DESC, comments) AS k
            FROM labevents WHERE valuenum IS NOT NULL AND comments IS NOT NULL GROUP BY 1, 2)
        WHERE k <= 3 AND n >= 2 ORDER BY itemid, rows DESC, comments""",
    "diagnoses": r"""
        SELECT icd_code, icd_version, d.long_title, count(*) AS rows
        FROM diagnoses_icd JOIN d_icd_diagnoses d USING (icd_code, icd_version)
        GROUP BY 1, 2, 3 ORDER BY icd_version, icd_code""",
    "procedures": r"""
        SELECT icd_code, icd_version, d.long_title, count(*) AS rows
        FROM procedures_icd JOIN d_icd_procedures d USING (icd_code, icd_version)
        GROUP BY 1, 2, 3 ORDER BY icd_version, icd_code""",
    # drug strings with their most common order attributes (and the pharmacy's frequency and type)
    "drugs": r"""
        WITH p AS (SELECT r.*, ph.frequency, ph.proc_type FROM prescriptions r
                   LEFT JOIN pharmacy ph USING (pharmacy_id)),
        e AS (SELECT DISTINCT pharmacy_id FROM emar)
        SELECT drug, count(*) AS rows,
               mode(drug_type ORDER BY drug_type) AS drug_type, mode(route ORDER BY route) AS route,
               mode(formulary_drug_cd ORDER BY formulary_drug_cd) AS formulary_drug_cd,
               mode(gsn ORDER BY gsn) AS gsn, mode(ndc ORDER BY ndc) AS ndc,
               mode(prod_strength ORDER BY prod_strength) AS prod_strength,
               mode(dose_val_rx ORDER BY dose_val_rx) AS dose_val_rx,
               mode(dose_unit_rx ORDER BY dose_unit_rx) AS dose_unit_rx,
               mode(form_val_disp ORDER BY form_val_disp) AS form_val_disp,
               mode(form_unit_disp ORDER BY form_unit_disp) AS form_unit_disp,
               mode(doses_per_24_hrs ORDER BY doses_per_24_hrs) AS doses_per_24_hrs,
               mode(frequency ORDER BY frequency) AS frequency, mode(proc_type ORDER BY proc_type) AS proc_type,
               round(median(epoch(stoptime - starttime) / 86400), 2) AS median_days,
               round(avg((pharmacy_id IN (SELECT pharmacy_id FROM e))::INT), 4) AS p_emar
        FROM p WHERE drug IS NOT NULL GROUP BY drug ORDER BY drug""",
    "specimens": r"""
        SELECT spec_itemid, spec_type_desc, test_itemid, test_name, count(*) AS rows,
               round(avg((hadm_id IS NULL)::INT), 4) AS p_outpatient,
               mode(comments ORDER BY comments) FILTER (WHERE org_itemid IS NULL) AS negative_comment
        FROM microbiologyevents GROUP BY 1, 2, 3, 4 ORDER BY spec_itemid, test_itemid""",
    # ICU input items: frequency, stays using them, rows per (stay, item), typical amounts and rates
    "input_items": r"""
        WITH per_stay AS (SELECT itemid, count(*) AS n FROM inputevents GROUP BY stay_id, itemid)
        SELECT i.itemid, d.label, d.category, count(*) AS rows,
               (SELECT count(*) FROM per_stay s WHERE s.itemid = i.itemid) AS stays,
               mode(amountuom ORDER BY amountuom) AS amountuom, mode(rateuom ORDER BY rateuom) AS rateuom,
               round(avg((rate IS NOT NULL)::INT), 4) AS p_rate,
               mode(ordercategoryname ORDER BY ordercategoryname) AS ordercategoryname,
               mode(secondaryordercategoryname ORDER BY secondaryordercategoryname) AS secondaryordercategoryname,
               mode(ordercategorydescription ORDER BY ordercategorydescription) AS ordercategorydescription,
               round(quantile_cont(amount, 0.5), 4) AS amount_p50, round(quantile_cont(rate, 0.5), 4) AS rate_p50,
               round(quantile_cont(epoch(endtime - starttime) / 60, 0.5), 1) AS minutes_p50
        FROM inputevents i JOIN d_items d USING (itemid)
        GROUP BY i.itemid, d.label, d.category ORDER BY i.itemid""",
    # ICU procedure and date-time items with their frequency
    "icu_event_items": r"""
        SELECT 'procedureevents' AS linksto, p.itemid, d.label, d.category, count(*) AS rows,
               count(DISTINCT stay_id) AS stays, mode(ordercategoryname ORDER BY ordercategoryname) AS ordercategory,
               mode(ordercategorydescription ORDER BY ordercategorydescription) AS orderdescription,
               round(quantile_cont(epoch(endtime - starttime) / 60, 0.5), 1) AS minutes_p50
        FROM procedureevents p JOIN d_items d USING (itemid) GROUP BY 1, 2, 3, 4
        UNION ALL
        SELECT 'datetimeevents', t.itemid, d.label, d.category, count(*), count(DISTINCT stay_id), NULL, NULL, NULL
        FROM datetimeevents t JOIN d_items d USING (itemid) GROUP BY 1, 2, 3, 4
        ORDER BY 1, 2""",
}

TABLES = {
    "labevents": "hosp", "d_labitems": "hosp", "diagnoses_icd": "hosp", "d_icd_diagnoses": "hosp",
    "procedures_icd": "hosp", "d_icd_procedures": "hosp", "prescriptions": "hosp", "pharmacy": "hosp",
    "emar": "hosp", "microbiologyevents": "hosp", "inputevents": "icu", "procedureevents": "icu",
    "datetimeevents": "icu", "d_items": "icu",
}


def derive_resources(demo_dir: Path, out_dir: Path) -> dict[str, int]:
    """Write one ``<name>.csv.gz`` per query of :data:`QUERIES`; return their row counts."""
    demo_dir, out_dir = Path(demo_dir), Path(out_dir)
    con = duckdb.connect()
    for table, module in TABLES.items():
        path = demo_dir / module / f"{table}.csv.gz"
        if not path.exists():
            raise DatabaseError(f"{path} not found: pass the directory of the MIMIC-IV demo (with hosp/ and icu/)")
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_csv('{path}', header=true, sample_size=-1)")
    out_dir.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    for name, sql in QUERIES.items():
        rel = con.sql(sql)
        rows = rel.fetchall()
        columns = rel.columns
        target = out_dir / f"{name}.csv.gz"
        tmp = out_dir / f".{name}.csv"
        con.execute(f"COPY ({sql}) TO '{tmp}' (HEADER, DELIMITER ',')")
        # gzip with a fixed mtime, so that the bytes depend on the content only
        with open(tmp, "rb") as src, open(target, "wb") as raw, \
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
            gz.write(src.read())
        tmp.unlink()
        counts[name] = len(rows)
        assert columns  # every query names its columns
    return counts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("demo_dir", type=Path)
    parser.add_argument("out_dir", type=Path)
    args = parser.parse_args(argv)
    for name, n in derive_resources(args.demo_dir, args.out_dir).items():
        print(f"{name:16s} {n:6d} rows")


if __name__ == "__main__":
    main()
