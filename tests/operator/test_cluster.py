"""Third tier: the operator (KopfRunner, as its own ServiceAccount) on a real kube-apiserver, driven by kubectl.

The examples are applied before the operator starts, so the first assertions prove the start-up
reconcile; later tests change objects and watch the ConfigMap, the NetworkPolicy, statuses and events.
"""

from __future__ import annotations

import json
import logging
import re
import time

import pytest
import requests
import yaml
from kopf.testing import KopfRunner
from support.operator import (
    CLUSTER_TIMEOUT,
    EXAMPLES,
    NAMESPACE,
    example_objects,
    registry_of,
    service_account_kubeconfig,
    wait_for,
)

from agentfn.devstack.harness.ports import free_port
from agentfn.operator import audit
from agentfn.operator.reconcile import dumps, reconcile

pytestmark = pytest.mark.timeout(CLUSTER_TIMEOUT)
NS = ["-n", NAMESPACE]


@pytest.fixture(scope="module")
def operator(operator_kube, tmp_path_factory):
    operator_kube.kubectl("apply", "-f", str(EXAMPLES))
    kubeconfig = service_account_kubeconfig(operator_kube, "agentfn-operator", tmp_path_factory.mktemp("operator"))
    port = free_port()
    log = LogRecorder()
    logging.getLogger("kopf").addHandler(log)  # kopf resets the root logger's handlers, not its own
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("KUBECONFIG", str(kubeconfig))
            env.setenv("AGENTFN_NAMESPACE", NAMESPACE)
            with KopfRunner(
                ["run", "-m", "agentfn.operator", "--namespace", NAMESPACE, f"--liveness=http://127.0.0.1:{port}/healthz"]
            ) as runner:
                runner.liveness_url, runner.log = f"http://127.0.0.1:{port}/healthz", log
                yield runner
    finally:
        logging.getLogger("kopf").removeHandler(log)
    assert runner.exit_code == 0 and runner.exception is None, log.text()[-3000:]
    # Least privilege was enough: nothing the operator tried was refused.
    assert "publish failed" not in log.text() and "Forbidden" not in log.text(), log.text()[-3000:]
    assert "registry sha256:" in log.text() and "lease agentfn-operator released" in log.text()


