"""--all2all-backend per engine version and topology (qdd.catalog.all2all, qdd.plan.all2all)."""

from __future__ import annotations

import copy

import pytest

from qdd.api.rules import EXPERIMENTAL_ALL2ALL, REFUSED_ALL2ALL
from qdd.catalog.all2all import ALL2ALL_BACKENDS
from qdd.catalog.vllm_options import serve_options
from qdd.errors import SpecError

from .helpers import flag, plan_of


def test_the_table_covers_exactly_vllms_backends():
    # The parser's choices of vLLM 0.33.0 (qdd/catalog/data), less passthrough, which it does not offer.
    choices = set(serve_options().option("all2all-backend").choices or ())
    assert choices - set(ALL2ALL_BACKENDS) == set()
    assert set(ALL2ALL_BACKENDS) - choices <= {"passthrough"}
    assert ALL2ALL_BACKENDS["passthrough"].status == "refused"


def test_removed_and_alias_backends_are_refused_and_deepep_is_experimental():
    assert {"pplx", "naive", "flashinfer_all2allv", "passthrough", "mori_high_throughput"} <= set(REFUSED_ALL2ALL)
    assert set(EXPERIMENTAL_ALL2ALL) == {"deepep_high_throughput", "deepep_low_latency", "deepep_v2", "nixl_ep"}


def _with(seed_cr, role, **tuning):
    cr = copy.deepcopy(seed_cr)
    cr["spec"][role].setdefault("tuning", {}).update(tuning)
    return cr


@pytest.mark.parametrize("backend", ["allgather_reducescatter", "flashinfer_nvlink_two_sided", "flashinfer_nvlink_one_sided"])
def test_backends_that_work_across_gb200_trays_render_on_the_dep8(seed_cr, backend):
    plan = plan_of(_with(seed_cr, "decode", all2allBackend=backend))
    assert plan.decode.pods_per_endpoint == 2
    assert {flag(list(p.argv), "--all2all-backend") for p in plan.decode.pods} == {backend}


def test_moonep_works_inside_one_tray_only(seed_cr):
    plan = plan_of(_with(seed_cr, "prefill", all2allBackend="moonep"))  # DEP2: one tray
    assert flag(list(plan.prefill.pods[0].argv), "--all2all-backend") == "moonep"
    with pytest.raises(SpecError) as e:
        plan_of(_with(seed_cr, "decode", all2allBackend="moonep"))  # DEP8: two trays
    [err] = e.value.errors
    assert err.field == "spec.decode.tuning.all2allBackend"
    assert "spans 2 GB200 trays of one NVLink domain" in err.message and "use allgather_reducescatter" in err.message


def test_deepep_low_latency_across_trays_is_refused_even_when_experimental_is_allowed(seed_cr):
    with pytest.raises(SpecError) as e:
        plan_of(_with(seed_cr, "decode", all2allBackend="deepep_low_latency", allowExperimentalAll2all=True))
    assert "vllm#37931" in e.value.errors[0].message


def test_experimental_backend_needs_the_switch_and_then_warns(seed_cr):
    with pytest.raises(SpecError) as e:
        plan_of(_with(seed_cr, "decode", all2allBackend="deepep_high_throughput"))
    assert e.value.errors[0].field == "spec.decode.tuning.all2allBackend"
    assert "allowExperimentalAll2all" in e.value.errors[0].message
    plan = plan_of(_with(seed_cr, "decode", all2allBackend="deepep_high_throughput", allowExperimentalAll2all=True))
    assert any("experimental --all2all-backend deepep_high_throughput" in w for w in plan.warnings)


def test_across_nodes_off_nvlink_the_network_decides(seed_cr):
    cr = _with(seed_cr, "decode", all2allBackend="flashinfer_nvlink_two_sided")
    cr["spec"]["cluster"] = {"gpuType": "H200", "sameNVLinkDomain": False}
    cr["spec"]["decode"]["topology"]["dataParallel"] = 16  # two 8-GPU HGX nodes joined by the network
    with pytest.raises(SpecError) as e:
        plan_of(cr)
    assert any("H200 nodes over the network" in x.message for x in e.value.errors)


def test_the_alias_is_refused_with_a_suggestion_that_works_off_nvlink(seed_cr):
    cr = _with(seed_cr, "decode", all2allBackend="flashinfer_all2allv")
    cr["spec"]["cluster"] = {"gpuType": "H200", "sameNVLinkDomain": False}
    cr["spec"]["decode"]["topology"]["dataParallel"] = 16
    with pytest.raises(SpecError) as e:
        plan_of(cr)
    [msg] = [x.message for x in e.value.errors if x.field == "spec.decode.tuning.all2allBackend"]
    assert "use allgather_reducescatter (the default)" in msg and "alias in vLLM 0.33 of flashinfer_nvlink_two_sided" in msg
