"""Identity at every door: forged tokens are refused everywhere, and callers and services stay apart."""

import base64
import hashlib
import hmac
import json
import time

import jwt
import pytest
import requests
from agentfn.shared.dev_issuer import CALLER_AUDIENCE, SERVICE_AUDIENCE
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

SERVICE = "system:serviceaccount:agentfn:agentfn-model"
DOORS = [
    ("get", "/v1/entries", None),
    ("post", "/v1/entries", {"kind": "fact", "text": "t", "source": "s"}),
    ("patch", "/v1/entries/00000000-0000-4000-8000-000000000000", {"text": "t"}),
    ("delete", "/v1/entries/00000000-0000-4000-8000-000000000000", None),
    ("post", "/v1/recall", {"query": "q"}),
    ("post", "/internal/v1/episodes", {"subject": "someone", "text": "They met."}),
]


def claims(issuer, **changes):
    now = int(time.time())
    base = {"iss": issuer.url, "sub": "mallory", "aud": CALLER_AUDIENCE, "iat": now, "nbf": now, "exp": now + 600,
            "groups": []}
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def tampered(issuer):
    """A valid signature over one payload, sent with another."""
    header, _, signature = issuer.caller_token("mallory").split(".")
    payload = base64.urlsafe_b64encode(json.dumps(claims(issuer, sub="admin")).encode()).rstrip(b"=").decode()
    return f"{header}.{payload}.{signature}"


def hs256_with_public_key(issuer):
    """The classic confusion attack: HMAC keyed with the issuer's public key, which anyone can fetch."""
    pem = jwt.algorithms.ECAlgorithm.from_jwk(issuer.jwk).public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": issuer.kid}).encode())
    body = b64(json.dumps(claims(issuer)).encode())
    sig = b64(hmac.new(pem, f"{head}.{body}".encode(), hashlib.sha256).digest())
    return f"{head}.{body}.{sig}"


def alg_none(issuer):
    return jwt.encode(claims(issuer), None, algorithm="none", headers={"kid": issuer.kid})


FORGED = {
    "alg none": alg_none,
    "HS256 signed with the public key": hs256_with_public_key,
    "expired": lambda i: i.sign(claims(i, exp=int(time.time()) - 120, iat=int(time.time()) - 800,
                                       nbf=int(time.time()) - 800)),
    "not valid yet": lambda i: i.sign(claims(i, nbf=int(time.time()) + 600, exp=int(time.time()) + 1200)),
    "wrong issuer": lambda i: i.sign(claims(i, iss="https://evil.example")),
    "wrong audience": lambda i: i.sign(claims(i, aud="someone-else")),
    "unknown kid": lambda i: jwt.encode(claims(i), ec.generate_private_key(ec.SECP256R1()), algorithm="ES256",
                                        headers={"kid": "not-a-key-of-ours"}),
    "issuer's kid, another key": lambda i: jwt.encode(claims(i), ec.generate_private_key(ec.SECP256R1()),
                                                      algorithm="ES256", headers={"kid": i.kid}),
    "tampered payload": tampered,
    "no sub": lambda i: i.sign(claims(i, sub=None)),
    "no exp": lambda i: i.sign(claims(i, exp=None)),
    "groups not a list": lambda i: i.sign(claims(i, groups="admins")),
    "not a JWT": lambda i: "not.a.jwt",
    "empty": lambda i: "",
}


@pytest.mark.parametrize("forge", FORGED.values(), ids=FORGED.keys())
@pytest.mark.parametrize(("method", "path", "body"), DOORS, ids=[f"{m} {p}" for m, p, _ in DOORS])
def test_forged_tokens_are_refused_at_every_door(memory, issuer, forge, method, path, body):
    response = requests.request(method, memory.url + path, json=body,
                                headers={"Authorization": f"Bearer {forge(issuer)}"}, timeout=10)
    assert response.status_code == 401, response.text
    assert response.headers["Content-Type"] == "application/problem+json"
    assert response.json()["detail"]


@pytest.mark.parametrize(("method", "path", "body"), DOORS, ids=[f"{m} {p}" for m, p, _ in DOORS])
def test_no_token_is_refused_at_every_door(memory, method, path, body):
    response = requests.request(method, memory.url + path, json=body, timeout=10)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


CALLER_DOORS = DOORS[:-1]


@pytest.mark.parametrize(("method", "path", "body"), CALLER_DOORS, ids=[f"{m} {p}" for m, p, _ in CALLER_DOORS])
def test_a_service_token_never_passes_a_caller_door(memory, issuer, method, path, body):
    for token in (issuer.service_token(SERVICE),
                  issuer.service_token(SERVICE, audience=CALLER_AUDIENCE)):
        response = requests.request(method, memory.url + path, json=body,
                                    headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert response.status_code == 401, response.text


def test_a_caller_token_never_passes_the_service_door(memory, issuer):
    for token in (issuer.caller_token("alice"), issuer.caller_token(SERVICE)):
        response = requests.post(memory.url + "/internal/v1/episodes", json={"subject": "alice", "text": "x"},
                                 headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert response.status_code == 401, response.text


def test_an_untrusted_service_account_is_forbidden(memory, issuer):
    token = issuer.service_token("system:serviceaccount:agentfn:page", audience=SERVICE_AUDIENCE)
    response = requests.post(memory.url + "/internal/v1/episodes", json={"subject": "alice", "text": "x"},
                             headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert response.status_code == 403
    assert "not trusted" in response.json()["detail"]


def test_an_unreachable_key_set_is_503_not_401(memory_env, tmp_path, issuer):
    from support import Gunicorn, free_port

    env = {**memory_env, "AGENTFN_JWKS_URL": f"http://127.0.0.1:{free_port()}/jwks.json"}
    server = Gunicorn("agentfn.memory.app:create_app()", env, tmp_path / "memory.log")
    server.start()
    try:
        response = requests.get(server.url + "/v1/entries", headers=issuer.headers("alice"), timeout=30)
        assert response.status_code == 503
        assert "keys cannot be fetched" in response.json()["detail"]
    finally:
        server.stop()
