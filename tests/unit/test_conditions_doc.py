"""docs/conditions.md is generated from qdd.api.condition_docs, and that table holds exactly the
reasons the code can write per condition type: read from the code that builds the conditions (its
syntax tree), so a new reason or condition without its line in the reference fails here."""

from __future__ import annotations

import ast
import importlib
import inspect
import os
from collections import defaultdict
from types import ModuleType

from qdd.api import benchmark, conditions
from qdd.api.condition_docs import BENCHMARK, CONDITIONS, DEPLOYMENT, markdown

from ..conftest import ROOT

PAGE = ROOT / "docs" / "conditions.md"
MARK = ("<!-- generated from qdd/api/condition_docs.py: QDD_UPDATE_DOCS=1 pytest tests/unit/test_conditions_doc.py -->"
        "\n")

CONDITION_BUILDERS = ("qdd.controller.status_conditions", "qdd.controller.bench_status", "qdd.observe.judge",
                      "qdd.controller.autoscaling.status")
"""Modules whose ``_cond(type, ok, reason, message, generation)`` calls write every condition."""
FAMILIES = {
    # A reason passed through from another module's result, by the expression that carries it.
    "f.canary.reason": ("CanaryState", 1, ("qdd.canary.judge", "qdd.controller.canary")),
    "f.accuracy.reason": ("AccuracyState", 1, ("qdd.canary.accuracy", "qdd.controller.reconcile")),
    "f.kv.reason": ("Verdict", 1, ("qdd.preflight.verdict", "qdd.preflight.observe")),
    "f.placed[1]": ("placed", 1, ("qdd.controller.placement",)),
    "cdv.reason": ("PlatformVerdict", 1, ("qdd.controller.platform",)),
}
"""expression -> (the call that makes it, or the function whose 3-tuple returns hold it; the reason's
index; the modules that make it)."""
SELF_PASS_THROUGH = {"v.reason", "worst.reason"}
"""A Verdict copied from another Verdict (qdd.preflight.verdict.combine, observe): no new reason."""


def _value(mod: ModuleType, node: ast.expr) -> object:
    """A module-level name or dotted attribute (``Reason.PLANNED``, ``C.READY``, ``COMPLETE``), else a KeyError."""
    if isinstance(node, ast.Name):
        if node.id not in vars(mod):
            raise KeyError(node.id)
        return vars(mod)[node.id]
    if isinstance(node, ast.Attribute):
        return getattr(_value(mod, node.value), node.attr)
    raise KeyError(ast.unparse(node))


def _assigned(fn: ast.FunctionDef, name: str) -> list[ast.expr]:
    """What ``name`` is assigned in ``fn`` (``name = x`` and ``name, other = x, y``)."""
    out: list[ast.expr] = []
    for node in ast.walk(fn):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            if isinstance(target, ast.Name) and target.id == name:
                out.append(node.value)
            elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                out += [v for t, v in zip(target.elts, node.value.elts, strict=True)
                        if isinstance(t, ast.Name) and t.id == name]
    return out


def _caller_args(tree: ast.Module, fn: ast.FunctionDef, name: str) -> list[ast.expr]:
    """The arguments given for parameter ``name`` of ``fn`` by the calls in its module."""
    index = [a.arg for a in fn.args.args].index(name)
    return [c.args[index] for c in ast.walk(tree) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
            and c.func.id == fn.name and len(c.args) > index]


def _strings(mod: ModuleType, tree: ast.Module, fn: ast.FunctionDef | None, node: ast.expr) -> set[str]:
    """Every string ``node`` can be."""
    text = ast.unparse(node)
    if text in FAMILIES:
        return _passed_through(tree, node, text)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _strings(mod, tree, fn, node.body) | _strings(mod, tree, fn, node.orelse)
    try:
        value = _value(mod, node)
        assert isinstance(value, str), text
        return {value}
    except KeyError:
        pass
    if isinstance(node, ast.Name) and fn is not None:
        found = _assigned(fn, node.id) or (
            _caller_args(tree, fn, node.id) if node.id in [a.arg for a in fn.args.args] else [])
        if found:
            return set().union(*(_strings(mod, tree, fn, v) for v in found))
    raise AssertionError(f"{mod.__name__}: cannot tell which reason `{text}` is: teach this test the expression")


def _functions(tree: ast.Module) -> list[ast.FunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]


def _parsed(name: str) -> tuple[ModuleType, ast.Module]:
    mod = importlib.import_module(name)
    return mod, ast.parse(inspect.getsource(mod))


def _status(node: ast.expr) -> object:
    """The status a maker is given, where it is a constant (True, False, None); else ``...``."""
    return node.value if isinstance(node, ast.Constant) else ...


