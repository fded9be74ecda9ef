"""The real vllm-router, run with the args `qdd render` gives the router Deployment of the seed
example, in front of fake prefill/decode engines speaking the P/D protocol (docs/facts/pd-protocol.md).

Two ways to find the engines:
* static: the rendered discovery flags replaced by ``--prefill URL``/``--decode URL`` (one per
  endpoint), every other rendered arg kept (router_harness.py lists the substitutions);
* discovery: every rendered arg kept but the bind address/ports, with KUBECONFIG pointing at a
  fake API server (fake_kube_api.py) that serves the pods `qdd render` produced, each with a
  loopback pod IP where a fake engine (or, for pods the router must never call, a tripwire)
  listens on the rendered HTTP port.

Everything binds to 127.0.0.0/8, every wait is bounded, the router runs under `timeout`.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import socket
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from qdd import labels
from qdd.canary.registration import LIST_PATH, listed_urls, registration, serving_pods

from .fake_engine import FakeEngine, FakeFleet, Tripwire, prompt_digest
from .fake_kube_api import FakeKubeAPI
from .router_harness import (BIND_FLAGS, DISCOVERY_FLAGS, EXAMPLE, OPENER, ROOT, Router, free_port, render,
                             router_container, split_flags, sse_events, substitute)

CR = yaml.safe_load(EXAMPLE.read_text())


def _double() -> Any:
    """hack/fake_canary_router.py as a module (it is a script, not a package)."""
    spec = importlib.util.spec_from_file_location("fake_canary_router", ROOT / "hack" / "fake_canary_router.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
MODEL = CR["spec"]["model"]["servedModelName"]


def _argv(container: dict[str, Any]) -> list[str]:
    return [*container.get("command", []), *container.get("args", [])]


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def _pods(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every engine pod the rendered objects make (StatefulSet replicas expanded)."""
    out = []
    for o in objs:
        if o["kind"] == "Pod":
            out.append(copy.deepcopy(o))
        elif o["kind"] == "StatefulSet":
            t = o["spec"]["template"]
            for i in range(o["spec"]["replicas"]):
                meta = copy.deepcopy(t["metadata"]) | {"name": f"{o['metadata']['name']}-{i}",
                                                       "namespace": o["metadata"]["namespace"]}
                # The operator labels a StatefulSet's pods with its generation (its template never
                # carries it: qdd.controller.rollout.pods_to_label); the router selects on it.
                meta["labels"][labels.GENERATION] = o["metadata"]["labels"][labels.GENERATION]
                out.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(t["spec"])})
    return out


def _http_port(pod: dict[str, Any]) -> int | None:
    for c in pod["spec"]["containers"]:
        for p in c.get("ports", []):
            if p["name"] == "http":
                return int(p["containerPort"])
    return None


def _dp_size(pod: dict[str, Any]) -> int:
    (c,) = [c for c in pod["spec"]["containers"] if c["name"] == "vllm"]
    return int(_flag(_argv(c), "--data-parallel-size"))


RENDERED = render(CR)
ROUTER_ARGS = router_container(RENDERED)["args"]
ENGINE_PODS = [p for p in _pods(RENDERED) if p["metadata"]["labels"]["qdd.dev/role"] in ("prefill", "decode")]
SERVING = [p for p in ENGINE_PODS if _http_port(p) is not None]
PREFILL_PODS = [p for p in SERVING if p["metadata"]["labels"]["qdd.dev/role"] == "prefill"]
DECODE_PODS = [p for p in SERVING if p["metadata"]["labels"]["qdd.dev/role"] == "decode"]
PREFILL_RANKS = sum(_dp_size(p) for p in PREFILL_PODS)
DECODE_RANKS = sum(_dp_size(p) for p in DECODE_PODS)


def _fleet(host_of: dict[str, str] | None = None, port: int = 0) -> FakeFleet:
    def make(role: str, pods: list[dict[str, Any]]) -> list[FakeEngine]:
        return [FakeEngine(role, p["metadata"]["name"], MODEL, dp_size=_dp_size(p), port=port,
                           host=(host_of or {}).get(p["metadata"]["name"], "127.0.0.1"),
                           token=f"{role}{i}")
                for i, p in enumerate(pods)]
    return FakeFleet(prefill=make("prefill", PREFILL_PODS), decode=make("decode", DECODE_PODS))


# --- the P/D flow, checked the same way for every mode ------------------------------------------

