"""The door itself: caller tokens verified, bad input refused with a problem, the OpenAPI document honoured."""

import json
import subprocess
import sys
import time

import jwt
import pytest
import requests
import schemathesis
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import HealthCheck, settings
from support import openapi_schema

from agentfn.devstack.harness.identity import MODEL_SERVICE
from agentfn.devstack.issuer import CALLER_AUDIENCE, SERVICE_AUDIENCE
from agentfn.shared.contract import audience

PUB = "http://www.pub.test"


def claims(issuer, **changes):
    now = int(time.time())
    base = {"iss": issuer.url, "sub": "mallory", "aud": CALLER_AUDIENCE, "iat": now, "nbf": now, "exp": now + 600}
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


FORGED = {
    "no token": lambda i: None,
    "not a JWT": lambda i: "not.a.jwt",
    "alg none": lambda i: jwt.encode(claims(i), None, algorithm="none", headers={"kid": i.kid}),
    "expired": lambda i: i.sign(
        claims(i, exp=int(time.time()) - 120, iat=int(time.time()) - 900, nbf=int(time.time()) - 900)
    ),
    "wrong audience": lambda i: i.sign(claims(i, aud="someone-else")),
    "a service token": lambda i: i.sign(claims(i, aud=SERVICE_AUDIENCE, sub="system:serviceaccount:agentfn:agentfn-model")),
    "wrong issuer": lambda i: i.sign(claims(i, iss="https://evil.example")),
    "issuer's kid, another key": lambda i: jwt.encode(
        claims(i), ec.generate_private_key(ec.SECP256R1()), algorithm="ES256", headers={"kid": i.kid}
    ),
}


@pytest.mark.parametrize("forge", FORGED.values(), ids=FORGED.keys())
def test_forged_tokens_are_refused_and_fetch_nothing(lab_fetcher, issuer, lab, forge):
    token = forge(issuer)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    before = len(lab.public_hits())
    response = requests.post(
        lab_fetcher.url + "/v1/open", json={"url": f"{PUB}/article?forged"}, headers=headers, timeout=10
    )
    assert response.status_code == 401, response.text
    assert response.headers["Content-Type"] == "application/problem+json"
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert lab.public_hits()[before:] == []


def page_token(issuer, *, ttl: int = 600, **changes) -> str:
    """A token as the exchange makes one for the page fetcher (audience, actor), with its own lifetime."""
    own = {"aud": audience("page"), "sub": "a-caller", "exp": int(time.time()) + ttl, "act": {"sub": MODEL_SERVICE}}
    return issuer.sign(claims(issuer, **{**own, **changes}))


def open_with(base: str, token: str, url: str) -> requests.Response:
    return requests.post(base + "/v1/open", json={"url": url}, headers={"Authorization": f"Bearer {token}"}, timeout=10)


def test_a_token_that_passed_is_refused_once_it_has_expired(tight_page, issuer, lab, page_subject):
    token = page_token(issuer, ttl=3, sub=page_subject)
    assert open_with(tight_page.url, token, f"{PUB}/article?while-valid").status_code == 200
    time.sleep(max(0.0, jwt.decode(token, options={"verify_signature": False})["exp"] - time.time()) + 1)
    before = len(lab.public_hits())
    response = open_with(tight_page.url, token, f"{PUB}/article?once-expired")
    assert response.status_code == 401, response.text
    assert response.json()["detail"] == "the token has expired"
    assert lab.public_hits()[before:] == []


