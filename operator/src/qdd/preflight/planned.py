"""The transfer layout a plan's decode ranks register (:class:`~.layout.TransferLayout` from the
planner's :class:`~qdd.plan.memory.CacheLayout`), and ``python -m qdd.preflight layout`` to print it.
Operator side: the GPU program reads the layout as JSON and never imports this."""

from __future__ import annotations

import argparse
import json

from ..catalog import Checkpoint, EngineProfile
from ..plan import Plan
from ..plan.memory import CacheLayout, cache_layout
from .layout import TransferLayout


def from_cache_layout(cache: CacheLayout, model: str, mamba_ssm_cache_dtype: str, tensor_parallel: int,
                      tokens: int) -> TransferLayout:
    return TransferLayout(model=model, kv_cache_dtype=cache.kv_dtype, mamba_ssm_cache_dtype=mamba_ssm_cache_dtype,
                          tensor_parallel=tensor_parallel, tokens=tokens, block_size=cache.block_size,
                          page_bytes=cache.page_bytes, tensors=cache.layers_per_group,
                          attn_groups=cache.attn_groups, gdn_groups=cache.gdn_groups)


def for_checkpoint(ckpt: Checkpoint, profile: EngineProfile, tensor_parallel: int, kv_cache_dtype: str,
                   mamba_ssm_cache_dtype: str, tokens: int) -> TransferLayout:
    """The layout of a checkpoint at given dtypes and TP, without a whole Plan."""
    cache = cache_layout(ckpt, tensor_parallel, kv_cache_dtype, mamba_ssm_cache_dtype, profile)
    return from_cache_layout(cache, ckpt.architecture.name, mamba_ssm_cache_dtype, tensor_parallel, tokens)


def for_plan(plan: Plan) -> TransferLayout:
    """The layout the deployment's decode ranks register (TP and dtypes match on both roles:
    the planner enforces it), for one request of ISL + OSL tokens."""
    w = plan.spec.workload
    return from_cache_layout(plan.capacity.layout, plan.checkpoint.architecture.name,
                             plan.spec.decode.tuning.mamba_ssm_cache_dtype, plan.decode.tp, w.isl + w.osl)


def main(argv: list[str]) -> int:
    """``layout --plan CR.yaml`` or ``layout --model M --tp N …``: print the layout as JSON."""
    p = argparse.ArgumentParser(prog="python -m qdd.preflight layout")
    p.add_argument("--plan", help="a QwenDisaggDeployment YAML: the layout its decode ranks register")
    p.add_argument("--model", default="nvidia/Qwen3.5-397B-A17B-NVFP4")
    p.add_argument("--vllm-version", default="0.33.0")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--mamba-ssm-cache-dtype", default="bfloat16")
    p.add_argument("--isl", type=int, default=8192)
    p.add_argument("--osl", type=int, default=1024)
    args = p.parse_args(argv)
    if args.plan:
        from ..api import parse_resource
        from ..plan import build_plan
        from ..yamlinput import load_documents

        with open(args.plan) as fh:
            tl = for_plan(build_plan(parse_resource(load_documents(fh.read())[0])))
    else:
        from ..catalog import engine_profile, resolve_checkpoint

        tl = for_checkpoint(resolve_checkpoint(args.model), engine_profile(args.vllm_version), args.tp,
                            args.kv_cache_dtype, args.mamba_ssm_cache_dtype, args.isl + args.osl)
    print(json.dumps(tl.to_json(), indent=2))
    return 0
