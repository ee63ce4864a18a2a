"""The platform's public doors as the CLI calls them: one gateway URL, the caller's token, problems as errors.

Every door answers an error as an RFC 9457 problem; `Problem` carries its title and detail so that the
commands show those two lines and nothing else (never a traceback).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator
from typing import Any

import requests

from .settings import CliSettings

TOKEN_HINT = "export AGENTFN_TOKEN=$(agentfn token alice --groups developers)"
TIMEOUT = (5, 600)  # connect; read between two chunks (a turn on a small CPU engine pauses long)
# The C0 and C1 controls but newline and tab, and DEL. What the doors relay was written by a model, a tool, a page or
# a note; printed as is, such a character could clear the screen, set the clipboard (OSC 52) or hide where a
# link goes (OSC 8) on the person's terminal.
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def escaped(text: str) -> str:
    """The text with every format character (Unicode category Cf: bidirectional overrides and isolates such as
    U+202E and U+2066-2069, zero-width characters, U+FEFF) written as its escape, `\\u202e`. Drawn as is on a card,
    such a character reorders or hides what follows it, so the call the person approves could read as another.
    Only a call is drawn this way (its tool, arguments, note and result): in an answer an emoji's joiner or a
    Persian word's non-joiner is text the person needs."""
    if text.isascii():
        return text
    return "".join(_escape(c) if unicodedata.category(c) == "Cf" else c for c in text)


def _escape(c: str) -> str:
    return f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"


def printable(value: Any) -> Any:
    """A decoded answer with every control character taken out of its strings (keys too): everything the CLI shows
    of the platform's answers comes through here, whatever then draws it. A call drawn on a card is then `escaped`
    too."""
    if isinstance(value, str):
        return CONTROLS.sub("", value)
    if isinstance(value, list):
        return [printable(v) for v in value]
    if isinstance(value, dict):
        return {printable(k): printable(v) for k, v in value.items()}
    return value


def default_url() -> str:
    """The local stack's gateway (`agentfn up`)."""
    return f"http://127.0.0.1:{CliSettings.from_env().dev_port_base}"


class Failure(Exception):
    """What a command shows and the exit code it leaves with."""

    def __init__(self, title: str, detail: str = "", code: int = 1):
        super().__init__(title)
        self.title, self.detail, self.code = title, detail, code


class Problem(Failure):
    """A platform error: the door's problem details."""

    def __init__(self, status: int, title: str, detail: str = "", body: dict | None = None):
        super().__init__(title, detail)
        self.status, self.body = status, body or {}

    @classmethod
    def of(cls, response: requests.Response) -> Problem:
        try:
            body = printable(response.json())
        except ValueError:
            body = None
        if isinstance(body, dict) and "title" in body:
            return cls(
                int(body.get("status") or response.status_code), str(body["title"]), str(body.get("detail") or ""), body
            )
        return cls(
            response.status_code,
            printable(f"{response.status_code} {response.reason or ''}".strip()),
            "the gateway answered without problem details",
        )


class Client:
    def __init__(self, url: str, token: str | None):
        if not token:
            raise Failure(
                "no caller token",
                f"get one from the local dev issuer:\n  {TOKEN_HINT}\nor pass --token (any gateway's caller token works)",
                code=2,
            )
        self.url = url.rstrip("/")
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {token}"

    def request(self, method: str, path: str, *, stream: bool = False, **kw: Any) -> requests.Response:
        try:
            response = self.http.request(method, self.url + path, stream=stream, timeout=TIMEOUT, **kw)
        except requests.ConnectionError:
            raise Failure(
                f"the gateway is not answering at {self.url}: start the platform with `agentfn up`, "
                "or give another with --url or AGENTFN_URL"
            ) from None
        except requests.Timeout:
            raise Failure(f"the gateway at {self.url} did not answer in time") from None
        except requests.RequestException as error:
            raise Failure(f"cannot reach {self.url}", type(error).__name__) from None
        if response.status_code >= 400:
            problem = Problem.of(response)
            response.close()
            raise problem
        return response

    def json(self, method: str, path: str, **kw: Any) -> Any:
        response = self.request(method, path, **kw)
        return printable(response.json()) if response.content else None

    # The doors.
    def entries(self, kind: str | None = None) -> list[dict]:
        found, offset, page = [], 0, 1000
        while True:
            params = {"limit": page, "offset": offset, **({"kind": kind} if kind else {})}
            batch = self.json("GET", "/v1/entries", params=params)["entries"]
            found += batch
            if len(batch) < page:
                return found
            offset += page

    def turn(self, agent: str, messages: list[dict], approvals: list[dict] | None = None) -> Iterator[tuple[str, dict]]:
        """A turn's events as they arrive; closing the iterator closes the stream (the turn is cancelled)."""
        body = {"messages": messages, **({"approvals": approvals} if approvals else {})}
        response = self.request("POST", f"/v1/agents/{agent}/turns", json=body, stream=True)
        try:
            yield from events(response.iter_lines(decode_unicode=True))
        except requests.RequestException:
            raise Failure("the stream was cut before the answer ended") from None
        finally:
            response.close()


def events(lines: Iterator[str]) -> Iterator[tuple[str, dict]]:
    """Server-sent events: `event:` and `data:` lines, a blank line ends one."""
    name, data = None, []
    for line in lines:
        if line == "":
            if name is not None:
                yield name, printable(json.loads("\n".join(data) or "{}"))
            name, data = None, []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if name is not None:
        yield name, printable(json.loads("\n".join(data) or "{}"))
