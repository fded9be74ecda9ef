"""Probes never generate on an engine pod (docs/facts/probes-and-canary.md): a generating health check
sent straight to a decode pod has no P/D parameters, is refused (or makes decode prefill locally),
and a liveness probe built on it crash-loops the pod (dynamo#8215). Kubernetes probes ask the
engines' /health only; the end-to-end check is the canary, which goes through the router."""

from __future__ import annotations

import pytest

from qdd import names
from qdd.canary.client import completions_url
from qdd.controller.canary import CanaryChecker
from qdd.render.benchmark import router_url

from ..conftest import EXAMPLES, load
from .helpers import engine_pod_specs, objects_of, plan_of

EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))
GENERATING = ("/v1/completions", "/v1/chat/completions", "/generate", "/v1/responses", "/inference")
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")


def _probes(container: dict) -> list[tuple[str, dict]]:
    return [(k, container[k]) for k in PROBES if k in container]


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_engine_probes_ask_health_only_and_never_generate(path):
    objs = objects_of(load(path))
    seen = {"prefill": 0, "decode": 0}
    for role, _labels, spec in engine_pod_specs(objs):
        for c in spec["containers"]:
            for kind, probe in _probes(c):
                assert set(probe) & {"httpGet", "exec", "grpc", "tcpSocket"} == {"httpGet"}, (role, kind, probe)
                http = probe["httpGet"]
                assert http["path"] == "/health", (role, kind, http)
                assert not any(g in http["path"] for g in GENERATING)
                seen[role] += 1
            # A probe the kubelet sends must not carry a body or a method that could generate.
            assert "command" not in str([p for _, p in _probes(c)])
    # Both roles' serving pods are probed (so the absence of generating probes is not an absence of probes).
    assert seen["prefill"] > 0 and seen["decode"] > 0


def test_headless_decode_workers_have_no_http_probe():
    cr = load(EXAMPLES / "qwen35-397b-4xdep2-1xdep8-cc5120.yaml")
    plan = plan_of(cr)
    workers = [p for p in plan.decode.pods if p.group_role == "worker"]
    assert workers and not any(p.serves_http for p in workers)
    objs = objects_of(cr)
    for _role, labels, spec in engine_pod_specs(objs):
        if labels.get("qdd.dev/group-role") == "worker":
            assert not any(_probes(c) for c in spec["containers"]), labels


def test_the_generating_checks_go_through_the_router():
    """The canary and the benchmark address the router Service, never an engine pod or its Service."""
    cr = load(EXAMPLES / "qwen35-397b-4xdep2-1xdep8-cc5120.yaml")
    plan = plan_of(cr)
    url = CanaryChecker(override="", workers=0).base_url(plan)
    assert url == f"http://{names.router(plan.name)}.{plan.namespace}.svc:{plan.router.port}"
    assert completions_url(url) == url + "/v1/completions"
    assert router_url(plan) == url
