"""The generated CRD (qdd.api.crd): committed bytes, structural schema, columns, subresources, CEL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from qdd import cli
from qdd.api.crd import crd
from qdd.api.rules import SPEC_RULES

from ..conftest import ROOT

COMMITTED = ROOT / "crds" / "qdd.dev_qwendisaggdeployments.yaml"


@pytest.fixture(scope="module")
def version() -> dict[str, Any]:
    [v] = crd()["spec"]["versions"]
    return v


def _nodes(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _nodes(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _nodes(v, f"{path}[{i}]")


def test_committed_crd_is_regenerated_byte_for_byte(capsys):
    cli.main(["crd"])
    generated = capsys.readouterr().out
    committed = COMMITTED.read_text()
    assert generated == committed, (
        f"{COMMITTED.relative_to(ROOT)} is stale: the API models changed without regenerating it. Run `make crds` "
        "and commit the result.")


def test_schema_is_structural(version):
    schema = version["schema"]["openAPIV3Schema"]
    for path, node in _nodes(schema):
        if isinstance(node, dict):
            bad = {"$ref", "anyOf", "oneOf", "allOf", "nullable", "$defs", "title"} & set(node)
            assert not bad, f"{path}: {bad}"
            if node.get("type") == "object" and path != ".properties.metadata":  # the API server owns metadata
                assert "properties" in node or "x-kubernetes-preserve-unknown-fields" in node \
                    or "additionalProperties" in node, path


def test_every_property_has_a_description(version):
    schema = version["schema"]["openAPIV3Schema"]
    missing = [f"{path}.{name}" for path, node in _nodes(schema) if isinstance(node, dict)
               and isinstance(node.get("properties"), dict) and path.split(".")[-1] != "properties"
               for name, prop in node["properties"].items() if not prop.get("description")]
    # The API server refuses a description on metadata (only name/generateName may be constrained).
    assert missing == [".metadata"]


def test_identity_and_short_name():
    c = crd()
    assert c["metadata"]["name"] == "qwendisaggdeployments.qdd.dev"
    assert c["spec"]["group"] == "qdd.dev" and c["spec"]["scope"] == "Namespaced"
    assert c["spec"]["names"]["kind"] == "QwenDisaggDeployment" and c["spec"]["names"]["shortNames"] == ["qdd"]


def test_printer_columns(version):
    cols = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert {"Prefill", "Decode", "GPUs", "Concurrency", "Ready", "Age"} <= set(cols)
    assert cols["Concurrency"]["jsonPath"] == ".spec.workload.concurrency"
    assert cols["Age"] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    for c in cols.values():  # every .status column points at a declared field (else pruned, column empty)
        if c["jsonPath"].startswith(".status."):
            assert c["jsonPath"].split(".")[2].split("[")[0] in status, c


def test_status_and_scale_subresources(version):
    sub = version["subresources"]
    assert sub["status"] == {}
    assert sub["scale"] == {"specReplicasPath": ".spec.prefill.endpoints", "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector"}
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert status["replicas"]["type"] == "integer" and status["selector"]["type"] == "string"


def test_every_rule_is_a_spec_level_validation(version):
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    got = spec["x-kubernetes-validations"]
    assert got == [{"rule": r.cel, "fieldPath": r.field, "message": r.message} for r in SPEC_RULES]
    for r in SPEC_RULES:  # each fieldPath names a real field below spec
        node = spec
        for part in r.field.strip(".").split("."):
            node = node["properties"][part]
