"""The benchmark Jobs' clients, for real: vLLM 0.33.0's own ``vllm bench serve`` (from .qdd/vllm-venv)
and qdd's GSM8K evaluation, through the real vllm-router (rendered args), against fake P/D engines
(tests/contract/fake_engine.py, test doubles for GPUs) set to a known token interval, prompt length
and answers. qdd's parsers must give back what the fakes were set to.

Substitutions in the Job's argv (everything else as :mod:`qdd.render.benchmark` renders it): the
router URL (a loopback port), ``--tokenizer`` (a byte-level BPE tokenizer made here with the
``tokenizers`` package, since nothing may be downloaded; it only draws the random prompts) and the
result directory and scripts path (a temp dir instead of ``/tmp/qdd-bench`` and ``/qdd-bench``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from qdd.api.benchmark import parse_benchmark_spec
from qdd.bench import gsm8k
from qdd.bench.results import parse_compact, parse_serve_result, sweep_point
from qdd.render.benchmark import RESULT_DIR, SCRIPTS_DIR, accuracy_argv, sweep_argv

from .fake_engine import FakeEngine, FakeFleet
from .router_harness import EXAMPLE, Router, free_port, render, router_container, substitute
from .vllm_harness import ensure_venv

CR = yaml.safe_load(EXAMPLE.read_text())
MODEL = CR["spec"]["model"]["servedModelName"]
INTERVAL_S = 0.02
"""The fake decode's token interval: the ITL the client must measure."""
PROMPT_TOKENS = 64
"""What the fakes report as usage.prompt_tokens (vllm bench serve then counts that as the prompt)."""
BENCH_SRC = Path(__file__).resolve().parents[2] / "operator" / "src" / "qdd" / "bench"

TOKENIZER_CODE = """
import sys
from tokenizers import Tokenizer, models, pre_tokenizers, decoders
from transformers import PreTrainedTokenizerFast
alphabet = pre_tokenizers.ByteLevel.alphabet()
vocab = {c: i for i, c in enumerate(sorted(alphabet))}
vocab["<|endoftext|>"] = len(vocab)
tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
fast.save_pretrained(sys.argv[1])
"""


def _question(i: int) -> tuple[int, int]:
    return i, 3 * i + 1


def _answer(body: dict[str, Any]) -> str | None:
    """GSM8K-style questions 'What is A plus B?': right unless A is a multiple of 4 (then off by one)."""
    found = re.findall(r"Question: What is (\d+) plus (\d+)\?", str(body.get("prompt")))
    if not found:
        return None
    a, b = map(int, found[-1])
    return f" {a} + {b} is {a + b + (1 if a % 4 == 0 else 0)}.\n#### done"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Router, Path]]:
    tmp = tmp_path_factory.mktemp("bench-client")
    py = ensure_venv()
    subprocess.run([str(py), "-c", TOKENIZER_CODE, str(tmp / "tokenizer")], check=True, capture_output=True,
                   timeout=300)
    fleet = FakeFleet(
        prefill=[FakeEngine("prefill", f"p{i}", MODEL, prompt_tokens=PROMPT_TOKENS).start() for i in range(2)],
        decode=[FakeEngine("decode", "d0", MODEL, token_interval_s=INTERVAL_S, prompt_tokens=PROMPT_TOKENS,
                           answer=_answer).start()])
    try:
        args, _ = substitute(router_container(render(CR))["args"], port=free_port(), prometheus_port=free_port(),
                             prefill_urls=[e.url for e in fleet.prefill], decode_urls=[e.url for e in fleet.decode])
        with Router(args, tmp / "router.log") as router:
            router.wait_ready(2, 1)
            yield router, tmp
    finally:
        fleet.stop()


def _sweep_spec(concurrency: int) -> Any:
    return parse_benchmark_spec({"deploymentName": "d", "sweep": {
        "isl": PROMPT_TOKENS, "osl": 12, "randomRangeRatio": 1.0, "concurrencies": [concurrency],
        "promptsPerConcurrency": 3, "warmupsPerConcurrency": 1}}).sweep


