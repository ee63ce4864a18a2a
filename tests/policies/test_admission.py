"""The admission rules of policies/ (ValidatingAdmissionPolicies, CEL), evaluated offline with celpy.

The test tier's kube-apiserver (1.20) predates ValidatingAdmissionPolicy (GA in 1.30), so the rules are
run here the way the apiserver runs them: the policy's resource rules and matchConditions decide whether
it applies, its variables are bound in order, and each validation that is false denies with its message.
Rows are Gateway API style: one allowed base object and `(id, patch, message | None)`.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
POLICIES = ROOT / "policies"
RESOURCES = {("agentfn.dev", "ToolGrant"): "toolgrants", ("serving.knative.dev", "Service"): "services", ("", "Pod"): "pods"}


def load(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def policies() -> dict[str, dict[str, Any]]:
    return {
        p["metadata"]["name"]: p
        for f in sorted(POLICIES.glob("*.yaml"))
        for p in load(f)
        if p["kind"] == "ValidatingAdmissionPolicy"
    }


ENV = celpy.Environment()


def evaluate(expression: str, activation: dict[str, Any]) -> Any:
    return ENV.program(ENV.compile(expression)).evaluate(activation)


def matches(policy: dict, obj: dict, operation: str) -> bool:
    group = obj["apiVersion"].rpartition("/")[0]
    resource = RESOURCES[(group, obj["kind"])]
    return any(
        group in rule["apiGroups"] and resource in rule["resources"] and operation in rule["operations"]
        for rule in policy["spec"]["matchConstraints"]["resourceRules"]
    )


def denials(obj: dict, operation: str = "CREATE") -> list[str]:
    """The messages of every policy that applies to obj and denies it (empty: admitted)."""
    found = []
    for policy in policies().values():
        if not matches(policy, obj, operation):
            continue
        activation: dict[str, Any] = {"object": celpy.json_to_cel(obj)}
        spec = policy["spec"]
        if not all(evaluate(c["expression"], activation) for c in spec.get("matchConditions", [])):
            continue
        variables = {}
        for variable in spec.get("variables", []):
            activation["variables"] = celpy.json_to_cel(variables) if not variables else celpy.celtypes.MapType(variables)
            variables[celpy.celtypes.StringType(variable["name"])] = evaluate(variable["expression"], activation)
        activation["variables"] = celpy.celtypes.MapType(variables)
        for validation in spec["validations"]:
            result = evaluate(validation["expression"], activation)
            assert isinstance(result, celpy.celtypes.BoolType), (validation["expression"], result)
            if not result:
                found.append(validation["message"])
    return found


def patched(base: dict, patch: dict) -> dict:
    """patch: dotted paths -> value (None removes the key)."""
    obj = copy.deepcopy(base)
    for path, value in patch.items():
        *parents, last = path.split(".")
        node = obj
        for key in parents:
            node = node[int(key)] if key.isdigit() else node.setdefault(key, {})
        if value is None:
            node.pop(last, None)
        elif last.isdigit():
            node[int(last)] = value
        else:
            node[last] = value
    return obj


def test_every_policy_has_a_binding_and_the_chart_carries_them():
    names = set(policies())
    assert names == {
        "agentfn-toolgrant-channels",
        "agentfn-knative-min-scale",
        "agentfn-knative-limits",
        "agentfn-run-code-gvisor",
    }
    bound = {b["spec"]["policyName"] for b in load(POLICIES / "bindings.yaml")}
    assert bound == names
    chart_files = ROOT / "charts" / "agentfn" / "files" / "policies"
    assert chart_files.resolve() == POLICIES.resolve()


GRANT = {
    "apiVersion": "agentfn.dev/v1alpha1",
    "kind": "ToolGrant",
    "metadata": {"name": "g", "namespace": "agentfn"},
    "spec": {"tool": "platform_status", "agents": ["site-guide"], "groups": ["visitors"]},
}
ALONE = "run_code, open_page, remember and forget are never callable alone"
MCP = "run_code, open_page, remember and forget are never callable over MCP"
GRANT_ROWS = [
    ("a read tool as a step", {}, None),
    ("a read tool alone and over MCP", {"spec.callableAlone": True, "spec.mcp": True}, None),
    ("run_code as the reviewer's step", {"spec.tool": "run_code", "spec.agents": ["code-reviewer"]}, None),
    (
        "run_code with both channels said false",
        {"spec.tool": "run_code", "spec.callableAlone": False, "spec.mcp": False},
        None,
    ),
    ("run_code alone", {"spec.tool": "run_code", "spec.callableAlone": True}, [ALONE]),
    ("run_code over MCP", {"spec.tool": "run_code", "spec.mcp": True}, [MCP]),
    ("open_page alone", {"spec.tool": "open_page", "spec.callableAlone": True}, [ALONE]),
    ("open_page over MCP, no agents", {"spec.tool": "open_page", "spec.agents": None, "spec.mcp": True}, [MCP]),
    ("remember alone", {"spec.tool": "remember", "spec.callableAlone": True}, [ALONE]),
    ("forget over MCP", {"spec.tool": "forget", "spec.mcp": True}, [MCP]),
    ("remember on both", {"spec.tool": "remember", "spec.callableAlone": True, "spec.mcp": True}, [ALONE, MCP]),
]


@pytest.mark.parametrize("patch, expected", [r[1:] for r in GRANT_ROWS], ids=[r[0] for r in GRANT_ROWS])
def test_toolgrant_channels(patch, expected):
    assert denials(patched(GRANT, patch)) == (expected or [])


def test_the_grant_rule_is_also_checked_on_update_but_not_on_delete():
    bad = patched(GRANT, {"spec.tool": "run_code", "spec.mcp": True})
    assert denials(bad, "UPDATE") == [MCP]
    assert denials(bad, "DELETE") == []


KSVC = {
    "apiVersion": "serving.knative.dev/v1",
    "kind": "Service",
    "metadata": {"name": "agentfn-memory", "namespace": "agentfn"},
    "spec": {
        "template": {
            "metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "0"}},
            "spec": {
                "containers": [{"image": "agentfn/memory:0.1.0", "resources": {"limits": {"cpu": "2", "memory": "2Gi"}}}]
            },
        }
    },
}
MIN_SCALE = 'a Knative Service here needs autoscaling.knative.dev/min-scale "0" on spec.template'
OLD_SPELLING = 'autoscaling.knative.dev/minScale must be "0" too when it is set'
LIMITS = "every container of a Knative Service here needs resources.limits.cpu and resources.limits.memory"
KSVC_ROWS = [
    ("scales to zero, with limits", {}, None),
    ("the old spelling at zero too", {"spec.template.metadata.annotations.autoscaling.knative.dev/minScale": "0"}, None),
    ("min-scale one", {"spec.template.metadata.annotations": {"autoscaling.knative.dev/min-scale": "1"}}, [MIN_SCALE]),
    ("no min-scale", {"spec.template.metadata.annotations": {"autoscaling.knative.dev/max-scale": "3"}}, [MIN_SCALE]),
    ("no annotations", {"spec.template.metadata": {}}, [MIN_SCALE]),
    ("no template metadata", {"spec.template.metadata": None}, [MIN_SCALE]),
    (
        "min-scale zero but minScale two",
        {
            "spec.template.metadata.annotations": {
                "autoscaling.knative.dev/min-scale": "0",
                "autoscaling.knative.dev/minScale": "2",
            }
        },
        [OLD_SPELLING],
    ),
    ("no cpu limit", {"spec.template.spec.containers.0.resources.limits": {"memory": "2Gi"}}, [LIMITS]),
    ("no memory limit", {"spec.template.spec.containers.0.resources.limits": {"cpu": "1"}}, [LIMITS]),
    ("requests only", {"spec.template.spec.containers.0.resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}, [LIMITS]),
    ("no resources", {"spec.template.spec.containers.0": {"image": "x"}}, [LIMITS]),
    (
        "a sidecar without limits",
        {
            "spec.template.spec.containers": [
                {"image": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
                {"image": "b"},
            ]
        },
        [LIMITS],
    ),
    ("neither", {"spec.template.metadata": None, "spec.template.spec.containers.0": {"image": "x"}}, [MIN_SCALE, LIMITS]),
]


def ksvc_patched(patch: dict) -> dict:
    obj = copy.deepcopy(KSVC)
    for path, value in patch.items():
        if "autoscaling.knative.dev/" in path:  # an annotation key has dots of its own
            obj["spec"]["template"]["metadata"]["annotations"][path.split("annotations.", 1)[1]] = value
        else:
            obj = patched(obj, {path: value})
    return obj


@pytest.mark.parametrize("patch, expected", [r[1:] for r in KSVC_ROWS], ids=[r[0] for r in KSVC_ROWS])
def test_knative_services_scale_to_zero_and_have_limits(patch, expected):
    assert sorted(denials(ksvc_patched(patch))) == sorted(expected or [])


def test_the_charts_own_services_are_admitted():
    from support.chart import knative_services

    for values_set in ("default", "cnpg", "external", "minimal"):
        for fn, service in knative_services(values_set).items():
            assert denials(service) == [], (values_set, fn)


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "agentfn-run-code-00001-deployment-abc",
        "namespace": "agentfn",
        "labels": {"serving.knative.dev/service": "agentfn-run-code", "serving.knative.dev/revision": "r"},
    },
    "spec": {"runtimeClassName": "gvisor", "containers": [{"name": "run-code", "image": "agentfn/run-code:0.1.0"}]},
}
GVISOR = "run_code's pods must run under the gVisor RuntimeClass (runtimeClassName gvisor)"
POD_ROWS = [
    ("run_code under gVisor", {}, None),
    ("run_code without a runtime class", {"spec.runtimeClassName": None}, [GVISOR]),
    ("run_code under runc", {"spec.runtimeClassName": "runc"}, [GVISOR]),
    ("run_code under kata", {"spec.runtimeClassName": "kata"}, [GVISOR]),
    (
        "run_code of a release without a prefix",
        {"metadata.labels": {"serving.knative.dev/service": "run-code"}, "spec.runtimeClassName": None},
        [GVISOR],
    ),
    (
        "memory needs no gVisor",
        {"metadata.labels": {"serving.knative.dev/service": "agentfn-memory"}, "spec.runtimeClassName": None},
        None,
    ),
    ("a pod of no function", {"metadata.labels": None, "spec.runtimeClassName": None}, None),
    ("a pod with other labels only", {"metadata.labels": {"app": "run-code"}, "spec.runtimeClassName": None}, None),
]


@pytest.mark.parametrize("patch, expected", [r[1:] for r in POD_ROWS], ids=[r[0] for r in POD_ROWS])
def test_run_code_pods_run_under_gvisor(patch, expected):
    assert denials(patched(POD, patch)) == (expected or [])


def test_the_pod_knative_makes_from_the_charts_run_code_is_admitted():
    from support.chart import knative_services

    template = knative_services("default")["run_code"]["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "agentfn",
            "labels": {**template["metadata"]["labels"], "serving.knative.dev/service": "agentfn-run-code"},
        },
        "spec": template["spec"],
    }
    assert denials(pod) == []
    assert denials(patched(pod, {"spec.runtimeClassName": None})) == [GVISOR]
