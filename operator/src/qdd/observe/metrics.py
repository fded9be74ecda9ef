"""The vLLM 0.33 series qdd reads, as exposed on an engine's ``/metrics`` (prometheus-client adds
``_total`` to counters and ``_bucket``/``_sum``/``_count`` to histograms), with the file of vLLM
0.33.0 that declares each. tests/unit/test_observe_metrics.py checks every name against
tests/unit/data/vllm-0.33.0-metrics.json, which tests/unit/gen_vllm_metrics.py reads from vLLM's
source. Every series carries ``model_name`` and ``engine`` (the engine core's index: one per DP
rank; vllm/v1/metrics/loggers.py, PrometheusStatLogger labelnames)."""

from __future__ import annotations

LOGGERS = "vllm/v1/metrics/loggers.py"
NIXL = "vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py"

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
"""Fraction 0..1 of the engine's KV-cache blocks in use (despite the name: 1 = full)."""
PREEMPTIONS = "vllm:num_preemptions"
PROMPT_TOKENS = "vllm:prompt_tokens"
GENERATION_TOKENS = "vllm:generation_tokens"
REQUEST_SUCCESS = "vllm:request_success"
"""Finished requests, by ``finished_reason`` (stop, length, abort, error...)."""
TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
TPOT = "vllm:request_time_per_output_token_seconds"
QUEUE_TIME = "vllm:request_queue_time_seconds"
NIXL_XFER_TIME = "vllm:nixl_xfer_time_seconds"
"""Histogram of successful NIXL READs (decode side): its count is transfers done."""
NIXL_FAILED_TRANSFERS = "vllm:nixl_num_failed_transfers"
NIXL_FAILED_NOTIFICATIONS = "vllm:nixl_num_failed_notifications"
NIXL_EXPIRED = "vllm:nixl_num_kv_expired_reqs"
"""Counted by the prefill (producer): requests whose blocks it freed when the lease ran out."""
NIXL_AFTER_EXPIRY = "vllm:nixl_num_notifications_after_expiry"
"""Counted by the prefill: decode's read-done notification came after the lease expired (the read
was of freed blocks: HTTP 200 with garbage)."""

GAUGES = {RUNNING: LOGGERS, WAITING: LOGGERS, KV_CACHE_USAGE: LOGGERS}
COUNTERS = {PREEMPTIONS: LOGGERS, PROMPT_TOKENS: LOGGERS, GENERATION_TOKENS: LOGGERS, REQUEST_SUCCESS: LOGGERS,
            NIXL_FAILED_TRANSFERS: NIXL, NIXL_FAILED_NOTIFICATIONS: NIXL, NIXL_EXPIRED: NIXL, NIXL_AFTER_EXPIRY: NIXL}
HISTOGRAMS = {TTFT: LOGGERS, ITL: LOGGERS, TPOT: LOGGERS, QUEUE_TIME: LOGGERS, NIXL_XFER_TIME: NIXL}
READ = {**GAUGES, **COUNTERS, **HISTOGRAMS}
"""Declared name -> the vLLM 0.33.0 file that declares it."""


def exposed_names() -> dict[str, str]:
    """Exposed sample name -> declared name: what a reader keeps of a /metrics text."""
    out = {g: g for g in GAUGES}
    out |= {f"{c}_total": c for c in COUNTERS}
    for h in HISTOGRAMS:
        out |= {f"{h}{suffix}": h for suffix in ("_bucket", "_sum", "_count")}
    return out


EXPOSED = exposed_names()
PREFIX_REGEX = "vllm:(" + "|".join(sorted(n.removeprefix("vllm:") for n in READ)) + ")(_total|_bucket|_sum|_count)?"
"""A PromQL ``__name__`` regex for exactly the series read (the Prometheus source's query)."""
