"""`qdd plan` for people (table) and machines (-o json): the seed's predicted decode capacity with its
assumptions and the numbers behind it."""

from __future__ import annotations

import json
from contextlib import redirect_stdout
from io import StringIO

import pytest
import yaml

from qdd import cli, labels
from qdd.api import parse_resource
from qdd.plan import build_plan

from ..conftest import EXAMPLES, load

SEED = EXAMPLES / "qwen35-397b-4xdep2-1xdep8-cc5120.yaml"


@pytest.fixture(scope="module")
def plan_json() -> dict:
    buf = StringIO()
    with redirect_stdout(buf):
        cli.main(["plan", "-o", "json", "-f", str(SEED)])
    return json.loads(buf.getvalue())


def test_json_has_the_predicted_capacity_and_rank_budget(plan_json):
    dc = plan_json["decodeCapacity"]
    rank, cache = dc["rank"], dc["cache"]
    assert dc["target"] == 5120 and dc["perEndpoint"] == dc["predicted"]
    assert rank["hbmBytes"] == 189_471 * 2**20 and rank["gpuMemoryUtilization"] == 0.92
    assert rank["usableBytes"] == int(rank["hbmBytes"] * 0.92)
    assert rank["kvCacheBytes"] == (rank["usableBytes"] - rank["weightBytes"] - rank["activationBytes"]
                                    - rank["cudaGraphBytes"] - rank["nonTorchBytes"])
    assert round(rank["weightBytes"] / 1e9, 1) == 46.8
    assert cache["kvCacheDtypeSource"].startswith("checkpoint: ModelOpt NVFP4 exports")
    del cache["kvCacheDtypeSource"]
    assert cache == {"kvCacheDtype": "fp8", "kvBytesPerToken": 15_360, "gdnStateBytesPerRequest": 97_689_600,
                     "blockSize": 2_128, "pageBytes": 2_179_072, "layersPerGroup": 15, "attentionGroups": 1,
                     "gdnGroups": 3, "gdnBlocksPerRequestPerGroup": 1, "blocksPerRank": 3901}
    assert dc["meanResidentTokens"] == 7835.5
    assert dc["predicted"] == 8 * (rank["kvCacheBytes"] // dc["requestBytes"])


def test_seed_prediction_is_near_where_the_seed_ran_out(plan_json):
    """The seed ran out of decode KV just above 5,120 on one DEP8 (a calibration point, not an input):
    the prediction must be within the model's stated tolerance of it, and 5120 is planned with a warning."""
    dc = plan_json["decodeCapacity"]
    assert abs(dc["predicted"] - 5120) <= dc["tolerance"] * 5120
    assert dc["endpointsNeeded"] == (1 if dc["predicted"] >= 5120 else 2)
    tight = [w for w in plan_json["warnings"] if "predicted decode capacity" in w]
    assert len(tight) == (0 if dc["predicted"] >= 5120 else 1)


def test_json_roles(plan_json):
    p, d = plan_json["prefill"], plan_json["decode"]
    assert (p["topology"], p["endpoints"], p["gpus"], p["maxNumBatchedTokens"]) == ("DEP2", 4, 8, 16384)
    assert (d["topology"], d["podsPerEndpoint"], d["maxCudagraphCaptureSize"], d["maxNumSeqs"]) == ("DEP8", 2, 768, 1024)
    assert [pod["dpRanks"] for pod in d["pods"]] == [[0, 3], [4, 7]]
    assert d["pods"][1]["sideChannelPorts"] == [5604, 5605, 5606, 5607]
    assert plan_json["gpus"] == 16 and plan_json["minNodes"] == 4


def test_table_prints_capacity_with_its_assumptions(plan_json, capsys):
    cli.main(["plan", "-f", str(SEED)])
    out = capsys.readouterr().out
    predicted = plan_json["decodeCapacity"]["predicted"]
    assert f"Decode capacity (predicted): {predicted:,} concurrent requests (1 x DEP8" in out
    assert "target 5,120" in out
    assert "KV fp8 15,360 B/token; GDN state 93.2 MiB/request x 1 (1 + speculative tokens; SSM bfloat16)" in out
    assert "hybrid block 2,128 tokens" in out and "1 attention + 3 GDN groups x 15 layers" in out
    assert "ISL 8192, OSL 1024, range ratio 0.8" in out
    assert "assumptions:" in out and "estimates" in out and "+/-20% tolerance" in out
    assert "weights 46.8" in out
    lines = out.splitlines()
    assert lines[2].split() == ["ROLE", "ENDPOINTS", "TOPOLOGY", "PODS/EP", "GPUS/POD", "GPUS", "BATCHED-TOKENS",
                                "MAX-SEQS", "CUDAGRAPH-MAX", "ASYNC", "KV-ROLE"]
    assert lines[4].split() == ["decode", "1", "DEP8", "2", "4", "8", "16384", "1024", "768", "on", "kv_consumer"]


def test_plan_shows_the_settings_both_roles_share(plan_json):
    """What `qdd plan` says every engine pod runs with (the values the argv carries)."""
    e = plan_json["engine"]
    assert (e["kvCacheDtype"], e["maxModelLen"], e["kvLeaseSeconds"], e["revision"]) == ("fp8", 9216, 120, None)
    assert e["kvCacheDtypeSource"].startswith("checkpoint: ModelOpt NVFP4")


def test_plan_shows_the_generation_the_engine_pods_are_labelled_with(plan_json, capsys):
    """The rollout generation (qdd.plan.generation) in -o json and on the table's second line: the
    value of the qdd.dev/generation label on every engine pod `qdd render` prints."""
    gen = build_plan(parse_resource(load(SEED))).generation
    assert len(gen) == 8 and int(gen, 16) >= 0
    assert plan_json["generation"] == gen
    cli.main(["plan", "-f", str(SEED)])
    assert capsys.readouterr().out.splitlines()[1] == (
        f"Generation: {gen} (label qdd.dev/generation of every engine pod; a new value is rolled as a new "
        "generation: docs/rollouts.md)")
    cli.main(["render", "-f", str(SEED)])
    pods = [o for o in yaml.safe_load_all(capsys.readouterr().out)
            if o["kind"] in ("Pod", "StatefulSet") and o["metadata"]["labels"].get(labels.ROLE) in ("prefill", "decode")]
    assert pods and {o["metadata"]["labels"][labels.GENERATION] for o in pods} == {gen}


def test_a_gpus_per_node_other_than_the_gpu_kinds_is_warned_about():
    cr = load(EXAMPLES / "qwen35-397b-4xdep2-1xdep8-cc5120.yaml")
    cr["spec"].setdefault("cluster", {})["gpusPerNode"] = 8  # GB200 trays have 4
    [w] = [w for w in build_plan(parse_resource(cr)).warnings if "gpusPerNode" in w]
    assert w.startswith("spec.cluster.gpusPerNode 8 differs from a GB200 node's 4 GPUs")
    cr["spec"]["cluster"]["gpusPerNode"] = 4
    assert not [w for w in build_plan(parse_resource(cr)).warnings if "gpusPerNode" in w]


def test_a_benchmark_beside_the_deployment_is_skipped_with_a_note(tmp_path, capsys):
    """`qdd import-recipe` writes a deployment and its QwenDisaggBenchmark into one file: `qdd plan`
    plans the one and names the other; a file of benchmarks only has nothing to plan (exit 2)."""
    bench = sorted((EXAMPLES / "benchmarks").glob("*.yaml"))[0]
    both = tmp_path / "imported.yaml"
    both.write_text((EXAMPLES / "qwen35-397b-4xdep2-1xdep8.yaml").read_text() + "\n---\n" + bench.read_text())
    cli.main(["plan", "-f", str(both)])
    out, err = capsys.readouterr()
    assert out.startswith("default/qwen35-397b-4xdep2-1xdep8: ")
    assert err == f"note: {both} (document 2): a QwenDisaggBenchmark, checked, not planned (kubectl apply it with the deployment)\n"
    with pytest.raises(SystemExit) as e:
        cli.main(["plan", "-f", str(bench)])
    assert e.value.code == 2
    assert capsys.readouterr().err.endswith(f"error: {bench}: no QwenDisaggDeployment in it\n")
