"""An engine's start-up, phase by phase, from the lines vLLM itself logs while it starts. Pure.

Every number is one vLLM writes, or the time between two of its lines (vLLM 0.33.0 wheel, the parser
venv; the same lines in the CPU build 0.32.0 the real-engine tests run), read from the engine
container's log as the kubelet keeps it (``kubectl logs``), default text format ``(<process> pid=N)
LEVEL MM-DD HH:MM:SS [file:line] message`` (vllm/logger.py ``_FORMAT``; ``VLLM_LOGGING_PREFIX`` may
come first; timestamps have whole seconds and no year):

| field | line(s) | where vLLM writes it |
|---|---|---|
| ``weights`` | ``Loading weights took X seconds`` | model_executor/model_loader/default_loader.py |
| ``modelInit`` | ``Initializing model took X seconds`` (building the modules, before the weights) | model_executor/model_loader/base_loader.py |
| ``modelLoad`` | ``Model loading took X GiB memory and Y seconds`` (GPU: construction and weights) | v1/worker/gpu_model_runner.py |
| ``dynamo`` | ``Dynamo bytecode transform time: X s`` | compilation/backends.py |
| ``compile`` | ``Compiling a graph for compile range R takes X s`` (cold) or ``Directly load the compiled graph(s) for compile range R from the cache, took X s`` (warm), summed | compilation/backends.py |
| ``torchCompile`` | ``torch.compile took X s in total`` | compilation/monitor.py |
| ``warmup`` | ``Warming up model for the compilation...`` to ``Warming up done.`` (CPU: torch.compile and a warm-up run; timestamps) | v1/worker/cpu_model_runner.py |
| ``compileCache`` | ``hit``: ``Directly load AOT compilation from path`` or a graph loaded from the cache, nothing compiled; ``miss``: ``saved AOT compiled function`` or a graph compiled | compilation/decorators.py, backends.py |
| ``compileCacheRefused`` | ``Compiling model again due to a load failure from P, reason: R`` (a cache vLLM would not use) | compilation/decorators.py |
| ``kvProfile`` | ``Memory profiling takes X seconds`` (GPU), skipped when ``Applying persisted startup plan`` (``startupPlan``) | utils/mem_utils.py, v1/worker/startup_plan.py |
| ``graphs`` | ``Graph capturing finished in X secs`` | v1/worker/gpu_model_runner.py |
| ``engineInit`` | ``init engine (profile, create kv cache, warmup model) took X s`` | v1/engine/core.py |
| ``nixlRegistration`` | ``Initializing NIXL wrapper`` to the first line after ``Registering KV_Caches`` of the same process (the agent and the KV caches' registration; timestamps) | distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py |
| ``logSpan`` | the log's first line to ``Starting vLLM server on`` (the API server listens next; timestamps) | entrypoints/launchers/api_server/entry.py |

A phase no line gives is None (not 0): a CPU engine captures no CUDA graphs, a GPU one logs no
``warmup``. Several engine cores (the DP ranks of one pod) each write their own: the slowest is kept
(the pod is as slow as its slowest rank); the lines one process writes per compile range are summed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

MAX_LINE = 4096
"""Characters of one line looked at: vLLM's start-up lines are short; a longer line is a dump."""
MAX_REASON = 200

_LINE = re.compile(r"\((?P<proc>[^()]*?) pid=(?P<pid>\d+)\) (?P<level>[A-Z]+) (?P<ts>\d\d-\d\d \d\d:\d\d:\d\d)"
                   r"(?:\.\d+)? \[(?P<where>[^\]]*)\] (?P<msg>.*)")
_NUM = r"([0-9]+(?:\.[0-9]+)?)"
_DURATIONS: dict[str, re.Pattern[str]] = {
    "weights": re.compile(r"Loading weights took " + _NUM + r" seconds"),
    "modelInit": re.compile(r"Initializing model took " + _NUM + r" seconds"),
    "modelLoad": re.compile(r"Model loading took [0-9.]+ GiB memory and " + _NUM + r" seconds"),
    "dynamo": re.compile(r"Dynamo bytecode transform time: " + _NUM + r" s"),
    "compiled": re.compile(r"Compiling a graph for compile range .* takes " + _NUM + r" s"),
    "loaded": re.compile(r"Directly load the compiled graph\(s\) for compile range .* from the cache, took " + _NUM + r" s"),
    "torchCompile": re.compile(r"torch\.compile took " + _NUM + r" s in total"),
    "kvProfile": re.compile(r"Memory profiling takes " + _NUM + r" seconds"),
    "graphs": re.compile(r"Graph capturing finished in " + _NUM + r" secs"),
    "engineInit": re.compile(r"init engine \(profile, create kv cache, warmup model\) took " + _NUM + r" s"),
}
_SUMMED = frozenset({"compiled", "loaded", "dynamo"})
"""One line per compile range or per compiled piece: added up within a process."""
_HIT = ("Directly load AOT compilation from path",)
_MISS = ("saved AOT compiled function to",)
_REFUSED = re.compile(r"Compiling model again due to a load failure from .*?, reason: (.*)")
_SPANS = {  # name: (the line that starts it, the line that ends it; None: the next line of the process)
    "warmup": ("Warming up model for the compilation", "Warming up done."),
    "nixlRegistration": ("Initializing NIXL wrapper", None),
}
_NIXL_DONE = "Registering KV_Caches"
_PLAN_APPLIED = "Applying persisted startup plan"
_SERVING = "Starting vLLM server on"


