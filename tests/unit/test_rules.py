"""Each cross-field rule (qdd.api.rules.SPEC_RULES) is written twice, as CEL for the API server and
as a Python check for `qdd plan`. A tiny evaluator of the CEL subset the rules use runs both on the
same scenarios (the spec as the API server sees it after defaulting) and they must agree."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import pytest

from qdd.api.rules import SPEC_RULES
from qdd.api.spec import QwenDisaggDeploymentSpec
from qdd.errors import SpecError

from ..conftest import EXAMPLES, load
from .helpers import plan_of

_TOKEN = re.compile(r"\s*(?:(?P<str>'[^']*')|(?P<num>\b\d+\b)|has\((?P<has>self(?:\.\w+)+)\)|(?P<path>self(?:\.(?!startsWith|lowerAscii)\w+)+)"
                    r"|(?P<meth>\.startsWith|\.lowerAscii)|(?P<op>&&|\|\||==|!=|>=|<=|>|<|!|\+|\*|\(|\)|\[|\]|,|\bin\b))")
_METHODS = {".startsWith": ".startswith", ".lowerAscii": ".lower"}
_OPS = {"&&": " and ", "||": " or ", "!": " not ", "in": " in "}


def cel_to_python(rule: str) -> str:
    """Translate the CEL subset of the rules (field paths, has(), !, &&, ||, ==, !=, in [..],
    startsWith, lowerAscii, string literals) into a Python expression; anything else fails."""
    out, pos = [], 0
    while pos < len(rule):
        m = _TOKEN.match(rule, pos)
        assert m and m.end() > pos, f"CEL outside the tested subset at {rule[pos:]!r}"
        pos = m.end()
        if m["str"]:
            out.append(m["str"])
        elif m["num"]:
            out.append(m["num"])
        elif m["has"]:
            out.append(f"_has({m['has'][5:]!r})")
        elif m["path"]:
            out.append(f"_get({m['path'][5:]!r})")
        elif m["meth"]:
            out.append(_METHODS[m["meth"]])
        else:
            out.append(_OPS.get(m["op"], m["op"]))
    return "".join(out)


def cel_eval(rule: str, spec: dict[str, Any]) -> bool:
    def walk(path: str) -> Any:
        node = spec
        for part in path.split("."):
            node = node[part]  # a missing field is a CEL error, as on the API server
        return node

    def has(path: str) -> bool:
        try:
            walk(path)
        except KeyError:
            return False
        return True

    return bool(eval(cel_to_python(rule), {"_get": walk, "_has": has}))  # noqa: S307 - test-only, own input


def _defaulted(spec: dict[str, Any]) -> tuple[dict[str, Any], QwenDisaggDeploymentSpec]:
    """(spec as the API server stores it after CRD defaulting, the parsed spec) without running the rules."""
    parsed = QwenDisaggDeploymentSpec.model_validate(spec)
    return parsed.model_dump(by_alias=True, exclude_none=True), parsed


def _tuning(role: str, **kw: Any) -> Callable[[dict], None]:
    return lambda s: s[role].setdefault("tuning", {}).update(kw)


def _host(h: str) -> Callable[[dict], None]:
    return lambda s: s["kvTransfer"].update(sideChannelHost=h)


def _engine(version: str, role: str, on: bool) -> Callable[[dict], None]:
    def mutate(s: dict) -> None:
        s["engine"]["vllmVersion"] = version
        _tuning(role, asyncScheduling=on)(s)
    return mutate


# name: (mutation of the seed spec, fieldPath of the one rule it breaks or None)
SCENARIOS: dict[str, tuple[Callable[[dict], None], str | None]] = {
    "seed": (lambda s: None, None),
    "tp-differs": (lambda s: s["prefill"]["topology"].update(tensorParallel=2), ".decode.topology.tensorParallel"),
    "kv-dtype": (_tuning("decode", kvCacheDtype="fp8"), ".decode.tuning.kvCacheDtype"),
    "ssm-dtype": (_tuning("prefill", mambaSsmCacheDtype="float32"), ".decode.tuning.mambaSsmCacheDtype"),
    "prefix-prefill": (_tuning("prefill", prefixCaching=True), ".prefill.tuning.prefixCaching"),
    "prefix-decode": (_tuning("decode", prefixCaching=True), ".decode.tuning.prefixCaching"),
    "host-0.0.0.0": (_host("0.0.0.0"), ".kvTransfer.sideChannelHost"),
    "host-localhost": (_host("localhost"), ".kvTransfer.sideChannelHost"),
    "host-LOCALHOST": (_host("LOCALHOST"), ".kvTransfer.sideChannelHost"),
    "host-127.0.0.5": (_host("127.0.0.5"), ".kvTransfer.sideChannelHost"),
    "host-::1": (_host("::1"), ".kvTransfer.sideChannelHost"),
    "host-routable": (_host("10.1.2.3"), None),
    "rpc-equals-http": (lambda s: s.setdefault("ports", {}).update(http=9000, dataParallelRpc=9000),
                        ".ports.dataParallelRpc"),
    "async-old": (_engine("0.23.0", "decode", True), ".decode.tuning.asyncScheduling"),
    "async-old-v": (_engine("v0.23.0", "prefill", True), ".prefill.tuning.asyncScheduling"),
    "async-off-old": (_engine("0.23.0", "decode", False), None),
    "async-new": (_engine("0.33.0", "decode", True), None),
    "router-port-is-metrics": (lambda s: s.setdefault("router", {}).update(port=29000), ".router.port"),
    "router-port-other": (lambda s: s.setdefault("router", {}).update(port=9000), None),
    "accuracy-gate": (lambda s: s.update(validation={"accuracy": {"benchmarkName": "gsm8k", "minScore": 0.85}}), None),
    "accuracy-gate-no-router": (lambda s: s.update(validation={"accuracy": {"benchmarkName": "gsm8k", "minScore": 0.85}},
                                                   router={"replicas": 0}), ".validation.accuracy"),
    "no-router-no-gate": (lambda s: s.update(router={"replicas": 0}), None),
}


def _autoscaling(budget: int, p_min: int = 1, d_min: int = 1) -> Callable[[dict], None]:
    # The seed: prefill DEP2 (2 GPUs per endpoint), decode DEP8 (8 GPUs per endpoint).
    return lambda s: s.update(autoscaling={"targets": {"ttftMs": 2000, "tpotMs": 50}, "gpuBudget": budget,
                                           "prefill": {"minEndpoints": p_min, "maxEndpoints": 8},
                                           "decode": {"minEndpoints": d_min, "maxEndpoints": 4}})


SCENARIOS.update({
    "autoscaling-budget-holds-minimum": (_autoscaling(10), None),
    "autoscaling-budget-below-minimum": (_autoscaling(9), ".autoscaling.gpuBudget"),
    "autoscaling-budget-below-raised-minimum": (_autoscaling(19, p_min=2, d_min=2), ".autoscaling.gpuBudget"),
})


def _scenario(name: str) -> dict[str, Any]:
    spec = copy.deepcopy(load(EXAMPLES / "qwen35-397b-4xdep2-1xdep8.yaml")["spec"])
    SCENARIOS[name][0](spec)
    return spec


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_cel_and_python_agree_and_reject_the_field_case(name):
    stored, parsed = _defaulted(_scenario(name))
    broken_cel = [r.field for r in SPEC_RULES if not cel_eval(r.cel, stored)]
    broken_py = [r.field for r in SPEC_RULES if not r.check(parsed)]
    assert broken_cel == broken_py
    want = SCENARIOS[name][1]
    assert broken_cel == ([want] if want else [])


@pytest.mark.parametrize("name", [n for n, (_, f) in SCENARIOS.items() if f])
def test_the_planner_refuses_what_the_rules_refuse(name):
    cr = load(EXAMPLES / "qwen35-397b-4xdep2-1xdep8.yaml")
    cr["spec"] = _scenario(name)
    with pytest.raises(SpecError) as e:
        plan_of(cr)
    assert [x.field for x in e.value.errors] == ["spec" + SCENARIOS[name][1]]


def test_the_evaluator_can_say_no():
    """The translator is strict: CEL outside its subset fails rather than passing silently."""
    assert cel_eval("self.a.b == 'x' && !has(self.c)", {"a": {"b": "x"}}) is True
    assert cel_eval("self.a.b in ['y', 'z'] || self.a.b.startsWith('q')", {"a": {"b": "x"}}) is False
    with pytest.raises(AssertionError):
        cel_to_python("self.a % 2 == 0")
