"""charts/qdd-operator/dashboards/qdd-pd.json and templates/podmonitor-engines.yaml.

Every PromQL expression of the dashboard is parsed (promql-parser, a real PromQL parser); every
metric it selects must be a series that vLLM 0.33.0 or the qdd operator exports, and every label it
matches or groups by must be a label of those series or one the scrape adds:
* vLLM: the names, types and label names recorded from vLLM 0.33.0's source with file:line in
  tests/unit/data/vllm-0.33.0-metrics.json (written by tests/unit/gen_vllm_metrics.py); the
  series names are what prometheus_client itself exposes for them (counters get _total,
  histograms _bucket/_sum/_count), computed here by instantiating each metric in a scratch registry.
* qdd: the collectors of qdd.controller.metrics, listed from the prometheus_client registry.
* scrape labels: the PodMonitor's relabel targets (read from the rendered template) plus the
  labels prometheus-operator puts on every target.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import prometheus_client
import pytest
import yaml
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "qdd-operator"
DASHBOARD = CHART / "dashboards" / "qdd-pd.json"
PODMONITOR = CHART / "templates" / "podmonitor-engines.yaml"
VLLM_DATA = ROOT / "tests" / "unit" / "data" / "vllm-0.33.0-metrics.json"

# Labels prometheus-operator attaches to every target it scrapes (PodMonitor and ServiceMonitor).
TARGET_LABELS = {"namespace", "pod", "container", "endpoint", "job", "instance", "service"}
GRAFANA_VARS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}


# --- what is exported --------------------------------------------------------------------------

def _exposed(kind: str, name: str, labelnames: list[str]) -> set[str]:
    """Series names prometheus_client exposes for a metric (its _created series left out)."""
    reg = CollectorRegistry()
    cls = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}[kind]
    m = cls(name, "doc", labelnames=labelnames, registry=reg)
    child = m.labels(*["x"] * len(labelnames)) if labelnames else m
    if kind == "histogram":
        child.observe(1.0)
    elif kind == "counter":
        child.inc()
    else:
        child.set(1.0)
    return {s.name for fam in reg.collect() for s in fam.samples if not s.name.endswith("_created")}


def vllm_series() -> dict[str, set[str]]:
    """series name → its label names, for vLLM 0.33.0."""
    data = json.loads(VLLM_DATA.read_text())
    assert data["vllm_version"] == "0.33.0"
    base = data["base_labelnames"]["labelnames"]
    out: dict[str, set[str]] = {}
    for m in data["metrics"]:
        labels = m["labelnames"] if m["labelnames"] is not None else base
        for series in _exposed(m["type"], m["name"], labels):
            out[series] = set(labels) | ({"le"} if series.endswith("_bucket") else set())
    return out


def qdd_series() -> dict[str, set[str]]:
    """series name → its label names, for every qdd_* collector in the operator's registry."""
    import qdd.controller.metrics as metrics_module

    registered = {fam.name for fam in prometheus_client.REGISTRY.collect() if fam.name.startswith("qdd_")}
    out: dict[str, set[str]] = {}
    for obj in vars(metrics_module).values():
        if isinstance(obj, prometheus_client.metrics.MetricWrapperBase):
            kind = obj._type  # noqa: SLF001 — prometheus_client keeps type and labels private
            labels = list(obj._labelnames)  # noqa: SLF001
            assert obj._name in registered  # noqa: SLF001
            for series in _exposed(kind, obj._name, labels):  # noqa: SLF001
                out[series] = set(labels) | ({"le"} if series.endswith("_bucket") else set())
    assert out, "qdd.controller.metrics declares no metric"
    return out


# --- the PodMonitor ------------------------------------------------------------------------------

def helm() -> str | None:
    cand = ROOT / ".qdd" / "bin" / "helm"
    return str(cand) if cand.exists() else shutil.which("helm")


def render_podmonitor(tmp: Path, values: dict[str, Any]) -> list[dict[str, Any]]:
    """`helm template` of the PodMonitor template alone (:func:`render_template`)."""
    return render_template(PODMONITOR, tmp, values)


