"""Evidence behind qdd's P/D refusals: each input qdd refuses is run once on the real CPU pair with
the guard bypassed (the rendered container edited after qdd rendered it), and what the engines did
is recorded — start failure, HTTP error, hang, wrong tokens, or nothing visible.

Run by ``make real-engine-guardrails`` (bench/real_engine_guardrails.py), which writes
bench/results/real-engine-guardrails.json; docs/real-engines.md's table is made from that file
(tests/unit/test_real_engine_docs.py checks they agree). One pair at a time (≈ 8 GB).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .engines import post_json
from .pair import Pair, nixl_stats, run_in_venv, start_pair, start_router

PROMPTS = ["The prefill engine computes", "A router sends each request", "Gated delta networks keep a recurrent state",
           "the quick brown fox jumps over"]
MAX_TOKENS = 16
REQUEST_TIMEOUT_S = 60.0
TOLERANCE_FACTOR = 2.0
"""As tests/realengine/test_pd.py: a token is right when its fp32 logit is within 2 × the measured
bf16 deviation of the fp32 maximum."""
ERROR_LINE = re.compile(r"\b[A-Z]\w*(Error|Exception): ")
"""An exception's message line (``RuntimeError: NIXL compatibility hash mismatch…``)."""
LOG_PREFIX = re.compile(r"^\(\w+ pid=\d+\) (ERROR|WARNING|INFO) \S+ \S+ \[[^\]]+\] ")


def _flag_value(args: list[str], flag: str, value: str) -> None:
    args[args.index(flag) + 1] = value


def _kv_config(container: dict[str, Any], **extra: Any) -> None:
    args = container["args"]
    i = args.index("--kv-transfer-config")
    kv = json.loads(args[i + 1])
    kv["kv_connector_extra_config"].update(extra)
    args[i + 1] = json.dumps(kv, separators=(",", ":"), sort_keys=True)


def conv_layout_sd_on_decode(role: str, c: dict[str, Any]) -> None:
    """SD explicitly: unset is no bypass on the CPU build, whose platform picks DS by itself when a
    NIXL connector is configured (vllm/platforms/cpu.py); on CUDA, unset means SD."""
    if role == "decode":
        for e in c["env"]:
            if e["name"] == "VLLM_SSM_CONV_STATE_LAYOUT":
                e["value"] = "SD"


def kv_cache_fp8_on_decode(role: str, c: dict[str, Any]) -> None:
    if role == "decode":
        _flag_value(c["args"], "--kv-cache-dtype", "fp8")


def mamba_fp32_on_decode(role: str, c: dict[str, Any]) -> None:
    if role == "decode":
        _flag_value(c["args"], "--mamba-ssm-cache-dtype", "float32")


def prefix_caching_on(role: str, c: dict[str, Any]) -> None:
    c["args"] = ["--enable-prefix-caching" if a == "--no-enable-prefix-caching" else a for a in c["args"]]


LEASE_S = 2
LATE_S = 8


def lease_2s(role: str, c: dict[str, Any]) -> None:
    _kv_config(c, kv_lease_duration=LEASE_S)


@dataclass(frozen=True)
class Case:
    name: str
    refused_by: str
    """The qdd rule or owned setting that refuses the input."""
    bypass: str
    edit: Callable[[str, dict[str, Any]], None] | None
    drive: str
    """router: the prompts through vllm-router (twice for prefix caching); late: prefill directly,
    decode after LATE_S; self: decode told to read from its own side channel; unroutable: decode
    told to read from 192.0.2.1 (TEST-NET-1, routed nowhere)."""


CASES = [
    Case("baseline", "(nothing: as qdd renders it)", "none", None, "router"),
    Case("conv-state layout not DS on decode", "VLLM_SSM_CONV_STATE_LAYOUT is owned (DS on every engine pod)",
         "decode VLLM_SSM_CONV_STATE_LAYOUT=SD (CUDA vLLM's default), prefill DS", conv_layout_sd_on_decode, "router"),
    Case("KV cache dtype mismatch", "rule: prefill and decode kvCacheDtype must be equal",
         "decode --kv-cache-dtype fp8, prefill bfloat16", kv_cache_fp8_on_decode, "router"),
    Case("GDN state dtype mismatch", "rule: prefill and decode mambaSsmCacheDtype must be equal",
         "decode --mamba-ssm-cache-dtype float32, prefill bfloat16", mamba_fp32_on_decode, "router"),
    Case("prefix caching on", "rule: prefixCaching must be off (both roles)",
         "--enable-prefix-caching on both engines; every prompt sent twice", prefix_caching_on, "router"),
    Case("side channel host is decode itself", "rule: sideChannelHost must not be 0.0.0.0 or loopback",
         "decode given remote_host 127.0.0.1 and its own side-channel port (what a loopback sideChannelHost "
         "advertises in a pod)", None, "self"),
    Case("side channel host unreachable", "rule: sideChannelHost must be an address peers reach",
         "decode given remote_host 192.0.2.1 (TEST-NET-1)", None, "unroutable"),
    Case("expired lease", "spec.kvTransfer.leaseSeconds >= 30 (CEL; default 120)",
         f"kv_lease_duration {LEASE_S} s on both, decode asked {LATE_S} s after prefill answered", lease_2s, "late"),
]


