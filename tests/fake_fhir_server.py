"""A tiny FHIR R4 server on loopback for tests (stdlib http.server): a few hand-written patients and
observations, searched the way MedAgentBench's functions search them. POSTs are refused (405): the
kit never sends them (it records them, as the official harness does)."""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PATIENTS: dict[str, dict[str, Any]] = {
    "S1000001": {"name": ("Ada", "Lovelace"), "birthDate": "1950-06-01"},    # 73 on 2023-11-13
    "S1000002": {"name": ("Alan", "Turing"), "birthDate": "1980-12-01"},     # 42 (birthday not yet reached)
    "S1000003": {"name": ("Grace", "Hopper"), "birthDate": "1990-11-13"},    # 33 (birthday today)
}
# (patient, code, effectiveDateTime, value)
OBSERVATIONS: list[tuple[str, str, str, float]] = [
    ("S1000001", "MG", "2023-11-13T08:00:00+00:00", 1.3),     # low, within 24 h
    ("S1000001", "MG", "2023-11-12T06:00:00+00:00", 2.5),     # older than 24 h
    ("S1000001", "GLU", "2023-11-13T01:00:00+00:00", 100.0),
    ("S1000001", "GLU", "2023-11-12T20:00:00+00:00", 121.0),
    ("S1000001", "GLU", "2023-11-10T20:00:00+00:00", 300.0),  # outside 24 h
    ("S1000001", "K", "2023-11-12T09:00:00+00:00", 3.1),      # low: 40 mEq
    ("S1000001", "A1C", "2021-01-05T10:00:00+00:00", 6.5),    # older than a year: order
    ("S1000002", "MG", "2023-11-01T08:00:00+00:00", 1.0),     # none within 24 h
    ("S1000002", "K", "2023-11-12T09:00:00+00:00", 4.0),      # not low
    ("S1000002", "A1C", "2023-06-01T10:00:00+00:00", 7.1),    # recent: no order
    ("S1000003", "MG", "2023-11-13T09:00:00+00:00", 2.1),     # within 24 h, not low
    ("S1000003", "GLU", "2023-11-13T09:30:00+00:00", 95.0),
]


def _bundle(resources: list[dict[str, Any]]) -> dict[str, Any]:
    return {"resourceType": "Bundle", "type": "searchset", "total": len(resources),
            "entry": [{"fullUrl": f"{r['resourceType']}/{r['id']}", "resource": r} for r in resources]}


def _patient(mrn: str, record: dict[str, Any]) -> dict[str, Any]:
    given, family = record["name"]
    return {"resourceType": "Patient", "id": mrn, "identifier": [{"value": mrn}],
            "name": [{"given": [given], "family": family}], "birthDate": record["birthDate"]}


def _observation(i: int, mrn: str, code: str, when: str, value: float) -> dict[str, Any]:
    return {"resourceType": "Observation", "id": f"obs{i}", "status": "final", "code": {"coding": [{"code": code}]},
            "subject": {"reference": f"Patient/{mrn}"}, "effectiveDateTime": when,
            "valueQuantity": {"value": value, "unit": "mg/dL"}}


def synthetic_records(mrns: list[str], seed: int = 0) -> tuple[dict[str, dict[str, Any]], list[tuple[str, str, str, float]]]:
    """Patients and observations for every MRN (seeded): each code is missing, old, recent or within 24 h, low
    or normal, so every branch of every grader is exercised."""
    import random
    from datetime import datetime, timedelta, timezone

    rng = random.Random(seed)
    now = datetime(2023, 11, 13, 10, 15, tzinfo=timezone.utc)
    ranges = {"MG": (0.6, 2.6), "GLU": (60.0, 260.0), "K": (2.8, 5.0), "A1C": (5.0, 9.5)}
    patients, observations = {}, []
    for mrn in mrns:
        patients[mrn] = {"name": ("Pat", mrn), "birthDate": f"{rng.randint(1930, 2005)}-{rng.randint(1, 12):02d}-"
                                                            f"{rng.randint(1, 28):02d}"}
        for code, (lo, hi) in ranges.items():
            for _ in range(rng.choice((0, 1, 2, 3))):
                hours = rng.choice((rng.uniform(0.5, 23.5), rng.uniform(25, 24 * 30), rng.uniform(24 * 400, 24 * 900)))
                when = (now - timedelta(hours=hours)).replace(microsecond=0).isoformat()
                observations.append((mrn, code, when, round(rng.uniform(lo, hi), 1)))
    return patients, observations


class _Handler(BaseHTTPRequestHandler):
    patients: dict[str, dict[str, Any]] = PATIENTS
    observations: list[tuple[str, str, str, float]] = OBSERVATIONS

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body, indent=2).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/fhir+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        path = url.path.removeprefix("/fhir/")
        if path == "metadata":
            return self._send(200, {"resourceType": "CapabilityStatement", "fhirVersion": "4.0.1"})
        if path == "Patient":
            mrn = query.get("identifier")
            hits = [m for m in self.patients if mrn in (None, m)]
            if "family" in query:
                hits = [m for m in hits if self.patients[m]["name"][1] == query["family"]]
            if "birthdate" in query:
                hits = [m for m in hits if self.patients[m]["birthDate"] == query["birthdate"]]
            return self._send(200, _bundle([_patient(m, self.patients[m]) for m in hits]))
        if path == "Observation":
            rows = [_observation(i, *o) for i, o in enumerate(self.observations)
                    if o[0] == query.get("patient") and o[1] == query.get("code")]
            return self._send(200, _bundle(rows))
        return self._send(404, {"resourceType": "OperationOutcome", "issue": [{"diagnostics": f"no {path}"}]})

    def do_POST(self) -> None:
        self._send(405, {"resourceType": "OperationOutcome", "issue": [{"diagnostics": "read-only test server"}]})


class FakeFhirServer:
    """``with FakeFhirServer() as base: ...`` serves on 127.0.0.1 (a free port); ``base`` ends in ``/fhir/``.
    ``patients`` / ``observations``: other records than the hand-written ones (e.g. :func:`synthetic_records`)."""

    def __init__(self, patients: dict[str, dict[str, Any]] | None = None,
                 observations: list[tuple[str, str, str, float]] | None = None) -> None:
        self.handler = type("Handler", (_Handler,), {"patients": patients if patients is not None else PATIENTS,
                                                     "observations": observations if observations is not None
                                                     else OBSERVATIONS})

    def __enter__(self) -> str:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self.handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/fhir/"

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
