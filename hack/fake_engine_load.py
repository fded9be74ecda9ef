"""TEST DOUBLE: the traffic a deployment's router spreads over its engine pods, for the engine
metrics double (hack/fake_engine_metrics.py) in the autoscaler's live loop (kwok runs no engine
and no router).

What it stands in for: vllm-router 0.1.17 in P/D mode with Kubernetes service discovery, as qdd
renders it (--prefill-selector / --decode-selector, round robin), in front of vLLM engines. The
router sends to a pod while it matches the rendered selector (equality on every label), is Running
and Ready and is not being deleted — the rule of vllm-router's discovery (``PodInfo::should_include``
and ``is_healthy``: Ready condition True and phase Running; a pod with a deletionTimestamp is
removed). Each request takes prefill then decode; an engine holds it (vllm:num_requests_running)
for its time there by Little's law. A pod the router stops sending to finishes what it holds within
one request time; a pod deleted while it still holds requests fails them — what a client would see
— and so does a request that arrives while a role has no pod to go to. The selectors are read from
the router Deployment's args (``<deployment>-router``), as the router gets them.

What it leaves out: queueing (every request starts at once), per-request variance, the KV transfer
itself (decode's TTFT is a fixed ``decode-ttft-ms``). Latency grows with the load per endpoint:
``ttft = prefill-ttft-ms × (1 + slope × max(0, rate per endpoint / prefill-capacity-rps − 1))``, the
same for ITL with the requests per decode endpoint over ``decode-capacity``.

Configuration (the namespace's ConfigMap qdd-simulated-engine-metrics, re-read every 2 s): ``load-rps``
(requests/s to the deployment; the key turns the load mode on), ``isl``, ``osl`` (tokens, default 1000
and 100), ``prefill-ttft-ms`` (200), ``decode-ttft-ms`` (50), ``itl-ms`` (20), ``prefill-capacity-rps``
(2 per endpoint), ``decode-capacity`` (64 requests per endpoint), ``slope`` (0.25).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

LOAD_KEY = "load-rps"
DEFAULTS = {"isl": 1000.0, "osl": 100.0, "prefill-ttft-ms": 200.0, "decode-ttft-ms": 50.0, "itl-ms": 20.0,
            "prefill-capacity-rps": 2.0, "decode-capacity": 64.0, "slope": 0.25}


def _num(cfg: dict[str, str], key: str) -> float:
    try:
        return float(cfg.get(key, DEFAULTS.get(key, 0.0)))
    except ValueError:
        return DEFAULTS.get(key, 0.0)


def selectors(deployments: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, str]]]:
    """deployment -> role -> the equality selector of its router's args (``--prefill-selector k=v ...``)."""
    out: dict[str, dict[str, dict[str, str]]] = {}
    for d in deployments:
        name = d["metadata"]["name"]
        if not name.endswith("-router"):
            continue
        for c in d["spec"]["template"]["spec"].get("containers") or []:
            args, role, sel = list(c.get("args") or []), None, {"prefill": {}, "decode": {}}
            for a in args:
                if a in ("--prefill-selector", "--decode-selector"):
                    role = a[2:].split("-")[0]
                elif a.startswith("--"):
                    role = None
                elif role is not None and "=" in a:
                    k, v = a.split("=", 1)
                    sel[role][k] = v
            if sel["prefill"] or sel["decode"]:
                out[name.removesuffix("-router")] = sel
    return out


def routable(pod: dict[str, Any], selector: dict[str, str]) -> bool:
    """vllm-router's rule: every selector label equal, Running, Ready, not being deleted."""
    meta, st = pod["metadata"], pod.get("status") or {}
    lab = meta.get("labels") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])
    return bool(selector) and all(lab.get(k) == v for k, v in selector.items()) and ready and \
        st.get("phase") == "Running" and not meta.get("deletionTimestamp")


@dataclass
class PodLoad:
    role: str
    routable: bool = False
    rate: float = 0.0
    """Requests/s the router sends it (while routable)."""
    hold_s: float = 0.0
    """Seconds each request stays on it."""
    left_at: float | None = None
    """When the router stopped sending to it (None while it sends)."""
    held_at_leave: float = 0.0

    def in_flight(self, now: float) -> float:
        if self.routable:
            return self.rate * self.hold_s
        if self.left_at is None or self.hold_s <= 0:
            return 0.0
        return self.held_at_leave * max(0.0, 1.0 - (now - self.left_at) / self.hold_s)


