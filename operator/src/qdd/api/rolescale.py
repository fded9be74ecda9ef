"""The QwenDisaggRoleScale API (qdd.dev/v1alpha1, short name ``qddscale``): one per role of a
QwenDisaggDeployment whose ``spec.autoscaling.mode`` is On — the role's endpoint count with a scale
subresource, so that an HPA, a KEDA ScaledObject or ``kubectl scale`` can drive each role, and
qdd's own planner writes through the same path (docs/autoscaling.md).

A CRD has one scale subresource and a P/D deployment has two roles, hence one small object per role
(the shape LeaderWorkerSet, RoleBasedGroup and Dynamo's scaling adapters have). The operator creates
``<deployment>-prefill`` and ``<deployment>-decode`` (owner reference to the deployment) with
``spec.replicas`` = ``spec.<role>.endpoints`` and never applies ``spec.replicas`` again: from then
on its writer is the role's ``driver`` (qdd's planner or the HPA/KEDA), through ``/scale``. The
operator writes ``status`` (the endpoints that exist, the selector of the role's serving pods).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .. import labels
from .autoscaling import MAX_PREFILL_ENDPOINTS
from .base import ApiModel
from .crd import AGE_COLUMN, column, custom_resource_definition, resource_schema
from .types import DNS1123_SUBDOMAIN

KIND = "QwenDisaggRoleScale"
PLURAL = "qwendisaggrolescales"
SINGULAR = "qwendisaggrolescale"
SHORT_NAME = "qddscale"
API_VERSION = f"{labels.GROUP}/{labels.VERSION}"


class RoleScaleSpec(ApiModel):
    deployment_name: str = Field(max_length=40, description="The QwenDisaggDeployment whose role this scales (same namespace).")
    role: Literal["prefill", "decode"] = Field(description="prefill or decode.")
    replicas: int = Field(ge=0, le=MAX_PREFILL_ENDPOINTS, description="Endpoints of this role wanted (the scale subresource's spec.replicas). Written by the role's driver (spec.autoscaling.<role>.driver: qdd's planner, or an HPA/KEDA); the operator keeps it within spec.autoscaling.<role>.minEndpoints..maxEndpoints and gpuBudget, and removes endpoints by draining them first.")


class RoleScaleStatus(ApiModel):
    replicas: int = Field(0, description="Endpoints of this role that exist (Ready, starting or draining): the scale subresource's status.replicas.")
    ready_replicas: int = Field(0, description="Endpoints of this role Ready and in the router.")
    draining: int = Field(0, description="Endpoints out of the router, finishing their requests before they are removed.")
    effective: int = Field(0, description="Endpoints the operator lays out now: spec.replicas within the bounds and the GPU budget, plus those still draining.")
    selector: str = Field("", description="Label selector of the role's HTTP-serving engine pods (the scale subresource's selector: an HPA reads their metrics).")
    message: str = Field("", description="Why effective differs from spec.replicas, when it does.")


def openapi_schema() -> dict[str, Any]:
    return resource_schema(
        RoleScaleSpec, RoleScaleStatus,
        description="The endpoint count of one role of a QwenDisaggDeployment, with a scale subresource "
                    "(docs/autoscaling.md). Created by the operator when spec.autoscaling.mode is On.",
        kind=KIND, spec_description="Which deployment and role, and how many endpoints.",
        status_description="Observed state, written by the operator.",
        name_description="<deployment>-<role>.",
        name_rule={"rule": f"self.metadata.name.matches(r'{DNS1123_SUBDOMAIN}')",
                   "message": "metadata.name must be lowercase letters, digits, '-' and '.'"})


PRINTER_COLUMNS = [
    column("Deployment", "string", ".spec.deploymentName", "The QwenDisaggDeployment."),
    column("Role", "string", ".spec.role"),
    column("Desired", "integer", ".spec.replicas", "Endpoints wanted by the role's driver."),
    column("Effective", "integer", ".status.effective", "Endpoints laid out (bounds, budget and drains applied)."),
    column("Ready", "integer", ".status.readyReplicas"),
    column("Draining", "integer", ".status.draining"),
    AGE_COLUMN,
]


def role_scale_crd() -> dict[str, Any]:
    """The CRD object for qwendisaggrolescales.qdd.dev (apiextensions.k8s.io/v1)."""
    scale = {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
             "labelSelectorPath": ".status.selector"}
    # metadata.name of at most 40 characters does not hold <deployment (40)>-prefill: lifted here.
    schema = openapi_schema()
    schema["properties"]["metadata"]["properties"]["name"]["maxLength"] = 63
    return custom_resource_definition(KIND, PLURAL, SINGULAR, SHORT_NAME, schema, {"status": {}, "scale": scale},
                                      PRINTER_COLUMNS)
