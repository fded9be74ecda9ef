"""An operator upgrade rolls nothing it renders the same: no operator or chart version, build or
process value in any rendered object or hash (docs/reliability.md, "Operator upgrades"; the
integration test N-1 -> N is tests/integration/test_upgrade.py)."""

from __future__ import annotations

import json

import pytest
import yaml

import qdd
from qdd import cli

from ..conftest import EXAMPLES, ROOT

CASES = sorted(EXAMPLES.glob("*.yaml"))
CHART = ROOT / "charts" / "qdd-operator" / "Chart.yaml"
VERSION_KEYS = ("helm.sh/chart", "app.kubernetes.io/version", "meta.helm.sh/release-name")


def _render(example, capsys) -> str:
    cli.main(["render", "-f", str(example)])
    return capsys.readouterr().out


@pytest.mark.parametrize("example", CASES, ids=lambda p: p.stem)
def test_render_does_not_depend_on_the_operator_version(example, capsys, monkeypatch):
    here = _render(example, capsys)
    monkeypatch.setattr(qdd, "__version__", "9.8.7")
    assert _render(example, capsys) == here


@pytest.mark.parametrize("example", CASES, ids=lambda p: p.stem)
def test_no_version_or_chart_label_in_any_rendered_object(example, capsys):
    chart = yaml.safe_load(CHART.read_text())
    versions = {qdd.__version__, chart["version"], chart["appVersion"]}
    for obj in yaml.safe_load_all(_render(example, capsys)):
        metas = [obj["metadata"]]
        if obj["kind"] in ("StatefulSet", "Deployment", "Job"):
            metas.append(obj["spec"]["template"]["metadata"])
        for meta in metas:
            for key in VERSION_KEYS:
                assert key not in (meta.get("labels") or {}) and key not in (meta.get("annotations") or {}), \
                    (obj["kind"], obj["metadata"]["name"], key)
            for k, v in {**(meta.get("labels") or {}), **(meta.get("annotations") or {})}.items():
                assert v not in versions, (obj["kind"], obj["metadata"]["name"], k, v)
        text = json.dumps(obj)
        assert f"qdd-operator-{chart['version']}" not in text and "qdd/qdd-operator:" not in text
