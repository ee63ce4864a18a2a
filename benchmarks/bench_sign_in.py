"""Benchmark: what signing a person in at the dev issuer costs, beside one token exchange at the same issuer.

Not a test; run by hand (2 cores, loopback only, a few seconds):

    .venv/bin/python benchmarks/bench_sign_in.py [--runs 200]

It starts the dev issuer under gunicorn as `agentfn up` does (one worker, the workbench registered as a web client)
and measures, alternating, p50 of `--runs`:
1. a sign-in's three requests as a browser and the workbench make them: the page (`GET /authorize`), the form
   (`POST /authorize`, answered with a code) and the code's redemption (`POST /token`, PKCE checked, two tokens
   signed); each request's own p50 too;
2. one token exchange (RFC 8693) at the same token endpoint, the request every part makes per caller and audience.
And the page's weight: the HTML and its stylesheet, raw and gzipped (nothing else is loaded).
Writes benchmarks/results/sign_in.json and sign_in.md, then stops what it started.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import json
import secrets
import shutil
import tempfile
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import requests
from report import command, machine, p50, when, write

from agentfn.devstack.harness.identity import MODEL_SERVICE
from agentfn.devstack.harness.servers import IssuerServer
from agentfn.devstack.issuer import JWT_BEARER, TOKEN_EXCHANGE, TOKEN_TYPES
from agentfn.shared.contract import audience

SITE = "http://127.0.0.1:8800/"  # the workbench's redirect URI as the dev stack registers it (never called here)
WORKBENCH = "agentfn-workbench"


def ms(began: float) -> float:
    return (time.perf_counter() - began) * 1000


class Bench:
    def __init__(self, runs: int):
        self.runs = runs
        self.tmp = Path(tempfile.mkdtemp(prefix="agentfn-bench-sign-in-"))
        self.http = requests.Session()

    def up(self) -> None:
        clients = {MODEL_SERVICE: {"subject_audiences": ["agentfn"], "audiences": [audience("memory")]}}
        self.served = IssuerServer(
            self.tmp / "issuer",
            {
                "AGENTFN_DEV_ISSUER_CLIENTS": json.dumps(clients),
                "AGENTFN_LOG_LEVEL": "WARNING",
                "AGENTFN_DEV_ISSUER_WEB_CLIENTS": json.dumps({WORKBENCH: {"redirect_uris": [SITE], "audience": "agentfn"}}),
            },
            self.tmp / "issuer.log",
        )
        self.url, self.issuer = self.served.url, self.served.issuer  # the served one's keys: signs the client assertion
        self.served.start()

    def down(self) -> None:
        self.served.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def sign_in(self) -> tuple[float, float, float]:
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        ask = {
            "response_type": "code",
            "client_id": WORKBENCH,
            "redirect_uri": SITE,
            "scope": "openid profile",
            "state": secrets.token_urlsafe(12),
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        began = time.perf_counter()
        shown = self.http.get(self.url + "/authorize", params=ask, timeout=10)
        page = ms(began)
        began = time.perf_counter()
        sent = self.http.post(
            self.url + "/authorize",
            timeout=10,
            allow_redirects=False,
            data={**ask, "subject": "alice", "groups": ["developers"], "action": "sign_in"},
        )
        form = ms(began)
        code = parse_qs(urlsplit(sent.headers["Location"]).query)["code"][0]
        began = time.perf_counter()
        tokens = self.http.post(
            self.url + "/token",
            timeout=10,
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": SITE,
                "client_id": WORKBENCH,
                "code_verifier": verifier,
            },
        )
        redeem = ms(began)
        if shown.status_code != 200 or tokens.status_code != 200:
            raise RuntimeError(f"sign-in failed: {shown.status_code} {tokens.text[:300]}")
        return page, form, redeem

    def exchange(self) -> float:
        form = {
            "grant_type": TOKEN_EXCHANGE,
            "subject_token": self.issuer.caller_token("alice"),
            "subject_token_type": TOKEN_TYPES[0],
            "audience": audience("memory"),
            "client_assertion_type": JWT_BEARER,
            "client_assertion": self.issuer.service_token(MODEL_SERVICE, audience=self.url),
        }
        began = time.perf_counter()
        answer = self.http.post(self.url + "/token", data=form, timeout=10)
        took = ms(began)
        if answer.status_code != 200:
            raise RuntimeError(f"exchange failed: {answer.text[:300]}")
        return took

    def measure(self) -> dict:
        for _ in range(10):  # warm the connection and the templates
            self.sign_in(), self.exchange()
        rows = {"page": [], "form": [], "redeem": [], "sign_in": [], "exchange": []}
        for _ in range(self.runs):
            page, form, redeem = self.sign_in()
            for key, value in (("page", page), ("form", form), ("redeem", redeem), ("sign_in", page + form + redeem)):
                rows[key].append(value)
            rows["exchange"].append(self.exchange())
        return {k: p50(v) for k, v in rows.items()}

    def weight(self) -> dict:
        ask = {
            "response_type": "code",
            "client_id": WORKBENCH,
            "redirect_uri": SITE,
            "scope": "openid",
            "state": "s",
            "code_challenge": "A" * 43,
            "code_challenge_method": "S256",
        }
        html = self.http.get(self.url + "/authorize", params=ask, timeout=10).content
        css = self.http.get(self.url + "/sign-in.css", timeout=10).content
        return {
            "html_bytes": len(html),
            "css_bytes": len(css),
            "total_bytes": len(html) + len(css),
            "total_gzip_bytes": len(gzip.compress(html)) + len(gzip.compress(css)),
        }


def markdown(results: dict) -> str:
    t, w = results["ms_p50"], results["weight"]
    lines = [
        "# Sign-in at the dev issuer beside one token exchange",
        "",
        f"{results['when']} on {results['machine']}; `{results['command']}`"
        " (the issuer under gunicorn, one worker, as `agentfn up` runs it).",
        "",
        "| what | p50 |",
        "|---|---|",
        f"| the sign-in page, `GET /authorize` | {t['page']} ms |",
        f"| the form, `POST /authorize` (a code) | {t['form']} ms |",
        f"| the code's redemption, `POST /token` (PKCE, an access and an ID token signed) | {t['redeem']} ms |",
        f"| a whole sign-in, the three requests (the person's own time not included) | {t['sign_in']} ms |",
        f"| one token exchange at the same endpoint | {t['exchange']} ms |",
        "",
        f"The page weighs {w['total_bytes']} bytes ({w['html_bytes']} HTML + {w['css_bytes']} CSS), "
        f"{w['total_gzip_bytes']} gzipped; it loads nothing else.",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    bench = Bench(args.runs)
    try:
        bench.up()
        results = {
            "when": when(),
            "machine": machine(),
            "command": command(),
            "runs": args.runs,
            "ms_p50": bench.measure(),
            "weight": bench.weight(),
        }
    finally:
        bench.down()
    write("sign_in", results, markdown(results))
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
