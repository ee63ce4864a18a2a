"""The operator's settings, all from the environment (`AGENTFN_` names, listed in the README's configuration table).

| name | default | meaning |
|---|---|---|
| `AGENTFN_NAMESPACE` | the pod's, else `agentfn` | where objects are read and outputs written (= kopf's `--namespace`) |
| `AGENTFN_REGISTRY_CONFIGMAP` | `agentfn-registry` | the ConfigMap holding the registry (key `registry.json`) |
| `AGENTFN_TOOLS_NETWORK_POLICY` | `agentfn-model-to-tools` | the NetworkPolicy: model function -> tool functions in use |
| `AGENTFN_FUNCTION_LABEL` | `serving.knative.dev/service` | the pod label naming a function (Knative sets it) |
| `AGENTFN_FUNCTION_PREFIX` | (empty) | prefix of the functions' Service names, e.g. `agentfn-` |
| `AGENTFN_OPERATOR_LEASE` | `agentfn-operator` | the Lease that keeps a single replica writing |
| `AGENTFN_OPERATOR_LEASE_SECONDS` | `15` | how long a replica's hold lasts without renewal |
| `AGENTFN_TOOL_CATALOG_DIR` | the source tree's `functions/` | folder of `<function>/tool.json` (see catalog.py) |
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

POD_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
REGISTRY_KEY = "registry.json"
REVISION_ANNOTATION = "agentfn.dev/registry-revision"
LABELS = {"app.kubernetes.io/name": "agentfn", "app.kubernetes.io/managed-by": "agentfn-operator"}


@dataclass(frozen=True)
class Config:
    namespace: str
    configmap: str = "agentfn-registry"
    network_policy: str = "agentfn-model-to-tools"
    function_label: str = "serving.knative.dev/service"
    function_prefix: str = ""
    lease: str = "agentfn-operator"
    lease_seconds: int = 15
    identity: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Config:
        env = os.environ if env is None else env
        namespace = env.get("AGENTFN_NAMESPACE", "").strip()
        if not namespace:
            namespace = POD_NAMESPACE_FILE.read_text().strip() if POD_NAMESPACE_FILE.is_file() else "agentfn"
        return cls(
            namespace=namespace,
            configmap=env.get("AGENTFN_REGISTRY_CONFIGMAP", cls.configmap),
            network_policy=env.get("AGENTFN_TOOLS_NETWORK_POLICY", cls.network_policy),
            function_label=env.get("AGENTFN_FUNCTION_LABEL", cls.function_label),
            function_prefix=env.get("AGENTFN_FUNCTION_PREFIX", cls.function_prefix),
            lease=env.get("AGENTFN_OPERATOR_LEASE", cls.lease),
            lease_seconds=int(env.get("AGENTFN_OPERATOR_LEASE_SECONDS", str(cls.lease_seconds))),
            # A pod's name is its hostname; the suffix tells two runs on one machine apart.
            identity=f"{socket.gethostname()}-{secrets.token_hex(3)}",
        )

    def function_service(self, function: str) -> str:
        """A function's Service name: its folder's name as a DNS label (`run_code` -> `run-code`)."""
        return self.function_prefix + function.replace("_", "-")
