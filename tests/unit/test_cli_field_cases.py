"""Field failures (docs/facts/field-failures.md#design-against-these) refused by `qdd render` run as a process: exit 2, the field named on
stderr, no traceback, nothing on stdout. The processes run in parallel once per session."""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import yaml

from ..conftest import EXAMPLES, ROOT, load
from .helpers import flag

BASE = load(EXAMPLES / "qwen35-397b-4xdep2-1xdep8.yaml")


def _tuning(role: str, **kw: Any) -> Callable[[dict], None]:
    return lambda s: s[role].setdefault("tuning", {}).update(kw)


def _host(h: str) -> Callable[[dict], None]:
    return lambda s: s["kvTransfer"].update(sideChannelHost=h)


def _ports(**kw: Any) -> Callable[[dict], None]:
    return lambda s: s.setdefault("ports", {}).update(kw)


def _extra_args(role: str, *args: str) -> Callable[[dict], None]:
    return lambda s: s[role].update(extraArgs=list(args))


def _old_engine(s: dict) -> None:
    s["engine"]["vllmVersion"] = "0.23.0"


# id: (mutation of spec, field named on stderr)
REFUSED: dict[str, tuple[Callable[[dict], None], str]] = {
    "tp-differs": (lambda s: s["prefill"]["topology"].update(tensorParallel=2), "spec.decode.topology.tensorParallel"),
    "kv-dtype-differs": (_tuning("decode", kvCacheDtype="fp8"), "spec.decode.tuning.kvCacheDtype"),
    "ssm-dtype-differs": (_tuning("prefill", mambaSsmCacheDtype="float32"), "spec.decode.tuning.mambaSsmCacheDtype"),
    "prefix-caching-prefill": (_tuning("prefill", prefixCaching=True), "spec.prefill.tuning.prefixCaching"),
    "prefix-caching-decode": (_tuning("decode", prefixCaching=True), "spec.decode.tuning.prefixCaching"),
    "host-0.0.0.0": (_host("0.0.0.0"), "spec.kvTransfer.sideChannelHost"),
    "host-localhost": (_host("localhost"), "spec.kvTransfer.sideChannelHost"),
    "host-LocalHost": (_host("LocalHost"), "spec.kvTransfer.sideChannelHost"),
    "host-127.0.0.5": (_host("127.0.0.5"), "spec.kvTransfer.sideChannelHost"),
    "host-::1": (_host("::1"), "spec.kvTransfer.sideChannelHost"),
    "rpc-equals-http": (_ports(http=8000, dataParallelRpc=8000), "spec.ports.dataParallelRpc"),
    "rpc-zero": (_ports(dataParallelRpc=0), "spec.ports.dataParallelRpc"),
    "async-on-old-engine": (lambda s: (_old_engine(s), _tuning("decode", asyncScheduling=True)(s)),
                            "spec.decode.tuning.asyncScheduling"),
    "typo": (lambda s: s["decode"].update(topolgy=s["decode"]["topology"]), "spec.decode.topolgy"),
    "owned-max-num-seqs": (_extra_args("decode", "--max-num-seqs=5"), "spec.decode.extraArgs[0]"),
    "owned-no-async": (_extra_args("prefill", "--enable-eplb", "--no-async-scheduling"), "spec.prefill.extraArgs[1]"),
    "owned-dp-rank": (_extra_args("decode", "--data-parallel-rank", "3"), "spec.decode.extraArgs[0]"),
    "owned-short-alias": (_extra_args("decode", "-tp", "2"), "spec.decode.extraArgs[0]"),
    "owned-env": (lambda s: s["decode"].update(extraEnv=[{"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "value": "10.0.0.1"}]),
                  "spec.decode.extraEnv[0].name"),
    "dp6-on-4-gpu-nodes": (lambda s: s["decode"]["topology"].update(dataParallel=6), "spec.decode.topology.dataParallel"),
    "side-channel-covers-http": (lambda s: s["kvTransfer"].update(sideChannelPort=7998), "spec.ports.http"),
    "bad-name": (None, "metadata.name"),
    "canary-timeout-not-below-period": (lambda s: s.update(validation={"canary": {"periodSeconds": 30,
                                                                                  "timeoutSeconds": 30}}),
                                        "spec.validation.canary.timeoutSeconds: must be below periodSeconds"),
    # engine correctness, part 2 (issue 11)
    "recompute": (lambda s: s["kvTransfer"].update(loadFailurePolicy="recompute"), "spec.kvTransfer.loadFailurePolicy"),
    "nvfp4-kv": (lambda s: (_tuning("prefill", kvCacheDtype="nvfp4")(s), _tuning("decode", kvCacheDtype="nvfp4")(s)),
                 "spec.prefill.tuning.kvCacheDtype"),
    "all2all-removed-pplx": (_tuning("decode", all2allBackend="pplx"), "spec.decode.tuning.all2allBackend"),
    "all2all-deepep-no-switch": (_tuning("prefill", all2allBackend="deepep_high_throughput"),
                                 "spec.prefill.tuning.all2allBackend"),
    "all2all-deepep-ll-across-trays": (_tuning("decode", all2allBackend="deepep_low_latency",
                                               allowExperimentalAll2all=True), "spec.decode.tuning.all2allBackend"),
    "all2all-moonep-across-trays": (_tuning("decode", all2allBackend="moonep"), "spec.decode.tuning.all2allBackend"),
    "owned-cudagraph-capture-sizes": (_extra_args("decode", "--cudagraph-capture-sizes", "1", "2", "4"),
                                      "spec.decode.extraArgs[0]"),
    "owned-speculative-config": (_extra_args("decode", "--speculative-config", '{"method":"mtp"}'),
                                 "spec.decode.extraArgs[0]"),
    "mtp-capture-off-multiple": (lambda s: (s.update(speculative={"numSpeculativeTokens": 2}),
                                            s["workload"].update(concurrency=1024),
                                            _tuning("decode", maxCudagraphCaptureSize=1024)(s)),
                                 "spec.decode.tuning.maxCudagraphCaptureSize"),
    "max-num-seqs-above-gdn-blocks": (lambda s: (_tuning("decode", maxNumSeqs=8000)(s)), "spec.decode.tuning.maxNumSeqs"),
    "qwen38-on-dep8": (lambda s: (s["model"].update(name="nvidia/Qwen3.8-2.4T-A95B-NVFP4"),
                                  s["prefill"].update(endpoints=1)), "spec.decode.topology.dataParallel"),
}
ACCEPTED: dict[str, Callable[[dict], None]] = {
    "old-engine-defaults": _old_engine,
    "extra-flag-passes": _extra_args("decode", "--enable-eplb"),
    "deepep-ll-within-one-tray-with-switch": lambda s: _tuning("prefill", all2allBackend="deepep_low_latency",
                                                               allowExperimentalAll2all=True)(s),
    "mtp-k2": lambda s: (s.update(speculative={"method": "mtp", "numSpeculativeTokens": 2}),
                         s["workload"].update(concurrency=1024)),
}


def _cr(case: str) -> dict:
    cr = copy.deepcopy(BASE)
    if case == "bad-name":
        cr["metadata"]["name"] = "Qwen35_397B"
    elif case in REFUSED:
        REFUSED[case][0](cr["spec"])
    else:
        ACCEPTED[case](cr["spec"])
    return cr


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "qdd.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=60)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    d = tmp_path_factory.mktemp("cases")
    (d / "invalid.yaml").write_text("spec: [unclosed\n")
    jobs = {"missing-file": ("render", "-f", str(d / "absent.yaml")),
            "invalid-yaml": ("render", "-f", str(d / "invalid.yaml")),
            "directory": ("render", "-f", str(d))}
    for case in [*REFUSED, *ACCEPTED]:
        path = d / f"{case}.yaml"
        path.write_text(yaml.safe_dump(_cr(case)))
        jobs[case] = ("render", "-f", str(path))
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {case: pool.submit(_run, *args) for case, args in jobs.items()}
    return {case: f.result() for case, f in futures.items()}


@pytest.mark.parametrize("case", list(REFUSED))
def test_refused_with_the_field_named(results, case):
    out = results[case]
    assert out.returncode == 2, out.stderr
    assert "error: " in out.stderr and REFUSED[case][1] in out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""


@pytest.mark.parametrize("case", ["missing-file", "invalid-yaml", "directory"])
def test_bad_input_files_exit_2_without_traceback(results, case):
    out = results[case]
    assert out.returncode == 2 and out.stderr.startswith("error: ") and "Traceback" not in out.stderr


def _engine_args(out: subprocess.CompletedProcess) -> list[list[str]]:
    assert out.returncode == 0, out.stderr
    objs = list(yaml.safe_load_all(out.stdout))
    pods = [o["spec"] for o in objs if o["kind"] == "Pod"]
    pods += [o["spec"]["template"]["spec"] for o in objs if o["kind"] == "StatefulSet"]
    return [p["containers"][0]["args"] for p in pods]


def test_old_engine_renders_async_off_and_kv_both(results):
    argvs = _engine_args(results["old-engine-defaults"])
    assert len(argvs) == 3
    for args in argvs:
        assert "--no-async-scheduling" in args and "--async-scheduling" not in args
        assert '"kv_role":"kv_both"' in flag(args, "--kv-transfer-config")


def test_non_owned_extra_flag_passes_through(results):
    leader, worker, prefill = _engine_args(results["extra-flag-passes"])
    assert leader[-1] == "--enable-eplb" and worker[-1] == "--enable-eplb"
    assert "--enable-eplb" not in prefill
