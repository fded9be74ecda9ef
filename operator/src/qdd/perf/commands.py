"""The CLI's performance commands (``qdd plan --predict``, ``qdd plan --slo``, ``qdd perf
profile``): argument handling and output; the work is in predict, sizing and profiling.

Each raises :class:`CommandError` with one line for the user (no traceback): the library absent,
the model or GPU not in its database, a bad --slo, a rate the topology cannot serve.
"""

from __future__ import annotations

import json
import math
from typing import Any

import yaml

from ..api.types import MAX_CONCURRENCY
from ..plan.types import Plan
from .aic import NotInDatabase, PerfModelUnavailable, open_database


class CommandError(Exception):
    """One line for the user."""


MAX_RATE = 1e6
"""Requests/s one deployment could be asked to serve: 64 prefill endpoints far below it."""
MAX_GPU_BUDGET = 100_000
"""As spec.autoscaling.gpuBudget."""


def check_inputs(plans: list[Plan], concurrency: int | None = None, rate: float | None = None,
                 accepted: float | None = None, gpu_budget: int | None = None) -> None:
    """The numbers of the command line, before any of them reaches the model: CommandError naming
    the flag and its range. Before (round 4): --rate inf ended in a traceback (OverflowError),
    --rate nan in "cannot convert float NaN to integer", --gpu-budget 10**9 in a loop of half a
    billion steps, a negative --concurrency or --mtp-accepted went into the model."""
    if concurrency is not None and not 1 <= concurrency <= MAX_CONCURRENCY:
        raise CommandError(f"--concurrency: {concurrency} is not between 1 and {MAX_CONCURRENCY} requests in flight")
    if rate is not None and not (math.isfinite(rate) and 0 < rate <= MAX_RATE):
        raise CommandError(f"--rate: {rate:g} is not a request rate above 0 and at most {MAX_RATE:g} requests/s")
    if gpu_budget is not None and not 1 <= gpu_budget <= MAX_GPU_BUDGET:
        raise CommandError(f"--gpu-budget: {gpu_budget} is not between 1 and {MAX_GPU_BUDGET} GPUs")
    if accepted is not None:
        most = max((p.spec.speculative.num_speculative_tokens for p in plans if p.spec.speculative is not None),
                   default=0)
        if not (math.isfinite(accepted) and 0 <= accepted <= most):
            raise CommandError(f"--mtp-accepted: {accepted:g} is not a mean of accepted draft tokens per step between "
                               f"0 and spec.speculative.numSpeculativeTokens ({most})")


def _db(plan: Plan, perf_model: str | None) -> Any:
    try:
        return open_database(perf_model or plan.spec.model.name, plan.gpu.name)
    except (PerfModelUnavailable, NotInDatabase) as e:
        raise CommandError(str(e)) from None


def predictions(plans: list[Plan], perf_model: str | None, concurrency: int | None, rate: float | None,
                accepted: float | None) -> list[dict[str, Any]]:
    from .predict import predict

    check_inputs(plans, concurrency, rate, accepted)
    out = []
    for plan in plans:
        try:
            out.append(predict(plan, _db(plan, perf_model), concurrency, rate, accepted))
        except NotInDatabase as e:
            raise CommandError(f"{plan.namespace}/{plan.name}: {e}") from None
        except ValueError as e:
            raise CommandError(f"{plan.namespace}/{plan.name}: {e}") from None
    return out


