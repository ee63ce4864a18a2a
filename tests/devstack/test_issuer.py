"""The dev issuer's token endpoint (RFC 8693) makes a real issuer's checks and answers RFC 6749 errors, never a
500; and the exchange client keeps what it got until shortly before it expires."""

from __future__ import annotations

import time

import jwt
import pytest
import requests
from support import MCP_RESOURCE

from agentfn.devstack.harness.identity import MODEL_SERVICE, account
from agentfn.devstack.issuer import JWT_BEARER, TOKEN_EXCHANGE, TOKEN_TYPES
from agentfn.shared.contract import audience
from agentfn.shared.exchange import ExchangeFailed, TokenExchange
from agentfn.shared.identity import Caller

ACCESS = TOKEN_TYPES[0]


def request(issuer, **changes) -> dict:
    """A good exchange request of the model function for the page fetcher; `changes` break one thing
    (a value of None drops the field)."""
    form = {
        "grant_type": TOKEN_EXCHANGE,
        "subject_token": issuer.caller_token("alice", ["developers"]),
        "subject_token_type": ACCESS,
        "audience": audience("page"),
        "client_assertion_type": JWT_BEARER,
        "client_assertion": issuer.service_token(MODEL_SERVICE, audience=issuer.url),
    }
    form.update({k: v(issuer) if callable(v) else v for k, v in changes.items()})
    return {k: v for k, v in form.items() if v is not None}


def expired_caller(issuer):
    now = int(time.time())
    return issuer.sign(
        {
            "iss": issuer.url,
            "sub": "alice",
            "aud": "agentfn",
            "iat": now - 900,
            "nbf": now - 900,
            "exp": now - 60,
            "groups": [],
        }
    )


REFUSED = {
    "another grant type": ({"grant_type": "client_credentials"}, 400, "unsupported_grant_type"),
    "no client authentication": ({"client_assertion": None, "client_assertion_type": None}, 401, "invalid_client"),
    "a client assertion for another audience": (
        {"client_assertion": lambda i: i.service_token(MODEL_SERVICE)},
        401,
        "invalid_client",
    ),
    "a client assertion signed by another key": (
        {
            "client_assertion": lambda i: jwt.encode(
                {"iss": i.url, "sub": MODEL_SERVICE, "aud": i.url, "exp": int(time.time()) + 60}, "k" * 32, algorithm="HS256"
            )
        },
        401,
        "invalid_client",
    ),
    "client_id not the assertion's subject": ({"client_id": "someone-else"}, 401, "invalid_client"),
    "a client not allowed to exchange": (
        {"client_assertion": lambda i: i.service_token(account("page"), audience=i.url)},
        400,
        "unauthorized_client",
    ),
    "no subject token": ({"subject_token": None}, 400, "invalid_request"),
    "a subject token type of another kind": (
        {"subject_token_type": "urn:ietf:params:oauth:token-type:saml2"},
        400,
        "invalid_request",
    ),
    "no audience": ({"audience": None}, 400, "invalid_request"),
    "an actor token": ({"actor_token": "x", "actor_token_type": ACCESS}, 400, "invalid_request"),
    "an audience the client may not ask for": ({"audience": audience("upstream", "platform_status")}, 400, "invalid_target"),
    "the gateway's own audience": ({"audience": "agentfn"}, 400, "invalid_target"),
    "an expired subject token": ({"subject_token": expired_caller}, 400, "invalid_grant"),
    "a subject token that is not a JWT": ({"subject_token": "not-a-jwt"}, 400, "invalid_grant"),
    "a subject token not meant for the client": (
        {"subject_token": lambda i: i.caller_token("alice", audience="other")},
        400,
        "invalid_grant",
    ),
    "a service account as the subject": (
        {"subject_token": lambda i: i.service_token(MODEL_SERVICE, audience="agentfn")},
        400,
        "invalid_grant",
    ),
}


@pytest.mark.parametrize(("changes", "status", "error"), REFUSED.values(), ids=REFUSED.keys())
def test_the_token_endpoint_refuses_with_an_rfc_6749_error(issuer, changes, status, error):
    answer = requests.post(issuer.token_endpoint, data=request(issuer, **changes), timeout=10)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"] == error and answer.json()["error_description"]
    assert answer.headers["Cache-Control"] == "no-store"


def test_an_exchanged_token_keeps_the_caller_names_the_part_and_the_actor_and_lives_minutes(issuer):
    answer = requests.post(issuer.token_endpoint, data=request(issuer), timeout=10)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["issued_token_type"] == ACCESS and body["token_type"] == "Bearer" and body["expires_in"] == 300
    claims = jwt.decode(
        body["access_token"], jwt.PyJWK(issuer.jwk).key, algorithms=["ES256"], audience=audience("page"), issuer=issuer.url
    )
    assert claims["sub"] == "alice" and claims["groups"] == ["developers"]
    assert claims["act"] == {"sub": MODEL_SERVICE} and claims["exp"] - claims["iat"] == 300


