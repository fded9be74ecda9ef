"""The CustomResourceDefinition of QwenDisaggBenchmark (qwendisaggbenchmarks.qdd.dev), generated from
:mod:`qdd.api.benchmark` with the same structural rewrite as the deployment's (:func:`qdd.api.crd.structural`)."""

from __future__ import annotations

from typing import Any

from .. import labels
from .benchmark import KIND, PLURAL, SHORT_NAME, SINGULAR, BenchmarkSpec, BenchmarkStatus
from .crd import structural
from .types import DNS1123_SUBDOMAIN

PRINTER_COLUMNS = [
    {"name": "Deployment", "type": "string", "jsonPath": ".spec.deploymentName", "description": "The QwenDisaggDeployment measured."},
    {"name": "Topology", "type": "string", "jsonPath": ".status.topology", "description": "Its shape, e.g. 4xDEP2-1xDEP8."},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Tok/s/GPU", "type": "number", "jsonPath": ".status.bestTotalTokensPerSecondPerGpu", "description": "Highest total tok/s per GPU of the sweep."},
    {"name": "Accuracy", "type": "number", "jsonPath": ".status.accuracy.mean", "description": "Mean GSM8K accuracy."},
    {"name": "Passed", "type": "string", "jsonPath": '.status.conditions[?(@.type=="AccuracyPassed")].status'},
    {"name": "Complete", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Complete")].status'},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def openapi_schema() -> dict[str, Any]:
    spec = structural(BenchmarkSpec.model_json_schema(by_alias=True, mode="validation"))
    status = structural(BenchmarkStatus.model_json_schema(by_alias=True, mode="validation"))
    spec["description"] = "Which deployment to measure, and how: a concurrency sweep and/or a GSM8K accuracy run."
    status["description"] = "Results, written by the operator."
    return {
        "type": "object",
        "description": "Benchmark and accuracy runs against a QwenDisaggDeployment's router.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "Versioned schema of this object: qdd.dev/v1alpha1."},
            "kind": {"type": "string", "description": f"REST resource this object represents: {KIND}."},
            # Job and ConfigMap names append up to 16 characters (-accuracy-r20, -sweep-c1048576 is cut).
            "metadata": {"type": "object", "properties": {"name": {
                "type": "string", "maxLength": 40,
                "description": "At most 40 characters: Job and ConfigMap names are built from it."}}},
            "spec": spec,
            "status": status,
        },
        "x-kubernetes-validations": [{
            "rule": f"self.metadata.name.matches(r'{DNS1123_SUBDOMAIN}')",
            "message": "metadata.name must be lowercase letters, digits, '-' and '.'"}],
    }


def benchmark_crd() -> dict[str, Any]:
    """The CRD object for qwendisaggbenchmarks.qdd.dev (apiextensions.k8s.io/v1)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{labels.GROUP}", "labels": {labels.PART_OF: "qdd"}},
        "spec": {
            "group": labels.GROUP,
            "names": {"kind": KIND, "listKind": f"{KIND}List", "plural": PLURAL, "singular": SINGULAR,
                      "shortNames": [SHORT_NAME], "categories": ["all", "llm"]},
            "scope": "Namespaced",
            "versions": [{"name": labels.VERSION, "served": True, "storage": True,
                          "schema": {"openAPIV3Schema": openapi_schema()},
                          "subresources": {"status": {}},
                          "additionalPrinterColumns": PRINTER_COLUMNS}],
        },
    }