def test_a_token_that_passed_lends_nothing_to_one_with_another_signature_or_payload(lab_fetcher, issuer, lab):
    token = page_token(issuer)
    assert open_with(lab_fetcher.url, token, f"{PUB}/article?signed").status_code == 200
    header, payload, signature = token.split(".")
    other_key = jwt.encode(
        jwt.decode(token, options={"verify_signature": False}),
        ec.generate_private_key(ec.SECP256R1()),
        algorithm="ES256",
        headers={"kid": issuer.kid},
    )
    other_payload = page_token(issuer, sub="someone-else").split(".")[1]
    flipped = signature[:-2] + ("A" if signature[-2] != "A" else "B") + signature[-1]
    for forged in (
        f"{header}.{payload}.{other_key.split('.')[2]}",
        f"{header}.{other_payload}.{signature}",
        f"{header}.{payload}.{flipped}",
    ):
        before = len(lab.public_hits())
        response = open_with(lab_fetcher.url, forged, f"{PUB}/article?forged-twin")
        assert response.status_code == 401, response.text
        assert lab.public_hits()[before:] == []
    assert open_with(lab_fetcher.url, token, f"{PUB}/article?signed").status_code == 200


BAD = [
    # (id, body or raw bytes, content type, status, words in the detail)
    ("no url", {}, None, 422, "missing required field 'url'"),
    ("url not a string", {"url": 42}, None, 422, "url: must be of type string"),
    ("empty url", {"url": ""}, None, 422, "url: must be at least 1"),
    ("url too long", {"url": f"{PUB}/" + "a" * 3000}, None, 422, "url: must be at most 2048"),
    ("negative offset", {"url": f"{PUB}/article", "offset": -1}, None, 422, "offset: must be >= 0"),
    ("window too small", {"url": f"{PUB}/article", "window": 10}, None, 422, "window: must be >= 100"),
    ("window too large", {"url": f"{PUB}/article", "window": 10**6}, None, 422, "window: must be <= 40000"),
    ("offset not an integer", {"url": f"{PUB}/article", "offset": 1.5}, None, 422, "offset: must be of type integer"),
    ("unknown field", {"url": f"{PUB}/article", "headers": {"Cookie": "x"}}, None, 422, "unknown field 'headers'"),
    ("body not an object", [f"{PUB}/article"], None, 422, "must be of type object"),
    ("bad JSON", b'{"url": ', "application/json", 400, "not valid JSON"),
    ("not JSON", b"url=http://www.pub.test/", "application/x-www-form-urlencoded", 415, "application/json"),
    ("huge body", json.dumps({"url": "x" * 40000}).encode(), "application/json", 413, "larger than"),
    ("bad URL", {"url": "ftp://www.pub.test/"}, None, 422, "only http and https"),
]