def _body(prompt: str, **extra: Any) -> dict[str, Any]:
    return {"model": "tiny-qwen35-moe", "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0,
            "ignore_eos": True, "return_token_ids": True, **extra}


def _direct(pair: Pair, prompt: str, rewrite: Callable[[dict[str, Any]], None], delay: float) -> tuple[int, Any]:
    """Steps 1–3 of the P/D protocol by hand (docs/facts/pd-protocol.md), with the prefill's answer edited."""
    status, body = post_json(pair.prefill.base + "/v1/completions",
                             _body(prompt, max_tokens=1, kv_transfer_params={"do_remote_decode": True,
                                                                             "do_remote_prefill": False}))
    if status != 200:
        return status, body
    kv = dict(body["kv_transfer_params"])
    rewrite(kv)
    time.sleep(delay)
    return post_json(pair.decode.base + "/v1/completions", _body(prompt, kv_transfer_params=kv),
                     timeout=REQUEST_TIMEOUT_S)


def _requests(case: Case, pair: Pair, logs: Path) -> list[tuple[str, int, Any, float]]:
    out = []
    if case.drive == "router":
        router, _ = start_router(pair, logs)
        with router:
            for prompt in PROMPTS * (2 if "prefix" in case.name else 1):
                t0 = time.monotonic()
                try:
                    status, body = post_json(router.base + "/v1/completions", _body(prompt), timeout=REQUEST_TIMEOUT_S)
                except OSError as e:
                    status, body = 0, f"no answer: {e!r}"
                out.append((prompt, status, body, time.monotonic() - t0))
        return out
    decode_port = int(pair.decode.env["VLLM_NIXL_SIDE_CHANNEL_PORT"])
    rewrite: Callable[[dict[str, Any]], None] = {
        "self": lambda kv: kv.update(remote_host="127.0.0.1", remote_port=decode_port),
        "unroutable": lambda kv: kv.update(remote_host="192.0.2.1"),
        "late": lambda kv: None,
    }[case.drive]
    for prompt in PROMPTS[:2]:
        t0 = time.monotonic()
        try:
            status, body = _direct(pair, prompt, rewrite, LATE_S if case.drive == "late" else 0)
        except OSError as e:
            status, body = 0, f"no answer in {REQUEST_TIMEOUT_S:.0f} s: {e!r}"
        out.append((prompt, status, body, time.monotonic() - t0))
    return out


def _judge(venv: Path, model: Path, answers: list[tuple[str, int, Any, float]]) -> dict[str, Any]:
    ok = [a for a in answers if a[1] == 200 and isinstance(a[2], dict)]
    cases = [{"prompt_ids": a[2]["choices"][0]["prompt_token_ids"], "completion_ids": a[2]["choices"][0]["token_ids"]}
             for a in ok]
    wrong = 0
    if cases:
        ref = json.loads(run_in_venv(venv, "reference.py", stdin=json.dumps({"model": str(model), "cases": cases})))
        wrong = sum(any(s["gap"] > TOLERANCE_FACTOR * s["bf16_dev"] for s in c["steps"]) for c in ref["cases"])
    return {"requests": len(answers), "http_200": len(ok), "wrong_tokens": wrong,
            "statuses": sorted({a[1] for a in answers}), "statuses_in_order": [a[1] for a in answers], "max_latency_s": round(max(a[3] for a in answers), 2),
            "first_error_body": next((str(a[2])[:300] for a in answers if a[1] != 200), None)}


def _log_errors(pair: Pair) -> dict[str, str | None]:
    """Each engine's first specific exception line (the root cause; vLLM logs wrappers after it)."""
    out: dict[str, str | None] = {}
    for e in (pair.prefill, pair.decode):
        lines = [LOG_PREFIX.sub("", ln.strip()) for ln in e.log_tail(2_000_000).splitlines() if ERROR_LINE.search(ln)]
        specific = [ln for ln in lines if not any(g in ln for g in GENERIC)]
        out[e.name] = (specific or lines or [None])[0]
        if out[e.name]:
            out[e.name] = str(out[e.name])[:300]
    return out


