"""The QwenDisaggDeployment the real-engine tests serve, and what qdd renders for it.

One prefill and one decode endpoint of one engine each (DP 1, TP 1, no expert parallel) for the
tiny Qwen3.5 MoE hybrid checkpoint of :mod:`tests.realengine.checkpoint`, on engine profile
0.32.0 (the vLLM version of the CPU build, hack/cpu-engine-venv.sh). The architecture numbers
are the checkpoint's config.json (text_config), given inline because the catalog does not hold
a test model. ``gpuType: H200`` only selects qdd's defaults (1 GPU per engine pod); the engines
run on CPU, which the harness says where it substitutes the device.
"""

from __future__ import annotations

import copy
from typing import Any

from qdd.api import parse_resource
from qdd.plan import build_plan
from qdd.render import render

MODEL_PATH = "/models/tiny-qwen35-moe"
"""spec.model.name: where the PVC mounts the checkpoint in a pod (spec.model.source.pvc)."""
SERVED = "tiny-qwen35-moe"

# The checkpoint's config.json numbers (tests/realengine/checkpoint.py, TEXT_CONFIG).
ARCHITECTURE = {
    "name": "Tiny-Qwen3.5-MoE", "vllmClass": "Qwen3_5MoeForConditionalGeneration",
    "numHiddenLayers": 4, "fullAttentionInterval": 4, "numAttentionHeads": 4, "numKeyValueHeads": 2,
    "headDim": 64, "linearNumKeyHeads": 2, "linearNumValueHeads": 2, "linearKeyHeadDim": 128,
    "linearValueHeadDim": 128, "linearConvKernelDim": 4, "hiddenSize": 128, "vocabSize": 512,
    "numExperts": 4, "numExpertsPerTok": 2, "moeIntermediateSize": 64, "sharedExpertIntermediateSize": 64,
}

CR: dict[str, Any] = {
    "apiVersion": "qdd.dev/v1alpha1",
    "kind": "QwenDisaggDeployment",
    "metadata": {"name": "tiny", "namespace": "default"},
    "spec": {
        "model": {"name": MODEL_PATH, "servedModelName": SERVED, "architecture": ARCHITECTURE,
                  "source": {"pvc": {"claimName": "tiny-model"}}},
        "engine": {"image": "qdd/vllm:0.32.0-cpu", "vllmVersion": "0.32.0"},
        "workload": {"isl": 64, "osl": 32, "concurrency": 4},
        "prefill": {"endpoints": 1, "topology": {"dataParallel": 1, "expertParallel": False}},
        "decode": {"endpoints": 1, "topology": {"dataParallel": 1, "expertParallel": False}},
        "cluster": {"gpuType": "H200"},
    },
}


def tiny_cr() -> dict[str, Any]:
    """A fresh copy of :data:`CR`."""
    return copy.deepcopy(CR)


def rendered(cr: dict[str, Any]) -> list[dict[str, Any]]:
    """qdd's objects for ``cr``: parse (the API's rules), plan, render — the operator's own path."""
    return render(build_plan(parse_resource(cr)))


def engine_container(objs: list[dict[str, Any]], role: str) -> dict[str, Any]:
    """The ``vllm`` container of the one engine pod template of ``role`` (prefill or decode)."""
    sets = [o for o in objs if o["kind"] == "StatefulSet" and o["metadata"]["labels"].get("qdd.dev/role") == role]
    assert len(sets) == 1, f"expected one {role} StatefulSet, got {len(sets)}"
    assert sets[0]["spec"]["replicas"] == 1
    (c,) = [c for c in sets[0]["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm"]
    return c
