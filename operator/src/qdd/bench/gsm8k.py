"""GSM8K accuracy through an OpenAI-compatible endpoint (the router), and its result format.

Standard library only: the accuracy Job runs this file with the engine image's python::

    python3 gsm8k.py --base-url http://<router>:8000 --model NAME --data DIR \
        [--examples N] [--shots 5] [--repeats 1] [--max-tokens 512] [--concurrency 64]

``DIR`` holds ``test.jsonl`` (and ``train.jsonl`` when ``--shots`` > 0): openai/gsm8k's ``main``
split as JSON lines ``{"question": ..., "answer": "...#### 42"}``; ``--hub`` loads the same with the
``datasets`` package instead (egress needed). Each question is sent to ``/v1/completions`` with
``temperature`` 0, after ``shots`` worked examples of the train split, as ``Question: …\\nAnswer:``,
stopping at the next ``Question:``; the answer is the last number of the text (commas dropped), right
when it equals the number after ``####``. This is the usual few-shot GSM8K setting (lm-eval's
``gsm8k`` task and vLLM's tests/evals/gsm8k score the same way).

Output, one JSON line on stdout (the Job's termination message; see :func:`parse_accuracy`):
``{"repeats": [0.9, …], "questions": N, "invalid": K, "errors": E}`` — accuracy (0..1) of each
repeat, questions per repeat, answers without a number and failed requests over all repeats.
Exit 0 when every request got an answer, 1 otherwise (the result is still printed).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
STOP = ["Question:", "</s>", "<|im_end|>", "<|endoftext|>"]
TIMEOUT_S = 600.0
"""One answer of up to max_tokens tokens on a loaded deployment."""


def truth(answer: str) -> str:
    """The reference number of a GSM8K answer (after ``####``)."""
    return answer.rsplit("####", 1)[-1].strip().replace(",", "")


def extract(text: str) -> str | None:
    """The last number of a model's answer, commas dropped, ``.0`` folded (``1,234.0`` → ``1234``)."""
    found = NUMBER.findall(text.replace(",", ""))
    if not found:
        return None
    n = found[-1]
    return n[:-2] if n.endswith(".0") else n


def prompt(shots: list[dict[str, str]], question: str) -> str:
    head = "".join(f"Question: {s['question']}\nAnswer: {s['answer']}\n\n" for s in shots)
    return f"{head}Question: {question}\nAnswer:"


def load_jsonl(path: Path) -> list[dict[str, str]]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for i, r in enumerate(rows):
        if not isinstance(r, dict) or not isinstance(r.get("question"), str) or "####" not in str(r.get("answer")):
            raise ValueError(f"{path}:{i + 1}: not a GSM8K row (question, answer with ####)")
    return rows


def _hub() -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    from datasets import load_dataset  # type: ignore[import-not-found]  # hub mode only: the engine image's datasets

    ds = load_dataset("openai/gsm8k", "main")
    return [dict(r) for r in ds["test"]], [dict(r) for r in ds["train"]]


def ask(base_url: str, model: str, text: str, max_tokens: int) -> str:
    body = {"model": model, "prompt": text, "max_tokens": max_tokens, "temperature": 0, "stop": STOP}
    req = urllib.request.Request(f"{base_url.rstrip('/')}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=TIMEOUT_S) as r:
        return str(json.loads(r.read())["choices"][0]["text"])


def run_once(args: argparse.Namespace, tests: list[dict[str, str]], shots: list[dict[str, str]]) -> tuple[int, int, int]:
    """(right, invalid, errors) of one pass over ``tests``."""
    def one(row: dict[str, str]) -> tuple[bool, bool, bool]:
        try:
            got = extract(ask(args.base_url, args.model, prompt(shots, row["question"]), args.max_tokens))
        except (OSError, ValueError, KeyError, IndexError, urllib.error.URLError):
            return False, False, True
        return got is not None and got == truth(row["answer"]), got is None, False

    with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
        outcomes = list(pool.map(one, tests))
    return sum(o[0] for o in outcomes), sum(o[1] for o in outcomes), sum(o[2] for o in outcomes)


@dataclass(frozen=True)
class AccuracyOutcome:
    repeats: list[float]
    questions: int
    invalid: int
    errors: int

    @property
    def mean(self) -> float:
        return sum(self.repeats) / len(self.repeats)


MAX_COUNT = 1 << 31
"""The largest question or error count read back (GSM8K has 1,319 test questions × ≤ 20 repeats)."""


def parse_accuracy(text: str | dict[str, Any] | None) -> AccuracyOutcome:
    """The accuracy Job's termination message (text, or JSON already read by the operator's bounded
    reader) → AccuracyOutcome. Raises ValueError naming the key."""
    if not text:
        raise ValueError("(termination message): empty: the Job wrote no result")
    raw = json.loads(text) if isinstance(text, str) else text
    reps = raw.get("repeats") if isinstance(raw, dict) else None
    if not isinstance(reps, list) or not 0 < len(reps) <= 100 or not all(
            isinstance(x, int | float) and not isinstance(x, bool) and 0 <= x <= 1 for x in reps):
        raise ValueError(f"repeats: a list of 1..100 accuracies in 0..1, got {str(reps)[:100]}")
    for k in ("questions", "invalid", "errors"):
        v = raw.get(k)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= MAX_COUNT:
            raise ValueError(f"{k}: a count in 0..{MAX_COUNT}, got {str(v)[:40]}")
    return AccuracyOutcome([float(x) for x in reps], raw["questions"], raw["invalid"], raw["errors"])


def passes(outcome: AccuracyOutcome, threshold: float) -> bool:
    """The gate: mean accuracy at or above ``threshold`` (0..1), and every request answered."""
    return outcome.errors == 0 and outcome.mean >= threshold


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="GSM8K accuracy through an OpenAI-compatible endpoint")
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", type=Path, help="directory with test.jsonl and train.jsonl")
    src.add_argument("--hub", action="store_true", help="openai/gsm8k with the datasets package")
    ap.add_argument("--examples", type=int)
    ap.add_argument("--shots", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--concurrency", type=int, default=64)
    args = ap.parse_args(argv)
    if args.hub:
        tests, train = _hub()
    else:
        tests = load_jsonl(args.data / "test.jsonl")
        train = load_jsonl(args.data / "train.jsonl") if args.shots else []
    tests = tests[: args.examples] if args.examples else tests
    shots = train[: args.shots]
    if len(shots) < args.shots:
        raise SystemExit(f"error: --shots {args.shots}: the train split has {len(train)} rows")
    repeats, invalid, errors = [], 0, 0
    for _ in range(args.repeats):
        right, bad, failed = run_once(args, tests, shots)
        repeats.append(round(right / len(tests), 6))
        invalid, errors = invalid + bad, errors + failed
    out: dict[str, Any] = {"repeats": repeats, "questions": len(tests), "invalid": invalid, "errors": errors}
    print(json.dumps(out, separators=(",", ":")))
    return 0 if errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
