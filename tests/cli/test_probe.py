"""`helm test`: the probe pod as rendered (validated with the chart's other objects by test_render.py), and its
checks (`python -m agentfn.cli.probe`) run for real on loopback: the model function on the real database behind
the dev gateway, with a caller token of the dev issuer; platform_status standing for a function that must not
answer; a closed port for one that does not. Each check is shown to fail when what it guards is broken."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from support.chart import FUNCTIONS, NAMESPACE, env_of, objects

from agentfn.devstack.harness.ports import free_port
from agentfn.devstack.harness.servers import ROOT, Gunicorn

PROBE = "agentfn-test-probe"


def probe_objects(sets: tuple[str, ...] = (), values_set: str = "default") -> dict[str, dict]:
    return {o["kind"]: o for o in objects(values_set, sets=sets) if o["metadata"]["name"] == PROBE}


def url(fn: str) -> str:
    return f"http://agentfn-{fn.replace('_', '-')}.{NAMESPACE}.svc.cluster.local"


def test_the_probe_pod_is_a_test_hook_of_the_model_image_that_checks_every_function():
    found = probe_objects(("tests.tokenSecret=probe-token", "tests.gatewayUrl=https://agents.example.com"))
    pod, policy = found["Pod"], found["NetworkPolicy"]
    for obj in (pod, policy):
        assert obj["metadata"]["annotations"]["helm.sh/hook"] == "test"
    [container] = pod["spec"]["containers"]
    [model] = [
        o
        for o in objects("default", "Service")
        if o["metadata"]["name"] == "agentfn-model" and o["apiVersion"] == "serving.knative.dev/v1"
    ]
    assert container["image"] == model["spec"]["template"]["spec"]["containers"][0]["image"]
    assert container["command"] == ["python", "-m", "agentfn.cli.probe"]
    env = {e["name"]: e["value"] for e in container["env"]}
    public = ("memory", "model", "workbench")
    assert env["AGENTFN_PROBE_READY_URLS"].split(",") == [url(f) for f in public]
    assert env["AGENTFN_PROBE_CLOSED_URLS"].split(",") == [url(f) for f in FUNCTIONS if f not in public]
    assert env["AGENTFN_PROBE_GATEWAY_URL"] == "https://agents.example.com"
    assert pod["spec"]["volumes"][0]["secret"]["secretName"] == "probe-token"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["spec"]["automountServiceAccountToken"] is False
    # its egress: the gateway and Knative's way to a Service, never a function's pods
    peers = [p for rule in policy["spec"]["egress"] for p in rule["to"]]
    assert all("podSelector" not in p for p in peers)
    assert {p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] for p in peers} == {
        "gateway-system",
        "knative-serving",
    }


@pytest.mark.parametrize(
    "sets, gateway_host",
    [
        ((), None),
        (("tests.tokenSecret=probe-token",), None),  # no gateway address known: no /v1/agents check
        (("tests.enabled=false",), "absent"),
    ],
    ids=["no token", "token without an address", "disabled"],
)
def test_the_probe_leaves_out_what_the_values_do_not_name(sets, gateway_host):
    found = probe_objects(sets)
    if gateway_host == "absent":
        assert found == {}
        return
    env = {e["name"] for e in found["Pod"]["spec"]["containers"][0]["env"]}
    assert "AGENTFN_PROBE_GATEWAY_URL" not in env and "volumes" not in found["Pod"]["spec"]


def test_with_a_gateway_hostname_the_probe_calls_it():
    env = env_of({"spec": {"template": probe_objects(("tests.tokenSecret=t",), "cnpg")["Pod"]}})
    assert env["AGENTFN_PROBE_GATEWAY_URL"] == "https://agentfn.example.com"


class AnyAnswer(Gunicorn):
    """The dev gateway or a dev upstream: no /readyz of their own, so any answer means up."""

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                requests.get(self.url + "/readyz", timeout=2)
                return
            except requests.RequestException:
                time.sleep(0.05)
        raise RuntimeError(f"{self.app} did not start; see {self.log}")


@pytest.fixture(scope="module")
def probed_stack(postgres, model_dsn, issuer, tmp_path_factory):
    """The model function behind the dev gateway, and platform_status with its dev upstream, on loopback."""
    var = tmp_path_factory.mktemp("probe")
    registry = var / "registry.json"
    subprocess.run(
        [sys.executable, "-m", "agentfn.operator.local", str(ROOT / "examples"), "--out", str(registry)],
        check=True,
        timeout=60,
    )
    closed = f"http://127.0.0.1:{free_port()}"
    model = Gunicorn(
        "agentfn.model.app:create_app()",
        {
            **issuer.env(),
            "AGENTFN_DATABASE_URL": model_dsn,
            "AGENTFN_REGISTRY_FILE": str(registry),
            "AGENTFN_TIER_FAST_URL": closed + "/v1",
            "AGENTFN_TIER_FAST_MODEL": "none",
            "AGENTFN_TIER_FAST_TOOL_MODE": "native",
            "AGENTFN_WARM_UP": "0",
            "AGENTFN_WORKERS": "1",
        },
        var / "model.log",
    )
    # the platform service behind platform_status: its dev upstream (a test double), which its /readyz asks
    upstream = AnyAnswer(
        "agentfn.devstack.platform_status:create_app()", issuer.upstream_env("platform_status"), var / "upstream.log"
    )
    tool = Gunicorn(
        "agentfn.platform_status.app:create_app()",
        {
            **issuer.env(),
            "AGENTFN_PLATFORM_STATUS_UPSTREAM_URL": upstream.url,
            "AGENTFN_EXCHANGE_TOKEN_FILE": str(issuer.assertion_file(var, "platform_status")),
        },
        var / "platform_status.log",
    )
    started = []
    try:
        for server in (model, upstream, tool):
            server.start()
            started.append(server)
        gateway = AnyAnswer(
            "agentfn.cli.gateway:create_app()",
            {"AGENTFN_GATEWAY_MODEL_URL": model.url, "AGENTFN_GATEWAY_MEMORY_URL": closed},
            var / "gateway.log",
        )
        gateway.start()
        started.append(gateway)
        token = var / "token"
        token.write_text(issuer.caller_token("probe-user", ["developers"]))
        yield {
            "model": model.url,
            "tool": tool.url,
            "gateway": gateway.url,
            "closed": closed,
            "token": token,
            "var": var,
            "issuer": issuer,
        }
    finally:
        for server in reversed(started):
            server.stop()


def probe(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agentfn.cli.probe"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "AGENTFN_PROBE_TIMEOUT_SECONDS": "2", **env},
    )


def healthy(s: dict) -> dict[str, str]:
    return {
        "AGENTFN_PROBE_READY_URLS": s["model"],
        "AGENTFN_PROBE_CLOSED_URLS": s["closed"],
        "AGENTFN_PROBE_GATEWAY_URL": s["gateway"],
        "AGENTFN_PROBE_TOKEN_FILE": str(s["token"]),
    }


def test_the_probe_passes_on_a_healthy_release(probed_stack):
    done = probe(healthy(probed_stack))
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["ok"] * 3
    assert f"GET {probed_stack['gateway']}/v1/agents: 200, " in lines[0] and "agents" in lines[0]
    assert probed_stack["token"].read_text() not in done.stdout + done.stderr


def other_token(s: dict) -> str:
    path = Path(s["var"]) / "wrong-audience"
    path.write_text(s["issuer"].caller_token("probe-user", ["developers"], audience="someone-else"))
    return str(path)


BROKEN = [
    (
        "an internal function answers the pod",
        lambda s: {"AGENTFN_PROBE_CLOSED_URLS": s["tool"]},
        r"is closed to this pod: it answered \(status 200\)",
    ),
    (
        "a public function is down",
        lambda s: {"AGENTFN_PROBE_READY_URLS": f"{s['model']},{s['closed']}"},
        r"/readyz answers: no answer \(ConnectionError\)",
    ),
    ("the gateway refuses the token", lambda s: {"AGENTFN_PROBE_TOKEN_FILE": other_token(s)}, r"/v1/agents: status 401"),
    (
        "the gateway does not route the path",
        lambda s: {"AGENTFN_PROBE_GATEWAY_URL": s["tool"]},
        r"/v1/agents: status 40[14]",
    ),
]


@pytest.mark.parametrize("breaks, pattern", [r[1:] for r in BROKEN], ids=[r[0] for r in BROKEN])
def test_each_check_fails_when_what_it_guards_is_broken(probed_stack, breaks, pattern):
    done = probe({**healthy(probed_stack), **breaks(probed_stack)})
    assert done.returncode == 1
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1 and re.search(pattern, failed[0]), done.stdout


def test_a_probe_with_nothing_to_check_fails():
    done = probe({})
    assert done.returncode == 1 and "nothing to check" in done.stdout