def _run_sweep(router: Router, tmp: Path, concurrency: int) -> dict[str, Any]:
    argv = sweep_argv(_sweep_spec(concurrency), concurrency, router.base, MODEL, "TOKENIZER")
    argv[argv.index("TOKENIZER")] = str(tmp / "tokenizer")
    argv[argv.index(RESULT_DIR)] = str(tmp / f"c{concurrency}")
    assert argv[:3] == ["vllm", "bench", "serve"]
    py = ensure_venv()
    run = subprocess.run([str(py), "-m", "vllm.entrypoints.cli.main", *argv[1:]], capture_output=True, text=True,
                         timeout=600, env={"PATH": "/usr/bin:/bin", "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1",
                                           "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    saved = tmp / f"c{concurrency}" / "result.json"
    # The Job's second step: results.py compact, with the engine image's python.
    out = subprocess.run([str(py), str(BENCH_SRC / "results.py"), "compact", str(saved)], capture_output=True,
                         text=True, timeout=60, check=True)
    return {"raw": json.loads(saved.read_text()), "message": out.stdout.strip()}


@pytest.mark.parametrize("concurrency", [1, 4])
def test_vllm_bench_serve_through_the_router_measures_the_fake_speed(stack, concurrency):
    router, tmp = stack
    got = _run_sweep(router, tmp, concurrency)
    r = parse_compact(got["message"])
    assert r == parse_serve_result(got["raw"]) and len(got["message"]) < 1024
    prompts = 3 * concurrency
    assert (r.completed, r.failed, r.num_prompts, r.max_concurrency) == (prompts, 0, prompts, concurrency)
    assert r.output_tokens == prompts * 12 and r.input_tokens == prompts * PROMPT_TOKENS
    itl = r.latency_ms["itl"]["median"]
    assert abs(itl - INTERVAL_S * 1000) <= 0.1 * INTERVAL_S * 1000, itl
    # The stream lasts at least (osl - 1) intervals after the first token, as the fake was set; vllm-router hands
    # the first tokens over together (TTFT absorbs about two intervals), so TPOT = (latency - TTFT) /
    # (osl - 1) comes out below the interval by that much, while ITL's median is the interval itself.
    assert min(got["raw"]["latencies"]) >= 11 * INTERVAL_S  # the fake's 11 sleeps are a floor
    ttft, tpot = r.latency_ms["ttft"]["mean"], r.latency_ms["tpot"]["mean"]
    mean_latency_ms = 1000 * sum(got["raw"]["latencies"]) / len(got["raw"]["latencies"])
    assert abs(ttft + 11 * tpot - mean_latency_ms) <= 0.5  # vLLM's own TPOT definition, ms
    point = sweep_point(r, concurrency, gpus=16)
    assert point["totalTokensPerSecondPerGpu"] == round(r.total_tokens_per_second / 16, 3)
    assert point["outputTokensPerSecondPerUser"] == round(1000 / r.latency_ms["tpot"]["median"], 3)
    assert point["completed"] == prompts and point["itlMs"]["p50"] == round(itl, 3)


def _gsm8k_files(directory: Path, n: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    rows = [{"question": f"What is {a} plus {b}?", "answer": f"{a} + {b} = {a + b}.\n#### {a + b}"}
            for a, b in map(_question, range(n))]
    (directory / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (directory / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:5]))


@pytest.mark.parametrize(("threshold", "passed"), [(0.75, True), (0.8, False)])
def test_gsm8k_through_the_router_gives_the_fake_accuracy(stack, threshold, passed):
    router, tmp = stack
    _gsm8k_files(tmp / "gsm8k", 20)  # a = 0..19: 0, 4, 8, 12, 16 answered wrong → 15/20 = 0.75
    spec = parse_benchmark_spec({"deploymentName": "d", "accuracy": {"repeats": 2, "shots": 3,
                                                                     "passThreshold": threshold}})
    argv = accuracy_argv(spec.accuracy, router.base, MODEL, str(tmp / "gsm8k"))
    argv[argv.index(f"{SCRIPTS_DIR}/gsm8k.py")] = str(BENCH_SRC / "gsm8k.py")
    run = subprocess.run([str(ensure_venv()), *argv[1:]], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    outcome = gsm8k.parse_accuracy(run.stdout.strip())
    assert outcome.repeats == [0.75, 0.75] and outcome.questions == 20 and outcome.invalid == 0
    assert outcome.errors == 0 and outcome.mean == 0.75
    assert gsm8k.passes(outcome, threshold) is passed


def test_gsm8k_prompt_is_few_shot_and_scores_the_last_number():
    shots = [{"question": "q1", "answer": "a1\n#### 1"}]
    assert gsm8k.prompt(shots, "q2") == "Question: q1\nAnswer: a1\n#### 1\n\nQuestion: q2\nAnswer:"
    assert gsm8k.extract("so 3 + 4 = 7, total 1,234.0 apples") == "1234"
    assert gsm8k.extract("no number") is None and gsm8k.truth("x\n#### 1,000") == "1000"
    assert sys.version_info >= (3, 10)
