"""Sizing rules (qdd.plan.sizing, qdd.catalog.engines): exact values, one test per rule."""

from __future__ import annotations

import pytest

from qdd.catalog import capture_grid, engine_profile, gpu_kind, round_up_to_grid
from qdd.errors import SpecError
from qdd.plan import sizing

from .helpers import flag, plan_of


def _decode_argv(cr) -> list[str]:
    return list(plan_of(cr).decode.pods[0].argv)


def test_capture_grid_is_vllms():
    """1, 2, 4, then every 8 up to 256, then every 16 (vllm/config/vllm.py)."""
    grid = capture_grid(1024)
    assert grid[:5] == [1, 2, 4, 8, 16]
    assert grid[grid.index(248):grid.index(248) + 4] == [248, 256, 272, 288]
    assert grid[-1] == 1024 and len(grid) == 3 + 32 + (1024 - 256) // 16
    assert all(b - a == 16 for a, b in zip(grid[grid.index(256):], grid[grid.index(256) + 1:], strict=False))


@pytest.mark.parametrize(("n", "want"), [(1, 1), (3, 4), (5, 8), (9, 16), (255, 256), (257, 272), (640, 640),
                                         (641, 656), (768, 768), (1000, 1008)])
def test_round_up_to_grid(n, want):
    assert round_up_to_grid(n) == want


def test_prefill_max_num_batched_tokens_is_twice_isl(seed_cr):
    assert sizing.prefill_max_num_batched_tokens(8192) == 16384
    assert sizing.prefill_max_num_batched_tokens(1024) == 2048
    seed_cr["spec"]["workload"]["isl"] = 4000
    assert flag(list(plan_of(seed_cr).prefill.pods[0].argv), "--max-num-batched-tokens") == "8000"


@pytest.mark.parametrize(("cc", "want"), [(3072, 512), (4096, 640), (5120, 768), (4100, 656), (64, 512), (4097, 656)])
def test_decode_capture_size_on_one_dep8(cc, want):
    """ceil(C/8) + 128 on the grid, at least 512: 4100 → 513 + 128 = 641 → 656."""
    assert sizing.decode_capture_size(cc, 1, 8) == want


def test_capture_size_rendered_for_an_off_grid_concurrency(seed_cr):
    seed_cr["spec"]["workload"]["concurrency"] = 4100
    argv = _decode_argv(seed_cr)
    assert flag(argv, "--max-cudagraph-capture-size") == "656"
    assert flag(argv, "--max-num-seqs") == "1024"


def test_two_decode_endpoints_halve_per_rank_concurrency(seed_cr):
    assert sizing.per_rank_concurrency(10240, 2, 8) == 640 == sizing.per_rank_concurrency(5120, 1, 8)
    assert sizing.decode_capture_size(10240, 2, 8) == 768
    assert sizing.decode_capture_size(5120, 2, 8) == 512  # 320 + 128 = 448, floored at 512
    seed_cr["spec"]["workload"]["concurrency"] = 10240
    seed_cr["spec"]["decode"]["endpoints"] = 2
    plan = plan_of(seed_cr)
    assert plan.decode.max_cudagraph_capture_size == 768
    assert len(plan.decode.pods) == 4 and plan.decode.gpus == 16


def test_per_rank_concurrency_rounds_up():
    assert sizing.per_rank_concurrency(4100, 1, 8) == 513
    assert sizing.per_rank_concurrency(1, 1, 8) == 1


def test_max_num_seqs_covers_capture_and_engine_default():
    gb200, h100 = gpu_kind("GB200"), gpu_kind("H100")
    p = engine_profile("0.33.0")
    assert sizing.decode_max_num_seqs(p, gb200, 768) == 1024
    assert sizing.decode_max_num_seqs(p, gb200, 2640) == 2640
    assert sizing.decode_max_num_batched_tokens(p, gb200, 1024) == 16384
    assert sizing.decode_max_num_batched_tokens(p, gb200, 20000) == 20000
    assert sizing.decode_max_num_batched_tokens(p, h100, 1024) == 8192
    assert sizing.decode_max_num_batched_tokens(engine_profile("0.23.0"), gb200, 1024) == 8192


def test_max_num_seqs_at_least_per_rank_concurrency(seed_cr):
    """Above 1024 per rank the capture size (per rank + 128) drives max-num-seqs (short requests fit)."""
    seed_cr["spec"]["workload"].update(isl=128, osl=64, concurrency=8800)
    plan = plan_of(seed_cr)  # 8 ranks of 1100 requests; 1100 + 128 = 1228 → 1232 on the grid
    assert plan.decode.max_num_seqs == 1232 >= 1100
    assert plan.decode.max_cudagraph_capture_size == 1232
    assert flag(list(plan.decode.pods[0].argv), "--max-num-seqs") == "1232"


def test_overrides_are_honoured(seed_cr):
    seed_cr["spec"]["decode"]["tuning"] = {"maxNumSeqs": 700, "maxCudagraphCaptureSize": 600,
                                           "maxNumBatchedTokens": 4096}
    seed_cr["spec"]["prefill"]["tuning"] = {"maxNumBatchedTokens": 32768, "maxNumSeqs": 64}
    plan = plan_of(seed_cr)
    d, p = list(plan.decode.pods[0].argv), list(plan.prefill.pods[0].argv)
    assert (flag(d, "--max-num-seqs"), flag(d, "--max-cudagraph-capture-size"), flag(d, "--max-num-batched-tokens")) \
        == ("700", "600", "4096")
    assert flag(p, "--max-num-batched-tokens") == "32768" and flag(p, "--max-num-seqs") == "64"


@pytest.mark.parametrize(("tuning", "field", "words"), [
    ({"maxNumSeqs": 400}, "spec.decode.tuning.maxNumSeqs", "below the 512 requests"),
    ({"maxCudagraphCaptureSize": 17000, "maxNumSeqs": 1024, "maxNumBatchedTokens": 16384},
         "spec.decode.tuning.maxCudagraphCaptureSize",
     "exceeds max-num-batched-tokens 16384"),
    ({"maxNumBatchedTokens": 800}, "spec.decode.tuning.maxNumBatchedTokens", "below maxNumSeqs 1024"),
])
def test_contradictory_overrides_name_the_field(seed_cr, tuning, field, words):
    seed_cr["spec"]["decode"]["tuning"] = tuning
    with pytest.raises(SpecError) as e:
        plan_of(seed_cr)
    assert [err.field for err in e.value.errors] == [field]
    assert words in e.value.errors[0].message
