"""Benchmark results read by qdd: pure parsers of what benchmark clients write (no I/O)."""

from .serve_result import BenchResultError, LatencyStats, ServeResult, parse_serve_result

__all__ = ["BenchResultError", "LatencyStats", "ServeResult", "parse_serve_result"]
