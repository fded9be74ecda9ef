"""The CustomResourceDefinition of QwenDisaggBenchmark (qwendisaggbenchmarks.qdd.dev), generated from
:mod:`qdd.api.benchmark` with the same structural rewrite as the deployment's (:func:`qdd.api.crd.structural`)."""

from __future__ import annotations

from typing import Any

from .. import labels
from .benchmark import KIND, PLURAL, SHORT_NAME, SINGULAR, BenchmarkSpec, BenchmarkStatus
from .crd import resource_schema
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
    # Job and ConfigMap names append up to 16 characters (-accuracy-r20, -sweep-c1048576 is cut).
    return resource_schema(
        BenchmarkSpec, BenchmarkStatus,
        description="Benchmark and accuracy runs against a QwenDisaggDeployment's router.", kind=KIND,
        spec_description="Which deployment to measure, and how: a concurrency sweep and/or a GSM8K accuracy run.",
        status_description="Results, written by the operator.",
        name_description="At most 40 characters: Job and ConfigMap names are built from it.",
        name_rule={"rule": f"self.metadata.name.matches(r'{DNS1123_SUBDOMAIN}')",
                   "message": "metadata.name must be lowercase letters, digits, '-' and '.'"})


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
