"""Condition types and reasons of ``QwenDisaggDeployment.status.conditions`` (metav1.Condition):
written only through these names (qdd.controller.status), read by the Argo CD health check
(charts/qdd-operator/files/argocd-health.lua) and users' ``kubectl wait``."""

from __future__ import annotations

READY = "Ready"
"""The summary users wait on: every endpoint of the current generation Ready, router available,
ComputeDomain Ready, KV transfer verified."""
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
RECONCILING = "Reconciling"
"""kstatus's abnormal-true pair (Flux, kubectl wait, Argo CD): Reconciling while converging…"""
STALLED = "Stalled"
"""…and Stalled when it cannot: an invalid spec, or no progress past spec.rollout.progressDeadlineSeconds."""
PLAN_VALID = "PlanValid"
COMPUTE_DOMAIN_READY = "ComputeDomainReady"
KV_TRANSFER_READY = "KVTransferReady"
PLACED = "Placed"
"""The scheduler placed every gang (PodGroup) in one NVLink domain; why not (no domain holds it,
with numbers), or that there is no gang scheduling on this cluster (qdd.controller.placement)."""

CANARY_PASSED = "CanaryPassed"
"""The canary (spec.validation.canary, qdd.canary): one deterministic completion through the router
answered as the generation's baseline says."""

ACCURACY_GATE_PASSED = "AccuracyGatePassed"
"""The accuracy gate (spec.validation.accuracy, qdd.canary.accuracy): the current generation's GSM8K
result from the named QwenDisaggBenchmark reached minScore. Absent when the gate is not set."""

DISRUPTION_PROTECTED = "DisruptionProtected"
"""Every role has a PodDisruptionBudget (two or more endpoints); False names the role a drain stops
(a budget for a single endpoint would wedge every drain of its nodes instead)."""

KV_TRANSFER_FAILING = "KVTransferFailing"
"""Serving conditions (qdd.observe.judge), from the engines' own metrics over spec.observe.windowSeconds;
abnormal-true, as a node's MemoryPressure: True names the cause, False is healthy, Unknown is
unread. NIXL transfers or notifications failed (decode answered HTTP 500, or recomputed)."""
KV_LEASE_EXPIRING = "KVLeaseExpiring"
"""Prefill freed a request's KV blocks before decode read them (vllm:nixl_num_kv_expired_reqs)."""
KV_CACHE_SATURATED = "KVCacheSaturated"
"""An engine's KV cache was full at every read for a whole window (held until a whole window below), or
engines preempted requests."""
REQUESTS_QUEUEING = "RequestsQueueing"
"""An engine's waiting queue stayed above the bound at every read for a whole window (held until a whole
window at or below)."""
ENGINE_STALLED = "EngineStalled"
"""An engine core (a DP rank) with requests running made no token for stallSeconds (its peers' progress is
evidence in the message, not required)."""
SERVING_TYPES = (KV_TRANSFER_FAILING, KV_LEASE_EXPIRING, KV_CACHE_SATURATED, REQUESTS_QUEUEING, ENGINE_STALLED)

SLO_ATTAINABLE = "SLOAttainable"
"""spec.autoscaling (Advise or On): whether the latency targets can be met within the endpoint bounds
and the GPU budget at the load the autoscaler sizes for (qdd.controller.autoscaling.status)."""

TYPES = (READY, PROGRESSING, DEGRADED, RECONCILING, STALLED, PLAN_VALID, COMPUTE_DOMAIN_READY, KV_TRANSFER_READY,
         PLACED, CANARY_PASSED, ACCURACY_GATE_PASSED, DISRUPTION_PROTECTED, *SERVING_TYPES, SLO_ATTAINABLE)
"""Every condition a status carries, in the order they are written."""


