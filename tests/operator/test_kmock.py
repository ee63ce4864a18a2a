"""Second tier: the whole operator (kopf, its handlers, the REST writes) against KMock's in-memory API.

No apiserver: KMock keeps objects and serves watch streams, so kopf sees the examples, the handlers
publish, and the test reads what was written from `kmock.objects`.
"""

from __future__ import annotations

import asyncio
import json
import logging

import kmock
import pytest
import yaml
from support.operator import example_objects

from agentfn.operator.reconcile import dumps, reconcile

NS = "agentfn"
AGENTS, GRANTS = "agentfn.dev/v1alpha1/agents", "agentfn.dev/v1alpha1/toolgrants"
CONFIGMAPS, POLICIES = "v1/configmaps", "networking.k8s.io/v1/networkpolicies"
LEASES, EVENTS = "coordination.k8s.io/v1/leases", "v1/events"


def declare(api: kmock.KubernetesEmulator) -> None:
    verbs = {"get", "list", "watch", "create", "patch", "update", "delete"}
    for resource, kind in [(AGENTS, "Agent"), (GRANTS, "ToolGrant")]:
        api.resources[resource] = kmock.ResourceInfo(kind=kind, namespaced=True, verbs=verbs, subresources={"status"})
    # kopf starts no watchers unless namespaces are known too.
    api.resources["v1/namespaces"] = kmock.ResourceInfo(kind="Namespace", namespaced=False, verbs=verbs)
    for resource, kind in [(CONFIGMAPS, "ConfigMap"), (POLICIES, "NetworkPolicy"), (LEASES, "Lease"), (EVENTS, "Event")]:
        api.resources[resource] = kmock.ResourceInfo(kind=kind, namespaced=True, verbs=verbs)


async def eventually(check, timeout: float = 15, what: str = ""):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            value = check()
        except (KeyError, TypeError):
            value = None
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.05)


def registry(api):
    try:
        configmap = api.objects[CONFIGMAPS, NS, "agentfn-registry"]
    except KeyError:
        return None
    return None if configmap.deleted else json.loads(configmap["data"]["registry.json"])


def ready_of(api, resource, name):
    conditions = {c["type"]: c for c in api.objects[resource, NS, name]["status"]["conditions"]}
    return conditions["Ready"]["status"], conditions["Ready"]["reason"]


@pytest.mark.asyncio
async def test_the_operator_publishes_the_examples_and_follows_changes(kmock, tmp_path, monkeypatch, tool_catalog, caplog):
    import kopf

    declare(kmock)
    agents, grants = example_objects()
    for obj in agents:
        kmock.objects[AGENTS, NS, obj["metadata"]["name"]] = obj
    for obj in grants:
        kmock.objects[GRANTS, NS, obj["metadata"]["name"]] = obj
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "kmock",
                "clusters": [{"name": "kmock", "cluster": {"server": str(kmock.url).rstrip("/")}}],
                "users": [{"name": "kmock", "user": {}}],
                "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "kmock"}}],
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("AGENTFN_NAMESPACE", NS)
    caplog.set_level(logging.INFO)

    stop = asyncio.Event()
    task = asyncio.create_task(kopf.operator(clusterwide=False, namespaces=[NS], standalone=True, stop_flag=stop))
    try:
        published = await eventually(lambda: registry(kmock), what="the registry ConfigMap")
        # The same bytes as local mode writes: one reconcile for both.
        assert kmock.objects[CONFIGMAPS, NS, "agentfn-registry"]["data"]["registry.json"] == dumps(
            reconcile(tool_catalog, agents, grants).registry
        )
        assert kmock.objects[CONFIGMAPS, NS, "agentfn-registry"]["metadata"]["annotations"] == {
            "agentfn.dev/registry-revision": published["revision"]
        }

        policy = await eventually(lambda: kmock.objects[POLICIES, NS, "agentfn-model-to-tools"], what="the policy")
        assert policy["spec"]["podSelector"] == {"matchLabels": {"serving.knative.dev/service": "model"}}
        (rule,) = policy["spec"]["egress"]
        assert rule["to"][0]["podSelector"]["matchExpressions"][0]["values"] == [
            "memory",
            "page",
            "platform-status",
            "run-code",
        ]

        await eventually(
            lambda: ready_of(kmock, GRANTS, "platform-status-for-everyone") == ("True", "Granted"), what="the grants' status"
        )
        status = kmock.objects[GRANTS, NS, "platform-status-for-everyone"]["status"]
        assert status["agents"] == "code-reviewer,site-guide" and status["channels"] == "step,alone,mcp"
        await eventually(lambda: ready_of(kmock, AGENTS, "code-reviewer") == ("True", "Ready"), what="the agents' status")
        assert kmock.objects[LEASES, NS, "agentfn-operator"]["spec"]["holderIdentity"]
        await eventually(
            lambda: (
                {"Granted", "Ready"}
                <= {e["reason"] for key, e in kmock.objects.items() if key[0] == kmock.resource(EVENTS) and not e.deleted}
            ),
            what="events",
        )

        # Deleting a grant removes its access from the registry.
        async with kmock.delete(f"/apis/agentfn.dev/v1alpha1/namespaces/{NS}/toolgrants/code-reviewer-runs-code") as r:
            assert r.status == 200
        after = await eventually(
            lambda: (r := registry(kmock)) and "run_code" not in r["agents"]["code-reviewer"]["tools"] and r,
            what="run_code gone from the registry",
        )
        assert after["revision"] != published["revision"]
        await eventually(
            lambda: ready_of(kmock, AGENTS, "code-reviewer") == ("True", "Ungranted"), what="the reviewer marked Ungranted"
        )

        # A grant no schema refused here (KMock runs no CEL) is marked Invalid and gives nothing.
        bad = {
            "apiVersion": "agentfn.dev/v1alpha1",
            "kind": "ToolGrant",
            "metadata": {"name": "run-code-over-mcp", "namespace": NS},
            "spec": {"tool": "run_code", "agents": ["code-reviewer"], "groups": ["developers"], "mcp": True},
        }
        async with kmock.post(f"/apis/agentfn.dev/v1alpha1/namespaces/{NS}/toolgrants", json=bad) as r:
            assert r.status in (200, 201)
        await eventually(
            lambda: ready_of(kmock, GRANTS, "run-code-over-mcp") == ("False", "ForbiddenChannel"),
            what="the bad grant marked Invalid",
        )
        assert registry(kmock)["mcp"].keys() == {"platform_status"}
        assert "run_code" not in registry(kmock)["agents"]["code-reviewer"]["tools"]
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=15)
    assert "publish failed" not in caplog.text