def _client_body(path: str, stream: bool, n: int = 5) -> dict[str, Any]:
    body: dict[str, Any] = {"model": MODEL, "max_tokens": n, "temperature": 0.0, "stream": stream}
    if path == "/v1/chat/completions":
        body["messages"] = [{"role": "user", "content": f"What is 17 * 23? ({stream})"}]
        if stream:
            body["stream_options"] = {"include_usage": True}
    else:
        body["prompt"] = f"The capital of France is ({stream})"
    return body


def _text(path: str, status: int, headers: dict[str, str], raw: bytes, stream: bool) -> str:
    assert status == 200, raw[:2000]
    if not stream:
        assert headers["content-type"].startswith("application/json")
        out = json.loads(raw)
        choice = out["choices"][0]
        return choice["message"]["content"] if path.endswith("chat/completions") else choice["text"]
    assert headers["content-type"].startswith("text/event-stream"), headers
    events = sse_events(raw)
    assert events[-1] == "[DONE]", events[-3:]
    chunks = [json.loads(e) for e in events[:-1]]
    assert len(chunks) >= 2, "a streamed answer comes as several SSE events"
    if path.endswith("chat/completions"):
        return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    return "".join(c["choices"][0]["text"] for c in chunks if c["choices"])


def check_one_request(router: Router, fleet: FakeFleet, path: str, stream: bool) -> None:
    """One client request through the router: prefill leg, decode leg, the client's answer."""
    for e in fleet.all:
        e.reset()
    body = _client_body(path, stream)
    status, headers, raw = router.post(path, body)
    text = _text(path, status, headers, raw, stream)

    prefills = [(e, r) for e in fleet.prefill for r in e.completions()]
    decodes = [(e, r) for e in fleet.decode for r in e.completions()]
    assert len(prefills) == 1 and len(decodes) == 1, (prefills, decodes, router.log_tail())
    (pe, pr), (de, dr) = prefills[0], decodes[0]
    assert pr.path == dr.path == path

    # 1. router → prefill: the client body + kv_transfer_params{do_remote_decode}, max_tokens 1, no stream
    p = pr.body or {}
    assert p["kv_transfer_params"]["do_remote_decode"] is True
    assert p["kv_transfer_params"]["do_remote_prefill"] is False
    assert all(p["kv_transfer_params"].get(k) is None
               for k in ("remote_engine_id", "remote_block_ids", "remote_host", "remote_port"))
    assert p["max_tokens"] == 1
    assert p.get("max_completion_tokens", 1) == 1
    assert p["stream"] is False
    assert p["model"] == MODEL
    assert p.get("prompt") == body.get("prompt") and p.get("messages") == body.get("messages")

    # 2. prefill → router: its kv_transfer_params; 3. router → decode: the original body + those params
    (issued,) = pe.issued.values()
    d = dr.body or {}
    assert d["kv_transfer_params"] == issued
    assert set(issued) >= {"remote_engine_id", "remote_request_id", "remote_block_ids", "remote_host",
                           "remote_port", "do_remote_prefill"}
    assert d["max_tokens"] == body["max_tokens"] and d["stream"] is stream
    assert d.get("prompt") == body.get("prompt") and d.get("messages") == body.get("messages")
    assert d.get("stream_options") == body.get("stream_options")
    assert pr.headers.get("x-request-id") == dr.headers.get("x-request-id") is not None

    # the decode READ exactly the prefill's blocks over the side channel, which freed the lease
    assert [r["request_id"] for r in pe.reads] == [issued["remote_request_id"]]
    assert pe.leases == {}

    # 4. the client gets the decode's answer
    expected = f"{de.token}:{pe.name}:{prompt_digest(body)}" + "".join(f" t{i}" for i in range(1, body["max_tokens"]))
    assert text == expected
    assert not [err for e in fleet.all for err in e.errors]


FLOWS = [(path, stream) for path in ("/v1/completions", "/v1/chat/completions") for stream in (False, True)]
FLOW_IDS = [f"{p.rsplit('/', 1)[-1]}-{'stream' if s else 'json'}" for p, s in FLOWS]


# --- static mode --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def static_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Router, FakeFleet]]:
    fleet = _fleet().start()
    try:
        args, _ = substitute(ROUTER_ARGS, port=free_port(), prometheus_port=free_port(),
                             prefill_urls=[e.url for e in fleet.prefill],
                             decode_urls=[e.url for e in fleet.decode])
        with Router(args, tmp_path_factory.mktemp("router-static") / "router.log") as router:
            router.wait_ready(PREFILL_RANKS, DECODE_RANKS)
            yield router, fleet
    finally:
        fleet.stop()


