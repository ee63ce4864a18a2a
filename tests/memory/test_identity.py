"""Identity at every door: forged tokens are refused everywhere, and callers and services stay apart."""

import base64
import hashlib
import hmac
import json
import secrets
import time

import jwt
import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from agentfn.devstack.harness.servers import Served
from agentfn.devstack.issuer import CALLER_AUDIENCE, SERVICE_AUDIENCE
from agentfn.shared.contract import audience

SERVICE = "system:serviceaccount:agentfn:agentfn-model"
MODEL = SERVICE
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
    base = {
        "iss": issuer.url,
        "sub": "mallory",
        "aud": CALLER_AUDIENCE,
        "iat": now,
        "nbf": now,
        "exp": now + 600,
        "groups": [],
    }
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
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )

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
    "expired": lambda i: i.sign(
        claims(i, exp=int(time.time()) - 120, iat=int(time.time()) - 800, nbf=int(time.time()) - 800)
    ),
    "not valid yet": lambda i: i.sign(claims(i, nbf=int(time.time()) + 600, exp=int(time.time()) + 1200)),
    "wrong issuer": lambda i: i.sign(claims(i, iss="https://evil.example")),
    "wrong audience": lambda i: i.sign(claims(i, aud="someone-else")),
    "unknown kid": lambda i: jwt.encode(
        claims(i), ec.generate_private_key(ec.SECP256R1()), algorithm="ES256", headers={"kid": "not-a-key-of-ours"}
    ),
    "issuer's kid, another key": lambda i: jwt.encode(
        claims(i), ec.generate_private_key(ec.SECP256R1()), algorithm="ES256", headers={"kid": i.kid}
    ),
    "tampered payload": tampered,
    "no sub": lambda i: i.sign(claims(i, sub=None)),
    "no exp": lambda i: i.sign(claims(i, exp=None)),
    "groups not a list": lambda i: i.sign(claims(i, groups="admins")),
    "a NUL in sub": lambda i: i.sign(claims(i, sub="mallory\x00admin")),
    "not a JWT": lambda i: "not.a.jwt",
    "empty": lambda i: "",
}


@pytest.mark.parametrize("forge", FORGED.values(), ids=FORGED.keys())
@pytest.mark.parametrize(("method", "path", "body"), DOORS, ids=[f"{m} {p}" for m, p, _ in DOORS])
def test_forged_tokens_are_refused_at_every_door(memory, issuer, forge, method, path, body):
    response = requests.request(
        method, memory.url + path, json=body, headers={"Authorization": f"Bearer {forge(issuer)}"}, timeout=10
    )
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
    for token in (issuer.service_token(SERVICE), issuer.service_token(SERVICE, audience=CALLER_AUDIENCE)):
        response = requests.request(
            method, memory.url + path, json=body, headers={"Authorization": f"Bearer {token}"}, timeout=10
        )
        assert response.status_code == 401, response.text


