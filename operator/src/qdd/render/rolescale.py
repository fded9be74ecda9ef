"""The per-role scale adapters of a deployment whose ``spec.autoscaling.mode`` is On: one
QwenDisaggRoleScale per role (qdd.api.rolescale). Pure.

Created once with ``spec.replicas`` = ``spec.<role>.endpoints`` (within the autoscaling bounds) and
never applied again (``qdd.dev/on-change: keep``, read by qdd.controller.children): from then on the
count belongs to the role's driver — qdd's planner or an HPA/KEDA — writing through ``/scale``. Not
rendered for Off or Advise, so a deployment without autoscaling renders exactly as before.
"""

from __future__ import annotations

from typing import Any

from .. import labels, names
from ..api.rolescale import API_VERSION, KIND
from ..plan import Plan

ROLES = ("prefill", "decode")


def role_scale_objects(plan: Plan) -> list[dict[str, Any]]:
    """The two QwenDisaggRoleScale objects (none unless spec.autoscaling.mode is On)."""
    a = plan.spec.autoscaling
    if a is None or a.mode != "On":
        return []
    out = []
    for role in ROLES:
        bounds, written = (a.prefill, plan.spec.prefill.endpoints) if role == "prefill" else (a.decode, plan.spec.decode.endpoints)
        out.append({
            "apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": names.role_scale(plan.name, role), "namespace": plan.namespace,
                         "labels": labels.object_labels(plan.name, role),
                         "annotations": {labels.ON_CHANGE: "keep"}},
            "spec": {"deploymentName": plan.name, "role": role,
                     "replicas": min(max(written, bounds.min_endpoints), bounds.max_endpoints)},
        })
    return out
