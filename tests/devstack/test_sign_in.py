"""Signing a person in at the dev issuer as a browser app does at any OIDC issuer: authorization code with PKCE (S256)
for the workbench, a public client. The checks are a real authorization server's; the page is a strict one."""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
import time
from html.parser import HTMLParser
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest
import requests
from support import WORKBENCH, WORKBENCH_URL, web_clients

from agentfn.devstack.harness.ports import free_port
from agentfn.devstack.harness.servers import Served
from agentfn.devstack.issuer import DevIssuer
from agentfn.devstack.issuer import create_app as issuer_app
from agentfn.devstack.sign_in import Codes

ORIGIN = WORKBENCH_URL.rstrip("/")
MARKUP = "<img src=x onerror=alert(1)>"


def pkce() -> tuple[str, str]:
    """A verifier and its S256 challenge, as the browser app makes them (RFC 7636 4.1, 4.2)."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def asked(challenge: str, **changes) -> dict[str, str]:
    """A good authorization request of the workbench; `changes` break one thing (None drops the parameter)."""
    params = {
        "response_type": "code",
        "client_id": WORKBENCH,
        "redirect_uri": WORKBENCH_URL,
        "scope": "openid profile",
        "state": "st-" + secrets.token_urlsafe(8),
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "nonce": "n-" + secrets.token_urlsafe(8),
    }
    params.update(changes)
    return {k: v for k, v in params.items() if v is not None}


class Form(HTMLParser):
    """The sign-in page's form as a browser reads it: its action and hidden fields, the groups offered."""

    def __init__(self, html: str):
        super().__init__()
        self.action, self.hidden, self.groups, self.checked, self.inputs = None, {}, [], [], {}
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self.action = a.get("action")
        if tag == "input":
            self.inputs[a.get("name")] = a
            if a.get("type") == "hidden":
                self.hidden[a["name"]] = a["value"]
            if a.get("type") == "checkbox" and a.get("name") == "groups":
                self.groups.append(a["value"])
                if "checked" in a:
                    self.checked.append(a["value"])


def page(issuer, params) -> requests.Response:
    return requests.get(issuer.authorization_endpoint, params=params, timeout=10, allow_redirects=False)


def submit(issuer, fields, **headers) -> requests.Response:
    return requests.post(issuer.authorization_endpoint, data=fields, timeout=10, allow_redirects=False, headers=headers)


def back(answer: requests.Response) -> dict[str, str]:
    """The parameters the browser is sent back to the workbench with (each once)."""
    assert answer.status_code == 302, answer.text
    location = answer.headers["Location"]
    assert location.startswith(WORKBENCH_URL + "?"), location
    query = parse_qs(urlsplit(location).query)
    assert all(len(v) == 1 for v in query.values())
    return {k: v[0] for k, v in query.items()}


def sign_in(issuer, challenge, subject="alice", groups=("developers",), **changes) -> tuple[dict, dict]:
    """Open the page, fill the form the way a person does, send it; the request and what comes back."""
    params = asked(challenge, **changes)
    form = Form(page(issuer, params).text)
    answer = submit(issuer, {**form.hidden, "subject": subject, "groups": list(groups), "action": "sign_in"})
    return params, back(answer)


def redeem(issuer, code, verifier, /, **changes) -> requests.Response:
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": WORKBENCH_URL,
        "client_id": WORKBENCH,
        "code_verifier": verifier,
        **changes,
    }
    return requests.post(issuer.token_endpoint, data={k: v for k, v in form.items() if v is not None}, timeout=10)


def refused(answer: requests.Response, error: str, status: int = 400) -> None:
    assert answer.status_code == status, answer.text
    assert answer.json()["error"] == error and answer.json()["error_description"]
    assert answer.headers["Cache-Control"] == "no-store"


# --- the whole flow ----------------------------------------------------------------------------------------------


