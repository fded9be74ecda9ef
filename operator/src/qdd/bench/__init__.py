"""Benchmark results read by qdd: pure parsers of what benchmark clients write (no I/O), and the
QwenDisaggBenchmark's runs: ``results`` (qdd's one parser of ``vllm bench serve``'s saved result:
JSON → compact termination message → status sweep point; also read by the contract and real-engine
tests), ``gsm8k`` (the accuracy evaluation and its result), ``observe``, ``report`` (Pareto figure
and table).

``results`` and ``gsm8k`` use the standard library only: the benchmark Jobs run them as files with
the engine image's python (running a file does not import this package).
"""

from .results import ResultError, ServeResult, parse_serve_result

__all__ = ["ResultError", "ServeResult", "parse_serve_result"]
