"""The CustomResourceDefinition, generated from the pydantic models.

The OpenAPI schema must be structural (apiextensions.k8s.io/v1): no ``$ref``, no ``anyOf`` with
null, every object typed. :func:`structural` rewrites pydantic's JSON schema into that shape
and keeps descriptions, defaults, bounds, enums and the CEL rules.
"""

from __future__ import annotations

from typing import Any

from .. import labels
from .conditions import READY
from .spec import QwenDisaggDeploymentSpec
from .status import QwenDisaggDeploymentStatus
from .types import DNS1035_LABEL

_DROP = {"title", "$defs"}


def _map_keys_as_cel(schema: dict[str, Any]) -> dict[str, Any]:
    """A map whose keys are constrained (pydantic: ``patternProperties`` + ``propertyNames``,
    neither allowed in a structural schema) → ``additionalProperties`` for the values and CEL
    rules over the keys, with the same pattern (RE2 in CEL's ``matches``) and lengths."""
    rest = {k: v for k, v in schema.items() if k not in ("patternProperties", "propertyNames")}
    patterns = schema.get("patternProperties", {})
    if len(patterns) > 1:
        raise ValueError(f"not structural: several key patterns {sorted(patterns)}")
    names = schema.get("propertyNames", {})
    rules = []
    for pattern, value in patterns.items():
        rest["additionalProperties"] = value
        rules.append({"rule": f"self.all(k, k.matches(r'{pattern}'))",
                      "message": "every key must be a Kubernetes qualified name (an optional DNS prefix and '/', "
                                 "then letters, digits, '-', '_', '.')"})
    if "maxLength" in names or "minLength" in names:
        lo, hi = names.get("minLength", 0), names.get("maxLength")
        cond = " && ".join(c for c in (f"size(k) >= {lo}" if lo else "", f"size(k) <= {hi}" if hi else "") if c)
        rules.append({"rule": f"self.all(k, {cond})", "message": f"keys must be {lo} to {hi} characters long"})
    rest["x-kubernetes-validations"] = rest.get("x-kubernetes-validations", []) + rules
    return rest


def _without_null(schema: dict[str, Any]) -> dict[str, Any]:
    """``anyOf [X, null]`` (an optional field) → X with the rest of the schema; a None default dropped."""
    branches = [b for b in schema["anyOf"] if b.get("type") != "null"]
    if len(branches) != 1:
        raise ValueError(f"not structural: anyOf {schema['anyOf']}")
    rest = {k: v for k, v in schema.items() if k != "anyOf"}
    if rest.get("default", "x") is None:
        rest.pop("default")
    return {**branches[0], **rest}


def _keyword(key: str, value: Any, defs: dict[str, Any]) -> dict[str, Any]:
    """One keyword of a schema in its structural form (possibly none, or two keywords)."""
    if key in _DROP or (key == "required" and not value) or (key == "additionalProperties" and value is False):
        return {}  # structural schemas prune unknown fields already
    if key == "properties":
        return {key: {k: structural(v, defs) for k, v in value.items()}}
    if key in ("items", "additionalProperties"):
        if key == "additionalProperties" and (value is True or value == {}):
            return {"x-kubernetes-preserve-unknown-fields": True}
        return {key: structural(value, defs)}
    if key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
        # JSON Schema 2020-12 → OpenAPI v3.0: a bound plus a boolean flag.
        return {"minimum" if key == "exclusiveMinimum" else "maximum": value, key: True}
    if key == "const":
        return {"enum": [value]}
    return {key: value}


def structural(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> dict[str, Any]:
    """Inline ``$ref``, collapse ``anyOf [X, null]`` to X, turn key constraints into CEL, drop
    titles; recurse."""
    defs = defs if defs is not None else schema.get("$defs", {})
    if "$ref" in schema:
        target = defs[schema["$ref"].split("/")[-1]]
        return structural({**target, **{k: v for k, v in schema.items() if k != "$ref"}}, defs)
    if "anyOf" in schema:
        return structural(_without_null(schema), defs)
    if "patternProperties" in schema or "propertyNames" in schema:
        return structural(_map_keys_as_cel(schema), defs)
    out: dict[str, Any] = {}
    for key, value in schema.items():
        out.update(_keyword(key, value, defs))
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    if "default" in out and out["default"] is None:
        out.pop("default")
    return out


def resource_schema(spec_model: Any, status_model: Any, *, description: str, kind: str, spec_description: str,
                    status_description: str, name_description: str, name_rule: dict[str, str]) -> dict[str, Any]:
    """The openAPIV3Schema of one of qdd's kinds: apiVersion, kind, a metadata.name of at most 40
    characters (child names are built from it) checked by ``name_rule`` (CEL), and the structural
    spec and status of the pydantic models."""
    spec = structural(spec_model.model_json_schema(by_alias=True, mode="validation"))
    status = structural(status_model.model_json_schema(by_alias=True, mode="validation"))
    spec["description"], status["description"] = spec_description, status_description
    return {
        "type": "object",
        "description": description,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "Versioned schema of this object: qdd.dev/v1alpha1."},
            "kind": {"type": "string", "description": f"REST resource this object represents: {kind}."},
            # The API server allows only name/generateName constraints under metadata (no description).
            "metadata": {"type": "object", "properties": {"name": {
                "type": "string", "maxLength": 40, "description": name_description}}},
            "spec": spec,
            "status": status,
        },
        "x-kubernetes-validations": [name_rule],
    }


