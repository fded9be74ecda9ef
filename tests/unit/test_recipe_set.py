"""All 20 shapes of the published Qwen3.5 GB200 recipe set import without options, render, and every
vLLM flag of the recipe reaches each engine pod's argv with its value (qdd.recipe.objects)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from qdd.api.benchmark import parse_benchmark_spec
from qdd.recipe.names import cr_name
from qdd.recipe.objects import import_directory, import_objects

from .helpers import env_of, flag, objects_of, plan_of
from .srt_recipes import shapes, write_set

IMAGE = "qdd/vllm:0.33.0-cu13-arm64"
SHAPES = shapes()
SWEEP = [64, 128, 256, 512, 1024, 2048, 3072]
AT_VLLM_DEFAULT = {"pipeline-parallel-size": 1, "no-disable-hybrid-kv-cache-manager": True}
"""Recipe flags equal to vLLM 0.33's default, which qdd leaves out of the argv (the contract test
tests/contract/test_recipe_set_argv.py shows vLLM's parser reads the same value either way)."""


def test_the_set_has_twenty_shapes():
    assert len(SHAPES) == 20 and len({s for s, _ in SHAPES}) == 20


@pytest.mark.parametrize(("stem", "recipe"), SHAPES, ids=[s for s, _ in SHAPES])
def test_imports_without_options_with_a_deterministic_name(stem, recipe):
    imp = import_objects(recipe, None, IMAGE)
    name = imp.deployment["metadata"]["name"]
    assert name == f"qwen35-397b-{stem}" and len(name) <= 40
    assert import_objects(recipe, None, IMAGE).deployment == imp.deployment  # same input, same object
    said = "\n".join(imp.notes)
    assert f"metadata.name {name}: made from '{recipe['name']}'" in said and "nvfp4, gb200, disagg" in said
    assert "kv_both" in said and "kv_producer on prefill and kv_consumer on decode" in said


@pytest.mark.parametrize(("stem", "recipe"), SHAPES, ids=[s for s, _ in SHAPES])
def test_benchmark_of_each_variant(stem, recipe):
    imp = import_objects(recipe, None, IMAGE)
    bench = imp.benchmark
    assert bench is not None and bench["kind"] == "QwenDisaggBenchmark"
    assert bench["metadata"]["name"] == imp.deployment["metadata"]["name"] == bench["spec"]["deploymentName"]
    parse_benchmark_spec(bench["spec"])
    if stem.endswith("-acc"):
        assert bench["spec"] == {"deploymentName": bench["metadata"]["name"],
                                 "accuracy": {"passThreshold": 0.88, "repeats": 5}}
        assert imp.deployment["spec"]["workload"] == {"isl": 8192, "osl": 1024, "randomRangeRatio": 0.8,
                                                      "concurrency": 3072}
    else:
        levels = [int(stem[-4:])] if "-cc" in stem else SWEEP
        assert bench["spec"]["sweep"] == {"isl": 8192, "osl": 1024, "concurrencies": levels, "randomRangeRatio": 0.8,
                                          "promptsPerConcurrency": 8, "warmupsPerConcurrency": 1}
        assert imp.deployment["spec"]["workload"]["concurrency"] == max(levels)


def _argv_has(argv: tuple[str, ...], name: str, value: object) -> bool:
    if value is True:
        return f"--{name}" in argv
    return flag(list(argv), f"--{name}") == str(value)


@pytest.mark.parametrize(("stem", "recipe"), SHAPES, ids=[s for s, _ in SHAPES])
def test_every_recipe_flag_reaches_every_engine_argv(stem, recipe):
    cr = import_objects(recipe, None, IMAGE).deployment
    assert objects_of(cr)  # renders
    plan = plan_of(cr)
    n = int(stem.split("x")[0])
    assert len(plan.prefill.pods) == n and len(plan.decode.pods) == 2  # DEP8 = leader + worker over 2 trays
    for role, kv_role in ((plan.prefill, "kv_producer"), (plan.decode, "kv_consumer")):
        flags = recipe["backend"]["vllm_config"][role.role]
        for pod in role.pods:
            for name, value in flags.items():
                if name == "kv-transfer-config":
                    kv = json.loads(flag(list(pod.argv), "--kv-transfer-config"))
                    assert (kv["kv_connector"], kv["kv_load_failure_policy"], kv["kv_role"]) == (
                        "NixlConnector", "fail", kv_role)
                elif name in AT_VLLM_DEFAULT:
                    assert value == AT_VLLM_DEFAULT[name] and f"--{name}" not in pod.argv
                else:
                    assert _argv_has(pod.argv, name, value), (pod.name, name, value)
            env = {e.name: e.value for e in pod.env}
            assert env["VLLM_SSM_CONV_STATE_LAYOUT"] == "DS" and env["VLLM_LOGGING_COLOR"] == "0"
            assert not any(k.startswith("DYN_") for k in env)


