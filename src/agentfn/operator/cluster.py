"""The operator's reads and writes on the API: the objects, the registry ConfigMap, the NetworkPolicy, statuses.

Every write is conditional: the ConfigMap only when the revision or the bytes differ, the policy only
when its spec differs, a status only when `status.desired` says so. So a reconcile that changes nothing
costs three reads (the two lists and the ConfigMap) and the policy's read.
"""

from __future__ import annotations

import datetime
import secrets
from collections.abc import Mapping
from typing import Any

from .config import LABELS, REGISTRY_KEY, REVISION_ANNOTATION, Config
from .kube import Api, ApiError, namespaced
from .reconcile import dumps

GROUP_VERSION = "agentfn.dev/v1alpha1"
PLURALS = {"Agent": "agents", "ToolGrant": "toolgrants"}


class Cluster:
    def __init__(self, api: Api, config: Config):
        self.api, self.config = api, config

    def _path(self, group_version: str, plural: str, name: str = "") -> str:
        return namespaced(group_version, self.config.namespace, plural, name)

    def objects(self, kind: str) -> list[dict[str, Any]]:
        listed = self.api.get(self._path(GROUP_VERSION, PLURALS[kind]))
        items = listed.get("items") or []
        for item in items:  # a list's items carry no apiVersion/kind; events need them
            item.setdefault("apiVersion", GROUP_VERSION)
            item.setdefault("kind", kind)
        return items

    def write_registry(self, registry: Mapping[str, Any]) -> bool:
        """Write the registry ConfigMap if it differs; True when it was written."""
        path = self._path("v1", "configmaps", self.config.configmap)
        data, revision = dumps(registry), registry["revision"]
        current = self.api.get_or_none(path)
        if current is not None:
            annotations = (current.get("metadata") or {}).get("annotations") or {}
            if annotations.get(REVISION_ANNOTATION) == revision and (current.get("data") or {}) == {REGISTRY_KEY: data}:
                return False
        meta = {
            "labels": {**LABELS, "app.kubernetes.io/component": "registry"},
            "annotations": {REVISION_ANNOTATION: revision},
        }
        if current is None:
            self.api.create(
                self._path("v1", "configmaps"),
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": self.config.configmap, "namespace": self.config.namespace, **meta},
                    "data": {REGISTRY_KEY: data},
                },
            )
        else:
            # data as a whole: a key someone added by hand goes, so the file is exactly the registry
            self.api.merge_patch(
                path, {"metadata": meta, "data": {k: None for k in current.get("data") or {}} | {REGISTRY_KEY: data}}
            )
        return True

    def write_network_policy(self, policy: Mapping[str, Any]) -> bool:
        path = self._path("networking.k8s.io/v1", "networkpolicies", self.config.network_policy)
        current = self.api.get_or_none(path)
        if current is None:
            self.api.create(self._path("networking.k8s.io/v1", "networkpolicies"), policy)
            return True
        if _pruned(current.get("spec")) == _pruned(policy["spec"]):
            return False
        self.api.merge_patch(
            path, {"metadata": {k: policy["metadata"][k] for k in ("labels", "annotations")}, "spec": policy["spec"]}
        )
        return True

    def write_status(self, obj: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
        """Patch the object's status; False when the object is gone meanwhile (its deletion is its own event)."""
        name = obj["metadata"]["name"]
        try:
            self.api.merge_patch(self._path(GROUP_VERSION, PLURALS[obj["kind"]], name) + "/status", {"status": status})
        except ApiError as e:
            if e.status == 404:
                return False
            raise
        return True

    def post_event(self, obj: Mapping[str, Any], type: str, reason: str, message: str) -> None:
        """A core v1 Event on the object. Posted here, not with kopf.event: a publish also runs outside any
        handler (start-up, the lease thread), where kopf's event queue is not at hand."""
        meta = obj["metadata"]
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.api.create(
            self._path("v1", "events"),
            {
                "apiVersion": "v1",
                "kind": "Event",
                # Named as client-go names events (object name, a unique suffix), not by generateName.
                "metadata": {"name": f"{meta['name']}.{secrets.token_hex(8)}", "namespace": self.config.namespace},
                "involvedObject": {
                    "apiVersion": obj["apiVersion"],
                    "kind": obj["kind"],
                    "name": meta["name"],
                    "namespace": self.config.namespace,
                    "uid": meta.get("uid"),
                    "resourceVersion": meta.get("resourceVersion"),
                },
                "type": type,
                "reason": reason,
                "message": message[:1024],
                "source": {"component": "agentfn-operator"},
                "reportingComponent": "agentfn-operator",
                "reportingInstance": self.config.identity,
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            },
        )


def _pruned(spec: Any) -> Any:
    """A spec as the apiserver keeps it: empty lists and nulls are not stored."""
    if isinstance(spec, Mapping):
        return {k: _pruned(v) for k, v in spec.items() if v not in ([], None, {})}
    if isinstance(spec, list):
        return [_pruned(v) for v in spec]
    return spec
