"""Shared pydantic configuration: camelCase names on the wire, unknown fields refused."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    """Base of every API object. Unknown fields are an error (a typo must not be ignored)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


def cel(*rules: tuple[str, str, str]) -> dict[str, Any]:
    """``json_schema_extra`` for CEL rules: each (rule, fieldPath, message)."""
    return {
        "x-kubernetes-validations": [
            {"rule": r, "fieldPath": p, "message": m} if p else {"rule": r, "message": m} for r, p, m in rules
        ]
    }
