"""``QwenDisaggDeployment.status``: declared in full, so the structural CRD never prunes it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from . import conditions
from .autoscaling_status import AutoscalingStatus
from .base import ApiModel


class Condition(ApiModel):
    """metav1.Condition."""

    type: str = Field(description=", ".join(conditions.TYPES) + ".")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(description="CamelCase reason.")
    message: str = Field("", description="Human-readable detail.")
    last_transition_time: str | None = Field(None, description="RFC 3339 time of the last status flip.")
    observed_generation: int | None = Field(None, description="metadata.generation this condition describes.")


class RoleStatus(ApiModel):
    endpoints: int = Field(0, description="Desired endpoints.")
    ready_endpoints: int = Field(0, description="Endpoints whose every pod is Ready.")
    gpus: int = Field(0, description="GPUs requested by this role.")
    pods: int = Field(0, description="Pods of this role that exist.")


class PlanSummary(ApiModel):
    prefill_max_num_batched_tokens: int | None = Field(None, description="Effective prefill --max-num-batched-tokens.")
    decode_max_num_seqs: int | None = Field(None, description="Effective decode --max-num-seqs (per DP rank).")
    decode_max_cudagraph_capture_size: int | None = Field(None, description="Effective decode --max-cudagraph-capture-size.")
    decode_capacity: int | None = Field(None, description="Predicted concurrent requests the decode endpoints hold.")
    kv_block_size: int | None = Field(None, description="Hybrid attention block size, tokens.")
    nodes: int | None = Field(None, description="Nodes the engine pods need (at least).")
    kv_cache_dtype: str | None = Field(None, description="--kv-cache-dtype every engine pod runs with (resolved; never auto).")
    kv_cache_dtype_source: str | None = Field(None, description="Where kvCacheDtype comes from: the spec, or what the checkpoint declares.")
    prefill_max_num_seqs: int | None = Field(None, description="Prefill --max-num-seqs when qdd sets it (lowered to the cache's blocks per rank); unset: the engine default.")
    speculative_tokens: int | None = Field(None, description="Draft tokens per decode step (spec.speculative); 0 without speculative decoding.")
    prefill_compile_cache_key: str | None = Field(None, description="Folder of the prefill engines' compilation caches below the spec.engine.compileCache volume: a hash of what invalidates them (a new key: a cold compile). Unset without compileCache.")
    decode_compile_cache_key: str | None = Field(None, description="The same for the decode engines.")


class KVTransferStatus(ApiModel):
    passed: bool | None = Field(None, description="Preflight verdict.")
    bulk_gbps: float | None = Field(None, description="Bulk NIXL read, GB/s.")
    request_ms: float | None = Field(None, description="One workload request's KV, ms.")
    transports: list[str] = Field(default_factory=list, description="UCX transports seen.")
    reason: str | None = Field(None, description="Why it passed or failed.")


class RolloutStatus(ApiModel):
    generation: str | None = Field(None, description="Generation of the current spec (qdd.dev/generation: a hash of what prefill and decode must agree on).")
    slot: str | None = Field(None, description="Slot (a or b) the current generation's engine objects are named for.")
    serving: str | None = Field(None, description="<generation>/<slot> the router sends traffic to.")
    phase: str | None = Field(None, description="Stable, Surging (the new generation comes up next to the serving one), Switching (the router moves to it), Superseding (a newer edit: the half-made generation goes first), Recreating (the old generation goes first).")
    previous: str | None = Field(None, description="The generation being replaced, while it still has objects.")


class PeerRestartPending(ApiModel):
    pods: list[str] = Field(default_factory=list, description="Prefill pods replaced since the burst began.")
    since: str | None = Field(None, description="RFC 3339 time of the burst's first replacement seen.")
    last: str | None = Field(None, description="RFC 3339 time of its last replacement seen.")


class ProgressStatus(ApiModel):
    key: str | None = Field(None, description="What progress is measured on (generation, rollout phase, pods bound and Ready per role, preflight and router state), as of since.")
    since: str | None = Field(None, description="RFC 3339 time key last changed (or the deployment last served its current generation): the age Stalled reports.")


class CanaryStatus(ApiModel):
    generation: str | None = Field(None, description="The generation key the baseline belongs to (qdd.canary.generation): a new engine image, model or must-match engine flag takes a new baseline.")
    request_hash: str | None = Field(None, description="Hash of the canary request (prompt, maxTokens, model, sampling): a changed request takes a new baseline.")
    answer: str | None = Field(None, description="The baseline answer (choices[0].text), at most 256 characters.")
    answer_hash: str | None = Field(None, description="SHA-256 (16 hex digits) of the whole baseline answer.")
    baseline_source: str | None = Field(None, description="first-answer (kept from the generation's first passing check) or expected (spec.validation.canary.expected).")
    last_check_time: str | None = Field(None, description="RFC 3339 time of the last check.")
    last_result: str | None = Field(None, description="Passed, Mismatch or Failed.")
    last_answer: str | None = Field(None, description="What the last check got when it differed from the baseline, at most 256 characters.")
    latency_ms: float | None = Field(None, description="Wall time of the last request, ms (send to last byte).")
    message: str | None = Field(None, description="Why the last check failed.")


class AccuracyGateStatus(ApiModel):
    generation: str | None = Field(None, description="The generation (qdd.dev/generation) the score was measured on: a score of another generation never lets this one become Ready.")
    benchmark: str | None = Field(None, description="The QwenDisaggBenchmark that measured it (spec.validation.accuracy.benchmarkName).")
    score: float | None = Field(None, description="GSM8K mean accuracy of that run, 0..1.")
    min_score: float | None = Field(None, description="spec.validation.accuracy.minScore it was judged against.")
    passed: bool | None = Field(None, description="score >= minScore and every question answered.")
    questions: int | None = Field(None, description="Questions per repeat.")
    measured_time: str | None = Field(None, description="RFC 3339 time the operator first saw the result.")


class Percentiles(ApiModel):
    p50: float | None = Field(None, description="Median over the window, seconds (linear within vLLM's histogram bucket, as PromQL histogram_quantile).")
    p90: float | None = Field(None, description="90th percentile over the window, seconds.")
    p99: float | None = Field(None, description="99th percentile over the window, seconds.")


class ServingRole(ApiModel):
    """One role's engines, as their own metrics say (qdd.observe.model.RoleServing)."""

    engines: int = Field(0, description="Engine cores (vLLM's `engine` label: one per DP rank) whose metrics were read.")
    pods: int = Field(0, description="HTTP-serving pods read (a decode group's leader reports every rank of its group).")
    running: int = Field(0, description="Requests running, all engines (vllm:num_requests_running).")
    waiting: int = Field(0, description="Requests waiting, all engines (vllm:num_requests_waiting).")
    kv_cache_usage: float | None = Field(None, description="Highest KV-cache usage of one engine, 0..1 (vllm:kv_cache_usage_perc).")
    kv_cache_usage_mean: float | None = Field(None, description="Mean KV-cache usage over the engines, 0..1.")
    prompt_tokens_per_second: float | None = Field(None, description="Prompt tokens processed per second over the window (vllm:prompt_tokens).")
    generation_tokens_per_second: float | None = Field(None, description="Tokens generated per second over the window (vllm:generation_tokens).")
    requests_per_second: float | None = Field(None, description="Requests finished per second over the window (vllm:request_success).")
    ttft_seconds: Percentiles | None = Field(None, description="Time to first token as this role's engines measure it (vllm:time_to_first_token_seconds): on prefill, the prefill; on decode, arrival to first token, the KV transfer included.")
    itl_seconds: Percentiles | None = Field(None, description="Inter-token latency (vllm:inter_token_latency_seconds).")
    tpot_seconds: Percentiles | None = Field(None, description="Time per output token of each request (vllm:request_time_per_output_token_seconds).")
    preemptions: int = Field(0, description="Requests preempted in the window (vllm:num_preemptions).")
    failed_transfers: int = Field(0, description="NIXL transfers and notifications that failed in the window.")
    expired_leases: int = Field(0, description="Requests whose KV lease expired, or read after it, in the window.")


