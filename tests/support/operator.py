"""The operator's test helpers: the examples, the CRDs, waiting on the real kube-apiserver, the registry it
holds."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentfn.devstack.harness.apiserver import KubeAPI

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
CRDS = ROOT / "charts" / "agentfn" / "files" / "crds"
RBAC = ROOT / "operator" / "deploy" / "rbac.yaml"
NAMESPACE = "agentfn"
# The first build of the apiserver on a fresh machine (scripts/kube-apiserver.sh) takes about 8 minutes.
CLUSTER_TIMEOUT = 1500


def load_yaml(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def example_objects() -> tuple[list[dict], list[dict]]:
    docs = [d for f in sorted(EXAMPLES.glob("*.yaml")) for d in load_yaml(f)]
    return [d for d in docs if d["kind"] == "Agent"], [d for d in docs if d["kind"] == "ToolGrant"]


def crd(kind: str) -> dict[str, Any]:
    return next(d for f in CRDS.glob("*.yaml") for d in load_yaml(f) if d["spec"]["names"]["kind"] == kind)


def schema_of(kind: str) -> dict[str, Any]:
    return crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def wait_for(check: Callable[[], Any], timeout: float = 10, interval: float = 0.05, what: str = "") -> Any:
    """check()'s first truthy value within timeout seconds, else a failure saying what was awaited."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"not within {timeout} s: {what or check} (last: {last!r})")


def service_account_kubeconfig(kube: KubeAPI, account: str, directory: Path) -> Path:
    """A kubeconfig with a TokenRequest token of the ServiceAccount: the operator runs as it would in a pod."""
    token = kube.kubectl("-n", NAMESPACE, "create", "token", account, "--duration=1h").stdout.strip()
    path = directory / f"{account}.kubeconfig"
    path.write_text(kube.kubeconfig_text(token, NAMESPACE))
    return path


def registry_of(kube: KubeAPI) -> dict[str, Any] | None:
    done = kube.kubectl("-n", NAMESPACE, "get", "configmap", "agentfn-registry", "-o", "json", check=False)
    if done.returncode != 0:
        return None
    return json.loads(json.loads(done.stdout)["data"]["registry.json"])
