"""Token exchange (RFC 8693): a caller's token traded at the issuer for one meant for the part called next.

The model function calls memory, the page fetcher and the tools as the caller, and a read tool calls its
platform service as the caller; none of them sends on the token it received. It asks the issuer's token
endpoint for a token with the same subject and groups, the audience of the part it calls and itself as the
actor, authenticating as itself with its own workload token (RFC 7523 client assertion: the projected
ServiceAccount token, audience the issuer, read from its file on each exchange since the kubelet rotates it).
A token that leaks from one part is then good at that part only, for minutes.

Exchanged tokens are kept per (caller token, audience) until shortly before they expire, in a bounded
map, so a turn's calls after the first cost a dictionary lookup. A call that changes memory asks for a
fresh one (`fresh=True`), neither kept nor taken from the map: memory lets each exchanged token keep one
note and forget one entry.

`AGENTFN_TOKEN_FORWARDING=raw` is the weaker setting for an issuer without token exchange: the caller's
token is sent on as it came, and every part must then take the gateway's token (see `identity`).

Configuration: `ExchangeSettings` below (docs/configuration.md), and identity's issuer and forwarding.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import threading
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .identity import Caller, IdentitySettings
from .problems import ProblemError, problem_type
from .settings import Settings, setting

GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token"
JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
MARGIN = 30  # seconds: an exchanged token is renewed this long before it expires (a call takes up to 15 s)
MAX_BYTES = 64 * 1024  # a token response is a few kilobytes


@dataclass(frozen=True)
class ExchangeSettings(Settings):
    url: str | None = setting(
        "AGENTFN_TOKEN_EXCHANGE_URL", None, "the issuer's token endpoint (RFC 8693)", shown="`<AGENTFN_JWT_ISSUER>/token`"
    )
    token_file: str = setting(
        "AGENTFN_EXCHANGE_TOKEN_FILE",
        "/var/run/secrets/agentfn/exchange-token",
        "the function's own projected token (audience: the issuer), its RFC 7523 client assertion; read on each exchange",
    )
    client_id: str | None = setting(
        "AGENTFN_TOKEN_EXCHANGE_CLIENT_ID",
        None,
        "`client_id` sent along (Keycloak's federated client authentication wants it)",
    )
    client_secret_file: str | None = setting(
        "AGENTFN_TOKEN_EXCHANGE_CLIENT_SECRET_FILE",
        None,
        "a client secret instead of the assertion (HTTP Basic with the client id), for issuers that take no workload token",
    )
    token_type: str = setting(
        "AGENTFN_TOKEN_EXCHANGE_TOKEN_TYPE",
        ACCESS_TOKEN,
        "`requested_token_type` (`urn:ietf:params:oauth:token-type:jwt` for ZITADEL)",
    )
    timeout_seconds: float = setting("AGENTFN_TOKEN_EXCHANGE_TIMEOUT_SECONDS", 3.0, "bound on one exchange", minimum=0.1)
    cache: int = setting(
        "AGENTFN_TOKEN_EXCHANGE_CACHE", 4096, "exchanged tokens kept per process (least recently used go first)", minimum=1
    )


class ExchangeFailed(ProblemError):
    """The issuer refused the exchange (`status` 401/403) or did not answer as it should (502/503/504)."""


def _problem(status: int, detail: str) -> ExchangeFailed:
    titles = {401: "Unauthorized", 403: "Forbidden", 502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}
    return ExchangeFailed(status, titles[status], detail, type=problem_type("token-exchange"))


class TokenExchange:
    def __init__(
        self,
        *,
        mode: str,
        url: str,
        token_file: str,
        client_id: str | None = None,
        timeout: float = 3.0,
        size: int = 4096,
        secret_file: str | None = None,
        token_type: str = ACCESS_TOKEN,
    ):
        if mode not in ("exchange", "raw"):
            raise RuntimeError("AGENTFN_TOKEN_FORWARDING is `exchange` or `raw`")
        if secret_file and not client_id:
            raise RuntimeError("AGENTFN_TOKEN_EXCHANGE_CLIENT_SECRET_FILE needs AGENTFN_TOKEN_EXCHANGE_CLIENT_ID")
        self.mode, self.url, self.token_file, self.client_id = mode, url, token_file, client_id
        self.secret_file, self.token_type = secret_file, token_type
        self.timeout, self.size = timeout, size
        self._cache: OrderedDict[tuple[str, str], tuple[str, float]] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TokenExchange:
        identity, s = IdentitySettings.from_env(env), ExchangeSettings.from_env(env)
        return cls(
            mode=identity.token_forwarding,
            url=s.url or f"{identity.jwt_issuer.rstrip('/')}/token",
            token_file=s.token_file,
            client_id=s.client_id,
            timeout=s.timeout_seconds,
            size=s.cache,
            secret_file=s.client_secret_file,
            token_type=s.token_type,
        )

    def token_for(self, caller: Caller, audience: str, timeout: float | None = None, *, fresh: bool = False) -> str:
        """A token for `audience` carrying the caller; raises `ExchangeFailed` when the issuer gives none.
        `fresh`: exchanged for this call alone (never kept), for a part that counts a token's uses."""
        if self.mode == "raw":
            return caller.token
        if fresh:
            return self._exchange(caller.token, audience, min(self.timeout, timeout or self.timeout))[0]
        key = (hashlib.sha256(caller.token.encode()).hexdigest(), audience)
        now = time.time()
        with self._lock:
            kept = self._cache.get(key)
            if kept and kept[1] > now:
                self._cache.move_to_end(key)
                return kept[0]
        token, renew_at = self._exchange(caller.token, audience, min(self.timeout, timeout or self.timeout))
        with self._lock:
            self._cache[key] = (token, renew_at)
            self._cache.move_to_end(key)
            while len(self._cache) > self.size:
                self._cache.popitem(last=False)
        return token

    # --- the request to the issuer -----------------------------------------------------------------------

    def _credential(self, path: str) -> str:
        try:
            with open(path) as f:
                value = f.read().strip()
        except OSError:
            value = ""
        if not value:
            raise _problem(503, "this function has no credential to authenticate its token exchanges with")
        return value

    def _client_authentication(self) -> tuple[dict[str, str], tuple[str, str] | None]:
        """Form fields and HTTP Basic credentials that say who asks: the workload token, or a client secret."""
        if self.secret_file:
            return {}, (self.client_id, self._credential(self.secret_file))
        form = {"client_assertion_type": JWT_BEARER, "client_assertion": self._credential(self.token_file)}
        if self.client_id:
            form["client_id"] = self.client_id
        return form, None

    def _exchange(self, subject_token: str, audience: str, timeout: float) -> tuple[str, float]:
        client, basic = self._client_authentication()
        form = {
            "grant_type": GRANT,
            "subject_token": subject_token,
            "subject_token_type": ACCESS_TOKEN,
            "requested_token_type": self.token_type,
            "audience": audience,
            **client,
        }
        headers = {"Accept": "application/json", "Content-Type": "application/x-www-form-urlencoded"}
        if basic:  # RFC 6749 section 2.3.1: both parts form-encoded, then Basic
            pair = f"{urllib.parse.quote_plus(basic[0])}:{urllib.parse.quote_plus(basic[1])}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        status, body = self._post(urllib.parse.urlencode(form).encode(), headers, max(timeout, 0.001))
        if status != 200:
            error = body.get("error") if isinstance(body.get("error"), str) else f"HTTP {status}"
            # invalid_grant: the caller's token itself was refused; anything else is this function's setup.
            code = 401 if error == "invalid_grant" else (502 if status >= 500 else 403)
            raise _problem(code, f"the token issuer refused the exchange for {audience[:100]}: {error[:60]}")
        token = body.get("access_token")
        if not isinstance(token, str) or not token:
            raise _problem(502, "the token issuer answered without an access token")
        return token, time.time() + _lifetime(body, token) - MARGIN

    def _post(self, data: bytes, headers: dict[str, str], timeout: float) -> tuple[int, dict[str, Any]]:
        """POST to the token endpoint with the standard library's http.client (a tool has it loaded already: no
        second HTTP stack on a cold start), no redirects, no proxy, one connection per exchange."""
        parts = urllib.parse.urlsplit(self.url)
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = kind(parts.hostname, parts.port, timeout=timeout)
        try:
            conn.request(
                "POST", (parts.path or "/") + (f"?{parts.query}" if parts.query else ""), body=data, headers=headers
            )
            response = conn.getresponse()
            raw = response.read(MAX_BYTES + 1)
        except TimeoutError:
            raise _problem(504, f"the token issuer did not answer within {timeout:.1f} s") from None
        except (OSError, http.client.HTTPException):
            raise _problem(503, "the token issuer is not answering") from None
        finally:
            conn.close()
        try:
            body = json.loads(raw) if len(raw) <= MAX_BYTES else {}
        except ValueError:
            body = {}
        return response.status, body if isinstance(body, dict) else {}


def _lifetime(body: dict[str, Any], token: str) -> float:
    """Seconds the exchanged token lives: `expires_in`, else its own `exp` (read, not verified: the part
    called verifies it; this only decides when to ask again)."""
    expires_in = body.get("expires_in")
    if isinstance(expires_in, (int, float)) and not isinstance(expires_in, bool) and expires_in > 0:
        return float(expires_in)
    import jwt  # here, not on the way to ready: the first token's check loads it anyway

    try:
        exp = jwt.decode(token, options={"verify_signature": False}).get("exp")
    except jwt.PyJWTError:
        exp = None
    return float(exp) - time.time() if isinstance(exp, (int, float)) else 0.0
