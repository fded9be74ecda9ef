"""The CustomResourceDefinition of QwenDisaggBenchmark (qwendisaggbenchmarks.qdd.dev), generated from
:mod:`qdd.api.benchmark` with the same structural rewrite as the deployment's (:func:`qdd.api.crd.structural`)."""

from __future__ import annotations

from typing import Any

from .benchmark import (ACCURACY_PASSED, COMPLETE, KIND, PLURAL, SHORT_NAME, SINGULAR, BenchmarkSpec,
                        BenchmarkStatus)
from .crd import AGE_COLUMN, column, condition_column, custom_resource_definition, resource_schema
from .types import DNS1123_SUBDOMAIN

PRINTER_COLUMNS = [
    column("Deployment", "string", ".spec.deploymentName", "The QwenDisaggDeployment measured."),
    column("Topology", "string", ".status.topology", "Its shape, e.g. 4xDEP2-1xDEP8."),
    column("Phase", "string", ".status.phase"),
    column("Tok/s/GPU", "number", ".status.bestTotalTokensPerSecondPerGpu", "Highest total tok/s per GPU of the sweep."),
    column("Accuracy", "number", ".status.accuracy.mean", "Mean GSM8K accuracy."),
    condition_column("Passed", ACCURACY_PASSED),
    condition_column("Complete", COMPLETE),
    AGE_COLUMN,
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
    return custom_resource_definition(KIND, PLURAL, SINGULAR, SHORT_NAME, openapi_schema(), {"status": {}},
                                      PRINTER_COLUMNS)