def test_rendered_router_args_are_kept_but_for_the_documented_substitutions() -> None:
    container = router_container(RENDERED)
    assert container["command"] == ["vllm-router"]
    flags = dict(split_flags(ROUTER_ARGS))
    assert "--vllm-pd-disaggregation" in flags and flags["--kv-connector"] == ["nixl"]
    for mode in ("static", "discovery"):
        urls = {"prefill_urls": ["http://127.0.0.1:1"], "decode_urls": ["http://127.0.0.1:2"]} if mode == "static" else {}
        args, changed = substitute(ROUTER_ARGS, port=1, prometheus_port=2, **urls)
        allowed = set(BIND_FLAGS) | (set(DISCOVERY_FLAGS) if mode == "static" else set())
        assert set(changed) == allowed, mode
        kept = [(f, v) for f, v in split_flags(args) if f not in allowed | {"--prefill", "--decode"}]
        assert kept == [(f, v) for f, v in split_flags(ROUTER_ARGS) if f not in allowed], mode


@pytest.mark.parametrize(("path", "stream"), FLOWS, ids=FLOW_IDS)
def test_static_pd_flow(static_stack: tuple[Router, FakeFleet], path: str, stream: bool) -> None:
    check_one_request(*static_stack, path, stream)


def test_static_round_robin_over_every_endpoint_and_dp_rank(static_stack: tuple[Router, FakeFleet]) -> None:
    """The rendered policies are round_robin; vllm-router also spreads over DP ranks that each
    engine reports in its /metrics (``engine`` label) and names the rank in X-data-parallel-rank."""
    router, fleet = static_stack
    for e in fleet.all:
        e.reset()
    n = 2 * len(fleet.prefill)
    for i in range(n):
        status, _, raw = router.post("/v1/completions", {"model": MODEL, "prompt": f"req {i}", "max_tokens": 2})
        assert status == 200, raw
    assert [len(e.completions()) for e in fleet.prefill] == [2] * len(fleet.prefill)
    assert sum(len(e.completions()) for e in fleet.decode) == n
    for e in fleet.all:
        ranks = Counter(r.headers.get("x-data-parallel-rank") for r in e.completions())
        assert set(ranks) <= {str(i) for i in range(e.dp_size)}, (e.name, ranks)
        assert e.leases == {} and not e.errors
    decode_ranks = {r.headers.get("x-data-parallel-rank") for e in fleet.decode for r in e.completions()}
    assert len(decode_ranks) == min(n, DECODE_RANKS)


def test_router_metrics_on_the_rendered_prometheus_flag(static_stack: tuple[Router, FakeFleet]) -> None:
    router, fleet = static_stack
    check_one_request(router, fleet, "/v1/completions", False)
    text = router.metrics()
    assert 'vllm_router_pd_requests_total{route="/v1/completions"}' in text
    assert "vllm_router_pd_prefill_requests_total" in text and "vllm_router_pd_decode_requests_total" in text