def run_case(case: Case, venv: Path, model: Path, logs: Path, pair: Pair | None = None) -> dict[str, Any]:
    """Drive ``pair`` (or a pair started with the case's bypass, stopped after); the record of what happened."""
    logs.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {"case": case.name, "refused_by": case.refused_by, "bypass": case.bypass}
    own = pair is None
    if pair is None:
        try:
            pair = start_pair(venv, model, logs, edit=case.edit)
        except RuntimeError as e:
            record.update(outcome="engine did not start", detail=_last_error(str(e)))
            return record
    try:
        before = nixl_stats(pair.decode.metrics())
        answers = _requests(case, pair, logs)
        time.sleep(2)  # let decode's counters settle
        record.update(_judge(venv, model, answers))
        alive = {"prefill": pair.prefill.proc.poll() is None, "decode": pair.decode.proc.poll() is None}
        record["engines_alive"] = alive
        if alive["decode"]:
            after = nixl_stats(pair.decode.metrics())
            record["decode_nixl_delta"] = {k: after[k] - before[k] for k in after}
        if alive["prefill"]:
            record["prefill_expired_total"] = nixl_stats(pair.prefill.metrics())["expired"]
        record["log_errors"] = _log_errors(pair)
    finally:
        if own:
            pair.stop()
    record["outcome"] = outcome(record)
    return record


def run_all(venv: Path, model: Path, logs: Path, names: list[str] | None = None) -> list[dict[str, Any]]:
    """Every case (or those named), each on a pair of its own, one pair at a time. Never two cases
    on one pair: decode keeps the NIXL handshake of a prefill engine id for its lifetime, so after
    one good request a later remote_host is never dialled again (seen here: the side-channel cases
    run after the baseline on the same pair read from the real prefill and looked fine)."""
    return [run_case(c, venv, model, logs / re.sub(r"[^a-z0-9]+", "-", c.name.lower()))
            for c in CASES if names is None or c.name in names]


GENERIC = ("See root cause", "initialization failed", "Traceback", "Found ulimit")
"""Lines that match ERROR_LINE but say nothing about the case: wrappers of the root cause, and the
start-up warning about the open-file limit (it quotes "OSError: [Errno 24]")."""


def _last_error(text: str) -> str:
    """The most telling error line of an engine's log tail: the last specific one (vLLM wraps the
    root cause in generic "initialization failed" lines), else the last line."""
    lines = [LOG_PREFIX.sub("", ln.strip()) for ln in text.splitlines() if ERROR_LINE.search(ln)]
    specific = [ln for ln in lines if not any(g in ln for g in GENERIC)]
    return ((specific or lines or text.strip().splitlines())[-1])[:400]


def outcome(r: dict[str, Any]) -> str:
    """One phrase for the table: what a client would have seen."""
    if r.get("outcome"):
        return str(r["outcome"])
    parts = []
    if r["http_200"] < r["requests"]:
        parts.append(f"{r['requests'] - r['http_200']}/{r['requests']} requests failed (HTTP {r['statuses']})")
    if r["wrong_tokens"]:
        parts.append(f"{r['wrong_tokens']}/{r['http_200']} HTTP 200 answers with wrong tokens")
    if not all(r["engines_alive"].values()):
        parts.append("engine died: " + ", ".join(k for k, v in r["engines_alive"].items() if not v))
    return "; ".join(parts) or f"all {r['requests']} right (nothing visible)"


DOCS_BEGIN, DOCS_END = "<!-- guardrails:begin -->", "<!-- guardrails:end -->"


def table(records: list[dict[str, Any]]) -> str:
    """The markdown table of docs/real-engines.md, from bench/results/real-engine-guardrails.json."""
    rows = ["| input qdd refuses | refused by | bypass on the real pair | what the engines did | decode NIXL (ok / failed) |",
            "| --- | --- | --- | --- | --- |"]
    for r in records:
        d = r.get("decode_nixl_delta") or {}
        nixl = f"{d.get('transfers', 0):.0f} / {d.get('failed_transfers', 0):.0f}" if d else "—"
        seen = r["outcome"]
        if r.get("detail"):
            seen += f": `{r['detail'][:160]}`"
        else:
            causes = [c for c in ((r.get("log_errors") or {}).get(k) for k in ("decode", "prefill"))
                      if c and not any(g in c for g in GENERIC)]
            cause = causes[0] if causes else None
            if cause:
                seen += f"; engine log: `{cause[:200]}`"
        if r.get("max_latency_s") is not None:
            seen += f" (slowest answer {r['max_latency_s']} s)"
        cells = [r["case"], r["refused_by"], r["bypass"], seen, nixl]
        rows.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    return "\n".join(rows)


def write_docs(doc: Path, records: list[dict[str, Any]]) -> None:
    text = doc.read_text()
    head, rest = text.split(DOCS_BEGIN, 1)
    _, tail = rest.split(DOCS_END, 1)
    doc.write_text(f"{head}{DOCS_BEGIN}\n{table(records)}\n{DOCS_END}{tail}")
