"""Benchmark results read by qdd: pure parsers of what benchmark clients write (no I/O), and the
QwenDisaggBenchmark's runs: ``serve_result`` (a parser of ``vllm bench serve``'s printed or saved
result, used by the real-engine tests), ``results`` (the saved result JSON → compact termination
message → status sweep point), ``gsm8k`` (the accuracy evaluation and its result), ``observe``,
``report`` (Pareto figure and table).

``results`` and ``gsm8k`` use the standard library only: the benchmark Jobs run them as files with
the engine image's python (running a file does not import this package).
"""

from .serve_result import BenchResultError, LatencyStats, ServeResult, parse_serve_result

__all__ = ["BenchResultError", "LatencyStats", "ServeResult", "parse_serve_result"]