@pytest.mark.parametrize(("body", "ctype", "status", "words"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_a_problem_and_fetches_nothing(lab_fetcher, issuer, lab, body, ctype, status, words):
    headers = {"Authorization": f"Bearer {issuer.exchanged(audience('page'), 'bad-input')}"}
    kwargs = {"data": body, "headers": {**headers, "Content-Type": ctype}} if ctype else {"json": body, "headers": headers}
    before = len(lab.public_hits())
    response = requests.post(lab_fetcher.url + "/v1/open", timeout=10, **kwargs)
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"] == "application/problem+json"
    assert words in response.json()["detail"], response.json()
    assert lab.public_hits()[before:] == []


def test_only_post_opens(lab_fetcher, issuer):
    token = issuer.exchanged(audience("page"), "x")
    response = requests.get(lab_fetcher.url + "/v1/open", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert response.status_code == 405 and response.json()["detail"] == "GET is not allowed here"


def test_the_document_lists_the_door_and_the_admins_audit(lab_fetcher):
    document = requests.get(lab_fetcher.url + "/openapi.json", timeout=10).json()
    assert document["openapi"] == "3.1.0"
    assert set(document["paths"]) == {"/v1/open", "/v1/audit"}
    assert set(document["paths"]["/v1/audit"]["get"]["responses"]) == {"200", "400", "401", "403", "414", "503"}
    assert set(document["paths"]["/v1/open"]["post"]["responses"]) == {
        "200",
        "400",
        "401",
        "403",
        "413",
        "415",
        "422",
        "429",
        "502",
        "503",
        "504",
    }


def test_start_to_ready_under_gunicorn(lab_fetcher):
    assert lab_fetcher.ready_seconds < 10, lab_fetcher.ready_seconds  # the benchmark measures it; this only bounds it


WARM_UP = """
import json, sys, threading
import agentfn.page.app as page
LATE = ["trafilatura", "dns.resolver", "jsonschema", "urllib3", "certifi", "numpy"]
env = json.loads(sys.argv[1])
warm_up, page.warm_up = page.warm_up, lambda *args: None
assert page.create_app(env).test_client().get("/readyz").status_code == 200
ready = [m for m in LATE if m in sys.modules]  # what ready itself needed
page.warm_up = warm_up
page.create_app(env)
next(t for t in threading.enumerate() if t.name == "warm-up").join(60)
warm = [m for m in LATE if m in sys.modules]
import py3langid  # hidden from trafilatura's import only
print(json.dumps([ready, warm]))
"""


def test_the_way_to_ready_loads_no_extraction_dns_schema_or_http_client_and_the_warm_up_does(issuer, page_dsn):
    # trafilatura, dnspython, jsonschema and urllib3 were most of a cold start: loaded on a thread once ready instead.
    env = {
        **issuer.env(),
        "AGENTFN_DATABASE_URL": page_dsn,
        "AGENTFN_DNS_SERVERS": "127.0.0.1:53",
        "AGENTFN_LOG_LEVEL": "WARNING",
    }
    probe = subprocess.run(
        [sys.executable, "-c", WARM_UP, json.dumps(env)], capture_output=True, text=True, timeout=120, check=True
    )
    ready, warm = json.loads(probe.stdout.splitlines()[-1])
    assert ready == []
    assert warm == ["trafilatura", "dns.resolver", "jsonschema", "urllib3", "certifi"]  # numpy: only py3langid wants it


@pytest.fixture(scope="module")
def page_schema(lab_fetcher):
    schema = openapi_schema(lab_fetcher.url)
    # A schema-valid URL may still be refused for what it means (bad-url, blocked-address, dns-failure...):
    # those documented refusals are acceptable answers to valid data; anything 5xx still fails the run.
    schema.config.checks.positive_data_acceptance.expected_statuses = ["2xx", "401", "403", "422", "429"]
    # Too many generation ids may not fit gunicorn's request line at all: it refuses them (414) before the door.
    rejected = ["400", "401", "403", "404", "405", "406", "409", "414", "415", "422", "428", "429", "5xx"]
    schema.config.checks.negative_data_rejection.expected_statuses = rejected
    return schema


schema = schemathesis.pytest.from_fixture("page_schema")


@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_door_answers_as_documented(case, issuer):
    response = case.call(headers={"Authorization": f"Bearer {issuer.exchanged(audience('page'), 'schemathesis-caller')}"})
    assert response.status_code < 500, response.text
    if response.status_code == 413:
        return  # a body over the door's byte cap is refused (as documented) before its schema is read
    case.validate_response(response)


@pytest.mark.parametrize(
    "token",
    [
        pytest.param(lambda i: i.caller_token("a-caller"), id="the caller's own gateway token"),
        pytest.param(lambda i: i.exchanged(audience("tool", "platform_status"), "a-caller"), id="exchanged for a tool"),
        pytest.param(lambda i: i.exchanged(audience("memory"), "a-caller"), id="exchanged for memory"),
    ],
)
def test_the_fetcher_takes_only_a_token_exchanged_for_it(lab_fetcher, issuer, lab, token):
    """Never callable on its own: by signature, not only because no route leads here."""
    before = len(lab.public_hits())
    response = requests.post(
        lab_fetcher.url + "/v1/open",
        json={"url": f"{PUB}/article"},
        timeout=10,
        headers={"Authorization": f"Bearer {token(issuer)}"},
    )
    assert response.status_code == 401, response.text
    assert lab.public_hits()[before:] == []
