"""charts/qdd-operator/templates/prometheusrule.yaml: one alert per serving condition the operator
writes (qdd.api.conditions.SERVING_TYPES), each expression parsed by a real PromQL parser and every
metric and label checked against vLLM 0.33.0's declared series and the PodMonitor's labels (the
checks of tests/unit/test_dashboard.py), thresholds defaulting to spec.observe.thresholds'."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def test_one_alert_per_serving_condition_with_exported_series_only(tmp_path: Path) -> None:
    docs = render(tmp_path, {"monitoring": {"prometheusRule": chart_defaults() | {"enabled": True}}})
    assert [d["kind"] for d in docs] == ["PrometheusRule"]
    rules = docs[0]["spec"]["groups"][0]["rules"]
    assert {r["labels"]["condition"] for r in rules} == set(SERVING_TYPES)
    known, scrape = vllm_series() | qdd_series(), TARGET_LABELS | relabel_targets()
    for r in rules:
        names, problems = check_expr(r["expr"], known, scrape)
        assert problems == [] and names, (r["alert"], problems)
        assert r["annotations"]["summary"] and "docs/observability.md" in r["annotations"]["description"]
    by = {r["alert"]: r["expr"] for r in rules}
    assert by["QddKVCacheSaturated"].endswith(">= 0.95") and by["QddRequestsQueueing"].endswith("> 32")
    assert "[120s]" in by["QddEngineStalled"] and "[5m]" in by["QddKVTransferFailing"]


def test_chart_thresholds_default_to_the_spec_defaults() -> None:
    spec = ObserveThresholds().model_dump(by_alias=True)
    assert chart_defaults()["thresholds"] == spec


def test_a_threshold_value_reaches_the_rule(tmp_path: Path) -> None:
    values = chart_defaults() | {"enabled": True, "window": "10m", "thresholds": chart_defaults()["thresholds"] | {"kvCacheUsage": 0.9}}
    rules = render(tmp_path, {"monitoring": {"prometheusRule": values}})[0]["spec"]["groups"][0]["rules"]
    by = {r["alert"]: r["expr"] for r in rules}
    assert by["QddKVCacheSaturated"].endswith(">= 0.9") and "[10m]" in by["QddKVLeaseExpiring"]
