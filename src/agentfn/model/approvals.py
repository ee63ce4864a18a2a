"""The person's approval of a call that changes state: a token the model function signs, good once.

A call of a tool whose descriptor says it changes state (and whose grant does not waive approval) is not
run: the turn streams it as a `needs_approval` step with an approval token and ends. The caller's next
turn request may carry `approvals: [{token, approve}]`; each token is checked here before anything of
that turn runs, and all of them are used up at once (one transaction; a token is good once).

Stateless, as scale-to-zero needs: the token is a JWT (HS256, the key in `AGENTFN_APPROVAL_KEY_FILE`)
carrying the subject, the agent, the tool, the sha256 of the canonical arguments, the arguments
themselves (they are needed to run the call), the generation that asked, the conversation that asked (a
keyed digest of the messages that turn was given), a jti and an expiry (`AGENTFN_APPROVAL_SECONDS`). A
token runs only in a request that carries that same conversation: the person approved a call in the
conversation they saw, not in another one of theirs. It is signed, not encrypted: it goes only to the
caller who asked, over the same connection that streams them the arguments in plain text, and comes back
only from that caller; what matters is that no one can alter it, not that they cannot read it. It is
never logged or recorded.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from agentfn.shared.identity import Caller
from agentfn.shared.problems import ProblemError, problem_type

log = logging.getLogger("agentfn.model.approvals")

AUDIENCE, ISSUER = "agentfn-approval", "agentfn-model"
ALGORITHM = "HS256"
CLAIMS = ("sub", "agent", "tool", "args", "args_sha256", "gen", "conv", "jti", "exp", "iat")
# Keeps the conversation's digest apart from the token's own signature, which the same key makes.
CONVERSATION = b"agentfn-approval-conversation\x00"


def canonical(arguments: Any) -> str:
    """The arguments as bytes two equal calls share: sorted keys, compact separators."""
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest(arguments: Any) -> str:
    return hashlib.sha256(canonical(arguments).encode()).hexdigest()


def conversation_digest(key: bytes, messages: list[dict[str, str]]) -> str:
    """The conversation a token is bound to: keyed, so a token never lets anyone test a guess of what was said."""
    data = CONVERSATION + canonical(messages).encode("utf-8", "surrogatepass")
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def refused(status: int, kind: str, detail: str) -> ProblemError:
    titles = {
        403: "Approval refused",
        409: "Approval already used",
        422: "Approvals not valid",
        503: "Approvals unavailable",
    }
    return ProblemError(status, titles[status], detail, type=problem_type(kind))


@dataclass(frozen=True)
class Approval:
    """A checked token and the person's answer to it."""

    jti: str
    tool: str
    arguments: Any
    approve: bool
    expires: int


class Approvals:
    def __init__(self, key_file: str | None, seconds: int):
        self.key_file, self.seconds = key_file, seconds

    def _key(self) -> bytes:
        """Read at each use, so a rotated Secret takes effect without a restart."""
        if not self.key_file:
            raise refused(503, "approvals-unavailable", "approvals are not configured (AGENTFN_APPROVAL_KEY_FILE)")
        try:
            with open(self.key_file, "rb") as f:
                key = f.read().strip()
        except OSError as error:
            log.error("approval key unreadable", extra={"event": "approval", "error_type": type(error).__name__})
            raise refused(503, "approvals-unavailable", "the approval key cannot be read") from None
        if len(key) < 32:
            raise refused(503, "approvals-unavailable", "the approval key is shorter than 32 bytes")
        return key

    def issue(
        self,
        caller: Caller,
        agent: str,
        tool: str,
        arguments: Any,
        generation: uuid.UUID,
        messages: list[dict[str, str]],
    ) -> str:
        """A token for one call, bound to the conversation the asking turn was given (`messages`, as they came)."""
        import jwt

        key, now = self._key(), int(time.time())
        claims = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": caller.subject,
            "agent": agent,
            "tool": tool,
            "args": arguments,
            "args_sha256": digest(arguments),
            "gen": str(generation),
            "conv": conversation_digest(key, messages),
            "jti": str(uuid.uuid4()),
            "iat": now,
            "exp": now + self.seconds,
        }
        return jwt.encode(claims, key, algorithm=ALGORITHM)

    def check(
        self, caller: Caller, agent: str, messages: list[dict[str, str]], items: list[dict[str, Any]]
    ) -> list[Approval]:
        """The request's approvals, each checked against the request's caller, agent and conversation, or a problem
        refusing the whole request (nothing is used)."""
        if not items:
            return []
        import jwt

        key, out = self._key(), []
        conversation = conversation_digest(key, messages)
        for i, item in enumerate(items):
            where = f"approvals[{i}]"
            try:
                claims = jwt.decode(
                    item["token"],
                    key,
                    algorithms=[ALGORITHM],
                    audience=AUDIENCE,
                    issuer=ISSUER,
                    options={"require": list(CLAIMS)},
                )
            except jwt.ExpiredSignatureError:
                raise refused(403, "approval-expired", f"{where}: the approval has expired; ask again") from None
            except jwt.InvalidTokenError:
                raise refused(403, "approval-invalid", f"{where}: not an approval this platform signed") from None
            if claims["args_sha256"] != digest(claims["args"]):
                raise refused(403, "approval-invalid", f"{where}: the approval's arguments do not match its digest")
            if claims["sub"] != caller.subject:
                raise refused(403, "approval-not-yours", f"{where}: the approval was given to another caller")
            if claims["agent"] != agent:
                raise refused(403, "approval-other-agent", f"{where}: the approval is for another agent")
            if not hmac.compare_digest(str(claims["conv"]), conversation):
                raise refused(
                    403,
                    "approval-other-conversation",
                    f"{where}: the approval was asked for in another conversation; send it with the messages "
                    "of the turn that asked for it, unchanged",
                )
            out.append(
                Approval(str(claims["jti"]), str(claims["tool"]), claims["args"], bool(item["approve"]), int(claims["exp"]))
            )
        if len({a.jti for a in out}) != len(out):
            raise refused(422, "approvals-repeated", "the same approval appears twice in the request")
        return out