def openapi_schema() -> dict[str, Any]:
    # Service names and pod hostnames are built from the name: a DNS-1035 label (the API server
    # itself only asks a DNS-1123 subdomain of custom resources). api/resource.py checks the same.
    return resource_schema(
        QwenDisaggDeploymentSpec, QwenDisaggDeploymentStatus,
        description="A prefill/decode disaggregated vLLM deployment of a Qwen3.5 model.",
        kind="QwenDisaggDeployment",
        spec_description="What to serve, on what, for which traffic. See `qdd plan` for the effective sizing.",
        status_description="Observed state, written by the operator.",
        name_description="At most 40 characters: child object names are built from it.",
        name_rule={"rule": f"self.metadata.name.matches(r'{DNS1035_LABEL}')",
                   "message": "metadata.name must be a DNS label: lowercase letters, digits and '-', starting with a "
                              "letter and ending with a letter or digit"})


def column(name: str, type_: str, json_path: str, description: str | None = None,
           priority: int | None = None) -> dict[str, Any]:
    """One ``additionalPrinterColumns`` entry (keys in the order the CRD files have them)."""
    out: dict[str, Any] = {"name": name, "type": type_, "jsonPath": json_path}
    if priority is not None:
        out["priority"] = priority
    if description is not None:
        out["description"] = description
    return out


def condition_column(name: str, ctype: str, field: str = "status") -> dict[str, Any]:
    """A column showing ``field`` of the condition of type ``ctype``."""
    return column(name, "string", f'.status.conditions[?(@.type=="{ctype}")].{field}')


AGE_COLUMN = column("Age", "date", ".metadata.creationTimestamp")


def custom_resource_definition(kind: str, plural: str, singular: str, short_name: str, schema: dict[str, Any],
                               subresources: dict[str, Any], columns: list[dict[str, Any]]) -> dict[str, Any]:
    """The apiextensions.k8s.io/v1 CRD object of one qdd.dev kind: namespaced, one served and
    stored version (labels.VERSION), categories ``all`` and ``llm``."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{labels.GROUP}", "labels": {labels.PART_OF: "qdd"}},
        "spec": {
            "group": labels.GROUP,
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": singular,
                      "shortNames": [short_name], "categories": ["all", "llm"]},
            "scope": "Namespaced",
            "versions": [{"name": labels.VERSION, "served": True, "storage": True,
                          "schema": {"openAPIV3Schema": schema}, "subresources": subresources,
                          "additionalPrinterColumns": columns}],
        },
    }


PRINTER_COLUMNS = [
    column("Prefill", "string", ".status.prefillReady", "Ready/desired prefill endpoints."),
    column("Decode", "string", ".status.decodeReady", "Ready/desired decode endpoints."),
    column("GPUs", "integer", ".status.gpus", "GPUs requested by engine pods."),
    column("Concurrency", "integer", ".spec.workload.concurrency", "Target concurrent requests."),
    condition_column("Ready", READY),
    condition_column("Reason", READY, "reason"),
    column("Serving", "string", ".status.rollout.serving",
           "<generation>/<slot> the router sends traffic to (docs/rollouts.md).", priority=1),
    column("Rollout", "string", ".status.rollout.phase", "Stable, Surging, Switching, Superseding or Recreating.",
           priority=1),
    column("Running", "integer", ".status.serving.decode.running", "Requests running on decode (the engines' own "
           "vllm:num_requests_running; docs/observability.md).", priority=1),
    column("Waiting", "integer", ".status.serving.waiting", "Requests waiting on prefill and decode.", priority=1),
    column("KV-Cache", "number", ".status.serving.decode.kvCacheUsage", "Highest KV-cache usage of a decode engine, "
           "0..1.", priority=1),
    column("Tokens/s", "number", ".status.serving.decode.generationTokensPerSecond", "Tokens generated per second "
           "over spec.observe.windowSeconds.", priority=1),
    column("TTFT-p90", "number", ".status.serving.decode.ttftSeconds.p90", "90th percentile time to first token on "
           "decode (KV transfer included), seconds.", priority=1),
    AGE_COLUMN,
]


def crd() -> dict[str, Any]:
    """The CRD object for qwendisaggdeployments.qdd.dev (apiextensions.k8s.io/v1)."""
    scale = {"specReplicasPath": ".spec.prefill.endpoints", "statusReplicasPath": ".status.replicas",
             "labelSelectorPath": ".status.selector"}
    return custom_resource_definition(labels.KIND, labels.PLURAL, labels.SINGULAR, labels.SHORT_NAME,
                                      openapi_schema(), {"status": {}, "scale": scale}, PRINTER_COLUMNS)
