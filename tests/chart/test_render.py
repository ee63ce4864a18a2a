"""Static tier: the chart lints, renders over every values set, and every object it renders is valid:
built-in kinds with kubernetes-validate (strict, the newest Kubernetes it ships), Knative Services,
HTTPRoutes and CloudNativePG Clusters against their projects' real CRD schemas (strict too).
Each check is shown to bite on a broken object."""

from __future__ import annotations

import copy
import re

import kubernetes_validate
import pytest
from kubernetes_validate.utils import latest_version
from support.chart import CHART, NAMESPACE, VALUES_SETS, crd_validator, helm, objects

K8S_VERSION = latest_version()
CUSTOM = {"serving.knative.dev/v1", "gateway.networking.k8s.io/v1", "postgresql.cnpg.io/v1"}
SETS = list(VALUES_SETS)


def k8s_errors(obj: dict) -> str | None:
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        return f"{error.path}: {error.message}" if hasattr(error, "path") else str(error)
    return None


def crd_errors(obj: dict) -> str | None:
    errors = sorted(crd_validator(obj["apiVersion"], obj["kind"]).iter_errors(obj), key=str)
    return "; ".join(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors) or None


def name_of(obj: dict) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


def test_there_are_values_sets():
    assert {"default", "cnpg", "external", "minimal"} <= set(SETS)


@pytest.mark.parametrize("values_set", SETS)
def test_helm_lint_strict(values_set):
    args = ["lint", "--strict", str(CHART)]
    if VALUES_SETS[values_set]:
        args += ["-f", str(VALUES_SETS[values_set])]
    done = helm(*args)
    assert "0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("values_set", SETS)
def test_every_builtin_object_is_valid_kubernetes(values_set):
    builtin = [o for o in objects(values_set) if o["apiVersion"] not in CUSTOM]
    assert len(builtin) >= 15
    errors = {name_of(o): k8s_errors(o) for o in builtin}
    assert {k: v for k, v in errors.items() if v} == {}
    for obj in builtin:
        assert obj["metadata"].get("namespace", NAMESPACE) == NAMESPACE


@pytest.mark.parametrize("values_set", SETS)
def test_every_custom_resource_matches_its_crd(values_set):
    custom = [o for o in objects(values_set) if o["apiVersion"] in CUSTOM]
    assert len([o for o in custom if o["kind"] == "Service"]) == 8  # seven functions and the workbench
    errors = {name_of(o): crd_errors(o) for o in custom}
    assert {k: v for k, v in errors.items() if v} == {}


def first(kind: str, api_version: str | None = None, values_set: str = "cnpg") -> dict:
    return next(o for o in objects(values_set, kind) if api_version is None or o["apiVersion"] == api_version)


def set_path(obj: dict, path: str, value) -> dict:
    obj = copy.deepcopy(obj)
    keys = path.split(".")
    node = obj
    for key in keys[:-1]:
        node = node[int(key)] if key.isdigit() else node[key]
    last = keys[-1]
    if last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return obj


# (id, kind, apiVersion, path, value, error pattern): the validators refuse what a cluster would.
BROKEN = [
    ("networkpolicy unknown field", "NetworkPolicy", None, "spec.egressRules", [], r"egressRules"),
    ("networkpolicy bad policy type", "NetworkPolicy", None, "spec.policyTypes", "Egress", r"not of type 'array'"),
    ("deployment replicas as text", "Deployment", None, "spec.replicas", "one", r"not of type 'integer'"),
    ("role verbs not a list", "Role", None, "rules.0.verbs", "get", r"not of type 'array'"),
    ("ksvc unknown template field", "Service", "serving.knative.dev/v1", "spec.template.spec.replicas", 2, r"replicas"),
    (
        "ksvc containers not a list",
        "Service",
        "serving.knative.dev/v1",
        "spec.template.spec.containers",
        {},
        r"not of type 'array'",
    ),
    ("httproute path type unknown", "HTTPRoute", None, "spec.rules.0.matches.0.path.type", "Glob", r"'Glob' is not one of"),
    ("httproute parent without name", "HTTPRoute", None, "spec.parentRefs.0", {"kind": "Gateway"}, r"'name' is a required"),
    ("cnpg instances as text", "Cluster", None, "spec.instances", "two", r"not of type 'integer'"),
    ("cnpg managed role unknown field", "Cluster", None, "spec.managed.roles.0.owner", "x", r"owner"),
]


@pytest.mark.parametrize("kind, api_version, path, value, pattern", [r[1:] for r in BROKEN], ids=[r[0] for r in BROKEN])
def test_the_validators_refuse_broken_objects(kind, api_version, path, value, pattern):
    good = first(kind, api_version)
    check = crd_errors if good["apiVersion"] in CUSTOM else k8s_errors
    assert check(good) is None
    error = check(set_path(good, path, value))
    assert error is not None and re.search(pattern, error), error
