"""vllm-router arguments (PyPI vllm-router 0.1.17, `vllm-router --help`): P/D mode with the NIXL
connector, finding engines by Kubernetes service discovery on qdd's labels."""

from __future__ import annotations

from .. import labels
from ..api.rules import ROUTER_METRICS_PORT
from ..api.spec import QwenDisaggDeploymentSpec
from ..errors import FieldError
from .types import RouterPlan

METRICS_PORT = ROUTER_METRICS_PORT


def selector(cr: str, role: str, generation: str) -> list[str]:
    """Pods that serve HTTP for a role: every endpoint's leader (headless workers serve nothing) of
    one generation: a prefill and a decode of two generations never pair (qdd.plan.generation)."""
    return [f"{labels.DEPLOYMENT}={cr}", f"{labels.ROLE}={role}", f"{labels.GROUP_ROLE}=leader",
            f"{labels.GENERATION}={generation}"]


def router_args(cr: str, namespace: str, spec: QwenDisaggDeploymentSpec, generation: str) -> tuple[str, ...]:
    """vllm-router's argv, sending traffic to the engines of ``generation``."""
    r = spec.router
    return (
        "--host", "0.0.0.0",
        "--port", str(r.port),
        "--vllm-pd-disaggregation",
        "--kv-connector", "nixl",
        "--service-discovery",
        "--service-discovery-namespace", namespace,
        "--service-discovery-port", str(spec.ports.http),
        "--prefill-selector", *selector(cr, "prefill", generation),
        "--decode-selector", *selector(cr, "decode", generation),
        "--prefill-policy", r.prefill_policy,
        "--decode-policy", r.decode_policy,
        "--prometheus-host", "0.0.0.0",
        "--prometheus-port", str(METRICS_PORT),
    )


def router_plan(cr: str, namespace: str, spec: QwenDisaggDeploymentSpec, generation: str) -> RouterPlan:
    """The router of the deployment, selecting the engines of ``generation`` (the plan's own; during
    a Surge the controller renders it for the serving generation, qdd.render.render)."""
    r = spec.router
    return RouterPlan(replicas=r.replicas, image=r.image, port=r.port,
                      args=router_args(cr, namespace, spec, generation))


BROKEN_POLICIES: dict[str, str] = {
    "power_of_two": ("vllm-router 0.1.17 asks each engine GET /get_load, which vLLM does not serve (vLLM 0.33.0 answers "
                     "/load, and only with --enable-server-load-tracking; vllm-project/router#174, open): every load "
                     "query fails and the policy picks at random"),
}
"""Router policies known not to do what they say with vllm-router 0.1.17 in front of vLLM 0.33
(docs/facts/router-pd.md); qdd refuses them at the policy field."""


def router_problems(spec: QwenDisaggDeploymentSpec) -> list[FieldError]:
    """Policies of spec.router that do not work with the router and engine versions qdd renders."""
    r = spec.router
    return [FieldError(f"spec.router.{field}", f"{policy}: {BROKEN_POLICIES[policy]}; use round_robin or random")
            for field, policy in (("prefillPolicy", r.prefill_policy), ("decodePolicy", r.decode_policy))
            if policy in BROKEN_POLICIES]
