"""SLO-driven autoscaling of prefill and decode endpoints under a GPU budget (pure core).

:func:`decide` is the whole policy; :mod:`.types` its inputs and outputs; :mod:`.profile` a
tabulated :class:`CapacityProfile`; :func:`config_from_spec` maps ``spec.autoscaling``. No kopf,
no Kubernetes client, no clock: the controller and the offline closed loop (bench/autoscale.py)
call it the same way. docs/autoscaling.md describes the policy.
"""

from .policy import decide
from .spec import config_from_spec
from .types import (CapacityProfile, Counts, Decision, Observation, PolicyConfig, PolicyState, RoleCounts, RoleDecision,
                    RoleLimits)

__all__ = ["CapacityProfile", "Counts", "Decision", "Observation", "PolicyConfig", "PolicyState", "RoleCounts",
           "RoleDecision", "RoleLimits", "config_from_spec", "decide"]
