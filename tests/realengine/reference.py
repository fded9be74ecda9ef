"""The transformers reference forward pass for the tiny checkpoint (tests/realengine/checkpoint.py).

Run with the CPU engine venv's python; reads a JSON request on stdin, prints JSON:
    {"model": DIR, "cases": [{"prompt_ids": [...], "completion_ids": [...]}, ...]}
For each case, teacher-forced over prompt + completion (the engine's tokens), at every generated
position t: the fp32 reference's argmax and top-2 margin (logits), the fp32 logit gap of the
engine's token to the fp32 argmax (0 when the engine picked it), and the largest |bf16 − fp32|
logit difference of the same model run in bf16 (the measured bf16 tolerance of this model on this
sequence). Also the reference's own greedy continuation (fp32, same length), and with
``"decode": true`` in the request its text (``greedy_text``: the checkpoint's tokenizer, special
tokens skipped, as the engine's detokenizer does).
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _logits(model: Any, ids: list[int]) -> Any:
    import torch

    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0].float()


def _greedy(model: Any, prompt: list[int], n: int) -> list[int]:
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(_logits(model, ids)[-1].argmax()))
    return ids[len(prompt):]


def case(fp32: Any, bf16: Any, prompt: list[int], completion: list[int]) -> dict[str, Any]:
    ids = prompt + completion
    lf, lb = _logits(fp32, ids), _logits(bf16, ids)
    steps = []
    for t in range(len(completion)):
        row, brow = lf[len(prompt) - 1 + t], lb[len(prompt) - 1 + t]
        top2 = row.topk(2)
        tok = completion[t]
        steps.append({
            "engine": tok, "argmax": int(top2.indices[0]), "margin": float(top2.values[0] - top2.values[1]),
            "gap": float(row.max() - row[tok]), "bf16_dev": float((brow - row).abs().max()),
        })
    return {"steps": steps, "greedy": _greedy(fp32, prompt, len(completion))}


def main(req: dict[str, Any]) -> dict[str, Any]:
    import torch
    from transformers import Qwen3_5MoeForConditionalGeneration

    torch.manual_seed(0)
    fp32 = Qwen3_5MoeForConditionalGeneration.from_pretrained(req["model"], dtype=torch.float32).eval()
    bf16 = Qwen3_5MoeForConditionalGeneration.from_pretrained(req["model"], dtype=torch.bfloat16).eval()
    cases = [case(fp32, bf16, c["prompt_ids"], c["completion_ids"]) for c in req["cases"]]
    if req.get("decode"):
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(req["model"])
        for c in cases:
            c["greedy_text"] = tok.decode(c["greedy"], skip_special_tokens=True)
    return {"cases": cases}


if __name__ == "__main__":
    json.dump(main(json.load(sys.stdin)), sys.stdout)
