"""Third tier: memory's WriteEpisode takes the model function's ServiceAccount token
from the real apiserver's TokenRequest (audience agentfn-memory), checked against the apiserver's own
JWKS (`/openid/v1/jwks`, served by 1.20 behind the ServiceAccountIssuerDiscovery gate, on by default),
and refuses another ServiceAccount's token, another audience's, and another issuer's."""

from __future__ import annotations

import secrets

import pytest
import requests
from support.operator import CLUSTER_TIMEOUT, NAMESPACE

from agentfn.devstack.harness.servers import Client, Gunicorn

pytestmark = pytest.mark.timeout(CLUSTER_TIMEOUT)
MODEL = f"system:serviceaccount:{NAMESPACE}:agentfn-model"
SUMMARY = "Ana asked how to rotate the ledger's database password and chose to do it every ninety days."


def token(operator_kube, account: str, *audiences: str) -> str:
    flags = [f"--audience={a}" for a in audiences]
    return operator_kube.kubectl("-n", NAMESPACE, "create", "token", account, *flags, "--duration=10m").stdout.strip()


@pytest.fixture(scope="module")
def cluster_memory(operator_kube, memory_env, tmp_path_factory):
    """Memory trusting the apiserver's ServiceAccount issuer for its service door."""
    for account in ("agentfn-model", "agentfn-memory", "agentfn-intruder"):
        operator_kube.kubectl("-n", NAMESPACE, "create", "serviceaccount", account)
    directory = tmp_path_factory.mktemp("memory")
    jwks_token = directory / "token"  # memory's own token: every ServiceAccount may read the issuer's keys
    jwks_token.write_text(token(operator_kube, "agentfn-memory"))
    env = {
        **memory_env,
        "AGENTFN_SERVICE_JWT_ISSUER": operator_kube.issuer,
        "AGENTFN_SERVICE_JWT_AUDIENCE": "agentfn-memory",
        "AGENTFN_SERVICE_JWKS_URL": operator_kube.url + "/openid/v1/jwks",
        "AGENTFN_SERVICE_JWKS_CA_FILE": str(operator_kube.ca_file),
        "AGENTFN_SERVICE_JWKS_TOKEN_FILE": str(jwks_token),
        "AGENTFN_TRUSTED_SERVICE_ACCOUNTS": MODEL,
    }
    server = Gunicorn("agentfn.memory.app:create_app()", env, directory / "memory.log")
    server.start()
    yield server
    server.stop()


def write_episode(memory, bearer: str, subject: str):
    return requests.post(
        memory.url + "/internal/v1/episodes",
        json={"subject": subject, "text": SUMMARY},
        headers={"Authorization": f"Bearer {bearer}"},
        timeout=30,
    )


def test_the_model_functions_token_request_is_accepted(operator_kube, cluster_memory, issuer):
    subject = f"ana-{secrets.token_hex(3)}"
    written = write_episode(cluster_memory, token(operator_kube, "agentfn-model", "agentfn-memory"), subject)
    assert written.status_code == 201, written.text
    entries = Client(cluster_memory.url, issuer.headers(subject)).get("/v1/entries").json()["entries"]
    assert [e["id"] for e in entries] == [written.json()["id"]] and entries[0]["kind"] == "episode"


@pytest.mark.parametrize(
    ("account", "audiences", "status", "detail"),
    [
        ("agentfn-intruder", ["agentfn-memory"], 403, "not trusted"),
        ("agentfn-model", [], 401, "not meant for this service"),  # the apiserver's own audience
        ("agentfn-model", ["agentfn"], 401, "not meant for this service"),  # the callers' audience
    ],
)
def test_another_account_or_audience_is_refused(operator_kube, cluster_memory, issuer, account, audiences, status, detail):
    subject = f"ana-{secrets.token_hex(3)}"
    refused = write_episode(cluster_memory, token(operator_kube, account, *audiences), subject)
    assert refused.status_code == status and detail in refused.json()["detail"], refused.text
    assert Client(cluster_memory.url, issuer.headers(subject)).get("/v1/entries").json()["entries"] == []


def test_the_same_account_from_another_issuer_is_refused(cluster_memory, issuer):
    # The dev issuer signs a token naming the trusted account, with the right audience: not the cluster's key.
    refused = write_episode(cluster_memory, issuer.service_token(MODEL), f"ana-{secrets.token_hex(3)}")
    assert refused.status_code == 401, refused.text