class ServingStatus(ApiModel):
    observed_time: str | None = Field(None, description="RFC 3339 time of the newest read.")
    source: str | None = Field(None, description="pods (each pod's /metrics), the Prometheus URL read, or none (spec.observe.prometheus.url is not one the cluster admin allows: nothing is read).")
    window_seconds: int | None = Field(None, description="Seconds of reads the numbers cover.")
    prefill: ServingRole | None = Field(None, description="Prefill engines.")
    decode: ServingRole | None = Field(None, description="Decode engines.")
    waiting: int | None = Field(None, description="Requests waiting on both roles (the kubectl get -o wide column).")
    errors: list[str] = Field(default_factory=list, description="Pods whose metrics could not be read at the last read, and why (at most 8).")


class WeightCacheStatus(ApiModel):
    """The node-local weight cache as the pods report it (qdd.controller.weight_cache)."""

    digest: str | None = Field(None, description="spec.model.cache.digest.")
    trays: int = Field(0, description="Trays with a prefetch pod (the trays the engines may use, narrowed by spec.model.cache.nodeSelector).")
    verified: int = Field(0, description="Trays holding a copy whose every byte hashed to the digest.")
    fetching: int = Field(0, description="Trays whose prefetch is still verifying or copying.")
    failed: int = Field(0, description="Trays whose prefetch failed (the claim unreadable or not of the digest); retried by the kubelet.")
    verified_trays: list[str] = Field(default_factory=list, description="The verified trays by name (at most 64).")
    refused: list[str] = Field(default_factory=list, description="Trays whose cache was refused (it did not hash to the digest) and fetched again, and why (at most 8).")
    failures: list[str] = Field(default_factory=list, description="Why prefetches failed (at most 8).")
    engines_from_cache: int = Field(0, description="Engine pods that read the tray's verified copy.")
    engines_from_claim: int = Field(0, description="Engine pods that read the claim: no verified copy on their tray, or one refused at their start.")
    fallbacks: list[str] = Field(default_factory=list, description="Engine pods that read the claim, their tray and why (at most 8).")


