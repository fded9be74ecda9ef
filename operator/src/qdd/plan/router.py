"""vllm-router arguments (PyPI vllm-router 0.1.17, `vllm-router --help`): P/D mode with the NIXL
connector, finding engines by Kubernetes service discovery on qdd's labels."""

from __future__ import annotations

from .. import labels
from ..api.rules import ROUTER_METRICS_PORT
from ..api.spec import QwenDisaggDeploymentSpec
from .types import RouterPlan

METRICS_PORT = ROUTER_METRICS_PORT


def selector(cr: str, role: str) -> list[str]:
    """Pods that serve HTTP for a role: every endpoint's leader (headless workers serve nothing)."""
    return [f"{labels.DEPLOYMENT}={cr}", f"{labels.ROLE}={role}", f"{labels.GROUP_ROLE}=leader"]


def router_plan(cr: str, namespace: str, spec: QwenDisaggDeploymentSpec) -> RouterPlan:
    r = spec.router
    args = [
        "--host", "0.0.0.0",
        "--port", str(r.port),
        "--vllm-pd-disaggregation",
        "--kv-connector", "nixl",
        "--service-discovery",
        "--service-discovery-namespace", namespace,
        "--service-discovery-port", str(spec.ports.http),
        "--prefill-selector", *selector(cr, "prefill"),
        "--decode-selector", *selector(cr, "decode"),
        "--prefill-policy", r.prefill_policy,
        "--decode-policy", r.decode_policy,
        "--prometheus-host", "0.0.0.0",
        "--prometheus-port", str(METRICS_PORT),
    ]
    return RouterPlan(replicas=r.replicas, image=r.image, port=r.port, args=tuple(args))
