"""Label and annotation keys qdd puts on what it manages, all under the API group ``qdd.dev``."""

GROUP = "qdd.dev"
VERSION = "v1alpha1"
KIND = "QwenDisaggDeployment"
PLURAL = "qwendisaggdeployments"
SINGULAR = "qwendisaggdeployment"
SHORT_NAME = "qdd"

DEPLOYMENT = f"{GROUP}/deployment"
"""Name of the owning QwenDisaggDeployment; on every child object and pod."""
ROLE = f"{GROUP}/role"
"""``prefill`` | ``decode`` | ``router``; on every child object and pod."""
ENDPOINT = f"{GROUP}/endpoint"
"""Index of the prefill or decode endpoint (one DP/EP group), e.g. ``0``."""
GROUP_ROLE = f"{GROUP}/group-role"
"""Within a multi-pod decode endpoint: ``leader`` (serves HTTP) or ``worker`` (headless)."""
GROUP_SIZE = f"{GROUP}/group-size"
"""Pods in the multi-pod endpoint this pod belongs to: a group of an older shape is whole only
with that many pods (a DEP8 → DEP16 change rolls groups instead of reading them as broken)."""
REVISION = f"{GROUP}/revision"
"""Hash of the rendered pod template of one endpoint; a change means the endpoint is rolled."""
GENERATION = f"{GROUP}/generation"
"""Hash of everything prefill and decode must agree on or that changes what the engines load
(qdd.plan.generation): on every engine pod, StatefulSet and per-slot object. The router pairs a
prefill and a decode only when this label is equal; a change of it is a new generation, rolled by
``spec.rollout.strategy`` (qdd.controller.rollout)."""
SLOT = f"{GROUP}/slot"
"""``a`` | ``b``: the two places a generation's engine objects live in (qdd.names). Objects made
before generations existed carry no slot label and are slot ``a``."""
SERVING_GENERATION = f"{GROUP}/serving-generation"
"""Annotation of the router Deployment: ``<generation>/<slot>`` its selectors send traffic to."""
ON_CHANGE = f"{GROUP}/on-change"
"""Annotation of an immutable child (a Workload or PodGroup, qdd.render.gang): ``replace`` (deleted
when it changed, created again by a later pass) or ``keep`` (created once, never changed)."""
DRAINING = "draining"
"""Value of ``qdd.dev/group-role`` on the serving pod of an endpoint the autoscaler is removing: the
router's selectors want ``leader``, so the router stops sending it requests (vllm-router's Kubernetes
discovery drops a pod whose labels stop matching), while its in-flight requests finish
(qdd.controller.autoscaling.drain). The group's other pods keep ``worker``."""
DRAIN_SINCE = f"{GROUP}/drain-since"
"""Annotation of a draining pod: Unix seconds when it was taken out of the router."""
AUTOSCALER_FIELD_MANAGER = "qdd-autoscaler"
"""Field manager of qdd's planner's writes of a QwenDisaggRoleScale's spec.replicas (its /scale)."""
MANAGED_BY = "app.kubernetes.io/managed-by"
PART_OF = "app.kubernetes.io/part-of"
FIELD_MANAGER = "qdd-operator"

ROLES = ("prefill", "decode", "router")


def object_labels(deployment: str, role: str | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The labels of every object and pod of ``deployment`` (``role`` when it has one), in the
    order they are written, then ``extra``."""
    out = {"app.kubernetes.io/name": "qdd", "app.kubernetes.io/instance": deployment, MANAGED_BY: FIELD_MANAGER,
           PART_OF: "qdd", DEPLOYMENT: deployment}
    if role:
        out[ROLE] = role
    return {**out, **(extra or {})}


def index(value: str | None) -> int | None:
    """A numeric label's value (``ENDPOINT``, ``GROUP_SIZE``) as an int; None when it is not one.
    Children are found by label, and anyone who may create pods in the namespace can label one:
    a value int() refused raised in every pass of the deployment it named (docs/security.md, round 4)."""
    if value is None or not (value.isascii() and value.isdigit()) or len(value) > 6:
        return None
    return int(value)