def test_a_person_signs_in_and_the_access_token_opens_a_real_door(issuer, memory):
    verifier, challenge = pkce()
    params = asked(challenge)
    shown = page(issuer, params)
    assert shown.status_code == 200 and shown.headers["Content-Type"].startswith("text/html")
    assert "Development tool." in shown.text and "signs in" in shown.text and "anyone" in shown.text
    form = Form(shown.text)
    assert form.action == "/authorize" and "subject" in form.inputs and "other_groups" in form.inputs
    assert form.groups == ["developers", "platform-users", "platform-admins"]
    assert {k: form.hidden[k] for k in params} == params  # the request goes back with the form, whole

    subject = f"user-{secrets.token_hex(4)}"
    answer = submit(
        issuer,
        {
            **form.hidden,
            "subject": subject,
            "groups": ["developers", "platform-admins"],
            "other_groups": "ops, sre",
            "action": "sign_in",
        },
    )
    sent_back = back(answer)
    assert sent_back["state"] == params["state"] and sent_back["iss"] == issuer.url  # RFC 9207
    assert answer.headers["Cache-Control"] == "no-store"

    tokens = redeem(issuer, sent_back["code"], verifier)
    assert tokens.status_code == 200, tokens.text
    assert tokens.headers["Cache-Control"] == "no-store"
    body = tokens.json()
    assert body["token_type"] == "Bearer" and body["expires_in"] == 3600 and body["scope"] == "openid profile"

    # The access token opens memory's door: agentfn's own verifier (src/agentfn/shared/identity.py) behind a real function.
    headers = {"Authorization": f"Bearer {body['access_token']}"}
    kept = requests.post(
        memory.url + "/v1/entries",
        headers=headers,
        timeout=30,
        json={"kind": "fact", "text": "Signed in through the workbench.", "source": "sign-in test"},
    )
    assert kept.status_code == 201, kept.text
    assert [e["id"] for e in requests.get(memory.url + "/v1/entries", headers=headers, timeout=30).json()["entries"]] == [
        kept.json()["id"]
    ]

    key = jwt.PyJWKClient(issuer.jwks_url).get_signing_key_from_jwt(body["access_token"]).key
    access = jwt.decode(body["access_token"], key, algorithms=["ES256"], audience="agentfn", issuer=issuer.url)
    assert jwt.get_unverified_header(body["access_token"])["typ"] == "at+jwt"  # RFC 9068
    assert access["sub"] == subject and access["groups"] == ["developers", "platform-admins", "ops", "sre"]
    assert access["exp"] - access["iat"] == 3600 and access["client_id"] == WORKBENCH
    identity = jwt.decode(body["id_token"], key, algorithms=["ES256"], audience=WORKBENCH, issuer=issuer.url)
    assert identity["sub"] == subject and identity["nonce"] == params["nonce"]

    refused(redeem(issuer, sent_back["code"], verifier), "invalid_grant")  # a code is used once


def test_no_id_token_without_openid_and_no_nonce_unless_one_was_sent(issuer):
    verifier, challenge = pkce()
    _, sent_back = sign_in(issuer, challenge, scope=None, nonce=None)
    body = redeem(issuer, sent_back["code"], verifier).json()
    assert "access_token" in body and "id_token" not in body
    verifier, challenge = pkce()
    _, sent_back = sign_in(issuer, challenge, nonce=None)
    assert "nonce" not in jwt.decode(
        redeem(issuer, sent_back["code"], verifier).json()["id_token"], options={"verify_signature": False}
    )


def test_a_wrong_verifier_is_refused_and_spends_the_code(issuer):
    verifier, challenge = pkce()
    _, sent_back = sign_in(issuer, challenge)
    refused(redeem(issuer, sent_back["code"], pkce()[0]), "invalid_grant")
    refused(redeem(issuer, sent_back["code"], verifier), "invalid_grant")  # no second guess on a stolen code


REDEEM_REFUSED = {
    "another redirect_uri": ({"redirect_uri": "https://agentfn.test/other"}, 400, "invalid_grant"),
    "a code never issued": ({"code": "not-a-code"}, 400, "invalid_grant"),
    "a verifier too short for PKCE": ({"code_verifier": "short"}, 400, "invalid_grant"),
    "an unknown client": ({"client_id": "someone-else"}, 401, "invalid_client"),
    "no client_id": ({"client_id": None}, 401, "invalid_client"),
    "no code_verifier": ({"code_verifier": None}, 400, "invalid_request"),
    "no redirect_uri": ({"redirect_uri": None}, 400, "invalid_request"),
}


