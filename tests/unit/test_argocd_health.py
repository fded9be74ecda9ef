"""The Argo CD health check (charts/qdd-operator/files/argocd-health.lua) run in a real Lua 5.1
runtime (lupa; Argo CD's gopher-lua is Lua 5.1) against QwenDisaggDeployment objects recorded
from the local control plane (tests/integration/data/statuses/, re-recorded by record.py there),
plus edge cases the recordings cannot show."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from lupa import lua51

from ..conftest import ROOT

LUA = ROOT / "charts" / "qdd-operator" / "files" / "argocd-health.lua"
STATUSES = ROOT / "tests" / "integration" / "data" / "statuses"
ARGOCD_KEY = "resource.customizations.health.qdd.dev_QwenDisaggDeployment"


def to_lua(rt: Any, value: Any) -> Any:
    """JSON → Lua tables, as Argo CD hands the object over: objects and arrays are tables (arrays
    1-based), nulls are absent, numbers are Lua numbers."""
    if isinstance(value, dict):
        return rt.table_from({k: to_lua(rt, v) for k, v in value.items() if v is not None})
    if isinstance(value, list):
        return rt.table_from([to_lua(rt, v) for v in value])
    return value


def health(obj: dict[str, Any]) -> dict[str, str]:
    rt = lua51.LuaRuntime(unpack_returned_tuples=True)
    rt.globals().obj = to_lua(rt, obj)
    hs = rt.execute(LUA.read_text())
    out = {"status": hs["status"], "message": hs["message"]}
    assert set(dict(hs)) <= {"status", "message"}
    return out


def recorded(name: str) -> dict[str, Any]:
    return json.loads((STATUSES / f"{name}.json").read_text())


def cond(obj: dict[str, Any], ctype: str) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == ctype)


def test_runtime_is_lua_51():
    assert lua51.LuaRuntime().eval("_VERSION") == "Lua 5.1"


# The recordings themselves: each shows the state its name says (so the table below tests
# what it claims to test).
def test_recordings_show_their_states():
    assert "status" not in recorded("no-status")
    for name in ("progressing", "ready", "rolling-out", "degraded", "invalid-capacity", "invalid-model"):
        o = recorded(name)
        assert o["status"]["observedGeneration"] == o["metadata"]["generation"], name
    assert cond(recorded("progressing"), "Ready")["status"] == "False"
    assert cond(recorded("ready"), "Ready")["status"] == "True"
    stale = recorded("stale-generation")
    assert stale["status"]["observedGeneration"] < stale["metadata"]["generation"]
    roll = recorded("rolling-out")
    assert roll["metadata"]["generation"] > 1 and cond(roll, "Progressing")["status"] == "True"
    assert cond(recorded("degraded"), "Degraded")["status"] == "True"
    for name in ("invalid-capacity", "invalid-model"):
        assert cond(recorded(name), "PlanValid")["status"] == "False"


EXPECTED = {
    "no-status": ("Progressing", r"Waiting for the qdd operator to reconcile"),
    "progressing": ("Progressing", r"endpoints ready"),
    "ready": ("Healthy", r"prefill 4/4, decode 1/1 endpoints ready"),
    "stale-generation": ("Progressing", r"observe generation 2 \(status is for generation 1\)"),
    "rolling-out": ("Progressing", r"endpoints ready"),
    "degraded": ("Degraded", r"decode endpoint 0: .*recreating the whole group"),
    "invalid-capacity": ("Degraded", r"spec\.workload\.concurrency: 20000 concurrent requests exceed"),
    "invalid-model": ("Degraded", r"spec\.model"),
}


def test_every_recording_has_an_expectation():
    assert {p.stem for p in STATUSES.glob("*.json")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_health_of_recorded_status(name):
    want_status, want_message = EXPECTED[name]
    obj = recorded(name)
    hs = health(obj)
    assert hs["status"] == want_status, hs
    assert re.search(want_message, hs["message"]), hs
    if want_status == "Degraded":
        # The message is the message of the condition that made it Degraded.
        culprit = next(c for c in obj["status"]["conditions"]
                       if (c["type"] in ("Degraded", "Stalled") and c["status"] == "True")
                       or (c["type"] == "PlanValid" and c["status"] == "False"))
        assert hs["message"] == culprit["message"]
    if want_status == "Healthy" or name in ("progressing", "rolling-out"):
        assert hs["message"] == cond(obj, "Ready")["message"]


# --- edge cases, from the recordings with one thing changed ------------------------------------

def test_stale_conditions_are_ignored():
    obj = copy.deepcopy(recorded("ready"))
    for c in obj["status"]["conditions"]:
        c["observedGeneration"] = obj["metadata"]["generation"] - 1 if obj["metadata"]["generation"] > 1 else 0
    assert health(obj)["status"] == "Progressing"


def test_degraded_and_stalled_win_over_ready():
    obj = copy.deepcopy(recorded("ready"))
    cond(obj, "Stalled").update(status="True", message="stuck for a reason")
    assert health(obj) == {"status": "Degraded", "message": "stuck for a reason"}
    obj = copy.deepcopy(recorded("ready"))
    cond(obj, "Degraded").update(status="True", message="")
    assert health(obj) == {"status": "Degraded", "message": "Degraded"}


def test_older_generation_wins_over_degraded():
    """A Degraded condition about an older generation says nothing about the new spec."""
    obj = copy.deepcopy(recorded("degraded"))
    obj["metadata"]["generation"] += 1
    assert health(obj)["status"] == "Progressing"


def test_status_without_observed_generation_is_progressing():
    obj = copy.deepcopy(recorded("ready"))
    del obj["status"]["observedGeneration"]
    assert health(obj)["status"] == "Progressing"


def test_install_doc_carries_the_script_verbatim():
    """docs/install.md's argocd-cm snippet is the shipped file, indented under its key."""
    doc = (ROOT / "docs" / "install.md").read_text()
    m = re.search(rf"^( *){re.escape(ARGOCD_KEY)}: \|\n((?:\1  .*\n|\n)+)", doc, re.M)
    assert m, f"docs/install.md has no `{ARGOCD_KEY}: |` block"
    indent = m.group(1) + "  "
    body = "".join(line[len(indent):] if line.strip() else "\n" for line in m.group(2).splitlines(keepends=True))
    assert body.strip() == LUA.read_text().strip()


def test_status_files_are_scrubbed():
    for p in STATUSES.glob("*.json"):
        obj = json.loads(p.read_text())
        assert "managedFields" not in obj["metadata"], p.name
    assert Path(STATUSES / "record.py").exists()
