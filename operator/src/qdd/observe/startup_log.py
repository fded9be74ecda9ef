"""An engine's start-up, phase by phase, from the lines vLLM itself logs while it starts. Pure.

Every number is one vLLM writes (vLLM 0.33.0 wheel, the parser venv; the same lines in the CPU
build 0.32.0 the real-engine tests run), read from the engine container's log as the kubelet keeps
it (``kubectl logs``), default text format ``(<process> pid=N) LEVEL MM-DD HH:MM:SS [file:line]
message`` (vllm/logger.py ``_FORMAT``; ``VLLM_LOGGING_PREFIX`` may come first):

| phase | line | where vLLM writes it |
|---|---|---|
| ``weights`` | ``Loading weights took X seconds`` | model_executor/model_loader/default_loader.py |
| ``modelLoad`` | ``Model loading took X GiB memory and Y seconds`` (weights + model init) | v1/worker/gpu_model_runner.py |
| ``dynamo`` | ``Dynamo bytecode transform time: X s`` | compilation/backends.py |
| ``compile`` | ``Compiling a graph for compile range R takes X s`` (cold) or ``Directly load the compiled graph(s) for compile range R from the cache, took X s`` (warm) | compilation/backends.py |
| ``torchCompile`` | ``torch.compile took X s in total`` | compilation/monitor.py |
| ``kvProfile`` | ``Memory profiling takes X seconds`` (GPU), or skipped: ``Applying persisted startup plan`` | utils/mem_utils.py, v1/worker/startup_plan.py |
| ``graphs`` | ``Graph capturing finished in X secs`` | v1/worker/gpu_model_runner.py |
| ``engineInit`` | ``init engine (profile, create kv cache, warmup model) took X s`` | v1/engine/core.py |
| ``nixlRegistration`` | from ``Registering KV_Caches`` to the next line of the same process (timestamps: whole seconds) | distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py |
| ``logSpan`` | first line to the line that says the API server serves (timestamps: whole seconds) | entrypoints (uvicorn: ``Application startup complete``) |

A phase a line does not give is None (not 0): an engine that does not compile has no compile line,
a CPU engine captures no CUDA graphs. Several engine cores (DP ranks of one pod) each log their
own: the slowest one is kept (the pod is as slow as its slowest rank), the compile lines of one
process are summed (one per compile range). ``compileCache``: ``hit`` when every graph came from
the cache, ``miss`` when one was compiled, None without torch.compile lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

MAX_LINE = 4096
"""Characters of one line looked at: vLLM's start-up lines are short; a longer line is a dump."""

_LINE = re.compile(r"\((?P<proc>[^()]*?) pid=(?P<pid>\d+)\) (?P<level>[A-Z]+) (?P<ts>\d\d-\d\d \d\d:\d\d:\d\d)"
                   r"(?:\.\d+)? \[(?P<where>[^\]]*)\] (?P<msg>.*)")
_NUM = r"([0-9]+(?:\.[0-9]+)?)"
_PATTERNS: dict[str, re.Pattern[str]] = {
    "weights": re.compile(r"Loading weights took " + _NUM + r" seconds"),
    "modelLoad": re.compile(r"Model loading took [0-9.]+ GiB memory and " + _NUM + r" seconds"),
    "dynamo": re.compile(r"Dynamo bytecode transform time: " + _NUM + r" s"),
    "compiled": re.compile(r"Compiling a graph for compile range .* takes " + _NUM + r" s"),
    "loaded": re.compile(r"Directly load the compiled graph\(s\) for compile range .* from the cache, took " + _NUM + r" s"),
    "torchCompile": re.compile(r"torch\.compile took " + _NUM + r" s in total"),
    "kvProfile": re.compile(r"Memory profiling takes " + _NUM + r" seconds"),
    "graphs": re.compile(r"Graph capturing finished in " + _NUM + r" secs"),
    "engineInit": re.compile(r"init engine \(profile, create kv cache, warmup model\) took " + _NUM + r" s"),
}
_PLAN_APPLIED = "Applying persisted startup plan"
_NIXL = "Registering KV_Caches"
_SERVING = ("Application startup complete", "Starting vLLM API server")


