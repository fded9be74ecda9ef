"""The operator's own gauge ``qdd_serving_condition{namespace,name,condition}``: set by every pass
that judges the serving conditions, and removed (not left at its last value) when the deployment is
deleted or spec.observe.enabled turns false (qdd.controller.serving.forget_metrics)."""

from __future__ import annotations

from prometheus_client import REGISTRY

from qdd.api.conditions import SERVING_TYPES
from qdd.controller.observer import Observer
from qdd.controller.serving import add_serving, forget_metrics

from .controller_world import cr_of, plan_of


def series(namespace: str, name: str) -> dict[str, float]:
    """condition -> value of the deployment's qdd_serving_condition series (absent ones left out)."""
    out = {}
    for c in SERVING_TYPES:
        v = REGISTRY.get_sample_value("qdd_serving_condition", {"namespace": namespace, "name": name, "condition": c})
        if v is not None:
            out[c] = v
    return out


def judged(name: str, namespace: str = "default", **observe: object) -> dict:
    """A pass's serving part for deployment ``name`` (no engine read yet: every condition Unknown, 0)."""
    def mutate(c: dict) -> None:
        c["metadata"]["name"] = name
        c["metadata"]["namespace"] = namespace
        if observe:
            c["spec"]["observe"] = observe
    cr = cr_of(mutate=mutate)
    return add_serving({"conditions": []}, cr, plan_of(cr), [], Observer(workers=0, override=""), "t")


def test_forget_metrics_removes_the_deployments_series_and_only_them():
    judged("sm-a")
    judged("sm-b")
    assert series("default", "sm-a") == dict.fromkeys(SERVING_TYPES, 0.0)
    forget_metrics("default", "sm-a")
    assert series("default", "sm-a") == {}
    assert series("default", "sm-b") == dict.fromkeys(SERVING_TYPES, 0.0)  # another deployment keeps its own
    forget_metrics("default", "sm-a")  # twice, or for a deployment never judged: nothing to remove, no error
    forget_metrics("default", "never-judged")
    forget_metrics("default", "sm-b")


def test_observe_disabled_removes_the_series():
    judged("sm-off")
    assert len(series("default", "sm-off")) == len(SERVING_TYPES) == 5
    status = judged("sm-off", enabled=False)
    assert status == {"conditions": []} and series("default", "sm-off") == {}


def test_a_deleted_deployment_leaves_no_series():
    """The real Reconciler: a pass judges the serving conditions (the series appear), the resource
    is deleted, the pass that finds it gone forgets it (the series go)."""
    from qdd.controller.reconcile import Reconciler

    from .test_controller_status import NAME, FakeKube, router_canary

    kube = FakeKube(cr_of())
    r = Reconciler(kube, gang=True, canary=router_canary(),  # type: ignore[arg-type]
                   observer=Observer(workers=0, override="u/{pod}"))
    r.once("default", NAME)
    assert series("default", NAME) == dict.fromkeys(SERVING_TYPES, 0.0)
    kube.cr = None  # deleted
    assert r.once("default", NAME) == "gone"
    assert series("default", NAME) == {}
