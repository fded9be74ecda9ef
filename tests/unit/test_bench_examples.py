"""examples/benchmarks/: valid QwenDisaggBenchmarks, each pointing at a deployment of examples/, and
the same as what `qdd import-recipe` makes of the matching published recipe (less the dataset source)."""

from __future__ import annotations

from qdd.api.benchmark import KIND, parse_benchmark_spec
from qdd.recipe.objects import import_objects

from ..conftest import EXAMPLES, load
from .srt_recipes import recipe

BENCHMARKS = sorted((EXAMPLES / "benchmarks").glob("*.yaml"))


def test_every_benchmark_example_parses_and_points_at_an_example():
    assert BENCHMARKS
    names = {load(p)["metadata"]["name"] for p in EXAMPLES.glob("*.yaml")}
    for path in BENCHMARKS:
        obj = load(path)
        assert obj["kind"] == KIND
        spec = parse_benchmark_spec(obj["spec"])
        assert spec.deployment_name in names, path


def test_seed_benchmark_example_is_the_imported_recipes():
    ex = load(EXAMPLES / "benchmarks" / "qwen35-397b-4xdep2-1xdep8-sweep.yaml")
    sweep = import_objects(recipe(4, ""), None, "img").benchmark
    acc = import_objects(recipe(4, "-acc"), None, "img").benchmark
    assert sweep is not None and acc is not None
    assert ex["spec"]["sweep"] == sweep["spec"]["sweep"] and ex["metadata"]["name"] == sweep["metadata"]["name"]
    assert {k: v for k, v in ex["spec"]["accuracy"].items() if k not in ("source", "shots")} == acc["spec"]["accuracy"]
