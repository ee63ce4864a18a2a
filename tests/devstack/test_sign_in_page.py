"""The dev issuer's sign-in in a real browser (Debian's headless Chromium, driven by Playwright): the page works with
the keyboard alone under its own CSP, its form's redirect reaches the client, and only the client's origin may read
the token endpoint's answer. The client is a stand-in page on loopback (a test double for the workbench)."""

from __future__ import annotations

import base64
import hashlib
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
import pytest

from agentfn.devstack.harness.identity import dev_issuer
from agentfn.devstack.harness.ports import free_port
from agentfn.devstack.harness.servers import ROOT
from agentfn.devstack.issuer import CALLER_AUDIENCE
from agentfn.devstack.sign_in import WebClient

SHOTS = ROOT / "var" / "screenshots" / "sign-in"  # test artifacts, never committed


class StandIn(BaseHTTPRequestHandler):
    """Any path: an empty page, so the browser has a document at this origin."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        body = b"<!doctype html><title>stand-in</title><p>back at the client</p>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def site():
    """A web origin on loopback; yields its root URL."""
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()


@pytest.fixture
def other_site():
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()


@pytest.fixture
def site_issuer(tmp_path, site):
    """An issuer with the stand-in registered as the workbench."""
    issuer, served = dev_issuer(
        tmp_path, web_clients={"agentfn-workbench": WebClient("agentfn-workbench", frozenset({site}), CALLER_AUDIENCE)}
    )
    yield issuer
    served.stop()


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    return verifier, base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


REDEEM = """async ([url, form]) => {
    const answer = await fetch(url, {method: "POST", body: new URLSearchParams(form)});
    return {status: answer.status, body: await answer.json()};
}"""
READ = "async (url) => { try { return (await fetch(url)).status } catch (e) { return e.name } }"


def test_a_person_signs_in_with_the_keyboard_and_the_client_redeems_the_code(browser, site_issuer, site):
    verifier, challenge = pkce()
    state = secrets.token_urlsafe(12)
    params = {
        "response_type": "code",
        "client_id": "agentfn-workbench",
        "redirect_uri": site,
        "scope": "openid",
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "nonce": "n1",
    }
    page = browser.new_page(viewport={"width": 360, "height": 740})
    complaints = []
    page.on("console", lambda m: complaints.append(m.text) if m.type in ("error", "warning") else None)
    page.goto(f"{site_issuer.authorization_endpoint}?{urlencode(params)}")

    # Readable at 360 px with its stylesheet (allowed by the CSP), and no complaint from the browser.
    assert page.evaluate("getComputedStyle(document.querySelector('main')).maxWidth") == "544px"
    assert page.evaluate("document.documentElement.scrollWidth") <= 360
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "sign-in-360.png"), full_page=True)

    # The keyboard alone: the subject has the focus, Tab walks the groups, Space ticks, Enter on the button sends.
    assert page.evaluate("document.activeElement.id") == "subject"
    page.keyboard.type("alice")
    page.keyboard.press("Tab")
    page.keyboard.press("Space")  # developers
    for _ in range(2):
        page.keyboard.press("Tab")
    page.keyboard.press("Space")  # platform-admins
    page.keyboard.press("Tab")
    page.keyboard.type("ops")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Sign in"
    with page.expect_navigation():
        page.keyboard.press("Enter")

    # The form's answer is a redirect to the client: the page's form-action lets the browser follow it.
    page.wait_for_url(site + "?*")
    back = {k: v[0] for k, v in parse_qs(urlsplit(page.url).query).items()}
    assert back["state"] == state and back["iss"] == site_issuer.url and back["code"]

    # The client, on its own origin, reads the token endpoint's answer (CORS) as a browser app does.
    form = {
        "grant_type": "authorization_code",
        "code": back["code"],
        "redirect_uri": site,
        "client_id": "agentfn-workbench",
        "code_verifier": verifier,
    }
    answer = page.evaluate(REDEEM, [site_issuer.token_endpoint, form])
    assert answer["status"] == 200, answer
    claims = jwt.decode(answer["body"]["access_token"], options={"verify_signature": False})
    assert claims["sub"] == "alice" and claims["groups"] == ["developers", "platform-admins", "ops"]
    assert page.evaluate(READ, site_issuer.url + "/.well-known/openid-configuration") == 200
    assert complaints == []  # no CSP violation, no failed load, on the page or at the client
    assert page.evaluate(REDEEM, [site_issuer.token_endpoint, form])["body"]["error"] == "invalid_grant"  # used once


def test_another_site_cannot_read_the_token_endpoint_or_the_metadata(browser, site_issuer, other_site):
    page = browser.new_page()
    page.goto(other_site)
    form = {
        "grant_type": "authorization_code",
        "code": "x",
        "redirect_uri": other_site,
        "client_id": "agentfn-workbench",
        "code_verifier": pkce()[0],
    }
    with pytest.raises(Exception, match="Failed to fetch"):
        page.evaluate(REDEEM, [site_issuer.token_endpoint, form])
    assert page.evaluate(READ, site_issuer.url + "/.well-known/openid-configuration") == "TypeError"


def test_the_page_cannot_be_framed(browser, site_issuer, site):
    """`frame-ancestors 'none'`: a page that frames the sign-in page (to trick a click) gets an error in the frame."""
    params = {
        "response_type": "code",
        "client_id": "agentfn-workbench",
        "redirect_uri": site,
        "code_challenge": pkce()[1],
        "code_challenge_method": "S256",
    }
    page = browser.new_page()
    complaints = []
    page.on("console", lambda m: complaints.append(m.text))
    page.goto(site)
    page.evaluate(
        """(url) => new Promise(done => {
        const frame = document.createElement("iframe");
        frame.onload = done; frame.src = url; document.body.append(frame);
    })""",
        f"{site_issuer.authorization_endpoint}?{urlencode(params)}",
    )
    assert [f.url for f in page.frames[1:]] == ["chrome-error://chromewebdata/"]
    assert page.frames[1].query_selector("form") is None
    assert any("frame-ancestors 'none'" in c for c in complaints)
