"""The table of owned engine flags (qdd.plan.flags) is what the argv, the extraArgs check and the
docs page are made of."""

from __future__ import annotations

import os

from qdd.catalog.vllm_options import serve_options
from qdd.plan.args import OWNED_ENV
from qdd.plan.flags import ENGINE_FLAGS, OWNED_FLAGS, docs_table

from ..conftest import ROOT
from .helpers import plan_of

PAGE = ROOT / "docs" / "engine-flags.md"
MARK = "<!-- generated from qdd/plan/flags.py: QDD_UPDATE_DOCS=1 pytest tests/unit/test_engine_flags.py -->\n"


def test_every_owned_flag_is_a_vllm_option():
    table = serve_options()
    assert [f.name for f in ENGINE_FLAGS if f.name not in table.by_name] == []


def test_every_flag_the_seed_renders_is_an_owned_row(seed_cr):
    plan = plan_of(seed_cr)
    for pod in plan.prefill.pods + plan.decode.pods:
        rendered = {a[2:].removeprefix("no-") for a in pod.argv if a.startswith("--")}
        assert rendered <= set(OWNED_FLAGS), rendered - set(OWNED_FLAGS)


def test_docs_page_is_generated_from_the_table():
    text = PAGE.read_text()
    head, _, rest = text.partition(MARK)
    env_rows = "\n".join(f"| `{k}` | {v} |" for k, v in OWNED_ENV.items())
    want = docs_table() + "\n## Environment variables\n\n| variable | set by |\n|---|---|\n" + env_rows + "\n"
    if os.environ.get("QDD_UPDATE_DOCS") == "1":
        PAGE.write_text(head + MARK + want)
        return
    assert rest == want, "docs/engine-flags.md is stale: QDD_UPDATE_DOCS=1 pytest tests/unit/test_engine_flags.py"