def render_template(template: Path, tmp: Path, values: dict[str, Any]) -> list[dict[str, Any]]:
    """`helm template` of one chart template alone, in a scratch chart (the real chart may not exist yet)."""
    binary = helm()
    if not binary:
        pytest.fail("helm is not built: run `make tools` (make test does)")
    chart = tmp / "qdd-operator"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: qdd-operator\nversion: 0.0.0-test\n")
    shutil.copy(template, chart / "templates" / template.name)
    (tmp / "values.yaml").write_text(yaml.safe_dump(values))
    proc = subprocess.run([binary, "template", "r", str(chart), "-n", "qdd-system", "-f", str(tmp / "values.yaml")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def relabel_targets() -> set[str]:
    """targetLabel values of the PodMonitor's relabelings, read from the template text."""
    return set(re.findall(r"targetLabel:\s*([A-Za-z_][A-Za-z0-9_]*)", PODMONITOR.read_text()))


# --- PromQL --------------------------------------------------------------------------------------

def parse(expr: str) -> Any:
    import promql_parser

    for var, value in GRAFANA_VARS.items():
        expr = expr.replace(var, value)
    assert "$__" not in expr, f"unknown Grafana variable in {expr!r}"
    return promql_parser.parse(expr)


def _children(node: Any) -> list[Any]:
    out = []
    for attr in ("expr", "lhs", "rhs", "vector_selector", "param"):
        v = getattr(node, attr, None)
        if v is not None and hasattr(v, "prettify"):
            out.append(v)
    out += [a for a in getattr(node, "args", None) or [] if hasattr(a, "prettify")]
    return out


def _modifier_labels(node: Any) -> set[str]:
    mod = getattr(node, "modifier", None)
    labels: set[str] = set()
    for attr in ("labels", "matching", "group_labels"):  # by/without; on/ignoring; group_left/right
        v = getattr(mod, attr, None)
        v = getattr(v, "labels", v)
        if v:
            labels |= set(v)
    return labels


def check_expr(expr: str, known: dict[str, set[str]], scrape_labels: set[str]) -> tuple[set[str], list[str]]:
    """(metric names selected, problems) of one PromQL expression."""
    problems: list[str] = []
    names: set[str] = set()

    def visit(node: Any) -> set[str]:
        """Returns the labels the series under ``node`` may carry."""
        kind = type(node).__name__
        if kind == "VectorSelector":
            name = node.name
            if not name:
                problems.append(f"selector without a metric name in {expr!r}")
                return set()
            names.add(name)
            if name not in known:
                problems.append(f"unknown metric {name!r} in {expr!r}")
                return set()
            allowed = known[name] | scrape_labels
            for m in node.matchers.matchers:
                if m.name not in allowed:
                    problems.append(f"{name} has no label {m.name!r} (in {expr!r})")
            return allowed
        labels: set[str] = set()
        for child in _children(node):
            labels |= visit(child)
        grouped = _modifier_labels(node)
        for lbl in grouped - labels:
            problems.append(f"grouping by {lbl!r}, which none of its series carries (in {expr!r})")
        if kind == "AggregateExpr" and node.modifier is not None:
            without = str(node.modifier.type).lower().endswith("without")
            return labels - grouped if without else grouped & labels
        return labels

    visit(parse(expr))
    return names, problems


def dashboard_exprs(dash: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, expr) of every panel target and every label_values() query."""
    out = []
    for p in dash["panels"]:
        for t in p.get("targets", []):
            out.append((f"panel {p['title']!r} {t['refId']}", t["expr"]))
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.fullmatch(r"label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\)", q)
            assert m, f"variable {v['name']}: expected label_values(selector, label), got {q!r}"
            out.append((f"variable {v['name']}", f"count by ({m.group(2)}) ({m.group(1)})"))
    return out


def check_dashboard(dash: dict[str, Any]) -> tuple[set[str], list[str]]:
    known = vllm_series() | qdd_series()
    scrape = TARGET_LABELS | relabel_targets()
    used: set[str] = set()
    problems: list[str] = []
    for where, expr in dashboard_exprs(dash):
        try:
            names, probs = check_expr(expr, known, scrape)
        except Exception as e:  # noqa: BLE001 — a parse error is a finding like any other
            problems.append(f"{where}: does not parse: {e}")
            continue
        if not names:
            problems.append(f"{where}: selects no metric")
        used |= names
        problems += [f"{where}: {p}" for p in probs]
    return used, problems


@pytest.fixture(scope="module")
def dash() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


# --- tests ---------------------------------------------------------------------------------------

def test_every_metric_and_label_is_exported(dash: dict[str, Any]) -> None:
    used, problems = check_dashboard(dash)
    assert problems == []
    assert len(used) >= 25


def test_a_misspelt_metric_fails(dash: dict[str, Any]) -> None:
    """The check is live: misspell one vLLM name, one qdd name and one label, and it says so."""
    bad = copy.deepcopy(dash)
    text = json.dumps(bad)
    text = text.replace("vllm:kv_cache_usage_perc", "vllm:kv_cache_usage_percent", 1)
    text = text.replace("qdd_reconciles_total", "qdd_reconcile_total", 1)
    text = text.replace("sum by (role, finished_reason)", "sum by (role, finish_reason)", 1)
    _, problems = check_dashboard(json.loads(text))
    joined = "\n".join(problems)
    assert "unknown metric 'vllm:kv_cache_usage_percent'" in joined
    assert "unknown metric 'qdd_reconcile_total'" in joined
    assert "grouping by 'finish_reason'" in joined


def test_counters_are_used_with_their_exposed_names() -> None:
    """vLLM declares `vllm:prompt_tokens` (a Counter): Prometheus sees vllm:prompt_tokens_total,
    never the declared name."""
    series = vllm_series()
    assert "vllm:prompt_tokens_total" in series and "vllm:prompt_tokens" not in series
    assert "vllm:estimated_flops_per_gpu_total" in series  # declared with _total: not doubled
    assert {"vllm:nixl_xfer_time_seconds_bucket", "vllm:nixl_xfer_time_seconds_sum",
            "vllm:nixl_xfer_time_seconds_count"} <= set(series)
    assert series["vllm:request_success_total"] == {"model_name", "engine", "finished_reason"}


def test_covers_pd_serving(dash: dict[str, Any]) -> None:
    used, _ = check_dashboard(dash)
    must = {
        "TTFT": "vllm:time_to_first_token_seconds_bucket",
        "ITL": "vllm:inter_token_latency_seconds_bucket",
        "TPOT": "vllm:request_time_per_output_token_seconds_bucket",
        "KV-cache usage": "vllm:kv_cache_usage_perc",
        "prefill throughput": "vllm:prompt_tokens_total",
        "decode throughput": "vllm:generation_tokens_total",
        "NIXL transfer time": "vllm:nixl_xfer_time_seconds_bucket",
        "NIXL bytes": "vllm:nixl_bytes_transferred_sum",
        "NIXL failures": "vllm:nixl_num_failed_transfers_total",
        "running requests": "vllm:num_requests_running",
        "waiting requests": "vllm:num_requests_waiting",
        "operator reconciles": "qdd_reconciles_total",
        "ready endpoints": "qdd_ready_endpoints",
    }
    missing = {topic: m for topic, m in must.items() if m not in used}
    assert missing == {}


def test_dashboard_shape(dash: dict[str, Any]) -> None:
    assert dash["uid"] == "qdd-pd" and dash["schemaVersion"] >= 36
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    names = {v["name"] for v in dash["templating"]["list"]}
    assert {"datasource", "namespace", "deployment"} <= names
    for p in dash["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        if p["type"] == "row":
            continue
        assert p["targets"] and p.get("description"), p["title"]
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}"
            used_vars = set(re.findall(r"\$(?!__)\{?([A-Za-z_]+)", t["expr"]))
            assert used_vars <= names, (p["title"], used_vars - names)


def test_vllm_metric_list_cites_its_sources() -> None:
    data = json.loads(VLLM_DATA.read_text())
    assert data["generated_by"] == "tests/unit/gen_vllm_metrics.py"
    assert data["vllm_commit"] == "g4ba787ec9"
    files = {m["file"] for m in data["metrics"]}
    assert "vllm/v1/metrics/loggers.py" in files
    assert "vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py" in files
    for m in data["metrics"]:
        assert m["name"].startswith("vllm:") and isinstance(m["line"], int) and m["line"] > 0


def test_vllm_metric_list_is_current() -> None:
    """Regenerated from the vLLM 0.33.0 install of the contract tests (.qdd/vllm-venv), when present."""
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        import gen_vllm_metrics as gen
    finally:
        sys.path.pop(0)
    from tests.contract.vllm_harness import ensure_venv

    venv = ensure_venv().parent.parent  # builds .qdd/vllm-venv when missing (make test has already)
    sources = [sp for sp in sorted(venv.glob("lib/python3*/site-packages")) if (sp / "vllm" / "_version.py").exists()]
    assert sources, f"no vllm package in {venv}"
    fresh = json.dumps(gen.build(sources[0]), indent=1, sort_keys=True) + "\n"
    assert fresh == VLLM_DATA.read_text(), "run: python tests/unit/gen_vllm_metrics.py"


def test_podmonitor_off_by_default(tmp_path: Path) -> None:
    assert render_podmonitor(tmp_path, {}) == []
    assert render_podmonitor(tmp_path / "b", {"monitoring": {"podMonitor": {"enabled": False}}}) == []


def test_podmonitor_selects_the_engine_pods_that_serve_metrics(tmp_path: Path) -> None:
    from tests.unit.helpers import objects_of

    (pm,) = render_podmonitor(tmp_path, {"monitoring": {"podMonitor": {"enabled": True, "labels": {"release": "kps"}}}})
    assert pm["apiVersion"] == "monitoring.coreos.com/v1" and pm["kind"] == "PodMonitor"
    assert pm["metadata"]["namespace"] == "qdd-system" and pm["metadata"]["labels"]["release"] == "kps"
    (ep,) = pm["spec"]["podMetricsEndpoints"]
    assert ep["port"] == "http" and ep["path"] == "/metrics"
    assert {r["targetLabel"] for r in ep["relabelings"]} == relabel_targets() >= {"role", "qdd_deployment"}

    def selected(labels: dict[str, str]) -> bool:
        for e in pm["spec"]["selector"]["matchExpressions"]:
            assert e["operator"] == "In"
            if labels.get(e["key"]) not in e["values"]:
                return False
        return True

    cr = yaml.safe_load((ROOT / "examples" / "qwen35-397b-4xdep2-1xdep8-cc4096.yaml").read_text())
    pods = []  # (labels, container port names) of every pod the render makes
    for o in objects_of(cr):
        if o["kind"] in ("Pod", "StatefulSet", "Deployment"):
            t = o if o["kind"] == "Pod" else o["spec"]["template"]
            ports = {p["name"] for c in t["spec"]["containers"] for p in c.get("ports", [])}
            pods.append((t["metadata"]["labels"], ports))
    picked = [(lbl, ports) for lbl, ports in pods if selected(lbl)]
    assert {lbl["qdd.dev/role"] for lbl, _ in picked} == {"prefill", "decode"}
    assert not any(lbl["qdd.dev/role"] == "router" for lbl, _ in picked)
    # every selected pod that serves HTTP has the port; the headless decode worker has none and
    # is therefore not scraped.
    serving = [(lbl, ports) for lbl, ports in picked if "http" in ports]
    assert {lbl.get("qdd.dev/group-role") for lbl, _ in serving} == {"leader"}
    assert all("http" not in ports for lbl, ports in picked if lbl.get("qdd.dev/group-role") == "worker")


def test_podmonitor_custom_namespace_selector_and_interval(tmp_path: Path) -> None:
    (pm,) = render_podmonitor(tmp_path, {"monitoring": {"podMonitor": {
        "enabled": True, "namespace": "monitoring", "interval": "30s", "scrapeTimeout": "20s",
        "namespaceSelector": {"matchNames": ["llm"]}}}})
    assert pm["metadata"]["namespace"] == "monitoring"
    assert pm["spec"]["namespaceSelector"] == {"matchNames": ["llm"]}
    (ep,) = pm["spec"]["podMetricsEndpoints"]
    assert (ep["interval"], ep["scrapeTimeout"]) == ("30s", "20s")
