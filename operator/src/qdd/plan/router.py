"""vllm-router arguments (PyPI vllm-router 0.1.17, `vllm-router --help`): P/D mode with the NIXL
connector, finding engines by Kubernetes service discovery on qdd's labels."""

from __future__ import annotations

import math

from .. import labels
from ..api.rules import ROUTER_METRICS_PORT
from ..api.spec import QwenDisaggDeploymentSpec
from ..errors import FieldError
from .types import RouterPlan

METRICS_PORT = ROUTER_METRICS_PORT
PREFILL_LEG_S = 60
"""Seconds of a request's prefill leg the default timeout allows: an 8K-token prefill is under a
second on the seed (TTFT 750 ms at 5,120 concurrent requests, docs/perf-seed-table.md); the rest is
room for its queue at a prefill-bound point."""
DECODE_TOKEN_S = 0.2
"""Seconds per output token the default timeout allows the decode leg: 5 tokens/s per user, about
2.3 times the seed's slowest predicted TPOT (86.6 ms at 5,120 concurrent requests,
docs/perf-seed-table.md)."""
ROUTER_DEFAULT_TIMEOUT_S = 1800
"""vllm-router 0.1.17's own --request-timeout-secs (vllm_router/router_args.py)."""


def request_timeout(spec: QwenDisaggDeploymentSpec) -> int:
    """--request-timeout-secs: spec.router.requestTimeoutSeconds, else PREFILL_LEG_S + DECODE_TOKEN_S
    × workload.osl, seconds. vllm-router 0.1.17 builds one HTTP client with this as a total timeout
    (connect to last byte) and sends prefill, then decode, through it: the value bounds a hung
    prefill (the client's 500 comes after it, decode never contacted) and every decode's stream
    alike (a longer answer is cut); tests/contract/test_router.py measures both on the real binary."""
    r = spec.router
    if r.request_timeout_seconds is not None:
        return r.request_timeout_seconds
    return int(PREFILL_LEG_S + math.ceil(DECODE_TOKEN_S * spec.workload.osl))


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
        "--request-timeout-secs", str(request_timeout(spec)),
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


def router_warnings(spec: QwenDisaggDeploymentSpec) -> list[str]:
    """A request timeout the workload's own answers do not fit in: the router cuts them."""
    t, need = request_timeout(spec), int(PREFILL_LEG_S + math.ceil(DECODE_TOKEN_S * spec.workload.osl))
    if t >= need:
        return []
    return [f"spec.router.requestTimeoutSeconds {t} is below {need} s, what a request of the workload needs at "
            f"{1 / DECODE_TOKEN_S:g} tokens/s ({PREFILL_LEG_S} s of prefill + {spec.workload.osl} tokens): vllm-router "
            "cuts a streamed answer at this timeout; raise it, or remove it for the default"]


def router_problems(spec: QwenDisaggDeploymentSpec) -> list[FieldError]:
    """Policies of spec.router that do not work with the router and engine versions qdd renders."""
    r = spec.router
    return [FieldError(f"spec.router.{field}", f"{policy}: {BROKEN_POLICIES[policy]}; use round_robin or random")
            for field, policy in (("prefillPolicy", r.prefill_policy), ("decodePolicy", r.decode_policy))
            if policy in BROKEN_POLICIES]
