"""Memory's doors as the model function uses them: recall as the caller, WriteEpisode as itself.

Recall carries the caller's token exchanged for memory's audience (`agentfn.shared.exchange`).

WriteEpisode carries the model function's own service identity, never a caller's: in a cluster the
projected ServiceAccount token (audience of the memory service) that the kubelet rotates in its file,
locally a dev-issuer token written to a file by the dev stack. The file is read on every call, so a
rotated token is picked up without a restart.
"""

from __future__ import annotations

from typing import Any

from agentfn.shared import contract
from agentfn.shared.exchange import ExchangeFailed, TokenExchange
from agentfn.shared.identity import Caller
from agentfn.shared.problems import ProblemError, problem_type

from .parts_http import Http, Unreachable

RECALLED_FIELDS = ("id", "kind", "text", "source", "created_at", "updated_at", "similarity", "date")


STANDING_PREFERENCES = 2  # of a turn's few recalled entries: most stay the nearest to what the person said


class MemoryClient:
    def __init__(
        self,
        base_url: str | None,
        token_file: str | None,
        http: Http,
        tokens: TokenExchange | None = None,
        audience: str = contract.audience("memory"),
    ):
        self.base = (base_url or "").rstrip("/")
        self.token_file, self.http = token_file, http
        self.tokens = tokens or TokenExchange(mode="raw", url="", token_file="")
        self.audience = audience

    @property
    def configured(self) -> bool:
        return bool(self.base)

    def recall(
        self, caller: Caller, query: str, kinds: list[str], limit: int, max_tokens: int, timeout: float
    ) -> list[dict[str, Any]] | None:
        """The caller's recalled entries, or None when memory could not answer (the turn goes on without). Their
        newest preferences come whatever their similarity: how a person wants to be answered holds for every turn."""
        body = {"query": query[:4000], "kinds": kinds, "limit": limit, "max_tokens": max_tokens}
        if "preference" in kinds:
            body["preferences"] = min(STANDING_PREFERENCES, limit)
        try:
            token = self.tokens.token_for(caller, self.audience, timeout)
            answer = self.http.request("POST", self.base + "/v1/recall", token=token, timeout=timeout, body=body)
        except (Unreachable, ExchangeFailed):
            return None
        if answer.status != 200 or not isinstance(answer.body, dict) or not isinstance(answer.body.get("entries"), list):
            return None
        return [
            {k: e[k] for k in RECALLED_FIELDS if k in e}
            for e in answer.body["entries"]
            if isinstance(e, dict) and isinstance(e.get("id"), str) and isinstance(e.get("text"), str)
        ]

    def service_token(self) -> str:
        try:
            with open(self.token_file or "") as f:
                token = f.read().strip()
        except OSError:
            token = ""
        if not token:
            raise ProblemError(
                503,
                "Service Unavailable",
                "the model function has no service identity to write episodes with",
                type=problem_type("no-service-identity"),
            )
        return token

    def write_episode(self, subject: str, text: str, session_id: str | None, timeout: float) -> dict[str, Any]:
        body = {"subject": subject, "text": text}
        if session_id:
            body["session_id"] = session_id
        try:
            answer = self.http.request(
                "POST", self.base + "/internal/v1/episodes", token=self.service_token(), timeout=timeout, body=body
            )
        except Unreachable as error:
            raise ProblemError(
                504 if error.timeout else 502,
                "Memory unavailable",
                "memory did not keep the episode",
                type=problem_type("memory"),
            ) from None
        if answer.status == 201 and isinstance(answer.body, dict):
            return answer.body
        if answer.status in (401, 403):
            raise ProblemError(
                502,
                "Bad Gateway",
                "memory refused the model function's service identity",
                type=problem_type("memory"),
            )
        if answer.status == 422:
            raise ProblemError(
                422,
                "Unprocessable Content",
                "memory refused the episode: it breaks the episode rules",
                type=problem_type("episode-rules"),
            )
        raise ProblemError(502, "Bad Gateway", f"memory answered HTTP {answer.status}", type=problem_type("memory"))