def test_fake_engines_refuse_what_a_real_pd_pair_would_refuse() -> None:
    """Guards the guards: a decode without prefill params, or a prefill asked for more than one
    token, fails — so the flow tests above cannot pass with a router that skips a leg."""
    with FakeEngine("prefill", "p", MODEL) as p, FakeEngine("decode", "d", MODEL) as d:
        assert d.decode({"prompt": "x", "max_tokens": 3})[0] == 400
        assert p.prefill({"prompt": "x", "max_tokens": 3, "kv_transfer_params": {"do_remote_decode": True}})[0] == 400
        assert p.prefill({"prompt": "x", "max_tokens": 1})[0] == 400
        code, out = p.prefill({"prompt": "x", "max_tokens": 1, "stream": False,
                               "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False}})
        assert code == 200
        params = dict(out["kv_transfer_params"])  # type: ignore[call-overload]
        assert d.decode({"prompt": "x", "max_tokens": 2, "kv_transfer_params": params | {"remote_block_ids": [[9]]}})[0] == 400
        assert d.decode({"prompt": "x", "max_tokens": 2, "kv_transfer_params": params})[0] == 200
        assert d.decode({"prompt": "x", "max_tokens": 2, "kv_transfer_params": params})[0] == 400, "blocks are read once"


# --- discovery mode: every rendered arg but the bind address/ports --------------------------------

LOOPBACK_NET = "127.77.0."


def _bindable(hosts: list[str], port: int) -> bool:
    socks = []
    try:
        for h in hosts:
            s = socket.socket()
            socks.append(s)
            s.bind((h, port))
        return True
    except OSError:
        return False
    finally:
        for s in socks:
            s.close()


@pytest.fixture(scope="module")
def discovery_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("router-discovery")
    namespace = _flag(ROUTER_ARGS, "--service-discovery-namespace")
    port = int(_flag(ROUTER_ARGS, "--service-discovery-port"))
    assert all(_http_port(p) in (None, port) for p in ENGINE_PODS), "discovery port != engines' http port"
    serving = {p["metadata"]["name"] for p in SERVING}
    # Besides the rendered pods, two the router must never call: another deployment's prefill pod
    # in the same namespace, and this deployment's labels in another namespace.
    other = copy.deepcopy(PREFILL_PODS[0])
    other["metadata"]["name"] = "someone-else-prefill-0"
    other["metadata"]["labels"]["qdd.dev/deployment"] = "someone-else"
    elsewhere = copy.deepcopy(PREFILL_PODS[0])
    elsewhere["metadata"]["namespace"] = "elsewhere"
    # And one of this deployment's prefill pods that is Running but not Ready (still loading): the
    # router must neither register nor call it.
    loading = copy.deepcopy(PREFILL_PODS[0])
    loading["metadata"]["name"] = f"{PREFILL_PODS[0]['metadata']['name']}-loading"
    pods = [copy.deepcopy(p) for p in ENGINE_PODS] + [other, elsewhere, loading]
    for i, p in enumerate(pods):
        ip = f"{LOOPBACK_NET}{10 + i}"
        ready = "False" if p is loading else "True"
        p["status"] = {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": ip,
                       "conditions": [{"type": "Ready", "status": ready},
                                      {"type": "ContainersReady", "status": ready}]}
        p["metadata"].update(uid=f"uid-{i}", resourceVersion="1")
    if not _bindable([p["status"]["podIP"] for p in pods], port):
        pytest.fail(f"port {port} (the rendered --service-discovery-port) is taken on {LOOPBACK_NET}x "
                    "(a listener on 0.0.0.0?); free it to run the discovery test")
    mine = [p for p in pods if p["metadata"]["name"] in serving and p["metadata"]["namespace"] == namespace]
    fleet = _fleet({p["metadata"]["name"]: p["status"]["podIP"] for p in mine}, port)
    trips = [Tripwire(p["status"]["podIP"], port) for p in pods if p not in mine]
    api = FakeKubeAPI(pods).start()
    try:
        fleet.start()
        for t in trips:
            t.start()
        kubeconfig = api.write_kubeconfig(tmp / "kubeconfig", namespace)
        args, changed = substitute(ROUTER_ARGS, port=free_port(), prometheus_port=free_port())
        assert set(changed) == set(BIND_FLAGS)
        with Router(args, tmp / "router.log", kubeconfig=kubeconfig) as router:
            router.wait_ready(PREFILL_RANKS, DECODE_RANKS)
            yield {"router": router, "fleet": fleet, "api": api, "trips": trips, "namespace": namespace,
                   "pods": [p for p in pods if p["metadata"]["namespace"] == namespace]}
    finally:
        api.stop()
        fleet.stop()
        for t in trips:
            t.stop()


@pytest.mark.parametrize(("path", "stream"), FLOWS, ids=FLOW_IDS)
def test_discovery_pd_flow(discovery_stack: dict[str, Any], path: str, stream: bool) -> None:
    check_one_request(discovery_stack["router"], discovery_stack["fleet"], path, stream)


def test_discovery_selects_exactly_the_rendered_serving_pods(discovery_stack: dict[str, Any]) -> None:
    """The rendered selectors pick every prefill endpoint and the decode leader, never the headless
    decode worker, another deployment's pods, or pods in another namespace."""
    router, fleet = discovery_stack["router"], discovery_stack["fleet"]
    for e in fleet.all:
        e.reset()
    for i in range(2 * len(fleet.prefill)):
        status, _, raw = router.post("/v1/completions", {"model": MODEL, "prompt": f"sd {i}", "max_tokens": 2})
        assert status == 200, raw
    assert [len(e.completions()) for e in fleet.prefill] == [2] * len(fleet.prefill)
    assert all(e.completions() for e in fleet.decode)
    trips = discovery_stack["trips"]
    assert len(trips) == len(ENGINE_PODS) - len(SERVING) + 3
    assert [t.hits for t in trips] == [[] for _ in trips]
    ns = discovery_stack["namespace"]
    assert any(r.startswith(f"/api/v1/namespaces/{ns}/pods") for r in discovery_stack["api"].requests)


def test_list_workers_is_what_the_double_and_the_operator_say(discovery_stack: dict[str, Any]) -> None:
    """The start gate's contract: the real router's ``GET /list_workers`` for the rendered args and
    pods, the router TEST DOUBLE's answer for the same pods (hack/fake_canary_router.py, which the
    simulated cluster runs) and the serving pods the operator waits for (qdd.canary.registration)
    are the same endpoints: every Ready serving pod once, by its base URL (the router lists an engine
    once per DP rank, ``URL@rank``), never a headless worker, a pod that is not Ready, another
    deployment's or another namespace's."""
    router, pods = discovery_stack["router"], discovery_stack["pods"]
    with OPENER.open(router.base + LIST_PATH, timeout=5) as r:
        answer = json.loads(r.read())
    real = listed_urls(answer)
    assert real is not None and any("@" in u for u in answer["urls"]), answer  # DP ranks listed as URL@rank
    double_urls, tracked = _double().discovered(ROUTER_ARGS, pods, {})
    assert set(double_urls) == real and len(double_urls) == len(SERVING) == len(tracked)
    port = int(_flag(ROUTER_ARGS, "--service-discovery-port"))
    generation = SERVING[0]["metadata"]["labels"][labels.GENERATION]
    expected = serving_pods(pods, CR["metadata"]["name"], generation, port)
    assert set(expected) == real and sorted(expected.values()) == sorted(p["metadata"]["name"] for p in SERVING)
    reg = registration(len(SERVING), expected, {"router-0": real})
    assert reg.complete and reg.message == f"all {len(SERVING)} endpoints registered with every router pod (router-0)"


def test_rendered_router_rbac_covers_what_discovery_asked(discovery_stack: dict[str, Any]) -> None:
    """vllm-router lists and watches pods; the rendered Role grants exactly get/list/watch on pods."""
    seen = discovery_stack["api"].requests
    assert any("watch=" in r for r in seen) or any("limit=" in r for r in seen)
    (role,) = [o for o in RENDERED if o["kind"] == "Role" and o["metadata"]["labels"].get("qdd.dev/role") == "router"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]


def _relabel(api: FakeKubeAPI, pod: str, group_role: str) -> None:
    def change(p: dict[str, Any]) -> None:
        p["metadata"]["labels"][labels.GROUP_ROLE] = group_role
    api.modify(pod, change)


def _prefill_hits(router: Router, fleet: FakeFleet, n: int) -> list[int]:
    for e in fleet.all:
        e.reset()
    for i in range(n):
        status, _, raw = router.post("/v1/completions", {"model": MODEL, "prompt": f"drain {i}", "max_tokens": 2})
        assert status == 200, raw
    return [len(e.completions()) for e in fleet.prefill]


def test_discovery_drops_a_draining_pod_and_takes_it_back(discovery_stack: dict[str, Any]) -> None:
    """The autoscaler's drain (qdd.controller.autoscaling): relabelling an endpoint's serving pod
    ``qdd.dev/group-role: draining`` takes it out of the real router's rotation at the next watch
    event (the rendered selectors want ``leader``), with no request failing; relabelling it
    ``leader`` brings it back."""
    router, fleet, api = discovery_stack["router"], discovery_stack["fleet"], discovery_stack["api"]
    victim = PREFILL_PODS[-1]["metadata"]["name"]
    n = 4 * len(fleet.prefill)
    assert all(h > 0 for h in _prefill_hits(router, fleet, n))
    _relabel(api, victim, labels.DRAINING)
    try:
        hits = None
        for _ in range(50):  # the router's watch delivers the event within a few hundred ms
            hits = _prefill_hits(router, fleet, n)
            if hits[-1] == 0:
                break
        assert hits is not None and hits[-1] == 0 and all(h > 0 for h in hits[:-1]), (hits, router.log_tail())
        assert sum(hits) == n  # every request answered (200) by the others
    finally:
        _relabel(api, victim, "leader")
    for _ in range(50):
        if _prefill_hits(router, fleet, n)[-1] > 0:
            break
    else:
        raise AssertionError(f"{victim} relabelled leader again never got traffic back: {router.log_tail()}")


def test_example_is_the_seed() -> None:
    assert Path(EXAMPLE).name == "qwen35-397b-4xdep2-1xdep8-cc4096.yaml"
    assert len(PREFILL_PODS) == CR["spec"]["prefill"]["endpoints"]
    assert CR["spec"]["prefill"]["endpoints"] * CR["spec"]["prefill"]["topology"]["dataParallel"] == PREFILL_RANKS
    assert CR["spec"]["decode"]["topology"]["dataParallel"] == DECODE_RANKS