def recommend(base_doc: dict[str, Any], plan: Plan, slo_text: str, rate: float | None, gpu_budget: int | None,
              perf_model: str | None, accepted: float | None, name: str | None) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(explanation for people, the recommended QwenDisaggDeployment, the same as JSON-able data)."""
    from .sizing import deployment, parse_slo, size

    check_inputs([plan], rate=rate, accepted=accepted, gpu_budget=gpu_budget)
    try:
        slo = parse_slo(slo_text)
        opts = size(base_doc, _db(plan, perf_model), slo, rate, gpu_budget, accepted)
    except ValueError as e:
        raise CommandError(str(e)) from None
    ok = [o for o in opts if o.refused is None]
    goal = f"{rate:g} req/s" if rate is not None else f"the most req/s on at most {gpu_budget} GPUs"
    if not ok:
        why = "; ".join(f"{o.prefill}+{o.decode}: {o.refused}" for o in opts)
        raise CommandError(f"no layout meets TTFT {slo.ttft_ms:g} ms and TPOT {slo.tpot_ms:g} ms at {goal}: {why}")
    best = ok[0]
    dep = deployment(base_doc, best, name or f"{plan.name}-slo")
    lines = [f"SLO: TTFT <= {slo.ttft_ms:g} ms, TPOT <= {slo.tpot_ms:g} ms, {goal} "
             f"(mean ISL {best.profile.isl if best.profile else '?'} / OSL {best.profile.osl if best.profile else '?'}; "
             f"{best.profile.database if best.profile else ''})",
             "  #  LAYOUT                GPUS  P:D    PREFILL REQ/S/EP  DECODE REQS/EP  DECODE REQ/S/EP  SERVES REQ/S  "
             "TTFT MS  TPOT MS  WHY NOT"]
    for i, o in enumerate(ok):
        lines.append(f"  {i + 1:<2} {o.label:<21} {o.gpus:<5} {o.prefill_endpoints}:{o.decode_endpoints:<4} "
                     f"{o.prefill_rate:<17.2f} {o.decode_concurrency:<15,} {o.decode_rate:<16.2f} {o.served:<13.2f} "
                     f"{o.ttft_ms:<8,.0f} {o.tpot_ms:<8.1f} {o.lost or 'chosen'}")
    for o in opts:
        if o.refused is not None:
            lines.append(f"  -  {o.prefill} + {o.decode}: {o.refused}")
    lines.append(f"Chosen: {best.label} on {best.gpus} GPUs, {best.concurrency:,} requests in flight "
                 f"(spec.workload.concurrency); P:D = {best.prefill_endpoints}:{best.decode_endpoints} because one "
                 f"{best.prefill} takes {best.prefill_rate:.2f} req/s under the TTFT target and one {best.decode} "
                 f"completes {best.decode_rate:.2f} req/s under the TPOT target")
    data = {"slo": {"ttftMs": slo.ttft_ms, "tpotMs": slo.tpot_ms}, "rate": rate, "gpuBudget": gpu_budget,
            "options": [{"layout": o.label, "prefill": o.prefill, "decode": o.decode, "gpus": o.gpus if o.prefill_endpoints else None,
                         "prefillEndpoints": o.prefill_endpoints, "decodeEndpoints": o.decode_endpoints,
                         "prefillRequestsPerSecondPerEndpoint": round(o.prefill_rate, 3),
                         "decodeConcurrencyPerEndpoint": o.decode_concurrency,
                         "decodeRequestsPerSecondPerEndpoint": round(o.decode_rate, 3),
                         "servesRequestsPerSecond": round(o.served, 3), "ttftMs": round(o.ttft_ms, 1),
                         "tpotMs": round(o.tpot_ms, 2), "concurrency": o.concurrency, "lost": o.lost,
                         "refused": o.refused} for o in opts],
            "deployment": dep}
    return "\n".join(lines) + "\n", dep, data


def profile_document(plan: Plan, perf_model: str | None, accepted: float | None, results: list[tuple[str, str]],
                     output: str) -> str:
    """``qdd perf profile``: the profile (JSON) or its ConfigMap (YAML), calibrated by ``results``
    ((source, results.json text) pairs) when given."""
    from .measured import MeasuredError, measured_points
    from .profile import calibrate
    from .profiling import build_profile, configmap

    if plan.spec.speculative is not None and accepted is None:
        raise CommandError("spec.speculative: give --mtp-accepted N (mean accepted draft tokens per step)")
    check_inputs([plan], accepted=accepted)
    prof = build_profile(plan, _db(plan, perf_model), accepted)
    measured = []
    for src, text in results:
        try:
            dep, pts = measured_points(text, src)
        except MeasuredError as e:
            raise CommandError(str(e)) from None
        if dep and dep != plan.name:
            raise CommandError(f"{src}: measured on deployment {dep}, not {plan.name}: calibrate a profile with its "
                               "own deployment's benchmarks")
        measured += pts
    if measured:
        prof = calibrate(prof, measured)
    if output == "configmap":
        return yaml.safe_dump(configmap(prof, plan.namespace), sort_keys=False, width=200)
    return prof.to_json() + "\n"


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"