class LogRecorder(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")

    def text(self) -> str:
        return "\n".join(self.lines)


def get(operator_kube, *args) -> dict:
    return json.loads(operator_kube.kubectl("get", *NS, *args, "-o", "json").stdout)


def ready(obj) -> tuple[str, str] | None:
    conditions = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
    return (conditions["Ready"]["status"], conditions["Ready"]["reason"]) if "Ready" in conditions else None


def tables(text: str) -> dict[str, list[dict[str, str]]]:
    """`kubectl get a,b` output as {kind: rows}, each cell cut at its header's column."""
    found: dict[str, list[dict[str, str]]] = {}
    for block in text.strip().split("\n\n"):
        header, *lines = block.splitlines()
        starts = [m.start() for m in re.finditer(r"\S+", header)]
        names = header.split()
        for line in lines:
            cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
            row = dict(zip(names, cells, strict=True))
            kind, _, row["NAME"] = row["NAME"].partition("/")
            found.setdefault(kind.split(".")[0], []).append(row)
    return found


def rows_from_columns(text: str) -> list[audit.Row]:
    """The audit's rows, from the printer columns alone."""
    found = []
    for row in tables(text)["toolgrant"]:
        if row["READY"] != "True":
            continue
        who = (row["SUBJECTS"] or "-", row["GROUPS"] or "-")
        grant, limit = f"{NAMESPACE}/{row['NAME']}", row["DAILY"] or "-"
        channels = row["CHANNELS"].split(",")
        found += [
            (agent, row["TOOL"], *who, "step", limit, row["APPROVAL"], grant) for agent in row["AGENTS"].split(",") if agent
        ]
        found += [("-", row["TOOL"], *who, c, limit, "-", grant) for c in channels if c != "step"]
    return sorted(found)


def test_start_up_publishes_the_examples_as_the_registry_configmap(operator_kube, operator, tool_catalog):
    expected = reconcile(tool_catalog, *example_objects()).registry
    wait_for(lambda: registry_of(operator_kube) == expected, timeout=20, what="the registry ConfigMap")
    configmap = get(operator_kube, "configmap", "agentfn-registry")
    # The same bytes local mode writes: the apiserver's defaults are the reconcile's.
    assert configmap["data"] == {"registry.json": dumps(expected)}
    assert configmap["metadata"]["annotations"]["agentfn.dev/registry-revision"] == expected["revision"]
    assert configmap["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "agentfn-operator"


def test_every_object_is_ready_with_its_generation_and_columns(operator_kube, operator):
    wait_for(lambda: all(ready(o) for o in get(operator_kube, "agents,toolgrants")["items"]), timeout=20, what="statuses")
    for obj in get(operator_kube, "agents,toolgrants")["items"]:
        assert ready(obj) in (("True", "Ready"), ("True", "Granted")), obj["metadata"]["name"]
        status = obj["status"]
        assert status["observedGeneration"] == obj["metadata"]["generation"]
        invalid = next(c for c in status["conditions"] if c["type"] == "Invalid")
        assert invalid["status"] == "False" and invalid["observedGeneration"] == obj["metadata"]["generation"]
    shown = tables(operator_kube.kubectl("get", *NS, "agents,toolgrants").stdout)
    reviewer = next(r for r in shown["agent"] if r["NAME"] == "code-reviewer")
    assert reviewer["TOOLS"] == "run_code,platform_status,open_page,remember,forget" and reviewer["MEMORY"] == "facts"
    everyone = next(r for r in shown["toolgrant"] if r["NAME"] == "platform-status-for-everyone")
    assert (everyone["AGENTS"], everyone["CHANNELS"], everyone["DAILY"]) == (
        "code-reviewer,site-guide",
        "step,alone,mcp",
        "500",
    )


def test_each_object_gets_an_event(operator_kube, operator):
    def reasons():
        return {(e["involvedObject"]["name"], e["reason"]) for e in get(operator_kube, "events")["items"]}

    wait_for(
        lambda: {("code-reviewer", "Ready"), ("site-guide", "Ready"), ("code-reviewer-runs-code", "Granted")} <= reasons(),
        timeout=20,
        what="events",
    )


def test_the_network_policy_lets_the_model_function_reach_the_tools_in_use(operator_kube, operator):
    policy = wait_for(lambda: get(operator_kube, "networkpolicies")["items"], timeout=20, what="the policy")[0]
    assert policy["metadata"]["name"] == "agentfn-model-to-tools"
    assert policy["spec"]["podSelector"] == {"matchLabels": {"serving.knative.dev/service": "model"}}
    assert policy["spec"]["policyTypes"] == ["Egress"]
    (rule,) = policy["spec"]["egress"]
    assert rule == {
        "to": [
            {
                "podSelector": {
                    "matchExpressions": [
                        {
                            "key": "serving.knative.dev/service",
                            "operator": "In",
                            "values": ["memory", "page", "platform-status", "run-code"],
                        }
                    ]
                }
            }
        ]
    }


def test_the_liveness_probe_answers_with_the_revision(operator_kube, operator):
    revision = registry_of(operator_kube)["revision"]
    response = requests.get(operator.liveness_url, timeout=5)
    assert response.status_code == 200
    assert response.json()["registry"] == {
        "writing": True,
        "revision": revision,
        "published_at": response.json()["registry"]["published_at"],
    }


def test_the_audit_and_kubectl_columns_give_the_same_answer(operator_kube, operator):
    wait_for(lambda: all(ready(o) for o in get(operator_kube, "toolgrants")["items"]), timeout=20, what="statuses")
    from_registry = audit.rows(registry_of(operator_kube))
    assert from_registry == rows_from_columns(operator_kube.kubectl("get", *NS, "agents,toolgrants").stdout)
    assert len(from_registry) == 8


BAD_BY_SCHEMA = [
    ("Agent", {"brief": "x", "memory": "sometimes"}, "memory"),
    ("Agent", {"brief": "x", "limits": {"steps": 9}}, "steps"),
    ("ToolGrant", {"tool": "Run Code", "groups": ["a"], "agents": ["code-reviewer"]}, "tool"),
    ("ToolGrant", {"tool": "run_code", "groups": ["a"], "dailyLimit": 0}, "dailyLimit"),
]


@pytest.mark.parametrize(("kind", "spec", "field"), BAD_BY_SCHEMA, ids=[f"{k} {f}" for k, _, f in BAD_BY_SCHEMA])
def test_the_api_refuses_what_the_schema_can_refuse(operator_kube, operator, kind, spec, field):
    doc = {
        "apiVersion": "agentfn.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": "refused", "namespace": NAMESPACE},
        "spec": spec,
    }
    done = operator_kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc), check=False)
    assert done.returncode != 0 and field in done.stderr, done.stderr
    assert operator_kube.kubectl("get", *NS, kind.lower(), "refused", check=False).returncode != 0


BAD_GRANTS = [
    ("run-code-over-mcp", {"tool": "run_code", "agents": ["code-reviewer"], "mcp": True}, "ForbiddenChannel"),
    ("guide-opens-pages", {"tool": "open_page", "agents": ["site-guide"]}, "ForbiddenAgent"),
    ("rockets", {"tool": "launch_rockets", "agents": ["code-reviewer"]}, "UnknownTool"),
    ("for-a-ghost", {"tool": "platform_status", "agents": ["ghost"]}, "UnknownAgent"),
    ("status-again", {"tool": "platform_status", "agents": ["site-guide"], "subjects": ["eve"]}, "Conflict"),
]