@pytest.mark.parametrize(("changes", "status", "error"), REDEEM_REFUSED.values(), ids=REDEEM_REFUSED.keys())
def test_the_token_endpoint_refuses_a_bad_code_redemption(issuer, changes, status, error):
    verifier, challenge = pkce()
    _, sent_back = sign_in(issuer, challenge)
    refused(redeem(issuer, sent_back["code"], verifier, **changes), error, status)


@pytest.fixture
def served(tmp_path):
    """Serve an issuer with a code store of its own (`served(Codes(...))`) on loopback."""
    servers = []

    def serve(codes: Codes) -> DevIssuer:
        port = free_port()
        issuer = DevIssuer(tmp_path, f"http://127.0.0.1:{port}", web_clients=web_clients(), codes=codes)
        servers.append(Served(issuer_app(issuer), port))
        return issuer

    yield serve
    for server in servers:
        server.stop()


def test_an_expired_code_is_refused(served):
    quick_issuer = served(Codes(seconds=0.5))
    verifier, challenge = pkce()
    _, sent_back = sign_in(quick_issuer, challenge)
    time.sleep(0.6)
    refused(redeem(quick_issuer, sent_back["code"], verifier), "invalid_grant")


def test_codes_waiting_are_bounded_the_oldest_going_first(served):
    issuer = served(Codes(limit=2))
    pairs = [pkce() for _ in range(3)]
    codes = [sign_in(issuer, challenge)[1]["code"] for _, challenge in pairs]
    refused(redeem(issuer, codes[0], pairs[0][0]), "invalid_grant")
    assert [
        redeem(issuer, code, verifier).status_code for code, (verifier, _) in zip(codes[1:], pairs[1:], strict=True)
    ] == [200, 200]


def test_a_code_redeemed_by_many_at_once_is_redeemed_once(issuer):
    from concurrent.futures import ThreadPoolExecutor

    verifier, challenge = pkce()
    _, sent_back = sign_in(issuer, challenge)
    with ThreadPoolExecutor(8) as pool:
        statuses = sorted(pool.map(lambda _: redeem(issuer, sent_back["code"], verifier).status_code, range(8)))
    assert statuses == [200] + [400] * 7


# --- bad authorization requests ----------------------------------------------------------------------------------

# A client or redirect URI the issuer cannot trust: a page, never a redirect (the issuer is no open redirector).
NOT_REDIRECTED = {
    "an unknown client": {"client_id": "someone-else"},
    "no client_id": {"client_id": None},
    "an unregistered redirect_uri": {"redirect_uri": "https://attacker.test/"},
    "a redirect_uri with another path": {"redirect_uri": WORKBENCH_URL + "callback"},
    "a redirect_uri with a query added": {"redirect_uri": WORKBENCH_URL + "?next=x"},
    "a redirect_uri without its slash": {"redirect_uri": ORIGIN},
    "no redirect_uri": {"redirect_uri": None},
}


@pytest.mark.parametrize("changes", NOT_REDIRECTED.values(), ids=NOT_REDIRECTED.keys())
def test_an_untrusted_client_or_redirect_uri_is_an_error_page(issuer, changes):
    answer = page(issuer, asked(pkce()[1], **changes))
    assert answer.status_code == 400 and "Location" not in answer.headers
    assert answer.headers["Content-Type"].startswith("text/html") and "Sign-in refused" in answer.text
    assert "<form" not in answer.text


def test_a_client_id_sent_twice_is_an_error_page(issuer):
    params = list(asked(pkce()[1]).items()) + [("client_id", WORKBENCH)]
    answer = page(issuer, params)
    assert answer.status_code == 400 and "Location" not in answer.headers


