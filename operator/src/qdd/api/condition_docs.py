"""The users' reference of every condition type and reason qdd writes: what each means and what to
do. docs/conditions.md is generated from it (:func:`markdown`); tests/unit/test_conditions_doc.py
fails when the page is stale, and when the reasons here differ from those the code can write for
each type (it reads them from the code that builds the conditions: qdd.controller.status,
qdd.controller.bench_status, the canary's, the preflight's verdict and the placement's reasons).
Pure data."""

from __future__ import annotations

from dataclasses import dataclass

from . import benchmark as B
from . import conditions as C
from .conditions import Reason as R


@dataclass(frozen=True)
class ReasonDoc:
    reason: str
    status: str
    """The condition's status with this reason: True, False, Unknown, or "True or False"."""
    means: str
    action: str
    """What to do; "-" when nothing is to be done."""


@dataclass(frozen=True)
class ConditionDoc:
    type: str
    kind: str
    means: str
    reasons: tuple[ReasonDoc, ...]


_FIX_SPEC = ("fix the fields the message names (one `spec.FIELD: what to change` per problem); `qdd plan -f` lists "
             "every error offline. Nothing is applied or changed until the spec plans")
_INVALID = "the spec cannot be planned: unknown model, capacity, extra flags that contradict qdd, ..."
_SEE_CANARY = "see `CanaryPassed` with this reason"


def _canary_failed(status: str) -> ReasonDoc:
    return ReasonDoc(R.CANARY_FAILED, status,
                     "the canary got no answer: an HTTP error (status and body excerpt), no answer within "
                     "spec.validation.canary.timeoutSeconds, the router unreachable, a body that is not a completion",
                     "check the router and the engine pods' logs; a timeout on a loaded deployment: raise "
                     "spec.validation.canary.timeoutSeconds (below periodSeconds). Retried after min(periodSeconds, 30) s")


def _canary_mismatch(status: str) -> ReasonDoc:
    return ReasonDoc(R.CANARY_MISMATCH, status,
                     "HTTP 200 with an answer other than the baseline (the generation's first answer, or "
                     "spec.validation.canary.expected); the message has both texts",
                     "a wrong answer with HTTP 200 is what mismatched prefill and decode engines serve: check that "
                     "both roles run one generation (docs/rollouts.md) and the KV-transfer preflight; an intended "
                     "change of answer (new model): set or update spec.validation.canary.expected (docs/canary.md)")


_SEE_ACCURACY = "see `AccuracyGatePassed` with this reason"
_ACCURACY_BELOW = ("the gate's benchmark measured this generation below spec.validation.accuracy.minScore: the engines "
                   "answer wrongly with HTTP 200 (e.g. vllm#36094: ~0.35 instead of ~0.9 on some engine builds); a "
                   "Warning event says so; the router keeps serving this generation")
_ACCURACY_BELOW_DO = ("roll back the change (revert the spec: the previous generation comes back and is measured again), "
                      "or check the checkpoint, its revision and the engine version's known fixes "
                      "(docs/facts/engine-fixes.md)")
_ACCURACY_FAILED = ("the gate's benchmark failed on this generation (a Job failed, a result unreadable, GSM8K requests "
                    "unanswered): no score to judge")
_ACCURACY_FAILED_DO = ("read the benchmark's `Failed` and its Job's log; fix the cause, then delete the benchmark's "
                       "Jobs (or re-create the benchmark) to run it again")
_ACCURACY_INVALID = ("the benchmark spec.validation.accuracy.benchmarkName names does not exist, has no spec.accuracy, "
                     "or measures another deployment")
_ACCURACY_INVALID_DO = "create the QwenDisaggBenchmark with spec.deploymentName this deployment and spec.accuracy"

_SERVING = (" From the engines' own metrics (spec.observe; docs/observability.md): True names the cause; a "
            "Warning event when raised, a Normal one when cleared. Absent when spec.observe.enabled is false.")
_no_metrics = ReasonDoc(R.NO_ENGINE_METRICS, "Unknown", "no engine's metrics could be read yet (pods starting, or "
                        "status.serving.errors says why: refused, timeout, over the read limit, Prometheus)",
                        "wait for the pods; if it lasts, check that the operator reaches the pods' HTTP port (network "
                        "policy) or the Prometheus of spec.observe.prometheus")

