"""The dev issuer: an OIDC-style token issuer for the local platform and the tests.

It keeps its own EC key pair in a directory, serves its JWKS on loopback and mints caller tokens
(`sub`, `groups`, audience `agentfn`) and service tokens shaped like Kubernetes projected
ServiceAccount tokens (`sub` = `system:serviceaccount:<ns>:<sa>`, audience of the memory service).
The verifying code in `identity` is the same one used against a real gateway and cluster.
It is a development tool: it mints a token for whoever asks, so it only ever listens on loopback.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from flask import Flask, jsonify, request

from .identity import SERVICE_ACCOUNT_PREFIX

KEY_FILE = "dev-issuer-key.pem"
ALGORITHM = "ES256"
CALLER_AUDIENCE = "agentfn"
SERVICE_AUDIENCE = "agentfn-memory"


class DevIssuer:
    def __init__(self, directory: str | Path, url: str):
        self.url = url.rstrip("/")
        path = Path(directory) / KEY_FILE
        if path.exists():
            self._key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._key = ec.generate_private_key(ec.SECP256R1())
            pem = self._key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(pem)
        jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(self._key.public_key()))
        self.kid = jwt.PyJWK(jwk).key_id or jwk["x"][:16]
        self.jwk = {**jwk, "kid": self.kid, "use": "sig", "alg": ALGORITHM}

    @property
    def jwks_url(self) -> str:
        return f"{self.url}/.well-known/jwks.json"

    def sign(self, claims: dict[str, Any], headers: dict[str, Any] | None = None) -> str:
        """Sign any claims with the issuer's key (the tests use it to forge near-valid tokens)."""
        return jwt.encode(claims, self._key, algorithm=ALGORITHM, headers={"kid": self.kid, **(headers or {})})

    def _claims(self, sub: str, audience: str, ttl: int) -> dict[str, Any]:
        now = int(time.time())
        return {"iss": self.url, "sub": sub, "aud": audience, "iat": now, "nbf": now, "exp": now + ttl,
                "jti": str(uuid.uuid4())}

    def caller_token(self, subject: str, groups: list[str] | None = None, *, audience: str = CALLER_AUDIENCE,
                     ttl: int = 3600) -> str:
        return self.sign({**self._claims(subject, audience, ttl), "groups": list(groups or [])})

    def service_token(self, account: str, *, audience: str = SERVICE_AUDIENCE, ttl: int = 3600) -> str:
        if not account.startswith(SERVICE_ACCOUNT_PREFIX):
            raise ValueError(f"a service account is named {SERVICE_ACCOUNT_PREFIX}<namespace>:<name>")
        namespace, _, name = account[len(SERVICE_ACCOUNT_PREFIX):].partition(":")
        claims = self._claims(account, audience, ttl)
        claims["kubernetes.io"] = {"namespace": namespace, "serviceaccount": {"name": name, "uid": str(uuid.uuid4())}}
        return self.sign(claims)


def create_app(issuer: DevIssuer | None = None) -> Flask:
    """The issuer's HTTP face: discovery, JWKS and a token counter for the dev stack's CLI."""
    if issuer is None:
        issuer = DevIssuer(os.environ.get("AGENTFN_DEV_ISSUER_DIR", "var/issuer"), os.environ["AGENTFN_JWT_ISSUER"])
    app = Flask("agentfn.dev_issuer")

    @app.get("/.well-known/openid-configuration")
    def discovery():
        """OIDC discovery, so any OIDC-aware client finds the keys."""
        return jsonify(issuer=issuer.url, jwks_uri=issuer.jwks_url, id_token_signing_alg_values_supported=[ALGORITHM])

    @app.get("/.well-known/jwks.json")
    def jwks():
        """The public key set."""
        return jsonify(keys=[issuer.jwk])

    @app.post("/v1/tokens")
    def caller_token():
        """A caller token for a subject and groups."""
        body = request.get_json(force=True, silent=True) or {}
        subject, groups = body.get("subject"), body.get("groups", [])
        if not isinstance(subject, str) or not subject or not isinstance(groups, list):
            return jsonify(error="send {subject, groups?}"), 422
        return jsonify(token=issuer.caller_token(subject, [str(x) for x in groups], ttl=int(body.get("ttl", 3600))))

    @app.post("/v1/service-tokens")
    def service_token():
        """A service token shaped like a projected ServiceAccount token."""
        body = request.get_json(force=True, silent=True) or {}
        try:
            token = issuer.service_token(str(body.get("account", "")), audience=body.get("audience", SERVICE_AUDIENCE))
        except ValueError as e:
            return jsonify(error=str(e)), 422
        return jsonify(token=token)

    @app.get("/healthz")
    def healthz():
        return jsonify(status="ok")

    return app
