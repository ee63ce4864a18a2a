"""What `helm install` prints (templates/NOTES.txt), for every values set: the gateway's routes, how a caller
gets a token from the configured issuer, how to see agents and grants and the operator's conditions, how to
audit, and what uninstalling does to the CRDs."""

from __future__ import annotations

import pytest
import yaml
from support.chart import CHART, NAMESPACE, VALUES_SETS, helm


def notes(values_set: str, sets: tuple[str, ...] = ()) -> str:
    args = ["install", "agentfn", str(CHART), "--namespace", NAMESPACE, "--dry-run=client"]
    if VALUES_SETS[values_set]:
        args += ["-f", str(VALUES_SETS[values_set])]
    for item in sets:
        args += ["--set", item]
    out = helm(*args).stdout
    assert "NOTES:" in out
    return out.split("NOTES:", 1)[1]


def values(values_set: str) -> dict:
    base = yaml.safe_load((CHART / "values.yaml").read_text())
    extra = yaml.safe_load(VALUES_SETS[values_set].read_text()) if VALUES_SETS[values_set] else {}
    for key, value in extra.items():
        base[key] = {**base[key], **value} if isinstance(value, dict) else value
    return base


@pytest.mark.parametrize("values_set", list(VALUES_SETS))
def test_the_notes_say_where_everything_is(values_set):
    text, v = notes(values_set), values(values_set)
    host = f"https://{v['gateway']['hostnames'][0]}" if v["gateway"]["hostnames"] else "<the gateway's address>"
    if v["gateway"]["enabled"]:
        assert f"Gateway {v['gateway']['namespace']}/{v['gateway']['name']}" in text
        for door in (
            "/v1/entries",
            "/v1/recall",
            "/v1/agents",
            "/v1/tools",
            "/mcp",
            "/v1/admin/generations",
            "/v1/admin/grants",
            "/v1/admin/calls",
        ):
            assert f"{host}{door}" in text, door
    else:
        assert "No routes: gateway.enabled is false" in text
    assert "/internal" not in text.replace("never /internal/*", "")
    assert f"issuer {v['identity']['issuer']}" in text and f"audience {v['identity']['audience']}" in text
    assert f"curl -s {v['identity']['tokenExchangeUrl']} -d grant_type=client_credentials" in text
    assert f"kubectl get agents,toolgrants -n {NAMESPACE}" in text
    if v["operator"]["enabled"]:
        assert f"kubectl describe agent NAME -n {NAMESPACE}" in text and ".status.conditions" in text
        assert f"agentfn audit --kube --namespace {NAMESPACE}" in text
    else:
        assert "operator.enabled is false" in text and "agentfn audit" not in text
    assert "keeps them and every Agent and ToolGrant" in text
    assert f"helm test agentfn -n {NAMESPACE}" in text
    assert "GET /v1/agents once tests.tokenSecret" in text  # no values set names a token


def test_the_notes_name_the_probes_token_secret():
    assert "with the token of the Secret probe-token" in notes("cnpg", ("tests.tokenSecret=probe-token",))


@pytest.mark.parametrize(
    "sets, says",
    [
        (("crds.keep=false",), "crds.keep is false: `helm uninstall` deletes them and with them every Agent and ToolGrant"),
        (("crds.install=false",), None),
    ],
    ids=["not kept", "not installed"],
)
def test_the_notes_say_what_uninstalling_does_to_the_crds(sets, says):
    text = notes("default", sets)
    assert "keeps them and every Agent" not in text
    assert (says in text) if says else "The CRDs" not in text
