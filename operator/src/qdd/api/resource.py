"""Parsing a QwenDisaggDeployment (a dict from YAML or the API server) into typed objects."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from .. import labels
from ..errors import FieldError, SpecError
from .rules import SPEC_RULES
from .spec import QwenDisaggDeploymentSpec
from .types import DNS1035_LABEL, DNS1123_LABEL, PATTERN_HELP

API_VERSION = f"{labels.GROUP}/{labels.VERSION}"
_DNS_1035 = re.compile(DNS1035_LABEL)
_DNS_1123 = re.compile(DNS1123_LABEL)


@dataclass(frozen=True)
class Resource:
    """A parsed custom resource: identity plus a validated spec."""

    name: str
    namespace: str
    spec: QwenDisaggDeploymentSpec
    uid: str | None = None
    generation: int | None = None


def _loc_to_path(loc: tuple[Any, ...]) -> str:
    path = "spec"
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}"
    return path


_TYPE_HELP = {
    "string_type": "must be a string",
    "int_type": "must be an integer (unquoted)",
    "bool_type": "must be true or false (unquoted)",
    "float_type": "must be a number (unquoted)",
    "list_type": "must be a list",
    "model_type": "must be a mapping of fields",
    "dict_type": "must be a mapping",
}
"""Pydantic's type errors in the words of a Kubernetes manifest."""


def _without_nulls(node: Any) -> Any:
    """Mappings with their null values dropped: the API server prunes a null it may not store (no
    field of the CRD is nullable) and then applies the default, so ``tuning: null`` is ``tuning: {}``."""
    if isinstance(node, dict):
        return {k: _without_nulls(v) for k, v in node.items() if v is not None}
    if isinstance(node, list):
        return [_without_nulls(v) for v in node]
    return node


def parse_spec(spec: Any) -> QwenDisaggDeploymentSpec:
    """Validate ``spec`` (a dict). Raises :class:`SpecError` listing every bad field with a fix."""
    if not isinstance(spec, dict):
        raise SpecError.one("spec", "must be a mapping with model, engine, workload, prefill and decode")
    try:
        parsed = QwenDisaggDeploymentSpec.model_validate(_without_nulls(spec))
    except ValidationError as e:
        errors = []
        for err in e.errors():
            # pydantic reports unions and literals with a trailing type tag in loc: drop non-field parts.
            loc = tuple(p for p in err["loc"] if isinstance(p, int) or not str(p).startswith(("literal[", "function-")))
            msg = err["msg"]
            if err["type"] == "extra_forbidden":
                msg = "unknown field (check its spelling against `kubectl explain qdd.spec`)"
            elif err["type"] == "missing":
                msg = "required field is missing"
            elif err["type"] == "string_pattern_mismatch":
                msg = f"must be {PATTERN_HELP.get(err['ctx']['pattern'], 'of the documented form')}"
            else:
                msg = _TYPE_HELP.get(err["type"], msg.replace("Input should be", "must be").replace("Value error, ", ""))
                if err["type"] == "string_type" and isinstance(err.get("input"), (int, float)):
                    msg += f" (quote it: \"{err['input']}\")"
                elif err["type"] == "string_type" and isinstance(err.get("input"), dict) and "name" in err["input"]:
                    msg += f": the name itself ({err['input']['name']}), not a mapping with a name"
                elif err["type"] in ("model_type", "dict_type"):
                    msg += f" (see `kubectl explain qdd.{_loc_to_path(loc).split('[')[0]}`)"
            errors.append(FieldError(_loc_to_path(loc), msg))
        raise SpecError(errors) from None
    broken = [FieldError("spec" + r.field, r.message + (f" ({r.given(parsed)})" if r.given else ""))
              for r in SPEC_RULES if not r.check(parsed)]
    if broken:
        raise SpecError(broken)
    return parsed


def parse_resource(obj: Any) -> Resource:
    """Validate a whole custom resource dict (apiVersion, kind, metadata, spec)."""
    if not isinstance(obj, dict):
        raise SpecError.one("(document)", "must be a QwenDisaggDeployment mapping")
    errs = []
    if obj.get("apiVersion") != API_VERSION:
        errs.append(FieldError("apiVersion", f"must be {API_VERSION}"))
    if obj.get("kind") != labels.KIND:
        errs.append(FieldError("kind", f"must be {labels.KIND}"))
    meta = obj.get("metadata") or {}
    if not isinstance(meta, dict):
        raise SpecError(errs + [FieldError("metadata", "must be a mapping with name (and namespace)")])
    name = meta.get("name")
    if not name:
        errs.append(FieldError("metadata.name", "required"))
    elif not isinstance(name, str) or not _DNS_1035.fullmatch(name):
        # Services and pod hostnames are built from it: a DNS-1035 label (no leading digit, no capitals).
        errs.append(FieldError("metadata.name", "must be a DNS label: lowercase letters, digits and '-', starting "
                                                "with a letter and ending with a letter or digit"))
    elif len(name) > 40:
        # Child names append up to 23 characters (e.g. -decode-0-worker-hdless) under the 63-character limit.
        errs.append(FieldError("metadata.name", "at most 40 characters: child object names are built from it"))
    ns = meta.get("namespace")
    if ns is not None and (not isinstance(ns, str) or not _DNS_1123.fullmatch(ns) or len(ns) > 63):
        errs.append(FieldError("metadata.namespace", "must be a DNS label of at most 63 characters"))
    if errs:
        raise SpecError(errs)
    spec = parse_spec(obj.get("spec"))
    assert isinstance(name, str)  # checked above
    return Resource(name=name, namespace=meta.get("namespace") or "default", spec=spec,
                    uid=meta.get("uid"), generation=meta.get("generation"))
