"""spec.autoscaling: off by default, parsed with clear errors, mapped onto the policy's config."""

from __future__ import annotations

import copy

import pytest

from qdd.api.resource import parse_spec
from qdd.autoscale import config_from_spec
from qdd.errors import SpecError

from ..conftest import EXAMPLES, load

AUTOSCALING = {"mode": "On", "targets": {"ttftMs": 2000, "tpotMs": 15, "percentile": 95}, "gpuBudget": 64,
               "prefill": {"minEndpoints": 2, "maxEndpoints": 16}, "decode": {"maxEndpoints": 4, "driver": "External"},
               "startupSeconds": 300}


def _spec(**autoscaling):
    spec = copy.deepcopy(load(EXAMPLES / "qwen35-397b-4xdep2-1xdep8.yaml")["spec"])
    if autoscaling:
        spec["autoscaling"] = autoscaling
    return spec


def test_off_by_default():
    assert parse_spec(_spec()).autoscaling is None
    with pytest.raises(ValueError, match="autoscaling is off"):
        config_from_spec(parse_spec(_spec()))


def test_config_from_spec_carries_units_and_gpus_per_endpoint():
    cfg = config_from_spec(parse_spec(_spec(**AUTOSCALING)))
    assert (cfg.ttft_ms, cfg.tpot_ms, cfg.gpu_budget, cfg.startup_s, cfg.period_s) == (2000.0, 15.0, 64, 300.0, 15.0)
    # The example: prefill DEP2 (2 GPUs per endpoint), decode DEP8 (8).
    assert (cfg.prefill.min_endpoints, cfg.prefill.max_endpoints, cfg.prefill.gpus_per_endpoint, cfg.prefill.external) == (2, 16, 2, False)
    assert (cfg.decode.min_endpoints, cfg.decode.max_endpoints, cfg.decode.gpus_per_endpoint, cfg.decode.external) == (1, 4, 8, True)
    assert (cfg.at_budget, cfg.scale_up_cooldown_s, cfg.scale_down_cooldown_s) == ("Rebalance", 30.0, 300.0)


def test_startup_defaults_to_measured_then_600():
    a = {k: v for k, v in AUTOSCALING.items() if k != "startupSeconds"}
    assert config_from_spec(parse_spec(_spec(**a))).startup_s == 600.0
    assert config_from_spec(parse_spec(_spec(**a)), measured_startup_s=240.0).startup_s == 240.0


@pytest.mark.parametrize(("change", "field", "words"), [
    ({"prefill": {"minEndpoints": 5, "maxEndpoints": 4}}, "spec.autoscaling.prefill", "minEndpoints must not exceed maxEndpoints"),
    ({"decode": {"maxEndpoints": 17}}, "spec.autoscaling.decode.maxEndpoints", "16"),
    ({"mode": "on"}, "spec.autoscaling.mode", "Off"),
    ({"gpuBudget": 9}, "spec.autoscaling.gpuBudget", "raise gpuBudget"),
])
def test_bad_input_names_the_field_and_the_fix(change, field, words):
    with pytest.raises(SpecError) as e:
        parse_spec(_spec(**{**AUTOSCALING, "prefill": {"minEndpoints": 1, "maxEndpoints": 16}, **change}))
    assert [x.field for x in e.value.errors] == [field]
    assert words in e.value.errors[0].message
