"""Hypothesis strategies for QwenDisaggDeployments: mostly valid resources over the whole range
the API accepts (topologies, workloads, tuning, placement, extra args in every spelling), plus
the near-misses a user writes (tensor parallel that differs between roles, owned flags,
mis-sized decode). Used by test_fuzz_render.py; ``make fuzz`` runs it longer."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

MODELS = ["Qwen3.5-397B-A17B", "Qwen3.5-122B-A10B", "Qwen3.5-35B-A3B", "Qwen3.5-27B", "Qwen3-Next-80B-A3B"]
HARMLESS_ARGS = [["--enable-eplb"], ["--max-logprobs", "5"], ["--enforce-eager"], ["--block-size", "32"],
                 ["--block_size=32"], ["-q", "fp8"], ["--seed", "1"], ["--disable-log-stats"]]
OWNED_SPELLINGS = [["--asy"], ["-tp", "2"], ["--head"], ["-n2"], ["--max_num_seqs=8"], ["--no-enable-prefix"],
                   ["--kv-transfer-config.kv_role", "kv_both"], ["-as", "1"], ["--port=9000"]]

PORTS = [(8000, 29550)] * 6 + [(8080, 29551), (9000, 29550), (5600, 29550), (8000, 8000)]
"""(http, dataParallelRpc): mostly valid; 5600 collides with a side-channel base, 8000/8000 with itself."""
dns_label = st.from_regex(r"\A[a-z]([-a-z0-9]{0,20}[a-z0-9])?\Z", fullmatch=True)
label_value = st.from_regex(r"\A([A-Za-z0-9]([-A-Za-z0-9_.]{0,10}[A-Za-z0-9])?)?\Z", fullmatch=True)


@st.composite
def topology(draw: Any, dps: list[int], tp: int) -> dict[str, Any]:
    return {"dataParallel": draw(st.sampled_from(dps)), "tensorParallel": tp, "expertParallel": draw(st.booleans())}


@st.composite
def tuning(draw: Any) -> dict[str, Any]:
    t: dict[str, Any] = {}
    if draw(st.booleans()):
        t["streamInterval"] = draw(st.integers(1, 200))
    if draw(st.booleans()):
        t["gpuMemoryUtilization"] = draw(st.floats(0.5, 0.95))
    if draw(st.integers(0, 5)) == 0:
        t["maxNumSeqs"] = draw(st.integers(1, 4096))
    if draw(st.integers(0, 5)) == 0:
        t["maxCudagraphCaptureSize"] = draw(st.integers(1, 2048))
    if draw(st.integers(0, 5)) == 0:
        t["maxNumBatchedTokens"] = draw(st.integers(1, 65536))
    if draw(st.booleans()):
        t["apiServerCount"] = draw(st.integers(1, 4))
    return t


@st.composite
def resources(draw: Any) -> dict[str, Any]:
    """One QwenDisaggDeployment as a dict (apiVersion, kind, metadata, spec)."""
    model = draw(st.sampled_from(MODELS))
    suffix = draw(st.sampled_from(["-NVFP4", "-FP8", ""]))
    tp = draw(st.sampled_from([1, 1, 1, 2, 4]))
    isl = draw(st.one_of(st.integers(1, 16384), st.integers(1, 262144)))
    spec: dict[str, Any] = {
        "model": {"name": f"{draw(st.sampled_from(['nvidia', 'Qwen']))}/{model}{suffix}"},
        "engine": {"image": "registry.example/qdd-vllm:0.33.0",
                   "vllmVersion": draw(st.sampled_from(["0.33.0", "0.33.0", "0.23.0"]))},
        "workload": {"isl": isl, "osl": draw(st.integers(1, 8192)),
                     "randomRangeRatio": draw(st.sampled_from([1.0, 0.8, 0.5, 0.01])),
                     "concurrency": draw(st.one_of(st.integers(1, 6000), st.integers(1, 1 << 20)))},
        "prefill": {"endpoints": draw(st.integers(1, 12)), "topology": draw(topology([1, 2, 4, 8], tp)),
                    "tuning": draw(tuning())},
        "decode": {"endpoints": draw(st.integers(1, 4)),
                   "topology": draw(topology([1, 2, 4, 8, 16, 32], draw(st.sampled_from([tp] * 9 + [1, 2])))),
                   "tuning": draw(tuning())},
        "cluster": {"gpuType": draw(st.sampled_from(["GB200", "GB200", "B200", "H200", "H100"])),
                    "sameNVLinkDomain": draw(st.booleans())},
        "kvTransfer": {"sideChannelPort": draw(st.integers(1024, 65000)),
                       "preflight": {"enabled": draw(st.booleans())}},
        "ports": dict(zip(("http", "dataParallelRpc"), PORTS[draw(st.integers(0, len(PORTS) - 1))], strict=True)),
    }
    if draw(st.booleans()):
        spec["cluster"]["nodeSelector"] = draw(st.dictionaries(
            st.from_regex(r"\A[a-z]{1,8}(\.example/[a-z]{1,8})?\Z", fullmatch=True), label_value, max_size=3))
    if draw(st.booleans()):
        spec["cluster"]["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": draw(label_value),
                                           "effect": "NoSchedule"}]
    if draw(st.booleans()):
        spec["model"]["source"] = {"pvc": {"claimName": draw(dns_label), "subPath": f"{model}{suffix}"}}
        if draw(st.booleans()):
            spec["model"]["cache"] = {"digest": "sha256:" + draw(st.from_regex(r"\A[0-9a-f]{64}\Z", fullmatch=True))}
    shared = draw(st.lists(st.sampled_from(HARMLESS_ARGS), max_size=2))
    for role in ("prefill", "decode"):
        # Mostly the same extra args on both roles (must-match flags then agree), sometimes not.
        args = list(shared) if draw(st.integers(0, 4)) else draw(st.lists(st.sampled_from(HARMLESS_ARGS), max_size=2))
        if draw(st.integers(0, 9)) == 9:
            args.append(draw(st.sampled_from(OWNED_SPELLINGS)))
        spec[role]["extraArgs"] = [a for group in args for a in group]
        if draw(st.booleans()):
            spec[role]["extraEnv"] = [{"name": "NCCL_DEBUG", "value": "WARN"}]
    return {"apiVersion": "qdd.dev/v1alpha1", "kind": "QwenDisaggDeployment",
            "metadata": {"name": draw(dns_label), "namespace": draw(dns_label)}, "spec": spec}
