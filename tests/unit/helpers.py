"""Small helpers to plan/render a CR dict and pick objects out of the result."""

from __future__ import annotations

from typing import Any

from qdd.api import parse_resource
from qdd.plan import Plan, build_plan
from qdd.render import render


def plan_of(cr: dict[str, Any], slot: str = "a") -> Plan:
    return build_plan(parse_resource(cr), slot)


def objects_of(cr: dict[str, Any]) -> list[dict[str, Any]]:
    return render(plan_of(cr))


def engine_pod_specs(objs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(role, labels, pod spec) of every engine pod or pod template."""
    out = []
    for o in objs:
        if o["kind"] == "Pod":
            out.append((o["metadata"]["labels"]["qdd.dev/role"], o["metadata"]["labels"], o["spec"]))
        elif o["kind"] == "StatefulSet":
            t = o["spec"]["template"]
            for _ in range(o["spec"]["replicas"]):
                out.append((t["metadata"]["labels"]["qdd.dev/role"], t["metadata"]["labels"], t["spec"]))
    return out


def flag(args: list[str], name: str) -> str | None:
    """Value following ``name`` in an argv, or None when absent."""
    return args[args.index(name) + 1] if name in args else None


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def by_name(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    for o in objs:
        if o["kind"] == kind and o["metadata"]["name"] == name:
            return o
    raise KeyError(f"{kind}/{name}")