class EngineStartup(ApiModel):
    """One engine pod's last start, from its own log (vLLM's lines, qdd.observe.startup_log) and status."""

    pod: str = Field(description="Engine pod.")
    node: str | None = Field(None, description="Tray it runs on.")
    restarts: int = Field(0, description="The engine container's restart count: the start described is the latest.")
    before_start_seconds: float | None = Field(None, description="Scheduled to the engine container's start: image pull, volume mounts, init containers (whole seconds).")
    to_ready_seconds: float | None = Field(None, description="The engine container's start to Ready (at the readiness probe's period).")
    weights_seconds: float | None = Field(None, description="vLLM: Loading weights took.")
    model_init_seconds: float | None = Field(None, description="vLLM: Initializing model took (building the modules, before the weights).")
    model_load_seconds: float | None = Field(None, description="vLLM: Model loading took (weights and model construction).")
    dynamo_seconds: float | None = Field(None, description="vLLM: Dynamo bytecode transform time.")
    compile_seconds: float | None = Field(None, description="vLLM: compiling the graphs (cold) or loading them from the compile cache (warm).")
    compile_cache: Literal["hit", "miss"] | None = Field(None, description="hit: every graph came from the compile cache; miss: one was compiled.")
    compile_cache_refused: str | None = Field(None, description="vLLM: Compiling model again due to a load failure (the reason: a cache it would not use).")
    torch_compile_seconds: float | None = Field(None, description="vLLM: torch.compile took ... in total.")
    warmup_seconds: float | None = Field(None, description="vLLM (CPU): Warming up model for the compilation ... Warming up done (log timestamps).")
    kv_profile_seconds: float | None = Field(None, description="vLLM: Memory profiling takes (the KV-cache sizing run).")
    startup_plan: bool | None = Field(None, description="vLLM applied a persisted startup plan (KV profiling skipped).")
    graphs_seconds: float | None = Field(None, description="vLLM: Graph capturing finished in (CUDA graphs).")
    engine_init_seconds: float | None = Field(None, description="vLLM: init engine (profile, create kv cache, warmup model) took.")
    nixl_registration_seconds: float | None = Field(None, description="Registering the KV caches with NIXL (log timestamps: whole seconds).")
    log_span_seconds: float | None = Field(None, description="The log's first line to the API server's start-up complete (whole seconds).")


