"""charts/qdd-operator/templates/prometheusrule.yaml: one alert per serving condition the operator
writes (qdd.api.conditions.SERVING_TYPES), each expression parsed by a real PromQL parser and every
metric and label checked against vLLM 0.33.0's declared series and the PodMonitor's labels (the
checks of tests/unit/test_dashboard.py), thresholds defaulting to spec.observe.thresholds' (a 0 set
stays 0), and the same rules as the conditions (qdd.observe.judge): no extra `for` by default, the
level alerts held through their own ALERTS series, EngineStalled with no peer required."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from qdd.api.conditions import SERVING_TYPES
from qdd.api.observe import ObserveThresholds

from .test_dashboard import CHART, TARGET_LABELS, check_expr, qdd_series, relabel_targets, render_template, vllm_series

RULE = CHART / "templates" / "prometheusrule.yaml"


def render(tmp: Path, values: dict[str, Any]) -> list[dict[str, Any]]:
    return render_template(RULE, tmp, values)


def chart_defaults() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text())["monitoring"]["prometheusRule"]


def test_off_by_default(tmp_path: Path) -> None:
    assert render(tmp_path, {}) == []


ALERTS = {"ALERTS": {"alertname", "alertstate", "namespace", "qdd_deployment", "role", "severity", "condition",
                     "reason"}}
"""Prometheus's own series of the alerts pending or firing (with the alert's labels)."""


def rules_of(tmp: Path, values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    docs = render(tmp, {"monitoring": {"prometheusRule": values}})
    return {r["alert"]: r for r in docs[0]["spec"]["groups"][0]["rules"]}


def test_one_alert_per_serving_condition_with_exported_series_only(tmp_path: Path) -> None:
    docs = render(tmp_path, {"monitoring": {"prometheusRule": chart_defaults() | {"enabled": True}}})
    assert [d["kind"] for d in docs] == ["PrometheusRule"]
    rules = docs[0]["spec"]["groups"][0]["rules"]
    assert {r["labels"]["condition"] for r in rules} == set(SERVING_TYPES)
    known, scrape = vllm_series() | qdd_series() | ALERTS, TARGET_LABELS | relabel_targets()
    for r in rules:
        names, problems = check_expr(r["expr"], known, scrape)
        assert problems == [] and names, (r["alert"], problems)
        assert r["annotations"]["summary"] and "docs/observability.md" in r["annotations"]["description"]
    by = {r["alert"]: r["expr"] for r in rules}
    assert by["QddKVCacheSaturated"] == (
        'max by (namespace, qdd_deployment, role) (min_over_time(vllm:kv_cache_usage_perc{role!=""}[5m]) >= 0.95 and '
        'vllm:kv_cache_usage_perc{role!=""} offset 5m >= 0.95)\nor\n(max by (namespace, qdd_deployment, role) '
        '(max_over_time(vllm:kv_cache_usage_perc{role!=""}[5m])) >= 0.95 and on (namespace, qdd_deployment, role) '
        'ALERTS{alertname="QddKVCacheSaturated"})')
    assert by["QddRequestsQueueing"].count("> 32") == 3 and 'ALERTS{alertname="QddRequestsQueueing"}' in by[
        "QddRequestsQueueing"]
    assert "[120s]" in by["QddEngineStalled"] and "[5m]" in by["QddKVTransferFailing"]


def test_chart_thresholds_default_to_the_spec_defaults() -> None:
    spec = ObserveThresholds().model_dump(by_alias=True)
    assert chart_defaults()["thresholds"] == spec


def test_a_threshold_value_reaches_the_rule(tmp_path: Path) -> None:
    values = chart_defaults() | {"enabled": True, "window": "10m", "thresholds": chart_defaults()["thresholds"] | {"kvCacheUsage": 0.9}}
    rules = render(tmp_path, {"monitoring": {"prometheusRule": values}})[0]["spec"]["groups"][0]["rules"]
    by = {r["alert"]: r["expr"] for r in rules}
    assert by["QddKVCacheSaturated"].count(">= 0.9 ") == 2 and "[10m]" in by["QddKVLeaseExpiring"]
    assert "offset 10m" in by["QddKVCacheSaturated"] and ">= 0.95" not in by["QddKVCacheSaturated"]


def _numbers(rules: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The threshold each rule compares with, as rendered (the stall's range for EngineStalled)."""
    expr = {k: r["expr"] for k, r in rules.items()}
    return {"failedTransfers": expr["QddKVTransferFailing"].rsplit("> ", 1)[1],
            "expiredLeases": expr["QddKVLeaseExpiring"].rsplit("> ", 1)[1],
            "kvCacheUsage": expr["QddKVCacheSaturated"].split(">= ", 1)[1].split(" ", 1)[0],
            "preemptions": expr["QddKVCachePreempting"].rsplit("> ", 1)[1],
            "waitingPerEngine": expr["QddRequestsQueueing"].split("> ", 1)[1].split(" ", 1)[0],
            "stallSeconds": expr["QddEngineStalled"].split("[", 1)[1].split("s]", 1)[0]}


@pytest.mark.parametrize("values", [{"enabled": True}, {"enabled": True, "thresholds": {}},
                                    {"enabled": True, "thresholds": None}], ids=["none", "empty", "null"])
def test_rule_thresholds_start_from_the_spec_defaults(tmp_path: Path, values: dict[str, Any]) -> None:
    """Without values.yaml's thresholds (a `helm upgrade --reuse-values` from a chart without them, or
    a values file that sets only some), the template's own defaults: qdd.api's, number for number."""
    spec = ObserveThresholds().model_dump(by_alias=True)
    assert _numbers(rules_of(tmp_path, values)) == {k: str(v) for k, v in spec.items()}


def test_a_zero_set_stays_zero_and_integers_stay_integers(tmp_path: Path) -> None:
    """`value | default 32` took a waitingPerEngine of 0 for unset and alerted on 32; a values file
    gives numbers as float64, printed 1e+06 unless made integers."""
    got = _numbers(rules_of(tmp_path, {"enabled": True, "thresholds": {
        "waitingPerEngine": 0, "failedTransfers": 0, "expiredLeases": 1000000, "preemptions": 7, "stallSeconds": 30}}))
    assert got == {"failedTransfers": "0", "expiredLeases": "1000000", "kvCacheUsage": "0.95", "preemptions": "7",
                   "waitingPerEngine": "0", "stallSeconds": "30"}


def test_alerts_fire_with_the_conditions(tmp_path: Path) -> None:
    """`for` is 0s unless set (the expressions hold the conditions' own durations: a whole window
    for the levels, stallSeconds for the stall; a `for` would fire that much after the condition);
    the level alerts are held by their own ALERTS series, as the conditions by their held state;
    EngineStalled needs no other engine making tokens (the condition does not)."""
    assert chart_defaults()["for"] == "0s"
    rules = rules_of(tmp_path, {"enabled": True})
    assert {r["for"] for r in rules.values()} == {"0s"}
    for alert in ("QddKVCacheSaturated", "QddRequestsQueueing"):
        assert f'ALERTS{{alertname="{alert}"}}' in rules[alert]["expr"]
    stalled = rules["QddEngineStalled"]["expr"]
    assert stalled.count("vllm:") == 3 and "and on (namespace, qdd_deployment, role, pod, engine)" in stalled
    assert "and on (namespace, qdd_deployment, role)\n" not in stalled  # the peers' clause is gone
    assert {r["for"] for r in rules_of(tmp_path / "b", {"enabled": True, "for": "2m"}).values()} == {"2m"}