def test_bad_objects_the_schema_lets_through_are_marked_invalid_and_give_nothing(operator_kube, operator):
    before = wait_for(lambda: registry_of(operator_kube), what="a registry")
    docs = [
        {
            "apiVersion": "agentfn.dev/v1alpha1",
            "kind": "ToolGrant",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"groups": ["developers"], **spec},
        }
        for name, spec, _ in BAD_GRANTS
    ]
    operator_kube.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    try:
        for name, _, reason in BAD_GRANTS:
            wait_for(
                lambda name=name, reason=reason: ready(get(operator_kube, "toolgrant", name)) == ("False", reason),
                timeout=20,
                what=f"{name} marked {reason}",
            )
            obj = get(operator_kube, "toolgrant", name)
            invalid = next(c for c in obj["status"]["conditions"] if c["type"] == "Invalid")
            assert invalid["status"] == "True" and invalid["reason"] == reason and invalid["message"]
            assert not {"agents", "subjects", "groups", "channels"} & set(obj["status"]), "an invalid grant shows no access"
        warnings = {
            (e["involvedObject"]["name"], e["reason"])
            for e in get(operator_kube, "events")["items"]
            if e["type"] == "Warning"
        }
        assert {(name, reason) for name, _, reason in BAD_GRANTS} <= warnings
        assert registry_of(operator_kube) == before
    finally:
        operator_kube.kubectl("delete", *NS, "toolgrant", *(name for name, _, _ in BAD_GRANTS))
    time.sleep(0.5)
    assert registry_of(operator_kube) == before


def test_an_edit_is_published_with_its_new_generation(operator_kube, operator):
    operator_kube.kubectl(
        "patch", *NS, "toolgrant", "code-reviewer-runs-code", "--type=merge", "-p", '{"spec":{"dailyLimit":7}}'
    )
    try:
        wait_for(
            lambda: registry_of(operator_kube)["agents"]["code-reviewer"]["tools"]["run_code"]["dailyLimit"] == 7,
            timeout=10,
            what="the new daily limit",
        )
        obj = wait_for(
            lambda: (
                (o := get(operator_kube, "toolgrant", "code-reviewer-runs-code"))["status"]["observedGeneration"] == 2 and o
            ),
            timeout=10,
            what="observedGeneration 2",
        )
        assert obj["metadata"]["generation"] == 2 and ready(obj) == ("True", "Granted")
    finally:
        operator_kube.kubectl(
            "patch", *NS, "toolgrant", "code-reviewer-runs-code", "--type=merge", "-p", '{"spec":{"dailyLimit":50}}'
        )


def test_deleting_a_grant_removes_the_access_at_once(operator_kube, operator):
    wait_for(lambda: "run_code" in registry_of(operator_kube)["agents"]["code-reviewer"]["tools"], what="run_code granted")
    started = time.monotonic()
    operator_kube.kubectl("delete", *NS, "toolgrant", "code-reviewer-runs-code")
    try:
        wait_for(
            lambda: "run_code" not in registry_of(operator_kube)["agents"]["code-reviewer"]["tools"],
            timeout=5,
            what="run_code gone from the registry",
        )
        elapsed = time.monotonic() - started
        assert elapsed < 3, f"the registry took {elapsed:.2f} s"
        wait_for(
            lambda: (
                "run-code"
                not in get(operator_kube, "networkpolicy", "agentfn-model-to-tools")["spec"]["egress"][0]["to"][0][
                    "podSelector"
                ]["matchExpressions"][0]["values"]
            ),
            timeout=5,
            what="run-code gone from the policy",
        )
        wait_for(
            lambda: ready(get(operator_kube, "agent", "code-reviewer")) == ("True", "Ungranted"),
            timeout=5,
            what="the reviewer Ungranted",
        )
        assert "run_code" not in get(operator_kube, "agent", "code-reviewer")["status"]["tools"].split(",")
    finally:
        operator_kube.kubectl("apply", "-f", str(EXAMPLES / "grants.yaml"))
    wait_for(
        lambda: "run_code" in registry_of(operator_kube)["agents"]["code-reviewer"]["tools"], timeout=5, what="run_code back"
    )


def test_the_deployment_manifest_is_accepted_by_the_apiserver(operator_kube):
    done = operator_kube.kubectl("apply", "--dry-run=server", "-f", str(EXAMPLES.parent / "operator" / "deploy"))
    assert "deployment.apps/agentfn-operator created (server dry run)" in done.stdout
