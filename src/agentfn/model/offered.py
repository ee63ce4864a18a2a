"""Which addresses `open_page` may open in a turn: a URL the person wrote in this conversation, or a link of
a page opened earlier in the same turn: its exact href, or its number (`"3"` or `"[3]"`, a link of the page
opened last), both given as `url` (one argument keeps the schema a small model fills in simple).

So a page (or a note recalled from memory) cannot make the agent carry what it knows to an address the
model composed: any other URL is refused as the tool's problem, which the model reads, and nothing is
fetched. URLs are compared after normalising the scheme's and host's case and a trailing slash; the
fragment is dropped (it never leaves the browser, so the page fetcher never sends it); the query is kept
as written, since it is where a composed address would carry data.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from .tool_table import problem

# What a person writes as an address in a message: http(s) up to whitespace or a closing bracket or quote.
WRITTEN = re.compile(r"https?://[^\s<>\"'`)\]}]+", re.IGNORECASE)
LINK_NUMBER = re.compile(r"^\s*\[?\s*(\d{1,6})\s*\]?\s*$")
TRAILING = ".,;:!?"


def normal(url: str) -> str:
    try:
        parts = urllib.parse.urlsplit(url.strip())
    except ValueError:
        return url.strip()
    return urllib.parse.urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path.rstrip("/"), parts.query, ""))


def written(messages: list[dict[str, str]]) -> set[str]:
    """The URLs the person wrote in the conversation's user messages, normalised."""
    return {
        normal(m.rstrip(TRAILING))
        for message in messages
        if message["role"] == "user"
        for m in WRITTEN.findall(message["content"])
    }


NOT_OFFERED = problem(
    403,
    "URL not offered",
    "open_page opens only a URL the person wrote in this conversation or "
    "a link (by its number or href) of a page opened earlier in this turn",
    "url-not-offered",
)


@dataclass
class Offered:
    """The addresses open to `open_page` in one turn; grows with each page opened."""

    person: set[str]
    pages: set[str] = field(default_factory=set)  # pages opened this turn (read on with `offset`) and their links
    last_links: dict[int, str] = field(default_factory=dict)  # the last page's links by number

    def resolve(self, arguments: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The page fetcher's request for these arguments, or the problem the model is given instead."""
        url = arguments["url"]
        number = LINK_NUMBER.match(url)
        if number:
            link = int(number.group(1))
            if link not in self.last_links:
                return None, problem(
                    403, "URL not offered", f"no link [{link}] on a page opened in this turn", "url-not-offered"
                )
            url = self.last_links[link]
        elif normal(url) not in self.person | self.pages:
            return None, NOT_OFFERED
        return {**arguments, "url": url}, None

    def opened(self, page: Any) -> None:
        if not isinstance(page, dict):
            return
        links = {
            link["n"]: link["href"]
            for link in page.get("links") or ()
            if isinstance(link, dict) and isinstance(link.get("n"), int) and isinstance(link.get("href"), str)
        }
        self.last_links = links
        self.pages |= {normal(u) for u in (page.get("url"), page.get("final_url")) if isinstance(u, str)}
        self.pages |= {normal(h) for h in links.values()}