class Reason:
    """CamelCase reasons, by the condition that uses them."""

    PLANNED = "Planned"
    INVALID_SPEC = "InvalidSpec"
    NOT_REQUIRED = "NotRequired"
    COMPUTE_DOMAIN_READY = "Ready"
    COMPUTE_DOMAIN_NOT_READY = "NotReady"
    COMPUTE_DOMAIN_NOT_CONVERGING = "NotConverging"
    IMEX_NODE_NOT_READY = "ImexNodeNotReady"
    TRAY_REJOINING = "TrayRejoining"
    """ComputeDomainReady: the GB200 platform's states (qdd.controller.platform, docs/facts/gb200-platform.md)."""
    GROUP_RESTARTING = "GroupRestarting"
    NODE_NOT_READY = "NodeNotReady"
    """Degraded: an engine pod is on a NotReady or unreachable node, or stuck Terminating there
    (qdd.controller.nodeloss); the message says what frees it."""
    PEER_RESTARTED = "PeerRestarted"
    PEER_RESTART_PENDING = "PeerRestartPending"
    """Ready: prefill pods were replaced and decode's one recycle for the burst is still to come."""
    AS_EXPECTED = "AsExpected"
    PREFLIGHT_DISABLED = "PreflightDisabled"
    READY_COMPUTE_DOMAIN_NOT_READY = "ComputeDomainNotReady"
    KV_TRANSFER_NOT_READY = "KVTransferNotReady"
    ALL_ENDPOINTS_READY = "AllEndpointsReady"
    ENDPOINTS_NOT_READY = "EndpointsNotReady"
    ENDPOINTS_NOT_REGISTERED = "EndpointsNotRegistered"
    """Ready: every endpoint is Ready but the router does not list them all yet (GET /list_workers;
    qdd.canary.registration): the canary and benchmarks wait for it."""
    INSUFFICIENT_NVLINK_DOMAIN_CAPACITY = "InsufficientNVLinkDomainCapacity"
    ROLLING_OUT = "RollingOut"
    GENERATION_ROLLING_OUT = "NewGenerationRollingOut"
    DISRUPTION_BUDGETS = "PodDisruptionBudgets"
    SINGLE_ENDPOINT_ROLE = "SingleEndpointRole"
    RECREATING = "Recreating"
    PROGRESS_DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"
    """Stalled: no progress for spec.rollout.progressDeadlineSeconds, with a cause stated by the scheduler, a
    container's back-off or the preflight (qdd.controller.stall)."""
    RECONCILE_COMPLETE = "ReconcileComplete"
    CANARY_PASSED = "CanaryPassed"
    CANARY_MISMATCH = "CanaryMismatch"
    """HTTP 200 with an answer other than the baseline (or spec.validation.canary.expected)."""
    CANARY_FAILED = "CanaryFailed"
    """No answer: an HTTP error, a timeout, a connection refused, a body that is not a completion."""
    CANARY_PENDING = "CanaryPending"
    CANARY_DISABLED = "CanaryDisabled"
    CANARY_NO_ROUTER = "NoRouter"
    ACCURACY_PENDING = "AccuracyPending"
    """AccuracyGatePassed Unknown and Ready False: the router serves the generation, every endpoint is
    registered and the canary passed; the gate's benchmark has not measured this generation yet.
    The gate's benchmark runs in this state (qdd.controller.benchmark.serves_for_gate)."""
    ACCURACY_ABOVE_THRESHOLD = "AccuracyAboveThreshold"
    ACCURACY_BELOW_THRESHOLD = "AccuracyBelowThreshold"
    ACCURACY_RUN_FAILED = "AccuracyRunFailed"
    """The gate's benchmark failed on this generation (a Job failed, a result unreadable, GSM8K
    requests unanswered): no score to judge."""
    ACCURACY_BENCHMARK_INVALID = "AccuracyBenchmarkInvalid"
    """The benchmark spec.validation.accuracy names is missing, has no spec.accuracy, or measures
    another deployment."""
    NO_ENGINE_METRICS = "NoEngineMetrics"
    """A serving condition is Unknown: no engine's metrics could be read (status.serving.errors says why)."""
    PROMETHEUS_NOT_ALLOWED = "PrometheusNotAllowed"
    """A serving condition is Unknown: spec.observe.prometheus.url is not a Prometheus the cluster admin let the
    operator query (``qdd run --allow-prometheus-url``; docs/security.md)."""
    KV_TRANSFERS_FAILING = "KVTransfersFailing"
    NO_FAILED_TRANSFERS = "NoFailedTransfers"
    KV_LEASE_EXPIRED = "KVLeaseExpired"
    LEASES_HELD = "LeasesHeld"
    KV_CACHE_FULL = "KVCacheFull"
    PREEMPTING = "Preempting"
    KV_CACHE_AVAILABLE = "KVCacheAvailable"
    QUEUE_BEYOND_BOUND = "QueueBeyondBound"
    QUEUE_WITHIN_BOUND = "QueueWithinBound"
    ENGINE_NOT_PROGRESSING = "EngineNotProgressing"
    ALL_ENGINES_PROGRESSING = "AllEnginesProgressing"
    SLO_WITHIN_BUDGET = "WithinBoundsAndBudget"
    GPU_BUDGET_REACHED = "GPUBudgetReached"
    MAX_ENDPOINTS_REACHED = "MaxEndpointsReached"
    NO_PERFORMANCE_PROFILE = "NoPerformanceProfile"
    NO_DECISION_YET = "NoDecisionYet"
    """SLOAttainable: the last decision's verdict, or why there is none (no profile ConfigMap, no
    decision period passed yet)."""