@dataclass
class StartupLog:
    """Seconds per phase (None: no line said it); see the module docstring for the lines."""

    weights: float | None = None
    model_load: float | None = None
    dynamo: float | None = None
    compile: float | None = None
    compile_cache: str | None = None
    torch_compile: float | None = None
    kv_profile: float | None = None
    startup_plan: bool = False
    graphs: float | None = None
    engine_init: float | None = None
    nixl_registration: float | None = None
    log_span: float | None = None
    serving: bool = False
    """The API server said it serves (a complete start-up is in the text)."""
    lines: int = 0
    per_process: dict[str, dict[str, float]] = field(default_factory=dict)

    def as_status(self) -> dict[str, object]:
        """camelCase, seconds rounded to 0.1 s, None left out (the status' shape)."""
        out: dict[str, object] = {
            "weightsSeconds": self.weights, "modelLoadSeconds": self.model_load, "dynamoSeconds": self.dynamo,
            "compileSeconds": self.compile, "compileCache": self.compile_cache,
            "torchCompileSeconds": self.torch_compile, "kvProfileSeconds": self.kv_profile,
            "startupPlan": True if self.startup_plan else None, "graphsSeconds": self.graphs,
            "engineInitSeconds": self.engine_init, "nixlRegistrationSeconds": self.nixl_registration,
            "logSpanSeconds": self.log_span,
        }
        return {k: (round(v, 1) if isinstance(v, float) else v) for k, v in out.items() if v is not None}


def _when(ts: str, year: int = 2000) -> float:
    """Seconds of a ``MM-DD HH:MM:SS`` stamp in a leap year (the log has no year; a start that spans a
    new year is off by a year, and shows as a negative span, which is dropped)."""
    return datetime.strptime(f"{year}-{ts}", "%Y-%m-%d %H:%M:%S").timestamp()


def _max(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def parse_startup_log(text: str) -> StartupLog:
    """The start-up phases in ``text`` (an engine container's log from its first line; bounded by the
    caller). Never raises on odd input: lines that do not parse are skipped."""
    out = StartupLog()
    per: dict[str, dict[str, float]] = {}
    first: float | None = None
    nixl_at: dict[str, float] = {}
    for raw in text.splitlines():
        m = _LINE.search(raw[:MAX_LINE])
        if not m:
            continue
        out.lines += 1
        proc, msg = f"{m['proc']}/{m['pid']}", m["msg"]
        try:
            at = _when(m["ts"])
        except ValueError:
            continue
        first = at if first is None else first
        if proc in nixl_at:
            span = at - nixl_at.pop(proc)
            if span >= 0:
                out.nixl_registration = _max(out.nixl_registration, span)
        if _NIXL in msg:
            nixl_at[proc] = at
        if _PLAN_APPLIED in msg:
            out.startup_plan = True
        if not out.serving and any(s in msg for s in _SERVING) and "Starting vLLM API server" not in msg:
            out.serving = True
            if at - first >= 0:
                out.log_span = at - first
        for name, pat in _PATTERNS.items():
            hit = pat.search(msg)
            if hit:
                mine = per.setdefault(proc, {})
                value = float(hit.group(1))
                # one line per compile range (summed); the others once per process (the last kept)
                mine[name] = mine.get(name, 0.0) + value if name in ("compiled", "loaded", "dynamo") else value
    for mine in per.values():
        out.weights = _max(out.weights, mine.get("weights"))
        out.model_load = _max(out.model_load, mine.get("modelLoad"))
        out.dynamo = _max(out.dynamo, mine.get("dynamo"))
        compiled, loaded = mine.get("compiled"), mine.get("loaded")
        if compiled is not None or loaded is not None:
            out.compile = _max(out.compile, (compiled or 0.0) + (loaded or 0.0))
            state = "miss" if compiled is not None else "hit"
            out.compile_cache = "miss" if "miss" in (out.compile_cache, state) else state
        out.torch_compile = _max(out.torch_compile, mine.get("torchCompile"))
        out.kv_profile = _max(out.kv_profile, mine.get("kvProfile"))
        out.graphs = _max(out.graphs, mine.get("graphs"))
        out.engine_init = _max(out.engine_init, mine.get("engineInit"))
    out.per_process = per
    return out