def _family(expr: str) -> list[tuple[object, str]]:
    """(status, reason) of every result of ``expr``'s maker."""
    maker, index, modules = FAMILIES[expr]
    out: list[tuple[object, str]] = []
    for name in modules:
        mod, tree = _parsed(name)
        for fn in _functions(tree):
            if fn.name == maker:  # a function whose (status, reason, message) returns are the reasons
                for ret in ast.walk(fn):
                    if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Tuple):
                        status = _status(ret.value.elts[0])
                        out += [(status, r) for r in _strings(mod, tree, fn, ret.value.elts[index])]
                continue
            for call in ast.walk(fn):
                if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == maker
                        and ast.unparse(call.args[index]) not in SELF_PASS_THROUGH):
                    status = _status(call.args[0])
                    out += [(status, r) for r in _strings(mod, tree, fn, call.args[index])]
    return out


def _guards(tree: ast.Module, node: ast.expr, expr: str) -> list[tuple[bool, object]]:
    """(is, constant) of each ``<expr's object>.passed is [not] CONSTANT`` that an enclosing ``if``
    (or ``elif``) requires for ``node`` to run: the canary's reason reaches Degraded only when
    passed is False, Ready only when it is not True."""
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    subject = expr.rsplit(".", 1)[0] + ".passed"
    out: list[tuple[bool, object]] = []
    child, parent = node, parents.get(node)
    while parent is not None and not isinstance(parent, ast.FunctionDef):
        if isinstance(parent, ast.If) and child in parent.body:
            tests = parent.test.values if isinstance(parent.test, ast.BoolOp) else [parent.test]
            for t in tests:
                if (isinstance(t, ast.Compare) and ast.unparse(t.left) == subject and len(t.ops) == 1
                        and isinstance(t.ops[0], (ast.Is, ast.IsNot)) and isinstance(t.comparators[0], ast.Constant)):
                    out.append((isinstance(t.ops[0], ast.Is), t.comparators[0].value))
        child, parent = parent, parents.get(parent)
    return out


def _passed_through(tree: ast.Module, node: ast.expr, expr: str) -> set[str]:
    """The reasons of ``expr``'s family that can reach ``node``, given its guards."""
    guards = _guards(tree, node, expr)
    return {reason for status, reason in _family(expr)
            if status is ... or all((status is value) == is_ for is_, value in guards)}


def reasons_in_code() -> dict[str, set[str]]:
    """Condition type -> every reason the operator's code can write with it."""
    out: dict[str, set[str]] = defaultdict(set)
    for name in CONDITION_BUILDERS:
        mod, tree = _parsed(name)
        for fn in _functions(tree):
            for call in ast.walk(fn):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "_cond":
                    for ctype in _strings(mod, tree, fn, call.args[0]):
                        out[ctype] |= _strings(mod, tree, fn, call.args[2])
    return dict(out)


def test_the_reference_lists_exactly_the_reasons_the_code_writes():
    documented = {c.type: {r.reason for r in c.reasons} for c in CONDITIONS}
    assert sum(len(c.reasons) for c in CONDITIONS) == sum(len(v) for v in documented.values()), "a reason twice"
    assert documented == reasons_in_code()


def test_the_reference_covers_every_condition_type_of_both_kinds():
    assert [c.type for c in CONDITIONS if c.kind == DEPLOYMENT] == list(conditions.TYPES)
    assert [c.type for c in CONDITIONS if c.kind == BENCHMARK] == list(benchmark.CONDITION_TYPES)
    for c in CONDITIONS:
        assert c.means and all(r.means and r.action and r.status in ("True", "False", "Unknown", "True or False")
                               for r in c.reasons), c.type


def test_the_resolver_sees_known_reasons_of_each_family():
    """The families are read, not assumed: one reason of each, from three different modules."""
    code = reasons_in_code()
    assert {"TCPFallback", "PreflightPending"} <= code[conditions.KV_TRANSFER_READY]
    assert {"GangScheduled", "NoGangScheduling"} <= code[conditions.PLACED]
    assert {conditions.Reason.CANARY_MISMATCH, conditions.Reason.CANARY_NO_ROUTER} <= code[conditions.CANARY_PASSED]
    assert {conditions.Reason.ACCURACY_PENDING, conditions.Reason.ACCURACY_BELOW_THRESHOLD} <= code[
        conditions.ACCURACY_GATE_PASSED]
    assert conditions.Reason.ACCURACY_PENDING not in code[conditions.DEGRADED]  # only a failed gate degrades
    assert code[conditions.PROGRESSING] == code[conditions.RECONCILING]


def test_docs_page_is_generated_from_the_reference():
    text = PAGE.read_text()
    head, mark, rest = text.partition(MARK)
    assert mark, f"{PAGE} lost its generated-section marker"
    if os.environ.get("QDD_UPDATE_DOCS") == "1":
        PAGE.write_text(head + MARK + markdown())
        return
    assert rest == markdown(), "docs/conditions.md is stale: QDD_UPDATE_DOCS=1 pytest tests/unit/test_conditions_doc.py"
