"""Errors of the pure core: every one names the spec field it is about and how to fix it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FieldError:
    """One problem with one field.

    ``field`` is a dotted path from the resource root, e.g. ``spec.prefill.topology.tensorParallel``.
    ``message`` says what is wrong and what to write instead.
    """

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class SpecError(ValueError):
    """The spec cannot be planned. Carries every :class:`FieldError` found, not just the first."""

    def __init__(self, errors: list[FieldError]):
        self.errors = list(errors)
        super().__init__("; ".join(str(e) for e in self.errors))

    @classmethod
    def one(cls, field: str, message: str) -> SpecError:
        return cls([FieldError(field, message)])
