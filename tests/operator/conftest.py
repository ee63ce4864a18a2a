"""The operator's test parts: the examples, the CRDs, and for the third tier a real kube-apiserver.

The apiserver fixture is session-wide (about 5 s to start once the binary is cached; the first build on a
machine takes minutes, hence the long timeouts on the tests that use it). Everything it starts listens
on 127.0.0.1 and stops at the end of the session.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from agentfn_operator import catalog
from apiserver import KubeAPI

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


@pytest.fixture(scope="session")
def tools():
    return catalog.load()


@pytest.fixture(scope="session")
def kube(apiserver: KubeAPI):
    """The session's real kube-apiserver with the CRDs, the agentfn namespace and the operator's RBAC applied."""
    # The 1.20 schema of a CRD has no x-kubernetes-validations: client-side validation would refuse
    # the field, and the apiserver drops it. Newer clusters keep and run the rules.
    apiserver.kubectl("apply", "--validate=false", "-f", str(CRDS))
    apiserver.kubectl("wait", "--for=condition=Established", "crd/agents.agentfn.dev", "crd/toolgrants.agentfn.dev")
    apiserver.kubectl("create", "namespace", NAMESPACE)
    apiserver.kubectl("apply", "-f", str(RBAC))
    return apiserver


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
