"""qdd.perf.profile: the profile type the autoscaler reads, its queries and its calibration."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from pydantic import ValidationError

from qdd.perf.profile import (
    SCHEMA,
    MeasuredPoint,
    PerfProfile,
    Point,
    RoleProfile,
    calibrate,
    configmap_name,
    latency_at,
    load_profile,
    max_decode_concurrency,
    max_load_under,
    max_prefill_rate,
    measured_role_points,
    monotone,
)


def _role(role: str, pts: list[tuple[float, float]], max_load: float | None = None) -> RoleProfile:
    points = [Point(load=x, latency_ms=y, tokens_per_second=x * 10) for x, y in pts]
    return RoleProfile(role=role, topology="DEP2" if role == "prefill" else "DEP8",  # type: ignore[arg-type]
                       gpus_per_endpoint=2 if role == "prefill" else 8, max_load=max_load, points=points,
                       predicted=points)


def _profile() -> PerfProfile:
    return PerfProfile(deployment="qwen35", model="nvidia/Qwen3.5-397B-A17B-NVFP4", gpu="GB200", backend="vllm",
                       backend_version="0.24.0", database="aiconfigurator 0.12.0", isl=8192, osl=1024,
                       prefill=_role("prefill", [(1.0, 400.0), (2.0, 600.0), (4.0, 1400.0)]),
                       decode=_role("decode", [(64, 10.0), (256, 14.0), (1024, 30.0), (4096, 90.0)], max_load=5000),
                       not_captured=["NIXL transfer time"])


def test_queries_interpolate_between_points() -> None:
    p = _profile()
    assert latency_at(p.prefill, 1.5) == pytest.approx(500.0)
    assert latency_at(p.prefill, 0.2) == 400.0          # below the first point: the first latency
    assert latency_at(p.prefill, 5.0) == math.inf       # beyond the prediction: not promised
    assert latency_at(p.decode, 4500) == math.inf       # beyond the last point
    assert max_prefill_rate(p, 1000.0) == pytest.approx(3.0)
    assert max_prefill_rate(p, 300.0) == 0.0
    assert max_prefill_rate(p, 5000.0) == 4.0
    assert max_decode_concurrency(p, 22.0) == 640       # 256 + (1024-256)*(22-14)/(30-14)
    assert max_decode_concurrency(p, 1000.0) == 4096


def test_max_load_is_capped_by_capacity() -> None:
    role = _role("decode", [(64, 10.0), (8192, 50.0)], max_load=5000)
    assert max_load_under(role, 100.0) == 5000
    assert latency_at(role, 5001) == math.inf


def test_json_round_trip_and_configmap_name() -> None:
    p = _profile()
    text = p.to_json()
    assert f'"schema": "{SCHEMA}"' in text and '"latencyMs"' in text and '"gpusPerEndpoint"' in text
    assert load_profile(text) == p
    assert configmap_name("qwen35") == "qwen35-perf-profile"


def test_validation_names_the_field() -> None:
    with pytest.raises(ValidationError, match="loads must be strictly increasing"):
        _role("decode", [(256, 10.0), (64, 12.0)])
    with pytest.raises(ValidationError, match="latency must not fall"):
        _role("decode", [(64, 12.0), (256, 10.0)])
    bad = _profile().to_json().replace(SCHEMA, "qdd.dev/perf-profile/v0")
    with pytest.raises(ValidationError, match="schema"):
        load_profile(bad)


def test_monotone_takes_the_running_maximum() -> None:
    pts = monotone([Point(load=2, latency_ms=5, tokens_per_second=1), Point(load=1, latency_ms=7, tokens_per_second=1)])
    assert [(p.load, p.latency_ms) for p in pts] == [(1, 7), (2, 7)]


def _measured(conc: int, rate: float, ttft: float, tpot: float) -> MeasuredPoint:
    return MeasuredPoint(benchmark="b", concurrency=conc, request_rate=rate, ttft_ms=ttft, tpot_ms=tpot,
                         total_tokens_per_second_per_gpu=1.0, prefill_endpoints=2, decode_endpoints=1)


def test_measured_point_splits_over_endpoints() -> None:
    pre, dec = measured_role_points(_measured(1024, 4.0, 800.0, 45.0), osl=1024, isl=8192)
    assert (pre.load, pre.latency_ms, pre.tokens_per_second) == (2.0, 800.0, 16384.0)
    assert (dec.load, dec.latency_ms, dec.source) == (1024, 45.0, "measured")
    assert dec.tokens_per_second == pytest.approx(1024 * 1000 / 45.0)


def test_calibration_moves_the_profile() -> None:
    """A benchmark 50% slower on decode than predicted at 1024 requests: the profile takes the
    measured point, the neighbours move by the same ratio, and the answer to the autoscaler's
    question changes."""
    p = _profile()
    assert max_decode_concurrency(p, 30.0) == 1024
    cal = calibrate(p, [_measured(1024, 4.0, 800.0, 45.0)])
    assert latency_at(cal.decode, 1024) == 45.0
    assert [pt.source for pt in cal.decode.points] == ["calibrated", "calibrated", "measured", "calibrated"]
    assert latency_at(cal.decode, 4096) == pytest.approx(135.0)   # 90 × 1.5 beyond the measurement
    assert max_decode_concurrency(cal, 30.0) == 544                # 256 + 768 × (30 - 21) / (45 - 21)
    # prefill: 2 req/s per endpoint measured at 800 ms against 600 predicted
    assert latency_at(cal.prefill, 2.0) == 800.0
    assert max_prefill_rate(cal, 1000.0) < max_prefill_rate(p, 1000.0)
    # the prediction is kept, and calibrating again with the same point changes nothing
    assert cal.decode.predicted == p.decode.predicted
    assert calibrate(cal, [_measured(1024, 4.0, 800.0, 45.0)]) == cal
    assert load_profile(cal.to_json()) == cal


def test_calibration_between_two_measurements_interpolates_the_ratio() -> None:
    p = _profile()
    cal = calibrate(p, [_measured(64, 0.5, 400.0, 20.0), _measured(4096, 3.0, 1400.0, 90.0)])
    # ratio 2.0 at 64, 1.0 at 4096: at 1024 the ratio is 2 - (1024-64)/(4096-64) = 1.7619…
    assert latency_at(cal.decode, 1024) == pytest.approx(30.0 * (2 - 960 / 4032))


def test_profile_module_imports_no_performance_library() -> None:
    """The operator reads profiles without the optional extra: the module pulls in neither
    aiconfigurator nor pandas."""
    code = ("import sys, qdd.perf.profile; bad = [m for m in sys.modules if m.split('.')[0] in "
            "('aiconfigurator', 'aiconfigurator_core', 'pandas', 'numpy', 'kopf', 'kubernetes')]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_autoscalers_capacity_protocol():
    """PerfProfile answers qdd.autoscale's CapacityProfile (issue 27): at the profile's own lengths
    exactly the queries above; at other lengths to first order."""
    p = _profile()
    assert p.prefill_tokens_per_s(8192, 1000.0) == pytest.approx(3.0 * 8192)
    # half the prompt: the 1000 ms target reads as 2000 ms at the profiled length → the last point
    assert p.prefill_tokens_per_s(4096, 1000.0) == pytest.approx(4.0 * 8192)
    assert p.decode_concurrency(8192, 1024, 22.0) == pytest.approx(640.0)
    # twice the resident tokens: the KV capacity halves (5000 → 2500) and caps the answer
    assert p.decode_concurrency(2 * 8192 + 512, 1024, 1000.0) == pytest.approx(2500.0)
    with pytest.raises(ValueError, match="must be > 0"):
        p.decode_concurrency(0, 1024, 20.0)