def test_an_exchanged_token_never_outlives_the_callers(issuer):
    short = issuer.caller_token("alice", ttl=40)
    body = requests.post(issuer.token_endpoint, data=request(issuer, subject_token=short), timeout=10).json()
    assert body["expires_in"] <= 40


def test_an_mcp_token_is_exchanged_too(issuer):
    """A call over /mcp runs on a token meant for the MCP resource: the model function exchanges that one."""
    mcp = issuer.caller_token("alice", audience=MCP_RESOURCE)
    assert requests.post(issuer.token_endpoint, data=request(issuer, subject_token=mcp), timeout=10).status_code == 200


def test_the_issuer_publishes_its_token_endpoint(issuer):
    for path in ("/.well-known/openid-configuration", "/.well-known/oauth-authorization-server"):
        metadata = requests.get(issuer.url + path, timeout=10).json()
        assert metadata["token_endpoint"] == issuer.token_endpoint
        assert TOKEN_EXCHANGE in metadata["grant_types_supported"]


# --- the client: what the model function and the read tools use -----------------------------------------------


@pytest.fixture
def client(issuer, tmp_path):
    return TokenExchange(
        mode="exchange", url=issuer.token_endpoint, token_file=str(issuer.assertion_file(tmp_path, "model"))
    )


def test_exchanged_tokens_are_kept_per_caller_and_audience(client, issuer):
    alice = Caller("alice", ("developers",), issuer.caller_token("alice", ["developers"]))
    bob = Caller("bob", (), issuer.caller_token("bob"))
    page = client.token_for(alice, audience("page"))
    assert client.token_for(alice, audience("page")) == page  # kept: no second exchange
    assert client.token_for(alice, audience("memory")) != page
    assert jwt.decode(client.token_for(bob, audience("page")), options={"verify_signature": False})["sub"] == "bob"


def test_a_fresh_token_is_exchanged_for_its_call_alone(client, issuer):
    """What a memory write or forget asks for: memory counts an exchanged token's uses by its `jti`, so each gets
    its own token, and the kept one (recall's) stays as it was."""
    alice = Caller("alice", (), issuer.caller_token("alice"))
    kept = client.token_for(alice, audience("memory"))
    fresh = [client.token_for(alice, audience("memory"), fresh=True) for _ in range(2)]
    ids = {jwt.decode(t, options={"verify_signature": False})["jti"] for t in [kept, *fresh]}
    assert len(ids) == 3
    assert client.token_for(alice, audience("memory")) == kept


def test_a_token_near_its_end_is_exchanged_again(issuer, tmp_path):
    client = TokenExchange(
        mode="exchange", url=issuer.token_endpoint, token_file=str(issuer.assertion_file(tmp_path, "model"))
    )
    alice = Caller("alice", (), issuer.caller_token("alice", ttl=25))  # the exchanged one lives 25 s: within the margin
    assert client.token_for(alice, audience("page")) != client.token_for(alice, audience("page"))


def test_the_cache_is_bounded(issuer, tmp_path):
    client = TokenExchange(
        mode="exchange", url=issuer.token_endpoint, token_file=str(issuer.assertion_file(tmp_path, "model")), size=3
    )
    for n in range(5):
        client.token_for(Caller(f"c{n}", (), issuer.caller_token(f"c{n}")), audience("page"))
    assert len(client._cache) == 3


@pytest.mark.parametrize(
    ("subject_token", "audience", "status"),
    [
        ("expired", audience("page"), 401),  # the caller's token was refused: invalid_grant
        ("fresh", audience("upstream", "platform_status"), 403),  # this function's setup: invalid_target
    ],
)
def test_a_refused_exchange_is_a_problem(client, issuer, subject_token, audience, status):
    token = expired_caller(issuer) if subject_token == "expired" else issuer.caller_token("alice")
    with pytest.raises(ExchangeFailed) as refused:
        client.token_for(Caller("alice", (), token), audience)
    assert refused.value.status == status and token not in refused.value.detail


def test_an_issuer_that_does_not_answer_is_503_and_no_workload_token_is_503(issuer, tmp_path):
    from agentfn.devstack.harness.ports import free_port

    caller = Caller("alice", (), issuer.caller_token("alice"))
    down = TokenExchange(
        mode="exchange",
        url=f"http://127.0.0.1:{free_port()}/token",
        token_file=str(issuer.assertion_file(tmp_path, "model")),
    )
    with pytest.raises(ExchangeFailed) as failed:
        down.token_for(caller, audience("page"))
    assert failed.value.status == 503
    lost = TokenExchange(mode="exchange", url=issuer.token_endpoint, token_file=str(tmp_path / "missing"))
    with pytest.raises(ExchangeFailed) as failed:
        lost.token_for(caller, audience("page"))
    assert failed.value.status == 503


def test_raw_forwarding_sends_the_callers_token_unchanged(issuer):
    raw = TokenExchange(mode="raw", url="http://127.0.0.1:9/unused", token_file="/nonexistent")
    caller = Caller("alice", (), issuer.caller_token("alice"))
    assert raw.token_for(caller, audience("page")) == caller.token
