"""Shared pydantic configuration: the API server's rules, so that ``qdd render`` refuses exactly
what ``kubectl apply`` refuses: camelCase names only (a snake_case name is an unknown field, as
the structural CRD prunes it), unknown fields refused, strict JSON types (no "8" for 8, no 1 for
true), no NaN or infinity."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    """Base of every API object. Unknown fields are an error (a typo must not be ignored)."""

    model_config = ConfigDict(alias_generator=to_camel, validate_by_alias=True, validate_by_name=False,
                              extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


def cel(*rules: tuple[str, str, str]) -> dict[str, Any]:
    """``json_schema_extra`` for CEL rules: each (rule, fieldPath, message)."""
    return {
        "x-kubernetes-validations": [
            {"rule": r, "fieldPath": p, "message": m} if p else {"rule": r, "message": m} for r, p, m in rules
        ]
    }