class StartupStatus(ApiModel):
    pods: list[EngineStartup] = Field(default_factory=list, description="Engine pods whose start was read, slowest first (at most 64).")
    read: int = Field(0, description="Engine pods whose log was read.")
    errors: list[str] = Field(default_factory=list, description="Pods whose log could not be read or held no complete start-up, and why (at most 8).")


class QwenDisaggDeploymentStatus(ApiModel):
    observed_generation: int | None = Field(None, description="metadata.generation of the spec the status describes.")
    conditions: list[Condition] = Field(default_factory=list, description=", ".join(conditions.TYPES) + ".")
    prefill: RoleStatus | None = Field(None, description="Prefill endpoints.")
    decode: RoleStatus | None = Field(None, description="Decode endpoints.")
    prefill_ready: str | None = Field(None, description="ready/desired prefill endpoints, e.g. 4/4.")
    decode_ready: str | None = Field(None, description="ready/desired decode endpoints.")
    gpus: int | None = Field(None, description="GPUs requested by all engine pods.")
    replicas: int | None = Field(None, description="Prefill endpoints that exist (the scale subresource's status replicas).")
    selector: str | None = Field(None, description="Label selector of prefill pods (the scale subresource's selector).")
    plan: PlanSummary | None = Field(None, description="Effective sizing.")
    warnings: list[str] = Field(default_factory=list, description="What the plan accepts but a user should know (an unpinned model revision, a fixed side-channel host, a concurrency near capacity).")
    router_endpoint: str | None = Field(None, description="In-cluster URL of the router.")
    kv_transfer: KVTransferStatus | None = Field(None, description="KV-transfer preflight result.")
    canary: CanaryStatus | None = Field(None, description="The canary's baseline and last check (spec.validation.canary).")
    accuracy: AccuracyGateStatus | None = Field(None, description="The accuracy gate's last result and the generation it belongs to (spec.validation.accuracy).")
    prefill_pods: dict[str, str] | None = Field(None, description="UIDs of the prefill pods at the last reconcile, by name: a name with a new UID is a replaced prefill engine (peer restart).")
    rollout: RolloutStatus | None = Field(None, description="Which generation is current and which one serves.")
    progress: ProgressStatus | None = Field(None, description="The last progress seen (spec.rollout.progressDeadlineSeconds, Stalled).")
    peer_restart_pending: PeerRestartPending | None = Field(None, description="A burst of prefill replacements whose one decode recycle is still to come (every prefill pod back and Ready, none replaced for 30 s).")
    serving: ServingStatus | None = Field(None, description="What the engines report about serving, from their own metrics (spec.observe, docs/observability.md).")
    autoscaling: AutoscalingStatus | None = Field(None, description="The autoscaler's last decision, its inputs and why (spec.autoscaling, docs/autoscaling.md).")
    startup: StartupStatus | None = Field(None, description="Each engine pod's start-up phase by phase, from its own log (docs/cold-start.md#start-up-phases-measured).")
    weight_cache: WeightCacheStatus | None = Field(None, description="Which trays hold a verified copy of the checkpoint and which engines read it (spec.model.cache, docs/cold-start.md#node-local-weight-cache).")
    peer_restart: str | None = Field(None, description="Why decode groups were recycled after a prefill pod was replaced (their NIXL state of the old engine); cleared when decode is all Ready again.")