@dataclass
class Fleet:
    """The load of one namespace: ``update`` with its pods and router Deployments, ``of`` per pod."""

    cfg: dict[str, str] = field(default_factory=dict)
    pods: dict[str, PodLoad] = field(default_factory=dict)
    sent: float = 0.0
    failed: float = 0.0
    last: float | None = None

    @property
    def rate(self) -> float:
        return max(0.0, _num(self.cfg, LOAD_KEY))

    def latency(self, role: str, per_endpoint: float) -> float:
        """Seconds: prefill TTFT, decode ITL, at ``per_endpoint`` (req/s on prefill, requests held on decode)."""
        base, cap = ((_num(self.cfg, "prefill-ttft-ms"), _num(self.cfg, "prefill-capacity-rps")) if role == "prefill"
                     else (_num(self.cfg, "itl-ms"), _num(self.cfg, "decode-capacity")))
        over = max(0.0, per_endpoint / cap - 1.0) if cap > 0 else 0.0
        return base / 1000.0 * (1.0 + _num(self.cfg, "slope") * over)

    def update(self, now: float, pods: list[dict[str, Any]], deployments: list[dict[str, Any]]) -> None:
        """Advance to ``now`` with the namespace's current pods and router Deployments."""
        dt = 0.0 if self.last is None else max(0.0, now - self.last)
        self.last = now
        sel = selectors(deployments)
        seen: dict[str, tuple[str, bool]] = {}
        for p in pods:
            lab = p["metadata"].get("labels") or {}
            role, dep = lab.get("qdd.dev/role"), lab.get("qdd.dev/deployment")
            if role not in ("prefill", "decode") or lab.get("qdd.dev/group-role") == "worker":
                continue
            if p["metadata"].get("deletionTimestamp"):
                continue  # being deleted: judged gone below
            seen[p["metadata"]["name"]] = (role, routable(p, sel.get(dep or "", {}).get(role, {})))
        for name in list(self.pods):
            if name not in seen:  # deleted: what it held fails
                self.failed += math.ceil(self.pods.pop(name).in_flight(now) - 1e-6)
        by_role = {r: [n for n, (rr, ok) in seen.items() if rr == r and ok] for r in ("prefill", "decode")}
        rate = self.rate
        if rate > 0 and (not by_role["prefill"] or not by_role["decode"]):
            self.failed += rate * dt  # nowhere to send: the router answers 503
        else:
            self.sent += rate * dt
        osl = _num(self.cfg, "osl")
        n_pre, n_dec = max(len(by_role["prefill"]), 1), max(len(by_role["decode"]), 1)
        itl = self.latency("decode", rate / n_dec * osl * _num(self.cfg, "itl-ms") / 1000.0)
        holds = {"prefill": self.latency("prefill", rate / n_pre), "decode": _num(self.cfg, "decode-ttft-ms") / 1000.0
                 + osl * itl}
        for name, (role, ok) in seen.items():
            p = self.pods.setdefault(name, PodLoad(role))
            if p.routable and not ok:
                p.left_at, p.held_at_leave = now, p.in_flight(now)
            if ok:
                p.left_at = None
            p.routable = ok
            if ok:
                p.rate = rate / (n_pre if role == "prefill" else n_dec)
                p.hold_s = holds[role]

    def of(self, pod: str, now: float) -> dict[str, float]:
        """What one pod's engines report, for the whole pod: requests/s finished, requests running,
        KV-cache usage (prefill holds blocks for decode while it has requests), TTFT and ITL (s)."""
        p = self.pods.get(pod)
        if p is None:
            return {"rate": 0.0, "running": 0.0, "kv": 0.0, "ttft": 0.0, "itl": 0.0}
        held = p.in_flight(now)
        n_dec = max(sum(1 for x in self.pods.values() if x.role == "decode" and x.routable), 1)
        itl = self.latency("decode", self.rate / n_dec * _num(self.cfg, "osl") * _num(self.cfg, "itl-ms") / 1000.0)
        ttft = (p.hold_s if p.role == "prefill" else _num(self.cfg, "decode-ttft-ms") / 1000.0)
        return {"rate": p.rate if p.routable else 0.0, "running": float(math.ceil(held - 1e-6)) if held > 1e-6 else 0.0,
                "kv": (0.3 if held > 1e-6 else 0.0), "ttft": ttft, "itl": itl}
