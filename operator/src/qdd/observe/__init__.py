"""What the engines do, from their own Prometheus metrics: pure judgement, no I/O.

``metrics`` names the vLLM 0.33 series read (and the source file that declares each);
``model`` holds the plain data types (one engine core's read, a role's facts), which the
controller's reader (qdd.controller.engine_metrics) fills and the autoscaler reads; ``extract``
turns parsed samples into them; ``window`` computes rates and percentiles over a window of reads;
``judge`` turns a window into ``status.serving`` and the serving conditions. docs/observability.md.
"""

from .extract import engines_of
from .judge import CONDITION_TYPES, Judgement, judge
from .model import EngineRead, Histogram, PodRead, RoleServing

__all__ = ["CONDITION_TYPES", "EngineRead", "Histogram", "Judgement", "PodRead", "RoleServing", "engines_of", "judge"]