def test_rendered_env_of_the_pods_has_no_dynamo_variable():
    objs = objects_of(import_objects(SHAPES[0][1], None, IMAGE).deployment)
    for o in objs:
        if o["kind"] in ("StatefulSet", "LeaderWorkerSet"):
            for c in o["spec"]["template"]["spec"]["containers"]:
                assert not any(k.startswith("DYN_") for k in env_of(c))


def test_directory_import_gives_forty_objects(tmp_path):
    write_set(tmp_path)
    done, errors = import_directory(tmp_path, IMAGE)
    assert errors == [] and len(done) == 20
    assert sorted(o["kind"] for i in done for o in i.objects()) == ["QwenDisaggBenchmark"] * 20 + ["QwenDisaggDeployment"] * 20


def test_cli_imports_a_directory_and_says_what_it_decided(tmp_path):
    write_set(tmp_path / "set")
    run = subprocess.run([sys.executable, "-m", "qdd.cli", "import-recipe", str(tmp_path / "set")],
                         capture_output=True, text=True, check=True)
    docs = list(yaml.safe_load_all(run.stdout))
    assert len(docs) == 40
    assert ("note: " + str(tmp_path / "set" / "7xdep2-1xdep8-cc5120.yaml") + ": metadata.name "
            "qwen35-397b-7xdep2-1xdep8-cc5120: made from 'qwen35-397b-nvfp4-gb200-disagg-7xdep2-1xdep8-cc5120'") in run.stderr
    out = subprocess.run([sys.executable, "-m", "qdd.cli", "import-recipe", str(tmp_path / "set"), "-o",
                          str(tmp_path / "out")], capture_output=True, text=True, check=True)
    assert out.stdout == "" and len(list((tmp_path / "out").glob("*.yaml"))) == 20
    pair = list(yaml.safe_load_all((tmp_path / "out" / "qwen35-397b-5xdep2-1xdep8-acc.yaml").read_text()))
    assert [d["kind"] for d in pair] == ["QwenDisaggDeployment", "QwenDisaggBenchmark"]
    assert pair[1]["spec"]["accuracy"]["repeats"] == 5


def test_cli_refuses_name_for_a_directory(tmp_path):
    write_set(tmp_path)
    run = subprocess.run([sys.executable, "-m", "qdd.cli", "import-recipe", str(tmp_path), "--name", "x"],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "--name: names one recipe" in run.stderr and run.stdout == ""


def test_two_recipes_shortened_to_one_name_are_both_refused(tmp_path):
    _, r = SHAPES[0]
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(r))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(r | {"name": r["name"].upper()}))
    done, errors = import_directory(tmp_path, IMAGE)
    assert done == [] and [(e[0].rsplit("/", 1)[1], e[1]) for e in errors] == [("a.yaml", "name"), ("b.yaml", "name")]
    assert "imports as 'qwen35-397b-4xdep2-1xdep8'" in errors[0][2]


@pytest.mark.parametrize(("raw", "want"), [
    ("qwen35-397b-4xdep2-1xdep8", "qwen35-397b-4xdep2-1xdep8"),
    ("Qwen35_397B", "qwen35-397b"),
    ("8x-a", "qdd-8x-a"),
    ("qwen35-397b-nvfp4-gb200-disagg-8xdep2-1xdep8-acc", "qwen35-397b-8xdep2-1xdep8-acc"),
])
def test_names(raw, want):
    assert cr_name(raw, "NVFP4", "gb200")[0] == want


def test_a_name_still_too_long_keeps_its_start_and_a_hash():
    raw = "a-very-long-recipe-name-with-many-words-that-never-shortens-enough"
    name, how = cr_name(raw, None, None)
    assert name.startswith("a-very-long-recipe-name-with-") and len(name) <= 40  # whole words within 31
    assert name.rsplit("-", 1)[1] == __import__("hashlib").sha256(raw.encode()).hexdigest()[:8]
    assert cr_name(raw + "-x", None, None)[0] != name and "SHA-256" in how
