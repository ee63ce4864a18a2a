"""The operator's settings, all from the environment (docs/configuration.md is written from `Config`)."""

from __future__ import annotations

import dataclasses
import secrets
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agentfn.shared.settings import Settings, setting

POD_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
REGISTRY_KEY = "registry.json"
REVISION_ANNOTATION = "agentfn.dev/registry-revision"
LABELS = {"app.kubernetes.io/name": "agentfn", "app.kubernetes.io/managed-by": "agentfn-operator"}


@dataclass(frozen=True)
class Config(Settings):
    namespace: str = setting(
        "AGENTFN_NAMESPACE",
        "",
        "where objects are read and outputs written (= kopf's `--namespace`)",
        shown="the pod's, else `agentfn`",
    )
    configmap: str = setting(
        "AGENTFN_REGISTRY_CONFIGMAP", "agentfn-registry", "the ConfigMap holding the registry (key `registry.json`)"
    )
    network_policy: str = setting(
        "AGENTFN_TOOLS_NETWORK_POLICY",
        "agentfn-model-to-tools",
        "the NetworkPolicy: model function -> tool functions in use",
    )
    function_label: str = setting(
        "AGENTFN_FUNCTION_LABEL", "serving.knative.dev/service", "the pod label naming a function (Knative sets it)"
    )
    function_prefix: str = setting(
        "AGENTFN_FUNCTION_PREFIX", "", "prefix of the functions' Service names, e.g. `agentfn-`", shown="(empty)"
    )
    lease: str = setting("AGENTFN_OPERATOR_LEASE", "agentfn-operator", "the Lease that keeps a single replica writing")
    lease_seconds: int = setting(
        "AGENTFN_OPERATOR_LEASE_SECONDS", 15, "how long a replica's hold lasts without renewal", minimum=1
    )
    registry_file: str = setting(
        "AGENTFN_REGISTRY_FILE",
        "var/registry/registry.json",
        "local mode and audit: the registry file (the model function reads the same name)",
    )
    tool_catalog_dir: str = setting(
        "AGENTFN_TOOL_CATALOG_DIR",
        "",
        "folder of `<function>/tool.json` (see catalog.py)",
        shown="the installed functions' own",
    )
    identity: str = ""  # this replica's name in the Lease: not a setting

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Config:
        config = super().from_env(env)
        namespace = config.namespace
        if not namespace:
            namespace = POD_NAMESPACE_FILE.read_text().strip() if POD_NAMESPACE_FILE.is_file() else "agentfn"
        # A pod's name is its hostname; the suffix tells two runs on one machine apart.
        return dataclasses.replace(config, namespace=namespace, identity=f"{socket.gethostname()}-{secrets.token_hex(3)}")

    def function_service(self, function: str) -> str:
        """A function's Service name: its folder's name as a DNS label (`run_code` -> `run-code`)."""
        return self.function_prefix + function.replace("_", "-")