# Everything else goes back to the client with error= (RFC 6749 4.1.2.1), with its state and the issuer.
REDIRECTED = {
    "no response_type": ({"response_type": None}, "invalid_request"),
    "the implicit flow": ({"response_type": "token"}, "unsupported_response_type"),
    "a hybrid flow": ({"response_type": "code id_token"}, "unsupported_response_type"),
    "no PKCE": ({"code_challenge": None, "code_challenge_method": None}, "invalid_request"),
    "PKCE plain": ({"code_challenge_method": "plain"}, "invalid_request"),
    "no code_challenge_method": ({"code_challenge_method": None}, "invalid_request"),
    "a challenge that is no S256 hash": ({"code_challenge": "too-short"}, "invalid_request"),
    "a fragment response mode": ({"response_mode": "fragment"}, "invalid_request"),
    "an unknown scope": ({"scope": "openid admin"}, "invalid_scope"),
    "prompt=none": ({"prompt": "none"}, "login_required"),
    "a request object": ({"request": "eyJ.e30."}, "request_not_supported"),
    "a request_uri": ({"request_uri": "https://attacker.test/r"}, "request_uri_not_supported"),
    "a state too long": ({"state": "s" * 513}, "invalid_request"),
}


@pytest.mark.parametrize(("changes", "error"), REDIRECTED.values(), ids=REDIRECTED.keys())
def test_a_bad_request_goes_back_to_the_client_with_an_error(issuer, changes, error):
    params = asked(pkce()[1], **changes)
    sent_back = back(page(issuer, params))
    assert sent_back["error"] == error and sent_back["error_description"] and "code" not in sent_back
    assert sent_back["iss"] == issuer.url and sent_back["state"] == params["state"]


def test_a_parameter_sent_twice_goes_back_as_invalid_request_without_a_state(issuer):
    params = list(asked(pkce()[1]).items()) + [("state", "another")]
    sent_back = back(page(issuer, params))
    assert sent_back["error"] == "invalid_request" and "state" not in sent_back


def test_cancel_goes_back_as_access_denied(issuer):
    params = asked(pkce()[1])
    sent_back = back(submit(issuer, {**Form(page(issuer, params).text).hidden, "subject": "", "action": "cancel"}))
    assert sent_back["error"] == "access_denied" and sent_back["state"] == params["state"] and "code" not in sent_back


def test_the_form_is_checked_again_on_post(issuer):
    """The hidden fields are the browser's to change: a changed redirect URI is a page, a dropped challenge an error."""
    form = {**Form(page(issuer, asked(pkce()[1])).text).hidden, "subject": "alice", "action": "sign_in"}
    moved = submit(issuer, {**form, "redirect_uri": "https://attacker.test/"})
    assert moved.status_code == 400 and "Location" not in moved.headers
    sent_back = back(submit(issuer, {k: v for k, v in form.items() if k != "code_challenge"}))
    assert sent_back["error"] == "invalid_request" and "code" not in sent_back


BAD_CHOICES = {
    "no subject": {"subject": "  "},
    "a service account": {"subject": "system:serviceaccount:agentfn:agentfn-model"},
    "a control character": {"subject": "ali\x07ce"},
    "a subject too long": {"subject": "a" * 256},
    "another group's name too long": {"other_groups": "x" * 101},
    "another group with a control character": {"other_groups": "ops, s\x00re"},
}


@pytest.mark.parametrize("choice", BAD_CHOICES.values(), ids=BAD_CHOICES.keys())
def test_a_bad_choice_shows_the_page_again_with_why_and_issues_no_code(issuer, choice):
    first = Form(page(issuer, asked(pkce()[1])).text)
    form = {**first.hidden, "subject": "alice", "groups": ["developers"], "action": "sign_in", **choice}
    answer = submit(issuer, form)
    assert answer.status_code == 422 and "Location" not in answer.headers
    assert 'role="alert"' in answer.text and 'aria-invalid="true"' in answer.text
    again = Form(answer.text)
    assert again.hidden == first.hidden and again.inputs["subject"]["value"] == form["subject"]
    assert again.checked == ["developers"]  # what the person ticked stays ticked