def test_a_caller_token_never_passes_the_service_door(memory, issuer):
    for token in (issuer.caller_token("alice"), issuer.caller_token(SERVICE)):
        response = requests.post(
            memory.url + "/internal/v1/episodes",
            json={"subject": "alice", "text": "x"},
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        assert response.status_code == 401, response.text


def test_an_untrusted_service_account_is_forbidden(memory, issuer):
    token = issuer.service_token("system:serviceaccount:agentfn:page", audience=SERVICE_AUDIENCE)
    response = requests.post(
        memory.url + "/internal/v1/episodes",
        json={"subject": "alice", "text": "x"},
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert response.status_code == 403
    assert "not trusted" in response.json()["detail"]


@pytest.mark.slow  # memory under gunicorn
def test_an_unreachable_key_set_is_503_not_401(memory_env, tmp_path, issuer):
    from agentfn.devstack.harness.ports import free_port
    from agentfn.devstack.harness.servers import Gunicorn

    env = {**memory_env, "AGENTFN_JWKS_URL": f"http://127.0.0.1:{free_port()}/jwks.json"}
    server = Gunicorn("agentfn.memory.app:create_app()", env, tmp_path / "memory.log")
    server.start()
    try:
        response = requests.get(server.url + "/v1/entries", headers=issuer.headers("alice"), timeout=30)
        assert response.status_code == 503
        assert "keys cannot be fetched" in response.json()["detail"]
    finally:
        server.stop()


# --- exchanged tokens: memory takes those meant for it from the model function, and no other ----------------

EXCHANGED = {
    "for memory, by the model function": (audience("memory"), MODEL, 200),
    "for the page fetcher": (audience("page"), MODEL, 401),
    "for a tool": (audience("tool", "platform_status"), MODEL, 401),
}


@pytest.mark.parametrize(("audience", "actor", "status"), EXCHANGED.values(), ids=EXCHANGED.keys())
def test_memory_takes_a_token_exchanged_for_it_and_no_other(memory, issuer, audience, actor, status):
    token = issuer.exchanged(audience, "exchanged-reader", actor=actor)
    response = requests.post(
        memory.url + "/v1/recall", json={"query": "q"}, headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    assert response.status_code == status, response.text


def test_a_token_for_memory_from_an_untrusted_actor_is_refused(memory, issuer):
    token = issuer.sign({**claims(issuer, aud=audience("memory")), "act": {"sub": "system:serviceaccount:agentfn:page"}})
    response = requests.post(
        memory.url + "/v1/recall", json={"query": "q"}, headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    assert response.status_code == 401 and "not exchanged by a service this part trusts" in response.json()["detail"]


def test_a_token_exchanged_for_memory_recalls_keeps_and_forgets_one_but_never_lists_corrects_or_erases_all(memory, issuer):
    """What the model function's loop needs, and nothing more: a token it exchanged (it carries `act`) recalls,
    keeps one note and forgets one entry; listing, correcting and forgetting everything take the person's own."""
    subject = f"exchanged-{secrets.token_hex(4)}"
    own = {"Authorization": f"Bearer {issuer.caller_token(subject)}"}
    exchanged = {"Authorization": f"Bearer {issuer.exchanged(audience('memory'), subject)}"}
    note = {"kind": "preference", "text": "Prefers short answers with one example.", "source": "chat"}
    kept = requests.post(memory.url + "/v1/entries", json=note, headers=exchanged, timeout=30)
    assert kept.status_code == 201, kept.text
    entry = kept.json()
    recalled = requests.post(
        memory.url + "/v1/recall", json={"query": "How long should answers be?"}, headers=exchanged, timeout=30
    )
    assert recalled.status_code == 200 and [e["id"] for e in recalled.json()["entries"]] == [entry["id"]]

    refused = [
        ("GET", "/v1/entries", None),
        ("DELETE", "/v1/entries", {"confirm": "forget everything"}),
        ("PATCH", f"/v1/entries/{entry['id']}", {"text": "Prefers long answers."}),
    ]
    for method, path, body in refused:
        answer = requests.request(method, memory.url + path, json=body, headers=exchanged, timeout=30)
        assert answer.status_code == 403, (method, path, answer.text)
        assert answer.headers["Content-Type"] == "application/problem+json"
        problem = answer.json()
        assert problem["type"] == "https://agentfn.dev/problems/own-token-only" and "own token" in problem["detail"]
    # Nothing was listed, corrected or forgotten: the person's own token sees the entry as it was kept.
    mine = requests.get(memory.url + "/v1/entries", headers=own, timeout=30).json()["entries"]
    assert [(e["id"], e["text"]) for e in mine] == [(entry["id"], note["text"])]

    assert requests.delete(memory.url + f"/v1/entries/{entry['id']}", headers=exchanged, timeout=30).status_code == 204
    assert requests.get(memory.url + "/v1/entries", headers=own, timeout=30).json()["entries"] == []
    erased = requests.delete(memory.url + "/v1/entries", json={"confirm": "forget everything"}, headers=own, timeout=30)
    assert erased.status_code == 200, erased.text


# --- exchanged is what a token is, not whom it names: `act`, or a client other than the gateway's ---------------

UNTRUSTED = "system:serviceaccount:agentfn:page"
BY_WHAT_IT_IS = {
    # (claims changed, status at GET /v1/entries (the person's own door), at POST /v1/recall)
    "the person's, naming no client": ({}, 200, 200),
    "the person's, from the workbench": ({"client_id": "agentfn-workbench"}, 200, 200),
    "act, audience the gateway's alone": ({"act": {"sub": MODEL}}, 401, 401),
    "act of an untrusted actor, the gateway's": ({"act": {"sub": UNTRUSTED}}, 401, 401),
    "act, audiences the gateway's and memory's": (
        {"aud": [CALLER_AUDIENCE, audience("memory")], "act": {"sub": MODEL}},
        403,
        200,
    ),
    "act, audiences the gateway's and another": (
        {"aud": [CALLER_AUDIENCE, "someone-else"], "act": {"sub": MODEL}},
        401,
        401,
    ),
    "azp of the model function, the gateway's": ({"azp": MODEL}, 401, 401),
    "client_id of another client, the gateway's": ({"client_id": "some-other-app"}, 401, 401),
    "azp of the model function, memory's": ({"aud": audience("memory"), "azp": MODEL}, 403, 200),
    "azp of another client, memory's": ({"aud": audience("memory"), "azp": "some-other-app"}, 401, 401),
}


@pytest.mark.parametrize(("changes", "listing", "recalling"), BY_WHAT_IT_IS.values(), ids=BY_WHAT_IT_IS.keys())
def test_a_token_is_exchanged_by_what_it_is_not_by_its_audience(memory, issuer, changes, listing, recalling):
    """A token that carries `act`, or was issued to a client other than the gateway's, is exchanged whatever else its
    audience names: never the person's own (which lists), and taken only when meant for memory by a trusted actor."""
    headers = {"Authorization": f"Bearer {issuer.sign(claims(issuer, sub=f'what-{secrets.token_hex(4)}', **changes))}"}
    listed = requests.get(memory.url + "/v1/entries", headers=headers, timeout=10)
    assert listed.status_code == listing, listed.text
    assert listed.status_code == 200 or listed.headers["Content-Type"] == "application/problem+json"
    recalled = requests.post(memory.url + "/v1/recall", json={"query": "q"}, headers=headers, timeout=10)
    assert recalled.status_code == recalling, recalled.text


SPENT = "https://agentfn.dev/problems/exchanged-token-spent"


def keep(url: str, headers: dict, text: str) -> requests.Response:
    return requests.post(
        url + "/v1/entries", json={"kind": "fact", "text": text, "source": "chat"}, headers=headers, timeout=30
    )


def test_an_exchanged_token_keeps_one_note_and_forgets_one_entry(memory, issuer):
    """One write and one forget per exchanged token (by its `jti`); recall as often as a turn needs. A second write
    or forget is a 403 problem and changes nothing; a fresh token (the next call's) and the person's own go on."""
    subject = f"once-{secrets.token_hex(4)}"
    own = {"Authorization": f"Bearer {issuer.caller_token(subject)}"}
    mine = [keep(memory.url, own, text).json() for text in ("Works on the ledger.", "Lives in Lisbon.")]
    assert keep(memory.url, own, "Drinks green tea.").status_code == 201  # the person's own token is not counted
    leaked = {"Authorization": f"Bearer {issuer.exchanged(audience('memory'), subject)}"}

    assert keep(memory.url, leaked, "Prefers short answers.").status_code == 201
    again = keep(memory.url, leaked, "Prefers long answers.")
    assert again.status_code == 403 and again.json()["type"] == SPENT, again.text
    assert again.headers["Content-Type"] == "application/problem+json" and "nothing was kept" in again.json()["detail"]
    for _ in range(3):
        recalled = requests.post(
            memory.url + "/v1/recall", json={"query": "Where does the person work?"}, headers=leaked, timeout=30
        )
        assert recalled.status_code == 200, recalled.text

    missing = requests.delete(
        memory.url + f"/v1/entries/{secrets.token_hex(16)[:8]}-0000-4000-8000-000000000000", headers=leaked, timeout=30
    )
    assert missing.status_code == 404  # nothing deleted: the token's forget is not used up
    assert requests.delete(memory.url + f"/v1/entries/{mine[0]['id']}", headers=leaked, timeout=30).status_code == 204
    second = requests.delete(memory.url + f"/v1/entries/{mine[1]['id']}", headers=leaked, timeout=30)
    assert second.status_code == 403 and second.json()["type"] == SPENT, second.text
    left = {e["text"] for e in requests.get(memory.url + "/v1/entries", headers=own, timeout=30).json()["entries"]}
    assert left == {"Lives in Lisbon.", "Drinks green tea.", "Prefers short answers."}

    fresh = {"Authorization": f"Bearer {issuer.exchanged(audience('memory'), subject)}"}
    assert keep(memory.url, fresh, "Prefers long answers.").status_code == 201
    assert requests.delete(memory.url + f"/v1/entries/{mine[1]['id']}", headers=fresh, timeout=30).status_code == 204


@pytest.mark.slow  # a second memory under gunicorn
def test_an_exchanged_tokens_use_holds_across_memory_processes(memory, memory_env, issuer, tmp_path):
    """The use is kept in Postgres, not in a process: another memory (a worker, a replica) refuses it too."""
    from agentfn.devstack.harness.servers import Gunicorn

    other = Gunicorn("agentfn.memory.app:create_app()", memory_env, tmp_path / "memory.log")
    other.start()
    try:
        subject = f"replicas-{secrets.token_hex(4)}"
        leaked = {"Authorization": f"Bearer {issuer.exchanged(audience('memory'), subject)}"}
        assert keep(memory.url, leaked, "Works on the ledger.").status_code == 201
        there = keep(other.url, leaked, "Lives in Lisbon.")
        assert there.status_code == 403 and there.json()["type"] == SPENT, there.text
    finally:
        other.stop()


def test_an_exchanged_tokens_use_is_cleared_once_the_token_has_expired(memory, memory_env, issuer):
    """A use is kept only while its token could still be taken (its `exp` and the clock skew allowed)."""
    import psycopg

    def used(jti: str) -> int:
        with psycopg.connect(memory_env["AGENTFN_DATABASE_URL"]) as conn:
            return conn.execute("SELECT count(*) FROM memory.token_uses WHERE jti = %s", (jti,)).fetchone()[0]

    now, subject = int(time.time()), f"expiry-{secrets.token_hex(4)}"
    ending = claims(issuer, sub=subject, aud=audience("memory"), act={"sub": MODEL}, jti=secrets.token_hex(8))
    ending |= {"iat": now - 300, "nbf": now - 300, "exp": now - 7}  # taken for 3 s more (10 s of skew)
    answer = keep(memory.url, {"Authorization": f"Bearer {issuer.sign(ending)}"}, "Works on the ledger.")
    assert answer.status_code == 201, answer.text
    assert used(ending["jti"]) == 1
    time.sleep(4)
    later = {"Authorization": f"Bearer {issuer.exchanged(audience('memory'), subject)}"}
    assert keep(memory.url, later, "Lives in Lisbon.").status_code == 201  # its claim clears what has expired
    assert used(ending["jti"]) == 0


# --- the service key set's bearer token is read on each fetch (a projected token rotates) --------------------


class RotatingKeySet:
    """A stand-in for the API server's /openid/v1/jwks: it answers only the bearer token it currently wants,
    and its keys and that token change together, as when the cluster rotates keys and the kubelet the token."""

    def __init__(self):
        self.keys, self.wanted, self.fetches = [], "", []
        self.served = Served(self.app)
        self.url = self.served.url

    def app(self, environ, start_response):
        sent = environ.get("HTTP_AUTHORIZATION", "")
        self.fetches.append(sent)
        if sent != f"Bearer {self.wanted}":
            start_response("401 Unauthorized", [("Content-Type", "application/json")])
            return [b'{"message": "Unauthorized"}']
        body = json.dumps({"keys": [k for _, k in self.keys]}).encode()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    def add_key(self) -> tuple:
        key = ec.generate_private_key(ec.SECP256R1())
        kid = f"sa-key-{len(self.keys)}"
        jwk = {**json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key())), "kid": kid, "use": "sig", "alg": "ES256"}
        self.keys.append((key, jwk))
        return key, kid

    def service_token(self, key, kid: str) -> str:
        now = int(time.time())
        return jwt.encode(
            {
                "iss": "https://kubernetes.default.svc.cluster.local",
                "sub": SERVICE,
                "aud": SERVICE_AUDIENCE,
                "iat": now,
                "nbf": now,
                "exp": now + 600,
            },
            key,
            algorithm="ES256",
            headers={"kid": kid},
        )


@pytest.mark.slow  # memory under gunicorn
def test_the_service_key_sets_token_file_is_read_on_each_fetch(memory_env, issuer, tmp_path):
    from agentfn.devstack.harness.servers import Gunicorn

    jwks = RotatingKeySet()
    token_file = tmp_path / "token"
    jwks.wanted = "projected-token-1"
    token_file.write_text(jwks.wanted)
    first = jwks.add_key()
    env = {
        **memory_env,
        "AGENTFN_SERVICE_JWT_ISSUER": "https://kubernetes.default.svc.cluster.local",
        "AGENTFN_SERVICE_JWKS_URL": jwks.url + "/openid/v1/jwks",
        "AGENTFN_SERVICE_JWKS_TOKEN_FILE": str(token_file),
        "AGENTFN_JWKS_COOLDOWN_SECONDS": "0",
    }
    server = Gunicorn("agentfn.memory.app:create_app()", {**env, "AGENTFN_WORKERS": "1"}, tmp_path / "memory.log")
    server.start()

    def write_episode(token: str) -> requests.Response:
        return requests.post(
            server.url + "/internal/v1/episodes",
            headers={"Authorization": f"Bearer {token}"},
            json={"subject": f"rotated-{secrets.token_hex(3)}", "text": "They rotated the keys."},
            timeout=30,
        )

    try:
        assert write_episode(jwks.service_token(*first)).status_code == 201
        # The kubelet rotates the projected token; the cluster signs with a new key. Memory must fetch the
        # new key set with the token now in the file, not the one it read at its first fetch.
        jwks.wanted = "projected-token-2"
        token_file.write_text(jwks.wanted)
        second = jwks.add_key()
        response = write_episode(jwks.service_token(*second))
        assert response.status_code == 201, response.text
        assert jwks.fetches[-1] == "Bearer projected-token-2"
    finally:
        server.stop()
        jwks.served.stop()
