"""spec.model.loadFormat: vLLM's --load-format, rendered and owned like every flag qdd sets
(qdd.plan.flags; docs/cold-start.md#load-format)."""

from __future__ import annotations

import copy
import typing

import pytest

from qdd.api import parse_resource
from qdd.api.spec import LoadFormat
from qdd.errors import SpecError

from .helpers import flag, plan_of


def _with_format(cr, value):
    cr = copy.deepcopy(cr)
    cr["spec"]["model"]["loadFormat"] = value
    return cr


def test_offered_formats_are_the_safetensors_loaders():
    assert typing.get_args(LoadFormat) == ("auto", "safetensors", "fastsafetensors", "instanttensor", "runai_streamer")


def test_unset_leaves_the_flag_out(seed_cr):
    plan = plan_of(seed_cr)
    assert all("--load-format" not in p.argv for r in (plan.prefill, plan.decode) for p in r.pods)


@pytest.mark.parametrize("value", typing.get_args(LoadFormat))
def test_set_is_rendered_on_every_engine_pod(seed_cr, value):
    plan = plan_of(_with_format(seed_cr, value))
    pods = [p for r in (plan.prefill, plan.decode) for p in r.pods]
    assert len(pods) == 4 + 2
    assert {flag(list(p.argv), "--load-format") for p in pods} == {value}
    assert all(p.argv.count("--load-format") == 1 for p in pods)


@pytest.mark.parametrize("value", ["pt", "dummy", "modelexpress", "ipc_cache", "tensorizer", "Runai_Streamer"])
def test_other_formats_are_refused_at_the_field(seed_cr, value):
    with pytest.raises(SpecError) as e:
        parse_resource(_with_format(seed_cr, value))
    assert [(x.field, x.message) for x in e.value.errors] == [
        ("spec.model.loadFormat", "must be 'auto', 'safetensors', 'fastsafetensors', 'instanttensor' or 'runai_streamer'")]


@pytest.mark.parametrize("args", [["--load-format", "runai_streamer"], ["--load-format=fastsafetensors"],
                                  ["--load_format", "pt"], ["--load-f", "pt"]])
def test_extra_args_may_not_set_it(seed_cr, args):
    cr = copy.deepcopy(seed_cr)
    cr["spec"]["decode"]["extraArgs"] = args
    with pytest.raises(SpecError) as e:
        plan_of(cr)
    msgs = [(x.field, x.message) for x in e.value.errors]
    assert any(f == "spec.decode.extraArgs[0]" and "--load-format" in m and "set spec.model.loadFormat instead" in m
               for f, m in msgs), msgs


def test_neither_the_loader_nor_the_compile_cache_starts_a_new_generation(seed_cr):
    cr = _with_format(seed_cr, "instanttensor")
    cr["spec"]["engine"]["compileCache"] = {"claimName": "cc"}
    assert plan_of(cr).generation == plan_of(seed_cr).generation