def test_a_form_from_another_site_is_refused(issuer):
    """A cross-site page posting the form must not sign the browser in as someone it chose."""
    form = {**Form(page(issuer, asked(pkce()[1])).text).hidden, "subject": "mallory", "action": "sign_in"}
    for headers in (
        {"Origin": "https://attacker.test"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ):
        answer = submit(issuer, form, **headers)
        assert answer.status_code == 403 and "Location" not in answer.headers, headers
    same = submit(issuer, form, Origin=issuer.url, **{"Sec-Fetch-Site": "same-origin"})
    assert "code" in back(same)


# --- the page: strict, and text is text ---------------------------------------------------------------------------


def test_the_page_has_a_strict_content_security_policy(issuer):
    for answer in (page(issuer, asked(pkce()[1])), page(issuer, asked(pkce()[1], client_id="nobody"))):
        policy = policy_of(answer)
        assert policy["default-src"] == ["'none'"] and policy["frame-ancestors"] == ["'none'"]
        assert policy["style-src"] == ["'self'"] and policy["base-uri"] == ["'none'"] and "script-src" not in policy
        assert answer.headers["X-Frame-Options"] == "DENY" and answer.headers["X-Content-Type-Options"] == "nosniff"
        assert answer.headers["Cache-Control"] == "no-store"
        assert "<script" not in answer.text and "style=" not in answer.text and not re.search(r"\son\w+=", answer.text)
    # The form's answer is a redirect to the client: form-action allows exactly this page and the client's origin.
    assert policy_of(page(issuer, asked(pkce()[1])))["form-action"] == ["'self'", ORIGIN]
    stylesheet = requests.get(issuer.url + "/sign-in.css", timeout=10)
    assert stylesheet.status_code == 200 and stylesheet.headers["Content-Type"].startswith("text/css")


def policy_of(answer):
    return {d.split()[0]: d.split()[1:] for d in answer.headers["Content-Security-Policy"].split("; ")}


def test_markup_in_a_subject_or_state_is_shown_as_text(issuer):
    shown = page(issuer, asked(pkce()[1], login_hint=MARKUP, state=f'"><b>{MARKUP}'))
    assert shown.status_code == 200 and MARKUP not in shown.text and "<b>" not in shown.text
    assert "&lt;img src=x onerror=alert(1)&gt;" in shown.text
    assert Form(shown.text).inputs["subject"]["value"] == MARKUP  # the browser reads it back as the text it was
    form = {**Form(shown.text).hidden, "subject": MARKUP, "other_groups": "bad\x00group", "action": "sign_in"}
    again = submit(issuer, form)
    assert again.status_code == 422 and MARKUP not in again.text and "&lt;img" in again.text


# --- CORS: only the registered web origins ------------------------------------------------------------------------

CORS_DOORS = (
    "/token",
    "/.well-known/openid-configuration",
    "/.well-known/oauth-authorization-server",
    "/.well-known/jwks.json",
)


@pytest.mark.parametrize("path", CORS_DOORS)
def test_cors_answers_the_workbench_origin_only(issuer, path):
    method = "POST" if path == "/token" else "GET"
    preflight = {"Access-Control-Request-Method": method, "Access-Control-Request-Headers": "content-type"}
    mine = requests.options(issuer.url + path, headers={"Origin": ORIGIN, **preflight}, timeout=10)
    assert mine.status_code == 200 and mine.headers["Access-Control-Allow-Origin"] == ORIGIN
    assert method in mine.headers["Access-Control-Allow-Methods"] and "Access-Control-Allow-Credentials" not in mine.headers
    assert "content-type" in mine.headers["Access-Control-Allow-Headers"].lower()
    other = requests.options(issuer.url + path, headers={"Origin": "https://attacker.test", **preflight}, timeout=10)
    assert "Access-Control-Allow-Origin" not in other.headers and "Origin" in other.headers["Vary"]
    if method == "GET":
        assert (
            requests.get(issuer.url + path, headers={"Origin": ORIGIN}, timeout=10).headers["Access-Control-Allow-Origin"]
            == ORIGIN
        )
        assert (
            "Access-Control-Allow-Origin"
            not in requests.get(issuer.url + path, headers={"Origin": "https://attacker.test"}, timeout=10).headers
        )


def test_a_token_answer_is_readable_by_the_workbench_and_no_other_site(issuer):
    verifier, challenge = pkce()
    _, sent_back = sign_in(issuer, challenge)
    form = {
        "grant_type": "authorization_code",
        "code": sent_back["code"],
        "redirect_uri": WORKBENCH_URL,
        "client_id": WORKBENCH,
        "code_verifier": verifier,
    }
    answer = requests.post(issuer.token_endpoint, data=form, headers={"Origin": ORIGIN}, timeout=10)
    assert answer.status_code == 200 and answer.headers["Access-Control-Allow-Origin"] == ORIGIN
    refusal = requests.post(issuer.token_endpoint, data=form, headers={"Origin": "https://attacker.test"}, timeout=10)
    assert "Access-Control-Allow-Origin" not in refusal.headers


def test_the_dev_token_counter_is_never_open_to_a_web_origin(issuer):
    """`/v1/tokens` mints a token for anyone: no page, not even the workbench's, may read its answer."""
    answer = requests.post(issuer.url + "/v1/tokens", json={"subject": "alice"}, headers={"Origin": ORIGIN}, timeout=10)
    assert answer.status_code == 200 and "Access-Control-Allow-Origin" not in answer.headers
    preflight = requests.options(
        issuer.url + "/v1/tokens", timeout=10, headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}
    )
    assert "Access-Control-Allow-Origin" not in preflight.headers


