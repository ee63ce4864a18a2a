"""What the tests of every part share beyond the harness (agentfn.devstack.harness, which starts the parts for the
tests, the benchmarks and the studies alike): the issuer as the tests configure it, the tools they serve, and
schemathesis's reading of a function's OpenAPI document.

On the path through pytest's `pythonpath`: `from support import Issuer`. The modules of this package hold each
part's own helpers (`support.model`, `support.tools`, ...); the test doubles of what lies outside the project are in
agentfn.devstack; fixtures stay in the conftest files.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

import requests

from agentfn.devstack.harness.identity import MODEL_SERVICE, account, subject_hash_key
from agentfn.devstack.harness.servers import READ_TOOLS
from agentfn.devstack.issuer import CALLER_AUDIENCE, JWT_BEARER, TOKEN_EXCHANGE, TOKEN_TYPES, DevIssuer, ExchangeClient
from agentfn.devstack.sign_in import WebClient
from agentfn.shared.contract import audience

TOOLS = (*READ_TOOLS, "run_code")
# Tool functions of another team whose descriptors offer them alone and over MCP and do not say they are reads
# (support.model.stateful_tool): what the model function must never let be called alone.
STATEFUL_TOOLS = {"close_incident": {"changes_state": True}, "page_oncall": {}}
MCP_RESOURCE = "https://agentfn.test/mcp"  # /mcp's resource URL in the tests (AGENTFN_MCP_RESOURCE)
WORKBENCH = "agentfn-workbench"  # the workbench's client at the issuer: a browser app at the site root
WORKBENCH_URL = "https://agentfn.test/"
CHROMIUM = Path(os.environ.get("AGENTFN_TEST_CHROMIUM", "/usr/bin/chromium"))  # Debian's, which .ci/run installs


def exchange_clients() -> dict[str, ExchangeClient]:
    """What the issuer lets each workload exchange, as the dev stack configures it."""
    clients = {
        MODEL_SERVICE: ExchangeClient(
            frozenset({"agentfn", MCP_RESOURCE}),
            frozenset({audience("memory"), audience("page"), *(audience("tool", t) for t in (*TOOLS, *STATEFUL_TOOLS))}),
        )
    }
    for tool in READ_TOOLS:
        clients[account(tool)] = ExchangeClient(frozenset({audience("tool", tool)}), frozenset({audience("upstream", tool)}))
    return clients


def web_clients() -> dict[str, WebClient]:
    """The public clients people sign in with, as the dev stack configures the workbench."""
    return {WORKBENCH: WebClient(WORKBENCH, frozenset({WORKBENCH_URL}), CALLER_AUDIENCE)}


class Issuer(DevIssuer):
    """The dev issuer as the tests serve it, with the settings and tokens each part's tests ask of it."""

    def __init__(self, directory, *args, **kwargs):
        super().__init__(directory, *args, **kwargs)
        self.subject_hash_key_file = Path(subject_hash_key(directory)["AGENTFN_SUBJECT_HASH_KEY_FILE"])

    def env(self) -> dict[str, str]:
        """A part's identity settings: the model function trusted at WriteEpisode and as the actor of exchanges, and
        the key of the pseudonym the logs and traces name callers by."""
        return {
            "AGENTFN_JWT_ISSUER": self.url,
            "AGENTFN_JWKS_URL": self.jwks_url,
            "AGENTFN_TRUSTED_SERVICE_ACCOUNTS": MODEL_SERVICE,
            "AGENTFN_TRUSTED_ACTORS": MODEL_SERVICE,
            "AGENTFN_SUBJECT_HASH_KEY_FILE": str(self.subject_hash_key_file),
        }

    def subject_hash(self, subject: str) -> str:
        """The pseudonym the parts log for `subject`: HMAC-SHA256 keyed by the deployment's key, 48 bits in hex."""
        key = self.subject_hash_key_file.read_bytes().strip()
        return hmac.new(key, subject.encode(), hashlib.sha256).hexdigest()[:12]

    def upstream_env(self, tool: str) -> dict[str, str]:
        """A dev upstream's: it trusts its read tool as the actor."""
        return {**self.env(), "AGENTFN_TRUSTED_ACTORS": account(tool)}

    def headers(self, subject: str, groups: list[str] | None = None) -> dict[str, str]:
        """The gateway's caller token (audience agentfn): memory's and the model function's doors."""
        return {"Authorization": f"Bearer {self.caller_token(subject, groups)}"}

    def assertion_file(self, directory, part: str):
        """A part's workload token for the issuer (what a projected token with the issuer's audience is)."""
        path = directory / f"exchange-token-{part}"
        path.write_text(self.service_token(account(part), audience=self.url))
        return path

    def exchanged(
        self,
        audience: str,
        subject: str,
        groups: list[str] | None = None,
        *,
        actor: str = MODEL_SERVICE,
        token: str | None = None,
    ) -> str:
        """A real exchange at the issuer's token endpoint, as `actor` does it, of the caller's gateway token
        (or `token`) for `audience`."""
        form = {
            "grant_type": TOKEN_EXCHANGE,
            "subject_token": token or self.caller_token(subject, groups),
            "subject_token_type": TOKEN_TYPES[0],
            "audience": audience,
            "client_assertion_type": JWT_BEARER,
            "client_assertion": self.service_token(actor, audience=self.url),
        }
        answer = requests.post(self.token_endpoint, data=form, timeout=10)
        assert answer.status_code == 200, answer.text
        return answer.json()["access_token"]

    def tool_headers(self, tool: str, subject: str, groups: list[str] | None = None) -> dict[str, str]:
        """What the model function sends a tool function (or the page fetcher, `tool="page"`) for the caller."""
        part = audience("page") if tool == "page" else audience("tool", tool)
        return {"Authorization": f"Bearer {self.exchanged(part, subject, groups)}"}


def openapi_schema(url: str):
    """A function's own /openapi.json for schemathesis. Each test sends every case with a real token of its own, so
    the bearer scheme is left out of generation: a case is never "invalid" only for a token it is not sent with."""
    import schemathesis

    schema = schemathesis.openapi.from_url(url + "/openapi.json")
    schema.config.generation.update(with_security_parameters=False)
    return schema
