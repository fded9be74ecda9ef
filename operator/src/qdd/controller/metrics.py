"""Operator metrics (prometheus-client), served on ``qdd run --metrics-port``."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECONCILES = Counter("qdd_reconciles_total", "Reconciles of QwenDisaggDeployments, by result.", ["result"])
RECONCILE_ERRORS = Counter("qdd_reconcile_errors_total", "Reconciles that raised (API errors, conflicts).")
RECONCILE_SECONDS = Histogram("qdd_reconcile_duration_seconds", "Wall time of one reconcile.",
                              buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
RECONCILE_STEP_SECONDS = Histogram(
    "qdd_reconcile_step_seconds", "Wall time of one step of a reconcile: read (the custom resource and its "
    "children), plan (plan and render, cached for an unchanged spec), write (apply, prune, recreate, retire), "
    "status (compute, patch, events), capacity (within status: the cluster's free GPUs when a gang cannot be "
    "placed).", ["step"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
API_WRITES = Counter("qdd_api_writes_total", "Writes the operator sent to the API server.", ["verb", "kind"])
MANAGED = Gauge("qdd_managed_deployments", "QwenDisaggDeployments the operator manages.")
READY_ENDPOINTS = Gauge("qdd_ready_endpoints", "Ready endpoints per deployment and role.",
                        ["namespace", "name", "role"])
DESIRED_ENDPOINTS = Gauge("qdd_desired_endpoints", "Desired endpoints per deployment and role.",
                          ["namespace", "name", "role"])
GROUP_RESTARTS = Counter("qdd_group_restarts_total", "Multi-pod endpoints deleted whole to be recreated, by cause.",
                         ["role", "cause"])
TRIGGERS = Counter("qdd_reconcile_triggers_total",
                   "What asked for a reconcile: resync, takeover (this replica started to act, peering), spec "
                   "(create/update/resume of the custom resource), child (a watch event of a child, by kind and event "
                   "type) or node (a Node's transition that a deployment waits on: a tray coming back).",
                   ["cause", "kind", "event"])
ENGINE_READS = Counter("qdd_engine_metrics_reads_total", "Reads of engine pods' metrics (spec.observe), by result: "
                       "ok, error (refused, timeout, HTTP error) or limit (over the bytes or series bound).", ["result"])
ENGINE_READ_BYTES = Counter("qdd_engine_metrics_read_bytes_total", "Bytes of engine metrics read.")
ENGINE_READ_SECONDS = Histogram("qdd_engine_metrics_read_seconds", "Wall time of one pod's read, parse included.",
                                buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
SERVING_CONDITION = Gauge("qdd_serving_condition", "1 while a serving condition (KVTransferFailing, KVLeaseExpiring, "
                          "KVCacheSaturated, RequestsQueueing, EngineStalled) is True, else 0; by deployment.",
                          ["namespace", "name", "condition"])

# spec.autoscaling (qdd.controller.autoscaling; docs/autoscaling.md).
_DEPLOYMENT = ["namespace", "name"]
_ROLE = [*_DEPLOYMENT, "role"]
AUTOSCALER_DECISIONS = Counter("qdd_autoscaler_decisions_total", "Autoscaling decisions, by mode (Advise, On) and "
                               "outcome (decided, no-profile, no-metrics).", [*_DEPLOYMENT, "mode", "outcome"])
AUTOSCALER_TARGET = Gauge("qdd_autoscaler_target_endpoints", "Endpoints the last decision wants active.", _ROLE)
AUTOSCALER_EFFECTIVE = Gauge("qdd_autoscaler_effective_endpoints", "Endpoints laid out now (Ready, starting, "
                             "draining).", _ROLE)
AUTOSCALER_NEEDED = Gauge("qdd_autoscaler_needed_endpoints", "Endpoints the SLO needs at the forecast load, before "
                          "bounds and budget.", _ROLE)
AUTOSCALER_DRAINING = Gauge("qdd_autoscaler_draining_endpoints", "Endpoints out of the router, finishing before "
                            "removal.", _ROLE)
AUTOSCALER_GPUS_HELD = Gauge("qdd_autoscaler_gpus_held", "GPUs the deployment's engine pods hold (starting, draining "
                             "and terminating ones included).", _DEPLOYMENT)
AUTOSCALER_GPU_BUDGET = Gauge("qdd_autoscaler_gpu_budget", "spec.autoscaling.gpuBudget.", _DEPLOYMENT)
AUTOSCALER_SLO_ATTAINABLE = Gauge("qdd_autoscaler_slo_attainable", "1 when the last decision found the SLO attainable "
                                  "within bounds and budget, else 0.", _DEPLOYMENT)
AUTOSCALER_LATENCY = Gauge("qdd_autoscaler_latency_seconds", "Prefill TTFT and decode TPOT at the SLO's percentile: "
                           "observed (the engines' histograms), predicted (the profile at the load per Ready endpoint), "
                           "target.", [*_ROLE, "kind"])
AUTOSCALER_REQUEST_RATE = Gauge("qdd_autoscaler_request_rate", "Requests per second: observed, and forecast (what the "
                                "decision sized for).", [*_DEPLOYMENT, "kind"])
AUTOSCALER_DECISION_SECONDS = Histogram("qdd_autoscaler_decision_seconds", "Operator CPU time of one decision and its "
                                        "writes.", buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1))
AUTOSCALER_SCALE_WRITES = Counter("qdd_autoscaler_scale_writes_total", "Writes of a QwenDisaggRoleScale's spec.replicas "
                                  "by qdd's planner, by role and direction (up, down).", ["role", "direction"])
AUTOSCALER_DRAINS = Counter("qdd_autoscaler_drains_total", "Endpoint drains, by role and event: started, cancelled "
                            "(wanted again), removed (drained), timeout (removed after the router's request timeout).",
                            ["role", "event"])