# --- discovery and the dev stack's configuration ------------------------------------------------------------------


def test_discovery_publishes_the_code_flow(issuer):
    for path in ("/.well-known/openid-configuration", "/.well-known/oauth-authorization-server"):
        metadata = requests.get(issuer.url + path, timeout=10).json()
        assert metadata["authorization_endpoint"] == issuer.url + "/authorize"
        assert metadata["response_types_supported"] == ["code"]
        assert metadata["code_challenge_methods_supported"] == ["S256"]
        assert {"authorization_code", "urn:ietf:params:oauth:grant-type:token-exchange"} <= set(
            metadata["grant_types_supported"]
        )
        assert {"none", "private_key_jwt"} <= set(metadata["token_endpoint_auth_methods_supported"])
        assert "openid" in metadata["scopes_supported"] and metadata["authorization_response_iss_parameter_supported"]


def test_the_dev_stack_registers_the_workbench_at_the_gateways_site_root(tmp_path, monkeypatch):
    """The issuer as `agentfn up` configures it (through its environment) signs the workbench in at the gateway."""
    from agentfn.cli import plan
    from agentfn.cli.parts import PORTS

    port = free_port()
    monkeypatch.setenv("AGENTFN_JWT_ISSUER", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AGENTFN_DEV_ISSUER_DIR", str(tmp_path / "issuer"))
    monkeypatch.setenv("AGENTFN_DEV_ISSUER_WEB_CLIENTS", plan.web_clients())
    server = Served(issuer_app(), port)
    try:
        site_root = f"http://127.0.0.1:{PORTS['gateway']}/"
        params = {**asked(pkce()[1]), "client_id": "agentfn-workbench", "redirect_uri": site_root}
        assert requests.get(f"http://127.0.0.1:{port}/authorize", params=params, timeout=10).status_code == 200
        params["redirect_uri"] = f"http://localhost:{PORTS['gateway']}/"  # exact match: another spelling is refused
        assert requests.get(f"http://127.0.0.1:{port}/authorize", params=params, timeout=10).status_code == 400
    finally:
        server.stop()


@pytest.mark.parametrize(
    "uri", ["/relative", "https://workbench.test/#fragment", "ftp://workbench.test/", "https://user@workbench.test/"]
)
def test_a_web_client_with_a_bad_redirect_uri_stops_the_issuer_at_start(tmp_path, monkeypatch, uri):
    monkeypatch.setenv("AGENTFN_JWT_ISSUER", "http://127.0.0.1:9")
    monkeypatch.setenv("AGENTFN_DEV_ISSUER_DIR", str(tmp_path))
    monkeypatch.setenv("AGENTFN_DEV_ISSUER_WEB_CLIENTS", f'{{"w": {{"redirect_uris": ["{uri}"]}}}}')
    with pytest.raises(ValueError, match="absolute http"):
        issuer_app()
