"""vllm-router's rendered --request-timeout-secs (qdd.plan.router.request_timeout): what bounds a hung
prefill, and every decode's stream with it (docs/facts/router-pd.md; measured on the real binary in
tests/contract/test_router_prefill_failure.py)."""

from __future__ import annotations

import copy

import pytest

from qdd.errors import SpecError
from qdd.plan.router import DECODE_TOKEN_S, PREFILL_LEG_S, ROUTER_DEFAULT_TIMEOUT_S, request_timeout

from .helpers import flag, plan_of
from .test_controller_status import SEED


def _with(**router: object) -> dict:
    cr = copy.deepcopy(SEED)
    cr["spec"].setdefault("router", {}).update(router)
    return cr


def test_default_covers_the_workloads_answers_and_is_far_below_the_routers_own():
    plan = plan_of(SEED)
    assert plan.spec.workload.osl == 1024 and (PREFILL_LEG_S, DECODE_TOKEN_S) == (60, 0.2)
    assert request_timeout(plan.spec) == 265 < ROUTER_DEFAULT_TIMEOUT_S
    assert flag(list(plan.router.args), "--request-timeout-secs") == "265"
    # the seed's slowest predicted point (TPOT 86.6 ms at 5,120, docs/perf-seed-table.md) fits with room
    assert 0.750 + 1024 * 0.0866 < 265 / 2
    longer = copy.deepcopy(SEED)
    longer["spec"]["workload"] |= {"osl": 8192, "isl": 1024}
    assert request_timeout(plan_of(longer).spec) == 60 + 1639


def test_the_spec_overrides_it_and_a_value_too_short_for_the_workload_warns():
    plan = plan_of(_with(requestTimeoutSeconds=900))
    assert flag(list(plan.router.args), "--request-timeout-secs") == "900" and not [
        w for w in plan.warnings if "requestTimeoutSeconds" in w]
    short = plan_of(_with(requestTimeoutSeconds=30))
    (w,) = [w for w in short.warnings if "requestTimeoutSeconds" in w]
    assert w.startswith("spec.router.requestTimeoutSeconds 30 is below 265 s, what a request of the workload needs")
    with pytest.raises(SpecError, match="spec.router.requestTimeoutSeconds"):
        plan_of(_with(requestTimeoutSeconds=4))
