"""qdd's rendered P/D configuration served by real vLLM engines (CPU build), through the real
vllm-router, with real NIXL transfer of KV and Gated DeltaNet state between the two engines.

The completions are compared with a transformers forward pass of the same weights
(tests/realengine/reference.py): the first token exactly wherever the fp32 reference is decisive
(top-2 margin above the bf16 tolerance), every token within the bf16 tolerance measured on the same
sequence; and the decode engine's own NIXL metrics must count one successful transfer per request
and no failed one.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import threading

from qdd.api import parse_resource
from qdd.bench import parse_serve_result
from qdd.canary import CanaryState, complete, request_body
from qdd.canary.judge import answer_hash
from qdd.controller.canary import CanaryChecker
from qdd.plan import build_plan

from .deployment import SERVED, tiny_cr
from .engines import post_json
from .pair import generated_tokens, nixl_stats, run_in_venv

PROMPTS = [
    "The prefill engine computes",
    "A router sends each request",
    "Gated delta networks keep a recurrent state",
    "Kubernetes schedules pods onto nodes",
    "Numbers: 0 1 2 3 4 5",
    "the quick brown fox jumps over",
    "full attention layers keep keys and values",
    "an operator turns one resource into many objects",
]
MAX_TOKENS = 16
TOLERANCE_FACTOR = 2.0
"""A token is within bf16 tolerance when its fp32 logit is within 2 × (the largest |bf16 − fp32| logit
difference at that position) of the fp32 maximum: bf16 rounding can move either of the two logits by
up to that deviation."""

EXPECTED_SUBSTITUTIONS = {
    "command", "argv[0] (model)", "--port", "--kv-transfer-config kv_buffer_device",
    "env VLLM_NIXL_SIDE_CHANNEL_HOST", "env VLLM_NIXL_SIDE_CHANNEL_PORT", "env VLLM_CPU_KVCACHE_SPACE",
    "env VLLM_CPU_OMP_THREADS_BIND", "env PYTHONPATH", "env HF_HUB_OFFLINE", "env TRANSFORMERS_OFFLINE",
}


def _complete(router, prompt: str) -> dict:
    status, _, raw = router.post("/v1/completions", {
        "model": "tiny-qwen35-moe", "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0,
        "ignore_eos": True, "return_token_ids": True})
    assert status == 200, raw[:2000]
    return json.loads(raw)


def test_engines_run_exactly_what_qdd_rendered_but_the_listed_substitutions(pair):
    for role, engine in (("prefill", pair.prefill), ("decode", pair.decode)):
        subs = pair.substitutions[role]
        assert {s.what for s in subs} == EXPECTED_SUBSTITUTIONS
        rendered = next(o for o in pair.objects if o["kind"] == "StatefulSet"
                        and o["metadata"]["labels"]["qdd.dev/role"] == role)
        args = rendered["spec"]["template"]["spec"]["containers"][0]["args"]
        ran = engine.argv[2:]
        changed = [i for i, (a, b) in enumerate(zip(args, ran, strict=True)) if a != b]
        assert [args[i - 1] if i else "(model)" for i in changed] == ["(model)", "--port", "--kv-transfer-config"]
        kv_r, kv_ran = json.loads(args[changed[2]]), json.loads(ran[changed[2]])
        assert {k for k in kv_r if kv_r[k] != kv_ran[k]} == {"kv_buffer_device"}
        assert kv_ran["kv_role"] == ("kv_producer" if role == "prefill" else "kv_consumer")
        assert engine.env["VLLM_SSM_CONV_STATE_LAYOUT"] == "DS"


def test_completion_through_the_router_equals_the_reference_and_moves_state_over_nixl(pair, router, cpu_venv,
                                                                                     checkpoint):
    r, _ = router
    before = nixl_stats(pair.decode.metrics())
    outs = [_complete(r, p) for p in PROMPTS]
    after = nixl_stats(pair.decode.metrics())
    cases = [{"prompt_ids": o["choices"][0]["prompt_token_ids"], "completion_ids": o["choices"][0]["token_ids"]}
             for o in outs]
    assert all(len(c["completion_ids"]) == MAX_TOKENS for c in cases)
    ref = json.loads(run_in_venv(cpu_venv, "reference.py", stdin=json.dumps({"model": str(checkpoint),
                                                                              "cases": cases})))["cases"]
    decisive = 0
    for prompt, c, rc in zip(PROMPTS, cases, ref, strict=True):
        first = rc["steps"][0]
        if first["margin"] > TOLERANCE_FACTOR * first["bf16_dev"]:
            decisive += 1
            assert c["completion_ids"][0] == first["argmax"], (prompt, first)
        for t, s in enumerate(rc["steps"]):
            assert s["gap"] <= TOLERANCE_FACTOR * s["bf16_dev"], (prompt, t, s)
        assert len(set(c["completion_ids"])) > 2, f"degenerate output for {prompt!r}: {c['completion_ids']}"
    assert decisive >= len(PROMPTS) // 2, [rc["steps"][0] for rc in ref]
    # One READ of KV + GDN state per request, none failed (decode's own counters).
    assert after["transfers"] - before["transfers"] == len(PROMPTS), (before, after)
    assert after["bytes"] > before["bytes"]
    assert after["failed_transfers"] == 0 and after["failed_notifications"] == 0, after


def test_prefill_hands_decode_its_rendered_side_channel_and_one_block_list_per_group(pair):
    """Step 2 of the P/D protocol (docs/facts/pd-protocol.md), asked of the prefill engine directly."""
    s0 = post_json(pair.prefill.base + "/v1/completions", {
        "model": "tiny-qwen35-moe", "prompt": PROMPTS[0], "max_tokens": 1, "temperature": 0,
        "kv_transfer_params": {"do_remote_decode": True, "do_remote_prefill": False}})
    status, body = s0
    assert status == 200, body
    kv = body["kv_transfer_params"]
    assert kv["do_remote_prefill"] is True and kv["remote_host"] == "127.0.0.1"
    assert kv["remote_port"] == int(pair.prefill.env["VLLM_NIXL_SIDE_CHANNEL_PORT"])
    assert len(kv["remote_block_ids"]) >= 2, kv  # one block list per KV-cache group (attention, GDN)


def test_vllm_bench_serve_through_the_router_parsed_by_qdd(pair, router, cpu_venv, checkpoint, tmp_path):
    """The benchmark client (`vllm bench serve`, the CPU venv's) with the CR's workload (ISL, OSL,
    concurrency) through the router; its --save-result file read by qdd.bench."""
    r, _ = router
    w = tiny_cr()["spec"]["workload"]
    n = 2 * w["concurrency"]
    before, gen0 = nixl_stats(pair.decode.metrics()), generated_tokens(pair.decode.metrics())
    proc = subprocess.run(
        [str(cpu_venv / "bin" / "vllm"), "bench", "serve", "--backend", "vllm", "--base-url", r.base,
         "--endpoint", "/v1/completions", "--model", SERVED, "--tokenizer", str(checkpoint),
         "--dataset-name", "random", "--random-input-len", str(w["isl"]), "--random-output-len", str(w["osl"]),
         "--num-prompts", str(n), "--max-concurrency", str(w["concurrency"]), "--ignore-eos", "--seed", "0",
         "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
         "--save-result", "--result-dir", str(tmp_path), "--result-filename", "bench.json"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1", "NO_PROXY": "127.0.0.1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = parse_serve_result((tmp_path / "bench.json").read_text(), require=("ttft", "tpot", "itl", "e2el"))
    after, gen1 = nixl_stats(pair.decode.metrics()), generated_tokens(pair.decode.metrics())
    assert res.completed == n and res.failed == 0 and not res.errors, res
    # Decode generated every output token the client counted (decode's own counter). The random
    # dataset's prompts re-tokenize a token or two past ISL with this tokenizer; the engines then
    # stop at --max-model-len (ISL + OSL, qdd's default), so a request never exceeds it.
    assert gen1 - gen0 == res.output_tokens
    assert res.input_tokens + res.output_tokens <= n * (w["isl"] + w["osl"]), res
    assert res.output_tokens >= 0.9 * n * w["osl"], res
    assert set(res.latency_ms) == {"ttft", "tpot", "itl", "e2el"}
    assert 0 < res.latency_ms["ttft"]["p50"] <= res.latency_ms["e2el"]["p99"]
    assert after["transfers"] - before["transfers"] == n and after["failed_transfers"] == 0


def test_the_operators_canary_through_the_real_router_equals_the_reference_and_repeats(pair, router, cpu_venv,
                                                                                      checkpoint):
    """qdd's canary, as the operator runs it (qdd.controller.canary with the CR's own defaults), through
    the real router to the real pair: the first check keeps the baseline, a second one a period later
    gets the same answer (determinism), and that answer is the transformers reference's greedy text
    for the same prompt. The router's loopback URL stands in for its Service name (the harness runs it
    here, not in a cluster)."""
    r, _ = router
    cr = tiny_cr()
    plan = build_plan(parse_resource(cr))
    spec = plan.spec.validation.canary
    answered, sent = threading.Event(), []

    def send(url: str, body: dict, timeout: float):
        sent.append(body)
        return complete(url, body, timeout)

    checker = CanaryChecker(send, override=r.base, notify=lambda ns, name: answered.set())

    def check(now: dt.datetime) -> CanaryState:
        """Two passes, as the operator's: one sends (the pool), the one ``notify`` asks for judges."""
        answered.clear()
        sent = checker.state(cr, plan, True, now)
        assert sent.reason in ("CanaryPending", "CanaryPassed"), sent
        assert answered.wait(spec.timeout_seconds + 5), "no canary answer"
        return checker.state(cr, plan, True, now)

    t0 = dt.datetime.now(dt.timezone.utc)
    first = check(t0)
    assert (first.passed, first.reason) == (True, "CanaryPassed"), first
    assert first.record is not None and first.record["baselineSource"] == "first-answer"
    cr["status"] = {"canary": first.record, "conditions": []}
    second = check(t0 + dt.timedelta(seconds=spec.period_seconds + 60))  # due again
    assert (second.passed, second.reason) == (True, "CanaryPassed"), second
    assert second.record is not None and len(sent) == 2  # the second check sent its own request
    assert second.record["answerHash"] == first.record["answerHash"]
    # The same request with vLLM's token ids, for the reference (prompt ids as the engine tokenized them).
    body = request_body(SERVED, spec.prompt, spec.max_tokens)
    assert body == {"model": "tiny-qwen35-moe", "prompt": "The capital of France is", "max_tokens": 16,
                    "temperature": 0, "seed": 0, "n": 1, "stream": False}
    status, _, raw = r.post("/v1/completions", body | {"return_token_ids": True})
    assert status == 200, raw[:2000]
    choice = json.loads(raw)["choices"][0]
    answer = complete(r.base, body, spec.timeout_seconds)
    assert answer.text == choice["text"] and answer_hash(choice["text"]) == first.record["answerHash"]
    ref = json.loads(run_in_venv(cpu_venv, "reference.py", stdin=json.dumps({
        "model": str(checkpoint), "decode": True,
        "cases": [{"prompt_ids": choice["prompt_token_ids"], "completion_ids": choice["token_ids"]}]})))["cases"][0]
    got, want, steps = choice["token_ids"], ref["greedy"], ref["steps"]
    assert len(got) == spec.max_tokens and len(set(got)) > 2, got
    # Token for token the fp32 reference's greedy answer, up to the first position where the
    # reference is not decisive (its top-2 margin within the bf16 tolerance measured there: the
    # engine computes in bf16, so either token is right); every token within that tolerance.
    same = next((i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b), len(got))
    assert same == len(got) or steps[same]["margin"] <= TOLERANCE_FACTOR * steps[same]["bf16_dev"], (same, steps[same])
    assert all(s["gap"] <= TOLERANCE_FACTOR * s["bf16_dev"] for s in steps), steps
    assert same >= spec.max_tokens // 2, (same, got, want)
    if same == len(got):
        assert ref["greedy_text"] == answer.text
    print(f"canary on the real engines: answer {answer.text!r} ({same}/{len(got)} tokens = the fp32 reference's greedy "
          f"tokens; first difference margin {steps[same]['margin'] if same < len(got) else '-'} vs bf16 deviation "
          f"{steps[same]['bf16_dev'] if same < len(got) else '-'}); latency first {first.record['latencyMs']} ms, "
          f"second {second.record['latencyMs']} ms, third {answer.latency_ms} ms")
