"""docs/real-engines.md's guardrail table is the one made from bench/results/real-engine-guardrails.json
(the record of `make real-engine-guardrails` on the real CPU pair), and every case of
tests/realengine/guardrails.py has a recorded run."""

from __future__ import annotations

import json

from ..conftest import ROOT
from ..realengine.guardrails import CASES, DOCS_BEGIN, DOCS_END, table

RESULTS = ROOT / "bench" / "results" / "real-engine-guardrails.json"
DOC = ROOT / "docs" / "real-engines.md"


def test_every_case_was_run_on_the_real_engines():
    records = json.loads(RESULTS.read_text())["cases"]
    assert [r["case"] for r in records] == [c.name for c in CASES]
    for r in records:
        assert r["outcome"], r
        assert r.get("detail") or r.get("requests"), r  # a start failure says why; a run says what it sent


def test_the_docs_table_is_the_recorded_one():
    records = json.loads(RESULTS.read_text())["cases"]
    section = DOC.read_text().split(DOCS_BEGIN, 1)[1].split(DOCS_END, 1)[0]
    assert section.strip() == table(records)
