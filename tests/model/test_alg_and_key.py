"""A token whose `alg` does not fit the key its `kid` names is refused at every door with 401, never a 500.

The dev issuer publishes an EC key (ES256, what it signs with) and an RSA key (RS256), as issuers publish
several. Each forged token is otherwise exactly what the door takes (issuer, audience, actor, expiry), so
the only thing wrong is the algorithm named against the key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import jwt
import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from support import MCP_RESOURCE

from agentfn.devstack.harness.identity import MODEL_SERVICE
from agentfn.shared.contract import audience


def claims(issuer, audience: str, **extra) -> dict:
    now = int(time.time())
    return {
        "iss": issuer.url,
        "sub": "mallory",
        "aud": audience,
        "iat": now,
        "nbf": now,
        "exp": now + 600,
        "groups": ["platform-users", "developers"],
        **extra,
    }


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hs256_with_the_rsa_public_key(issuer, body: dict) -> str:
    pem = jwt.algorithms.RSAAlgorithm.from_jwk(issuer.rsa_jwk).public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": issuer.rsa_kid}).encode())
    payload = b64(json.dumps(body).encode())
    return f"{head}.{payload}.{b64(hmac.new(pem, f'{head}.{payload}'.encode(), hashlib.sha256).digest())}"


MISFITS = {
    "RS256 header naming the EC key": lambda i, body: i.sign(body, {"kid": i.kid}, rsa_key=True),
    "ES256 header naming the RSA key": lambda i, body: i.sign(body, {"kid": i.rsa_kid}),
    "HS256 header naming the RSA key": hs256_with_the_rsa_public_key,
    "EdDSA header naming the EC key": lambda i, body: jwt.encode(
        body, ed25519.Ed25519PrivateKey.generate(), algorithm="EdDSA", headers={"kid": i.kid}
    ),
}

# Each door, and what it takes: (method, part, path, audience or None for a service token, body).
DOORS = {
    "memory GET /v1/entries": ("get", "memory", "/v1/entries", "agentfn", None),
    "memory POST /v1/recall (exchanged)": ("post", "memory", "/v1/recall", audience("memory"), {"query": "q"}),
    "memory POST /internal/v1/episodes": (
        "post",
        "memory",
        "/internal/v1/episodes",
        None,
        {"subject": "mallory", "text": "They met."},
    ),
    "page POST /v1/open": ("post", "page", "/v1/open", audience("page"), {"url": "https://example.org/"}),
    "platform_status POST /v1/call": (
        "post",
        "platform_status",
        "/v1/call",
        audience("tool", "platform_status"),
        {"arguments": {}},
    ),
    "model GET /v1/agents": ("get", "model", "/v1/agents", "agentfn", None),
    "model POST /v1/tools/platform_status/call": (
        "post",
        "model",
        "/v1/tools/platform_status/call",
        "agentfn",
        {"arguments": {}},
    ),
    "model POST /mcp": ("post", "model", "/mcp", MCP_RESOURCE, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
}


@pytest.mark.parametrize("forge", MISFITS.values(), ids=MISFITS.keys())
@pytest.mark.parametrize(("method", "part", "path", "audience", "body"), DOORS.values(), ids=DOORS.keys())
def test_an_alg_that_does_not_fit_its_key_is_401_at_every_door(
    memory, page_fetcher, model_read_tools, model, issuer, forge, method, part, path, audience, body
):
    base = {"memory": memory, "page": page_fetcher, "model": model, **model_read_tools}[part].url
    if audience is None:  # memory's service door: a service token's claims
        body_claims = {**claims(issuer, "agentfn-memory"), "sub": MODEL_SERVICE, "groups": None}
    else:
        body_claims = claims(issuer, audience, **({"act": {"sub": MODEL_SERVICE}} if ":" in audience else {}))
    token = forge(issuer, {k: v for k, v in body_claims.items() if v is not None})
    response = requests.request(
        method,
        base + path,
        json=body,
        timeout=30,
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
    )
    assert response.status_code == 401, response.text


@pytest.mark.parametrize(("method", "part", "path", "audience", "body"), DOORS.values(), ids=DOORS.keys())
def test_the_same_token_with_a_fitting_alg_passes_the_door(
    memory, page_fetcher, model_read_tools, model, issuer, method, part, path, audience, body
):
    """The control: signed with the key its kid names, the same claims are not refused as a token (not 401)."""
    base = {"memory": memory, "page": page_fetcher, "model": model, **model_read_tools}[part].url
    if audience is None:
        token = issuer.service_token(MODEL_SERVICE)
    else:
        token = issuer.sign(
            claims(issuer, audience, **({"act": {"sub": MODEL_SERVICE}} if ":" in audience else {})), rsa_key=True
        )
    response = requests.request(
        method,
        base + path,
        json=body,
        timeout=30,
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
    )
    assert response.status_code != 401, response.text
