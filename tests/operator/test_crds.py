"""Static tier: the CRDs are structural and documented, the examples fit them, and the defaults the
reconcile applies by itself (local mode) are the CRDs' own."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft7Validator
from support.operator import crd, example_objects, schema_of

from agentfn.operator.reconcile import AGENT_DEFAULTS, AGENT_FIELDS, GRANT_DEFAULTS, GRANT_FIELDS, LIMIT_DEFAULTS

KINDS = ["Agent", "ToolGrant"]


def walk(node: dict[str, Any], path: str = ""):
    yield path, node
    for name, child in (node.get("properties") or {}).items():
        yield from walk(child, f"{path}.{name}")
    if "items" in node:
        yield from walk(node["items"], f"{path}[]")


@pytest.mark.parametrize("kind", KINDS)
def test_the_crd_is_a_first_class_api(kind):
    doc = crd(kind)
    assert doc["apiVersion"] == "apiextensions.k8s.io/v1" and doc["spec"]["group"] == "agentfn.dev"
    names = doc["spec"]["names"]
    assert doc["metadata"]["name"] == f"{names['plural']}.agentfn.dev"
    assert names["shortNames"] and names["categories"] == ["agentfn"]
    (version,) = doc["spec"]["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns[-3:] == ["Ready", "Reason", "Age"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_schema_is_structural_and_explained(kind):
    for path, node in walk(schema_of(kind)):
        assert "type" in node, f"{kind}{path} has no type (a structural schema needs one everywhere)"
        if path.startswith((".spec", ".status")) and path.count(".") <= 2 and not path.endswith("[]"):
            assert node.get("description"), f"{kind}{path} has no description for kubectl explain"
        if node.get("type") == "array":
            assert "maxItems" in node or path.endswith("conditions"), f"{kind}{path}: unbounded list"
        if "default" in node:
            Draft7Validator(node).validate(node["default"])


@pytest.mark.parametrize("kind", KINDS)
def test_every_printer_column_reads_a_field_of_the_schema(kind):
    schema = schema_of(kind)
    paths = {path for path, _ in walk(schema)}
    for column in crd(kind)["spec"]["versions"][0]["additionalPrinterColumns"]:
        field = column["jsonPath"].split("[")[0]
        assert field in paths or field == ".metadata.creationTimestamp", column


def test_the_reconcile_applies_the_crds_defaults_and_knows_their_fields():
    spec = schema_of("Agent")["properties"]["spec"]["properties"]
    assert {k: spec[k]["default"] for k in AGENT_DEFAULTS} == AGENT_DEFAULTS
    assert {k: v["default"] for k, v in spec["limits"]["properties"].items()} == LIMIT_DEFAULTS
    assert set(spec) == set(AGENT_FIELDS)
    grant = schema_of("ToolGrant")["properties"]["spec"]["properties"]
    assert set(grant) == set(GRANT_FIELDS)
    assert {k: grant[k]["default"] for k in GRANT_DEFAULTS} == GRANT_DEFAULTS


@pytest.mark.parametrize("kind", KINDS)
def test_every_example_fits_its_crd(kind):
    agents, grants = example_objects()
    objects = agents if kind == "Agent" else grants
    assert objects, f"no {kind} in examples/"
    validator = Draft7Validator(schema_of(kind))
    for obj in objects:
        errors = [e.message for e in validator.iter_errors(obj)]
        assert not errors, (obj["metadata"]["name"], errors)
        assert obj["metadata"]["namespace"] == "agentfn"


@pytest.mark.parametrize(
    ("kind", "spec", "field"),
    [
        ("Agent", {"brief": "x", "memory": "sometimes"}, "memory"),
        ("Agent", {"brief": "x", "limits": {"steps": 9}}, "steps"),
        ("Agent", {"brief": ""}, "brief"),
        ("Agent", {"brief": "x", "tools": ["Run Code"]}, "tools"),
        ("ToolGrant", {"tool": "run_code", "dailyLimit": 0}, "dailyLimit"),
        ("ToolGrant", {"tool": "run_code", "approval": "never"}, "approval"),
        ("ToolGrant", {"tool": "run_code", "agents": ["Code_Reviewer"]}, "agents"),
        ("ToolGrant", {"agents": ["code-reviewer"]}, "tool"),
    ],
)
def test_the_schema_refuses_what_a_schema_can_say(kind, spec, field):
    errors = list(Draft7Validator(schema_of(kind)).iter_errors({"spec": spec}))
    assert errors and any(field in ("/".join(map(str, e.absolute_path)) + e.message) for e in errors), errors