@dataclass
class StartupLog:
    """Seconds per phase (None: no line said it); see the module docstring for the lines."""

    weights: float | None = None
    model_init: float | None = None
    model_load: float | None = None
    dynamo: float | None = None
    compile: float | None = None
    torch_compile: float | None = None
    warmup: float | None = None
    compile_cache: str | None = None
    compile_cache_refused: str | None = None
    kv_profile: float | None = None
    startup_plan: bool = False
    graphs: float | None = None
    engine_init: float | None = None
    nixl_registration: float | None = None
    log_span: float | None = None
    serving: bool = False
    """The API server said it starts serving: a whole start-up is in the text."""
    lines: int = 0

    def as_status(self) -> dict[str, object]:
        """camelCase, seconds rounded to 0.1 s, None left out (status.startup's shape)."""
        out: dict[str, object] = {
            "weightsSeconds": self.weights, "modelInitSeconds": self.model_init, "modelLoadSeconds": self.model_load,
            "dynamoSeconds": self.dynamo, "compileSeconds": self.compile, "torchCompileSeconds": self.torch_compile,
            "warmupSeconds": self.warmup, "compileCache": self.compile_cache,
            "compileCacheRefused": self.compile_cache_refused, "kvProfileSeconds": self.kv_profile,
            "startupPlan": True if self.startup_plan else None, "graphsSeconds": self.graphs,
            "engineInitSeconds": self.engine_init, "nixlRegistrationSeconds": self.nixl_registration,
            "logSpanSeconds": self.log_span,
        }
        return {k: (round(v, 1) if isinstance(v, float) else v) for k, v in out.items() if v is not None}


def _when(ts: str) -> float:
    """Seconds of a ``MM-DD HH:MM:SS`` stamp in a leap year (the log has no year; a start across a new
    year gives a negative span, which is dropped)."""
    return datetime.strptime(f"2000-{ts}", "%Y-%m-%d %H:%M:%S").timestamp()


def _max(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


@dataclass
class _Process:
    """What one process (``(EngineCore_DP0 pid=N)``, ``(Worker pid=N)``) said."""

    values: dict[str, float] = field(default_factory=dict)
    open_spans: dict[str, float] = field(default_factory=dict)
    nixl_done: bool = False
    hit: bool = False
    miss: bool = False

    def line(self, at: float, msg: str) -> None:
        for name, pat in _DURATIONS.items():
            m = pat.search(msg)
            if m:
                v = float(m.group(1))
                self.values[name] = self.values.get(name, 0.0) + v if name in _SUMMED else v
        self.hit |= any(s in msg for s in _HIT)
        self.miss |= any(s in msg for s in _MISS)
        self._spans(at, msg)

    def _spans(self, at: float, msg: str) -> None:
        if self.nixl_done and "nixlRegistration" in self.open_spans:  # the line after the registration
            self._close("nixlRegistration", at)
        for name, (start, end) in _SPANS.items():
            if end is not None and end in msg and name in self.open_spans:
                self._close(name, at)
            elif start in msg:
                self.open_spans[name] = at
        self.nixl_done |= _NIXL_DONE in msg and "nixlRegistration" in self.open_spans

    def _close(self, name: str, at: float) -> None:
        span = at - self.open_spans.pop(name)
        if span >= 0:
            self.values[name] = span


class _Scan:
    def __init__(self) -> None:
        self.out = StartupLog()
        self.procs: dict[str, _Process] = {}
        self.first: float | None = None

    def line(self, raw: str) -> None:
        m = _LINE.search(raw[:MAX_LINE])
        if not m:
            return
        try:
            at = _when(m["ts"])
        except ValueError:
            return
        out, msg = self.out, m["msg"]
        out.lines += 1
        self.first = at if self.first is None else self.first
        self.procs.setdefault(f"{m['proc']}/{m['pid']}", _Process()).line(at, msg)
        out.startup_plan |= _PLAN_APPLIED in msg
        refused = _REFUSED.search(msg)
        if refused and out.compile_cache_refused is None:
            out.compile_cache_refused = refused.group(1)[:MAX_REASON]
        if _SERVING in msg and not out.serving:
            out.serving = True
            if at >= self.first:
                out.log_span = at - self.first

    def result(self) -> StartupLog:
        out = self.out
        for p in self.procs.values():
            v = p.values
            out.weights, out.model_init = _max(out.weights, v.get("weights")), _max(out.model_init, v.get("modelInit"))
            out.model_load, out.dynamo = _max(out.model_load, v.get("modelLoad")), _max(out.dynamo, v.get("dynamo"))
            if "compiled" in v or "loaded" in v:
                out.compile = _max(out.compile, v.get("compiled", 0.0) + v.get("loaded", 0.0))
            out.torch_compile, out.warmup = _max(out.torch_compile, v.get("torchCompile")), _max(out.warmup, v.get("warmup"))
            out.kv_profile, out.graphs = _max(out.kv_profile, v.get("kvProfile")), _max(out.graphs, v.get("graphs"))
            out.engine_init = _max(out.engine_init, v.get("engineInit"))
            out.nixl_registration = _max(out.nixl_registration, v.get("nixlRegistration"))
        miss = any(p.miss or "compiled" in p.values for p in self.procs.values())
        hit = any(p.hit or "loaded" in p.values for p in self.procs.values())
        out.compile_cache = "miss" if miss else "hit" if hit else None
        return out


def parse_startup_log(text: str) -> StartupLog:
    """The start-up phases in ``text`` (an engine container's log from its first line; the caller
    bounds it). Never raises on odd input: a line that does not parse is skipped."""
    scan = _Scan()
    for raw in text.splitlines():
        scan.line(raw)
    return scan.result()
