"""The planner: Spec → Plan, pure functions with every number's source in its docstring."""

from .build import build_plan
from .types import EnvEntry, Plan, PodPlan, RolePlan, RouterPlan

__all__ = ["EnvEntry", "Plan", "PodPlan", "RolePlan", "RouterPlan", "build_plan"]