_not_allowed = ReasonDoc(R.PROMETHEUS_NOT_ALLOWED, "Unknown", "spec.observe.prometheus.url is not a Prometheus the "
                         "cluster admin lets the operator query (the operator's --prometheus-url and "
                         "--allow-prometheus-url, chart values observe.prometheusUrl and "
                         "observe.allowedPrometheusUrls): nothing is read, a Warning event says so",
                         "remove spec.observe.prometheus (the operator's own source is read), or ask the cluster "
                         "admin to allow that URL (docs/security.md)")

DEPLOYMENT = "QwenDisaggDeployment"
BENCHMARK = B.KIND

CONDITIONS: tuple[ConditionDoc, ...] = (
    ConditionDoc(C.READY, DEPLOYMENT, "The summary to wait on (`kubectl wait --for=condition=Ready qdd/NAME`): the "
                 "router serves the current generation, every endpoint of it is Ready, the ComputeDomain is Ready, the "
                 "KV transfer is verified and the canary passed. When False, the reason is the first cause that holds "
                 "it back, in this order.", (
                     ReasonDoc(R.ALL_ENDPOINTS_READY, "True", "everything above holds", "-"),
                     ReasonDoc(R.INVALID_SPEC, "False", _INVALID, _FIX_SPEC),
                     ReasonDoc(R.RECREATING, "False", "spec.rollout.strategy Recreate: the old generation's pods are "
                               "deleted before the new generation starts; nothing serves meanwhile",
                               "wait; Surge (the default) keeps the old generation serving, with the GPUs of both"),
                     ReasonDoc(R.GENERATION_ROLLING_OUT, "False", "Surge: the new generation comes up next to the one "
                               "that serves, which keeps serving until the new one is Ready (the message names both "
                               "and counts the new one's endpoints)",
                               "wait; a Surge that does not finish needs free GPUs for a second generation "
                               "(docs/rollouts.md, \"A stuck Surge\")"),
                     ReasonDoc(R.INSUFFICIENT_NVLINK_DOMAIN_CAPACITY, "False", "see `Placed`", "see `Placed`"),
                     ReasonDoc(R.READY_COMPUTE_DOMAIN_NOT_READY, "False", "see `ComputeDomainReady`",
                               "see `ComputeDomainReady`"),
                     ReasonDoc(R.PEER_RESTART_PENDING, "False", "prefill pods were replaced (a drain, a prefill roll): "
                               "decode holds their old engines' NIXL state and is recycled once for the whole burst, when "
                               "every prefill pod is back and Ready and none was replaced for the window (qdd run "
                               "--peer-restart-window, 30 s); never Ready between", "wait"),
                     ReasonDoc(R.KV_TRANSFER_NOT_READY, "False", "every endpoint is Ready but the KV-transfer preflight "
                               "has not verified the transfer (the message has its verdict)", "see `KVTransferReady`"),
                     ReasonDoc(R.ENDPOINTS_NOT_REGISTERED, "False", "every endpoint is Ready but a Ready router pod "
                               "does not list them all yet (its GET /list_workers, read from each router pod); the message "
                               "says how many of how many every router pod lists, and names each router pod and the "
                               "endpoints it lacks. Read again when a router pod is new or restarts (its discovery starts "
                               "from nothing). The canary and benchmarks wait for it: a router that answers "
                               "with one endpoint of several registered serves (SemiAnalysisAI/InferenceX#2549)",
                               "wait (the router's Kubernetes discovery adds a pod once it is Running and Ready); if it "
                               "lasts, read the router's log and check its Role (pods get/list/watch)"),
                     ReasonDoc(R.CANARY_PENDING, "False", "everything else is ready; the canary has not answered yet",
                               _SEE_CANARY),
                     _canary_failed("False"),
                     _canary_mismatch("False"),
                     ReasonDoc(R.ACCURACY_PENDING, "False", "the router serves this generation, every endpoint is "
                               "registered and the canary passed; the accuracy gate's benchmark has not measured it yet",
                               _SEE_ACCURACY),
                     ReasonDoc(R.ACCURACY_BELOW_THRESHOLD, "False", _ACCURACY_BELOW, _ACCURACY_BELOW_DO),
                     ReasonDoc(R.ACCURACY_RUN_FAILED, "False", _ACCURACY_FAILED, _ACCURACY_FAILED_DO),
                     ReasonDoc(R.ACCURACY_BENCHMARK_INVALID, "False", _ACCURACY_INVALID, _ACCURACY_INVALID_DO),
                     ReasonDoc(R.ENDPOINTS_NOT_READY, "False", "endpoints or the router are not Ready yet (the message "
                               "counts them, and names engine pods the scheduler cannot place)",
                               "wait for model load (spec.cluster.startupTimeoutSeconds bounds it); if it lasts, "
                               "`kubectl describe` the pods the message names")),
                 ),
    ConditionDoc(C.PROGRESSING, DEPLOYMENT, "The operator is converging towards Ready (Argo CD reads it).", (
        ReasonDoc(R.ROLLING_OUT, "True", "not Ready yet and the spec plans; the message counts the ready endpoints",
                  "see `Ready` for what it waits on"),
        ReasonDoc(R.RECONCILE_COMPLETE, "False", "Ready: nothing left to do", "-"),
        ReasonDoc(R.INVALID_SPEC, "False", _INVALID + "; there is nothing to converge to", _FIX_SPEC),
    )),
    ConditionDoc(C.DEGRADED, DEPLOYMENT, "Something that served is broken or being repaired; the operator acts on it "
                 "itself. A group restart or peer restart is reported before a canary failure.", (
                     ReasonDoc(R.AS_EXPECTED, "False", "nothing broken", "-"),
                     ReasonDoc(R.GROUP_RESTARTING, "True", "a pod of a multi-pod decode group is missing, failed or "
                               "restarted: the whole group is recreated (its engines cannot rejoin one another)",
                               "wait; if it repeats, read the failed pod's logs and events (OOM, node, image)"),
                     ReasonDoc(R.NODE_NOT_READY, "True", "an engine pod is on a node the node controller marked "
                               "NotReady or unreachable; once evicted, the rest of its group is recreated, and a pod "
                               "stuck Terminating on the lost node (its name is needed again) is named with the node",
                               "repair the node, or fence it: `kubectl taint node NODE node.kubernetes.io/out-of-service"
                               "=nodeshutdown:NoExecute` (remove the taint after the repair) or `kubectl delete node "
                               "NODE` (docs/reliability.md#node-loss)"),
                     ReasonDoc(R.PEER_RESTARTED, "True", "a prefill pod was replaced: the decode groups that may hold "
                               "its stale NIXL agent are recreated (vLLM 0.33 keeps it, vllm#49238, #58063); a Warning "
                               "event says which", "wait: it clears when decode is Ready again"),
                     _canary_mismatch("True"),
                     _canary_failed("True"),
                     ReasonDoc(R.ACCURACY_BELOW_THRESHOLD, "True", _ACCURACY_BELOW, _ACCURACY_BELOW_DO),
                     ReasonDoc(R.ACCURACY_RUN_FAILED, "True", _ACCURACY_FAILED, _ACCURACY_FAILED_DO),
                     ReasonDoc(R.ACCURACY_BENCHMARK_INVALID, "True", _ACCURACY_INVALID, _ACCURACY_INVALID_DO),
                 )),
    ConditionDoc(C.RECONCILING, DEPLOYMENT, "kstatus's name for `Progressing` (Flux, `kubectl wait`, kstatus-based "
                 "tools); always the same status and reason.", (
                     ReasonDoc(R.ROLLING_OUT, "True", "as `Progressing`", "see `Ready`"),
                     ReasonDoc(R.RECONCILE_COMPLETE, "False", "as `Progressing`", "-"),
                     ReasonDoc(R.INVALID_SPEC, "False", "as `Progressing`", _FIX_SPEC),
                 )),
    ConditionDoc(C.STALLED, DEPLOYMENT, "kstatus's Stalled: the operator cannot make progress without a change of "
                 "the spec or of the cluster (docs/rollouts.md#stalled).", (
                     ReasonDoc(R.AS_EXPECTED, "False", "not stalled", "-"),
                     ReasonDoc(R.INVALID_SPEC, "True", _INVALID, _FIX_SPEC),
                     ReasonDoc(R.PROGRESS_DEADLINE_EXCEEDED, "True", "no progress for spec.rollout."
                               "progressDeadlineSeconds while the current generation does not serve: the message has "
                               "the age and the cause the scheduler (its own words), the kubelet (a back-off) or the "
                               "preflight stated, and whether an older generation keeps serving; one Warning event per "
                               "stall", "fix the cause (the selector, affinity or taint the scheduler names, free GPUs, "
                               "the image), or revert the edit: the serving generation is untouched"),
                 )),
    ConditionDoc(C.PLAN_VALID, DEPLOYMENT, "The spec plans (sizing, capacity, flags); status.plan holds the result.", (
        ReasonDoc(R.PLANNED, "True", "planned; the message has the GPUs and the topology", "-"),
        ReasonDoc(R.INVALID_SPEC, "False", _INVALID + "; a Warning event says the same", _FIX_SPEC),
    )),
    ConditionDoc(C.COMPUTE_DOMAIN_READY, DEPLOYMENT, "The deployment's ComputeDomain (GB200: the IMEX channel every "
                 "engine pod claims) is Ready.", (
                     ReasonDoc(R.NOT_REQUIRED, "True", "no ComputeDomain: spec.cluster.computeDomain is false, or the "
                               "GPU kind has no multi-node NVLink", "-"),
                     ReasonDoc(R.COMPUTE_DOMAIN_READY, "True", "the ComputeDomain is Ready", "-"),
                     ReasonDoc(R.COMPUTE_DOMAIN_NOT_READY, "False", "the ComputeDomain is not Ready yet: the NVIDIA DRA "
                               "driver has not set it up", "check the NVIDIA DRA driver for GPUs (its compute-domain "
                               "daemon pods on the nodes) and `kubectl describe computedomain`"),
                     ReasonDoc(R.COMPUTE_DOMAIN_NOT_CONVERGING, "False", "the ComputeDomain, or a tray's entry in it, has "
                               "not become Ready within 600 s; the message names the trays (dra-driver-nvidia-gpu#1050: a "
                               "domain that lost a node entry never turns Ready)", "check the compute-domain daemon pods "
                               "on the named trays and `kubectl describe computedomain`"),
                     ReasonDoc(R.IMEX_NODE_NOT_READY, "False", "the ComputeDomain reports Ready but the IMEX daemon of a "
                               "tray the engines run on is NotReady: GPU memory imports fail there "
                               "(dra-driver-nvidia-gpu#1417)", "check that tray's compute-domain daemon pod"),
                     ReasonDoc(R.TRAY_REJOINING, "False", "a tray the engines run on is back after a reboot without its "
                               "NVLink clique label (or with another clique) yet, as the node watch sees it; the message "
                               "says how long", "wait; past 600 s check GPU "
                               "Feature Discovery and the fabric manager on the tray"),
                 )),
    ConditionDoc(C.KV_TRANSFER_READY, DEPLOYMENT, "The KV-transfer preflight (spec.kvTransfer.preflight; a serve/fetch "
                 "Job pair per decode endpoint) moved cache-shaped bytes through NIXL, verified them and measured the "
                 "path; status.kvTransfer has the numbers. Set for a valid plan only; with several decode endpoints "
                 "the worst pair decides and the message names it.", (
                     ReasonDoc(R.PREFLIGHT_DISABLED, "True", "spec.kvTransfer.preflight.enabled is false: not checked",
                               "-"),
                     ReasonDoc("PreflightPending", "Unknown", "the preflight Jobs have not been created or have not "
                               "reported yet", "wait; they run once the engines are placed (their GPUs must be free in "
                               "the same NVLink domain)"),
                     ReasonDoc("PreflightFailed", "False", "the preflight program reported an error (no connection, "
                               "NIXL/UCX failure, timeout), or its Job failed without a result",
                               "read the message and the fetch pod's log (`kubectl logs job/NAME-preflight-fetch-0`)"),
                     ReasonDoc("DataMismatch", "False", "bytes read from prefill differ from what it wrote: a wrong "
                               "KV layout or a broken path; never served", "report it with the message: it is a qdd "
                               "or driver bug; do not serve from this deployment"),
                     ReasonDoc("TCPFallback", "False", "UCX moved the bytes over TCP and no GPU path (cuda_ipc/NVLink, "
                               "RDMA): the silent fallback that serves at a fraction of the speed",
                               "check spec.kvTransfer.ucx (UCX_TLS), the ComputeDomain's IMEX channel and "
                               "UCX_CUDA_IPC_ENABLE_MNNVL; the message has a hint"),
                     ReasonDoc("TransferSlow", "False", "bulk bandwidth below spec.kvTransfer.preflight.minBulkGbps, or "
                               "one request above maxRequestMs", "check the path as for TCPFallback; on a slower "
                               "fabric by design, lower the thresholds"),
                     ReasonDoc("KVTransferVerified", "True", "verified; the message has the transports, GB/s and ms per "
                               "request", "-"),
                 )),
    ConditionDoc(C.PLACED, DEPLOYMENT, "The scheduler placed every gang (PodGroup) in one NVLink domain "
                 "(docs/placement.md). Set once there is a plan.", (
                     ReasonDoc("GangScheduled", "True", "every PodGroup is placed, each all-or-nothing in one NVLink "
                               "domain", "-"),
                     ReasonDoc(R.NOT_REQUIRED, "True", "no multi-pod group: every endpoint is one pod", "-"),
                     ReasonDoc("Scheduling", "Unknown", "the scheduler has not placed every PodGroup yet", "wait"),
                     ReasonDoc(R.INSUFFICIENT_NVLINK_DOMAIN_CAPACITY, "False", "the scheduler said a gang's pods "
                               "lack GPUs (Insufficient nvidia.com/gpu on the nodes that pass its selector and taint checks, no "
                               "pod affinity, DRA claim or CPU/memory cause beside it): the message has the GPUs and "
                               "pods asked and the free GPUs per domain; `Ready` says the same and a Warning event is "
                               "posted. Never before the scheduler has said so", "free GPUs in one domain, use fewer or smaller "
                               "endpoints, or set spec.cluster.sameNVLinkDomain: false (one domain per group); the "
                               "scheduler retries when capacity frees"),
                     ReasonDoc("Unschedulable", "False", "the scheduler marked a gang's pods Unschedulable for another "
                               "cause it named (node selector or affinity, pod affinity, taint, DRA claim, cordoned "
                               "nodes, CPU or memory; GPUs beside one of those): the message names the cause and quotes "
                               "the scheduler", "fix what the scheduler names (e.g. spec.cluster.nodeAffinity, the "
                               "engine pods' tolerations, the DRA driver); `Stalled` escalates it after "
                               "spec.rollout.progressDeadlineSeconds"),
                     ReasonDoc("NoGangScheduling", "True or False", "the cluster does not serve the Workload API "
                               "(scheduling.k8s.io/v1alpha2): pods are kept in one NVLink domain by pod affinity, one "
                               "at a time, and a partial placement is possible; False while an engine pod is "
                               "Unschedulable", "enable the Workload API and gang scheduling on the cluster for "
                               "all-or-nothing placement (docs/placement.md)"),
                 )),
    ConditionDoc(C.CANARY_PASSED, DEPLOYMENT, "The canary (spec.validation.canary; docs/canary.md): one deterministic "
                 "completion through the router before Ready and every periodSeconds, answered as the generation's "
                 "baseline says; status.canary has the baseline, the last check and its latency. Set for a valid plan "
                 "only.", (
                     ReasonDoc(R.CANARY_PASSED, "True", "the answer equals the baseline", "-"),
                     ReasonDoc(R.CANARY_PENDING, "Unknown", "waiting for every endpoint, the router, the preflight and "
                               "the registration of every endpoint with every router pod (the message says how many they list), or "
                               "for the answer of a check just sent", "wait; see `Ready` for what is not ready"),
                     _canary_mismatch("False"),
                     _canary_failed("False"),
                     ReasonDoc(R.CANARY_DISABLED, "True", "spec.validation.canary.enabled is false: Ready does not wait "
                               "for it", "-"),
                     ReasonDoc(R.CANARY_NO_ROUTER, "True", "spec.router.replicas is 0: no router to send it through",
                               "-"),
                 )),
    ConditionDoc(C.ACCURACY_GATE_PASSED, DEPLOYMENT, "The accuracy gate (spec.validation.accuracy; "
                 "docs/benchmark.md#accuracy-gate): after each change of generation, Ready waits for a GSM8K result of "
                 "that generation from the named QwenDisaggBenchmark at or above minScore; status.accuracy keeps the "
                 "score with the generation it measured. Absent without the gate.", (
                     ReasonDoc(R.ACCURACY_ABOVE_THRESHOLD, "True", "this generation scored at or above minScore; the "
                               "message has the score", "-"),
                     ReasonDoc(R.ACCURACY_PENDING, "Unknown", "no result for this generation yet: the benchmark runs "
                               "once the router serves it, every endpoint is registered and the canary passed (the "
                               "message says which), or it is running", "wait; see the benchmark's `Complete`"),
                     ReasonDoc(R.ACCURACY_BELOW_THRESHOLD, "False", _ACCURACY_BELOW, _ACCURACY_BELOW_DO),
                     ReasonDoc(R.ACCURACY_RUN_FAILED, "False", _ACCURACY_FAILED, _ACCURACY_FAILED_DO),
                     ReasonDoc(R.ACCURACY_BENCHMARK_INVALID, "False", _ACCURACY_INVALID, _ACCURACY_INVALID_DO),
                 )),
    ConditionDoc(C.DISRUPTION_PROTECTED, DEPLOYMENT, "Every role has a PodDisruptionBudget, so a node drain evicts at "
                 "most one endpoint of each at a time. Set once there is a plan.", (
                     ReasonDoc(R.DISRUPTION_BUDGETS, "True", "both roles have two or more endpoints and a budget", "-"),
                     ReasonDoc(R.SINGLE_ENDPOINT_ROLE, "False", "a role has one endpoint: no budget protects it (one "
                               "would block every drain of its nodes), so a drain stops that role until the endpoint "
                               "is recreated elsewhere", "run two or more endpoints of the role to serve through "
                               "drains"),
                 )),
    *(ConditionDoc(t, DEPLOYMENT, means + _SERVING, (_no_metrics, _not_allowed, *reasons)) for t, means, reasons in (
        (C.KV_TRANSFER_FAILING, "NIXL KV transfers failed (vllm:nixl_num_failed_transfers on decode, which counts "
         "failed handshakes and notifications too), more than spec.observe.thresholds.failedTransfers in "
         "spec.observe.windowSeconds; clears once a whole window passes without one.", (
             ReasonDoc(R.NO_FAILED_TRANSFERS, "False", "no failure in the window; the message counts the transfers "
                       "done", "-"),
             ReasonDoc(R.KV_TRANSFERS_FAILING, "True", "transfers failed; the message names the pods and engines and "
                       "counts. With kv_load_failure_policy fail (qdd's) each is a request answered HTTP 500; a "
                       "mismatch between the roles (KV cache dtype, GDN state dtype, block size, model), an "
                       "unreachable side channel or a restarted prefill are the usual causes",
                       "check that both roles run one generation and the KV-transfer preflight; read the decode "
                       "pods' logs (NIXL); `qdd plan` shows the dtypes both roles run (docs/observability.md)"),
         )),
        (C.KV_LEASE_EXPIRING, "Prefill freed a request's KV blocks before decode read them "
         "(vllm:nixl_num_kv_expired_reqs, vllm:nixl_num_notifications_after_expiry on prefill), more than "
         "spec.observe.thresholds.expiredLeases in spec.observe.windowSeconds; clears once a whole window passes "
         "without one.", (
             ReasonDoc(R.LEASES_HELD, "False", "no lease expired in the window", "-"),
             ReasonDoc(R.KV_LEASE_EXPIRED, "True", "leases expired: decode read (or would read) freed blocks, "
                       "which answers HTTP 200 with garbage (vLLM 0.33 only logs and counts it)",
                       "raise spec.kvTransfer.leaseSeconds above decode's read delay; find why decode reads late "
                       "(RequestsQueueing or KVCacheSaturated on decode: add decode endpoints)"),
         )),
        (C.KV_CACHE_SATURATED, "An engine's KV cache was at or above spec.observe.thresholds.kvCacheUsage "
         "(vllm:kv_cache_usage_perc) at every read for a whole spec.observe.windowSeconds (KVCacheFull, held until "
         "every read of a whole window is below), or engines preempted more requests than "
         "spec.observe.thresholds.preemptions in the window (vllm:num_preemptions; clears once a whole window "
         "passes without one).", (
             ReasonDoc(R.KV_CACHE_AVAILABLE, "False", "room in every cache; the message has the highest usage", "-"),
             ReasonDoc(R.KV_CACHE_FULL, "True", "a cache stayed full: new requests wait, running ones get "
                       "preempted", "add endpoints of that role, lower spec.workload.concurrency or give the cache "
                       "more memory (tuning.gpuMemoryUtilization)"),
             ReasonDoc(R.PREEMPTING, "True", "requests were preempted: each recomputes its prefill on the engine "
                       "that preempted it", "as KVCacheFull"),
         )),
        (C.REQUESTS_QUEUEING, "An engine's queue (vllm:num_requests_waiting) was above "
         "spec.observe.thresholds.waitingPerEngine at every read for a whole spec.observe.windowSeconds, while "
         "/health stays green; held until every read of a whole window is at or below it.", (
             ReasonDoc(R.QUEUE_WITHIN_BOUND, "False", "no queue stayed above the bound for a whole window", "-"),
             ReasonDoc(R.QUEUE_BEYOND_BOUND, "True", "load beyond the role's capacity; the message names the "
                       "engines", "add endpoints of that role (prefill: `kubectl scale qdd/NAME --replicas=N`) or "
                       "lower the offered load"),
         )),
        (C.ENGINE_STALLED, "An engine core (one DP rank) with requests running at every read made no token "
         "(vllm:prompt_tokens + vllm:generation_tokens unchanged) for spec.observe.thresholds.stallSeconds; the "
         "message says whether other engines of its role made tokens meanwhile (evidence, not required: a single "
         "engine, or a whole DP/EP group hung together, is stalled too). True while the stall lasts; cleared by "
         "the first read with a token or no request running.", (
             ReasonDoc(R.ALL_ENGINES_PROGRESSING, "False", "every engine with requests running made tokens", "-"),
             ReasonDoc(R.ENGINE_NOT_PROGRESSING, "True", "a hung rank: it holds its requests and, in a DP/EP group, "
                       "its peers' collectives", "read that pod's log; deleting the pod makes qdd recreate its "
                       "whole group"),
         )),
    )),
    ConditionDoc(C.SLO_ATTAINABLE, DEPLOYMENT, "spec.autoscaling (Advise or On): whether the latency targets "
                 "(targets.ttftMs, tpotMs at targets.percentile) can be met within the endpoint bounds and gpuBudget at "
                 "the load the autoscaler sizes for; status.autoscaling has the decision, its inputs and why "
                 "(docs/autoscaling.md). A Warning event when it turns False, a Normal one when True again. Absent "
                 "without spec.autoscaling or with mode Off.", (
                     ReasonDoc(R.SLO_WITHIN_BUDGET, "True", "the endpoints the SLO needs fit the bounds and the budget",
                               "-"),
                     ReasonDoc(R.GPU_BUDGET_REACHED, "False", "the SLO needs more GPUs than gpuBudget: atBudget "
                               "Rebalance gives them to the role that misses by more, Hold keeps the counts",
                               "raise spec.autoscaling.gpuBudget, or accept the latency; status.autoscaling.<role>."
                               "needed says how many endpoints each role needs"),
                     ReasonDoc(R.MAX_ENDPOINTS_REACHED, "False", "a role needs more endpoints than its maxEndpoints",
                               "raise spec.autoscaling.<role>.maxEndpoints (the budget permitting)"),
                     ReasonDoc(R.NO_PERFORMANCE_PROFILE, "Unknown", "no usable performance profile (ConfigMap "
                               "<name>-perf-profile, key profile.json): nothing is decided, no count changes",
                               "`qdd perf profile -f CR.yaml -o configmap | kubectl apply -f -` "
                               "(docs/performance-model.md); the message says what is wrong with one that exists"),
                     ReasonDoc(R.NO_DECISION_YET, "Unknown", "no decision period has passed since the operator started, "
                               "or the engines' metrics have not been read yet", "wait one periodSeconds"),
                 )),
    ConditionDoc(B.COMPLETE, BENCHMARK, "Every run of the benchmark (sweep points, accuracy repeats) finished and its "
                 "result is recorded (status, ConfigMap `NAME-results`).", (
                     ReasonDoc("Completed", "True", "done; the message counts the sweep points and the GSM8K mean", "-"),
                     ReasonDoc("Running", "False", "a Job is running (the message names the step)", "wait"),
                     ReasonDoc("WaitingForDeployment", "False", "the deployment is missing or not Ready (the "
                               "message quotes its Ready reason: e.g. how many endpoints the router lists); the "
                               "deployment's accuracy gate waits instead until the deployment serves its current "
                               "generation with only the gate pending", "see the deployment's `Ready`"),
                     ReasonDoc("JobFailed", "False", "see `Failed`", "see `Failed`"),
                     ReasonDoc(R.INVALID_SPEC, "False", "see `Failed`", "see `Failed`"),
                 )),
    ConditionDoc(B.FAILED, BENCHMARK, "A run failed; the benchmark stops.", (
        ReasonDoc("JobFailed", "True", "a benchmark Job failed or its result could not be read",
                  "`kubectl logs` the Job the message names; fix the cause, then delete and re-create the benchmark "
                  "(an edit that changes a step's Job re-runs that step and the ones after it)"),
        ReasonDoc(R.INVALID_SPEC, "True", "the benchmark's spec, or its deployment's, is invalid",
                  "fix the fields the message names"),
        ReasonDoc("Completed", "False", "finished without failure", "-"),
        ReasonDoc("Running", "False", "as `Complete`", "-"),
        ReasonDoc("WaitingForDeployment", "False", "as `Complete`", "-"),
    )),
    ConditionDoc(B.ACCURACY_PASSED, BENCHMARK, "The mean GSM8K accuracy reached spec.accuracy.passThreshold.", (
        ReasonDoc("AboveThreshold", "True", "at or above the threshold; the message has the mean and the threshold",
                  "-"),
        ReasonDoc("BelowThreshold", "False", "below the threshold: the deployment answers worse than its gate",
                  "compare with the seed's (docs/benchmark.md): check the model, its revision and the engine flags "
                  "(`qdd plan`)"),
        ReasonDoc("RequestsFailed", "False", "some GSM8K requests got no answer (counted as wrong)",
                  "check the router and the engines under load; the message counts the failures"),
        ReasonDoc("NotMeasured", "Unknown", "the GSM8K run has not reported yet", "wait"),
        ReasonDoc("NotRequested", "Unknown", "spec.accuracy is not set", "-"),
    )),
)
"""Per resource kind, in the order of qdd.api.conditions.TYPES and qdd.api.benchmark.CONDITION_TYPES."""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown() -> str:
    """docs/conditions.md below its header: one section per kind, one table per condition type."""
    out: list[str] = []
    for kind in (DEPLOYMENT, BENCHMARK):
        docs = [c for c in CONDITIONS if c.kind == kind]
        out += [f"## {kind}", "", "Types: " + ", ".join(f"[`{c.type}`](#{c.type.lower()})" for c in docs) + ".", ""]
        for c in docs:
            out += [f"### {c.type}", "", c.means, "", "| reason | status | what it means | what to do |",
                    "|---|---|---|---|"]
            out += [f"| `{r.reason}` | {r.status} | {_cell(r.means)} | {_cell(r.action)} |" for r in c.reasons]
            out.append("")
    return "\n".join(out)
