"""The 20 recipe shapes of srt-slurm-recipes' Qwen3.5 GB200 8k1k vLLM disagg set, written for qdd's
tests in the published format (checked against the public NVIDIA/srt-slurm-recipes repository,
recipes/multi-node/Qwen3.5/GB200/8k1k/vllm/disagg/: file names ``{N}xdep2-1xdep8{,-acc,-cc4096,-cc5120}.yaml``
for N = 4..8; docs/facts/recipes.md).

What the published files hold, per variant: the base runs sa-bench at "64x128x256x512x1024x2048x3072";
-cc4096/-cc5120 run one point and add ``max-cudagraph-capture-size`` 640/768 on decode; -acc runs
``type: gsm8k`` with only ``repeat: 5``. Names are ``qwen35-397b-nvfp4-gb200-disagg-<file stem>``;
prefill_nodes = ceil(N / 2).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

VARIANTS = ("", "-acc", "-cc4096", "-cc5120")
PREFILL_COUNTS = (4, 5, 6, 7, 8)
CAPTURE = {"-cc4096": 640, "-cc5120": 768}
KV = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_load_failure_policy": "fail"})


def _role(dp: int) -> dict[str, Any]:
    return {"kv-transfer-config": KV, "served-model-name": "Qwen3.5-397B-A17B-NVFP4", "tensor-parallel-size": 1,
            "pipeline-parallel-size": 1, "data-parallel-size": dp, "enable-expert-parallel": True,
            "no-disable-hybrid-kv-cache-manager": True, "generation-config": "vllm", "no-enable-prefix-caching": True,
            "async-scheduling": True, "stream-interval": 100, "mamba-ssm-cache-dtype": "bfloat16",
            "language-model-only": True}


def recipe(n: int, variant: str) -> dict[str, Any]:
    """The recipe ``{n}xdep2-1xdep8{variant}`` as a dict in the published key order."""
    env = {"DYN_LOG": "error", "DYN_SDK_DISABLE_ANSI_LOGGING": "1", "VLLM_LOGGING_COLOR": "0",
           "VLLM_SSM_CONV_STATE_LAYOUT": "DS"}
    prefill, decode = _role(2) | {"max-num-batched-tokens": 16384}, _role(8)
    if variant in CAPTURE:
        decode["max-cudagraph-capture-size"] = CAPTURE[variant]
    bench: dict[str, Any] = {"type": "gsm8k", "repeat": 5} if variant == "-acc" else {
        "type": "sa-bench", "isl": 8192, "osl": 1024,
        "concurrencies": variant[3:] if variant in CAPTURE else "64x128x256x512x1024x2048x3072",
        "req_rate": "inf", "random_range_ratio": 0.8, "num_prompts_mult": 8, "num_warmup_mult": 1}
    return {
        "name": f"qwen35-397b-nvfp4-gb200-disagg-{n}xdep2-1xdep8{variant}",
        "model": {"path": "hf:nvidia/Qwen3.5-397B-A17B-NVFP4",
                  "container": "vllm/vllm-openai:nightly-d223c900d85224c02f2162ee2c757a769e99f519", "precision": "NVFP4"},
        "dynamo": {"version": "1.2.0.dev20260526", "install": True},
        "resources": {"gpu_type": "gb200", "gpus_per_node": 4, "prefill_nodes": (n + 1) // 2, "prefill_workers": n,
                      "gpus_per_prefill": 2, "decode_nodes": 2, "decode_workers": 1, "gpus_per_decode": 8},
        "frontend": {"type": "dynamo", "enable_multiple_frontends": False},
        "backend": {"type": "vllm", "connector": None, "prefill_environment": dict(env),
                    "decode_environment": dict(env), "vllm_config": {"prefill": prefill, "decode": decode}},
        "benchmark": bench,
    }


def shapes() -> list[tuple[str, dict[str, Any]]]:
    """(file stem, recipe) of all 20."""
    return [(f"{n}xdep2-1xdep8{v}", recipe(n, v)) for n in PREFILL_COUNTS for v in VARIANTS]


def write_set(directory: Path) -> list[Path]:
    """The 20 files, as the published directory lays them out."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for stem, r in shapes():
        path = directory / f"{stem}.yaml"
        path.write_text(yaml.safe_dump(r, sort_keys=False))
        out.append(path)
    return out
