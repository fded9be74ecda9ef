"""The serving canary on the real control plane. kwok runs no router, so the operator's canary goes
to the router TEST DOUBLE hack/fake_canary_router.py (QDD_CANARY_URL_OVERRIDE, set by the operator
fixture from the URL the double wrote): it answers a fixed SIMULATED text, or what ConfigMap
``qdd-simulated-canary`` of the test's namespace says (an answer, an HTTP status, a delay), and
records every request body, which the tests read back."""

from __future__ import annotations

import json
import urllib.request

from .conftest import Kube
from .test_operator import SEED, condition, cr_of, wait_ready

SIMULATED_ANSWER = " Paris. (SIMULATED answer of hack/fake_canary_router.py)"
PERIOD, TIMEOUT = 10, 2
"""A short period: a failed check is retried after min(period, 30) s, so each step below takes about
PERIOD + the operator's 5 s resync."""
STEP_TIMEOUT = 60


def _answer(kube: Kube, ns: str, **data: str) -> None:
    """Make the double answer ``data`` (answer / status / delaySeconds); nothing: its default."""
    kube.kubectl("delete", "configmap", "qdd-simulated-canary", "-n", ns, "--ignore-not-found")
    if data:
        kube.kubectl("create", "configmap", "qdd-simulated-canary", "-n", ns,
                     *[f"--from-literal={k}={v}" for k, v in data.items()])


def _requests(kube: Kube, ns: str, name: str) -> list[dict]:
    url = kube.canary_double_url.format(namespace=ns, name=name) + "/requests"
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def _events(kube: Kube, ns: str, name: str) -> list[tuple[str, str, str]]:
    items = kube.get("events", namespace=ns)["items"]
    return [(e["type"], e["reason"], e.get("message", "")) for e in items
            if e["involvedObject"].get("name") == name and e["involvedObject"].get("kind") == "QwenDisaggDeployment"]


def _wait_condition(kube: Kube, name: str, ns: str, ctype: str, status: str, reason: str) -> dict:
    def seen():
        obj = kube.get("qdd", name, ns)
        c = condition(obj, ctype)
        return c.get("status") == status and c.get("reason") == reason and obj
    return kube.wait_for(seen, timeout=STEP_TIMEOUT, interval=1, desc=f"{ctype}={status} ({reason})")


def test_ready_only_after_the_canary_then_degraded_on_a_wrong_answer_and_back(kube, operator, namespace):
    _answer(kube, namespace, status="503")
    cr = cr_of(SEED, namespace)
    cr["spec"]["validation"] = {"canary": {"periodSeconds": PERIOD, "timeoutSeconds": TIMEOUT}}
    name = cr["metadata"]["name"]
    kube.apply(cr)
    # Every endpoint Ready and the preflight passed, but the router answers 503: not Ready.
    obj = kube.wait_for(lambda: (o := kube.get("qdd", name, namespace)) and condition(o, "Ready").get(
        "reason") == "CanaryFailed" and o, timeout=120, interval=1, desc="Ready=False (CanaryFailed)")
    assert condition(obj, "Ready")["status"] == "False"
    assert (obj["status"]["prefillReady"], obj["status"]["decodeReady"]) == ("4/4", "1/1")
    assert condition(obj, "KVTransferReady")["status"] == "True"
    degraded = condition(obj, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "CanaryFailed")
    assert "HTTP 503: " in degraded["message"] and "SIMULATED HTTP 503" in degraded["message"]
    assert obj["status"]["canary"]["lastResult"] == "Failed" and "answer" not in obj["status"]["canary"]
    assert any(e[:2] == ("Warning", "CanaryFailed") for e in _events(kube, namespace, name))

    # The router answers: the first answer is the baseline, and Ready follows.
    _answer(kube, namespace)
    obj = wait_ready(kube, name, namespace, timeout=STEP_TIMEOUT)
    canary = obj["status"]["canary"]
    assert (canary["answer"], canary["baselineSource"], canary["lastResult"]) == (SIMULATED_ANSWER, "first-answer",
                                                                                   "Passed")
    assert canary["generation"] == obj["status"]["rollout"]["generation"] and len(canary["answerHash"]) == 16
    assert canary["latencyMs"] > 0
    assert (condition(obj, "CanaryPassed")["status"], condition(obj, "Degraded")["status"]) == ("True", "False")
    sent = _requests(kube, namespace, name)
    assert len(sent) >= 2
    assert all(b == {"model": "Qwen3.5-397B-A17B-NVFP4", "prompt": "The capital of France is", "max_tokens": 16,
                     "temperature": 0, "seed": 0, "n": 1, "stream": False} for b in sent), sent

    # The engines go wrong with HTTP 200: Degraded with what was expected and what came back.
    _answer(kube, namespace, answer=" garbage garbage garbage")
    obj = _wait_condition(kube, name, namespace, "Degraded", "True", "CanaryMismatch")
    msg = condition(obj, "Degraded")["message"]
    assert f"expected {SIMULATED_ANSWER!r} (first-answer), got ' garbage garbage garbage'" in msg
    assert (condition(obj, "Ready")["status"], condition(obj, "Ready")["reason"]) == ("False", "CanaryMismatch")
    assert obj["status"]["canary"]["lastAnswer"] == " garbage garbage garbage"
    assert obj["status"]["canary"]["answer"] == SIMULATED_ANSWER  # the baseline stays
    assert any(e[:2] == ("Warning", "CanaryMismatch") and "garbage" in e[2] for e in _events(kube, namespace, name))

    # A hung router: the request is cut at timeoutSeconds.
    _answer(kube, namespace, delaySeconds="5")
    obj = _wait_condition(kube, name, namespace, "Degraded", "True", "CanaryFailed")
    assert f"no answer within {TIMEOUT} s" in condition(obj, "Degraded")["message"]
    assert obj["status"]["canary"]["latencyMs"] < 5000

    # Right again: Degraded clears, Ready returns, a Normal event says so.
    _answer(kube, namespace)
    obj = wait_ready(kube, name, namespace, timeout=STEP_TIMEOUT)
    assert (condition(obj, "Degraded")["status"], condition(obj, "Degraded")["reason"]) == ("False", "AsExpected")
    assert any(e[:2] == ("Normal", "CanaryPassed") for e in _events(kube, namespace, name))


def test_a_disabled_canary_is_not_waited_for(kube, operator, namespace):
    _answer(kube, namespace, status="503")  # would hold Ready back if it were sent
    cr = cr_of(SEED, namespace)
    cr["spec"]["validation"] = {"canary": {"enabled": False}}
    name = cr["metadata"]["name"]
    kube.apply(cr)
    obj = wait_ready(kube, name, namespace)
    c = condition(obj, "CanaryPassed")
    assert (c["status"], c["reason"], c["message"]) == ("True", "CanaryDisabled", "spec.validation.canary.enabled is false")
    assert "canary" not in obj["status"] and _requests(kube, namespace, name) == []


def test_the_crd_refuses_a_timeout_not_below_the_period(kube, operator, namespace):
    cr = cr_of(SEED, namespace)
    cr["spec"]["validation"] = {"canary": {"periodSeconds": 10, "timeoutSeconds": 10}}
    p = kube.kubectl("apply", "-f", "-", input=json.dumps(cr), check=False)
    assert p.returncode != 0
    assert "spec.validation.canary.timeoutSeconds: Invalid value" in p.stderr
    assert "must be below periodSeconds (a check may not outlast its period): lower spec.validation.canary.timeoutSeconds" \
        in p.stderr
