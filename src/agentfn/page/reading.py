"""Reading: the fetched bytes become a title, readable text with its links numbered `[n]`, and a link list.

trafilatura extracts the main content from the bytes the guard fetched (it is never given a URL to
fetch). Links are resolved here, against the page's final URL or its `<base href>`, and numbered by
first appearance: the same href keeps one number across the page, so every window agrees.

trafilatura's import (about half a second of CPU) weighs as much as the rest of a cold start: it is imported on
the way to the first page, not to ready (the app's `warm_up` imports it once ready, so a first page seldom waits).
"""

from __future__ import annotations

import codecs
import re
import sys
import threading
from dataclasses import dataclass, field
from urllib.parse import quote, urljoin, urlsplit

from .fetch import Fetched

MAX_TITLE = 300
MAX_LINK_TEXT = 200
MAX_HREF = 2048
BOMS = [
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
]
META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
# The WHATWG Encoding standard reads these labels as windows-1252, and so do browsers.
AS_WINDOWS_1252 = {"iso-8859-1", "iso8859-1", "latin1", "latin-1", "l1", "us-ascii", "ascii", "cp819"}
BLOCKS = {"p", "head", "item", "quote", "code", "row", "list", "table", "div", "main", "body", "doc", "section"}
MARKER = re.compile(r"\[(\d+)\]")
SAFE = "/?#[]@!$&'()*+,;=%~:"
PLAIN_HREF = re.compile(r"^[\x21-\x7e]+$")  # printable ASCII: nothing to encode


@dataclass(frozen=True)
class Link:
    n: int
    href: str
    text: str


@dataclass(frozen=True)
class Reading:
    final_url: str
    title: str
    text: str = field(repr=False)
    links: tuple[Link, ...] = ()


def read(page: Fetched) -> Reading:
    text = decode(page.body, page.charset, html=page.media_type != "text/plain")
    if page.media_type == "text/plain":
        return Reading(page.final_url, "", text.replace("\r\n", "\n"))
    return read_html(text, page.final_url)


def decode(body: bytes, declared: str | None, *, html: bool) -> str:
    """Bytes to text: a BOM first, then the declared charset, then a `<meta charset>`, then UTF-8."""
    for bom, codec in BOMS:
        if body.startswith(bom):
            return body[len(bom) :].decode(codec, "replace")
    for candidate in (declared, _meta_charset(body) if html else None):
        codec = _text_codec(candidate)
        if codec:
            return body.decode(codec, "replace")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return body.decode("cp1252", "replace")


def _meta_charset(body: bytes) -> str | None:
    match = META_CHARSET.search(body[:4096])
    return match.group(1).decode("ascii") if match else None


def _text_codec(label: str | None) -> str | None:
    if not label:
        return None
    label = label.strip().lower()
    if label in AS_WINDOWS_1252:
        return "cp1252"
    try:
        b"".decode(label)  # refuses codecs that are not text encodings (rot13, base64...)
    except (LookupError, ValueError):
        return None
    return label


_IMPORTING = threading.Lock()
_extractor = None  # set once trafilatura's import has finished (sys.modules holds it while it is under way)


def extractor():
    """trafilatura, imported once. Without py3langid: trafilatura imports it (and numpy with it, a third of its
    import time) only for a language filter this fetcher never asks for, and does without it when it is missing."""
    global _extractor
    if _extractor is not None:
        return _extractor
    with _IMPORTING:
        if _extractor is None:
            hidden = "py3langid" not in sys.modules
            if hidden:
                sys.modules["py3langid"] = None  # type: ignore[assignment]  # makes `import py3langid` fail
            try:
                import trafilatura
            finally:
                if hidden and sys.modules.get("py3langid", False) is None:
                    del sys.modules["py3langid"]  # anyone else may still import it
            _extractor = trafilatura
        return _extractor


def read_html(text: str, final_url: str) -> Reading:
    trafilatura = extractor()
    tree = trafilatura.load_html(text)
    if tree is None:
        return Reading(final_url, "", "")
    title = _title(tree)
    base = _base(tree, final_url)
    # "txt": trafilatura's own plain text of the body is then not made, only its tree, which `_Renderer` reads.
    document = trafilatura.bare_extraction(
        tree,
        output_format="txt",
        include_links=True,
        include_tables=True,
        include_images=False,
        include_comments=False,
        with_metadata=False,
    )
    if document is None or document.body is None:
        _, plain, _ = trafilatura.baseline(text)  # nothing looked like an article: the page's plain text
        return Reading(final_url, title, plain.strip())
    renderer = _Renderer(base, final_url)
    body = renderer.render(document.body)
    return Reading(final_url, title, body, tuple(renderer.links.values()))


def _title(tree) -> str:
    for path in ("head/title", ".//title", ".//h1"):
        element = tree.find(path)
        if element is not None:
            title = " ".join(element.text_content().split())
            if title:
                return title[:MAX_TITLE]
    return ""


def _base(tree, final_url: str) -> str:
    element = tree.find("head/base[@href]")  # a base counts in the head, as browsers read it
    if element is None:
        return final_url
    base = urljoin(final_url, element.get("href", "").strip())
    return base if urlsplit(base).scheme in ("http", "https") else final_url


class _Renderer:
    """trafilatura's XML body as plain text: blocks on their own lines, links as `text [n]`."""

    def __init__(self, base: str, final_url: str):
        self.base, self.page = base, final_url.split("#", 1)[0]
        parts = urlsplit(base)
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.links: dict[str, Link] = {}

    def _resolve(self, target: str) -> str | None:
        """An absolute http(s) href, its path, query and fragment percent-encoded; None when it is not one."""
        if not target or target.startswith("#"):
            return None
        if PLAIN_HREF.match(target):  # the common cases, without urljoin's cost on pages with thousands of links
            if target.startswith("/") and not target.startswith("//") and "/." not in target:
                return self.origin + target
            if target[:8].lower().startswith(("http://", "https://")) and target.split("//", 1)[1][:1] not in "/":
                return target
        try:
            parts = urlsplit(urljoin(self.base, target))
        except ValueError:
            return None
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return None
        # Spaces and non-ASCII in the path, query and fragment percent-encoded (escapes kept); the host stays
        # as written, since the guard reads internationalised names itself.
        return parts._replace(**{k: quote(getattr(parts, k), safe=SAFE) for k in ("path", "query", "fragment")}).geturl()

    def render(self, body) -> str:
        blocks: list[tuple[str, str]] = []
        self._block(body, blocks)
        out: list[str] = []
        for i, (kind, line) in enumerate(blocks):
            if i:
                out.append("\n" if kind in ("item", "row") and blocks[i - 1][0] == kind else "\n\n")
            out.append(line)
        return "".join(out)

    def _block(self, element, blocks: list[tuple[str, str]]) -> None:
        tag = element.tag
        if tag == "row":
            cells = [self._inline(cell).strip() for cell in element]
            blocks.append(("row", " | ".join(c for c in cells)))
            return
        if tag == "code":
            code = element.text_content() if hasattr(element, "text_content") else "".join(element.itertext())
            blocks.append(("code", code.strip("\n")))
            return
        buffer = [element.text or ""]
        for child in element:
            if child.tag in BLOCKS:
                self._flush(tag, buffer, blocks)
                self._block(child, blocks)
                buffer = [child.tail or ""]
            else:
                buffer.append(self._inline(child))
                buffer.append(child.tail or "")
        self._flush(tag, buffer, blocks)

    @staticmethod
    def _flush(tag: str, buffer: list[str], blocks: list[tuple[str, str]]) -> None:
        line = " ".join("".join(buffer).split())
        if not line:
            return
        prefix = {"head": "## ", "item": "- ", "quote": "> "}.get(tag, "")
        blocks.append((tag, prefix + line))

    def _inline(self, element) -> str:
        if element.tag == "lb":
            return "\n"
        parts = [element.text or ""]
        for child in element:
            parts.append(self._inline(child))
            parts.append(child.tail or "")
        text = "".join(parts)
        if element.tag == "ref":
            link = self._number(element.get("target"), text)
            if link:
                return f"{text.rstrip()} [{link.n}]"
        return text

    def _number(self, target: str | None, text: str) -> Link | None:
        """The link's number; None for what a model cannot open (mailto:, javascript:, this page's anchors)."""
        href = self._resolve((target or "").strip())
        if href is None or len(href) > MAX_HREF:
            return None
        if "#" in href and href.split("#", 1)[0] == self.page:
            return None
        if href not in self.links:
            label = " ".join(text.split())[:MAX_LINK_TEXT]
            self.links[href] = Link(len(self.links) + 1, href, label)
        return self.links[href]


def window(reading: Reading, offset: int, size: int) -> tuple[str, int | None, list[Link]]:
    """The text from `offset`, about `size` characters cut at a space, the next offset, and its links."""
    total = len(reading.text)
    end = min(total, offset + size)
    if end < total:
        cut = reading.text.rfind(" ", end - size // 10, end)  # do not split a word or a [n] marker
        cut = max(cut, reading.text.rfind("\n", end - size // 10, end))
        if cut > offset:
            end = cut + 1
    chunk = reading.text[offset:end]
    numbers = {int(m) for m in MARKER.findall(chunk)}
    links = [link for link in reading.links if link.n in numbers]
    return chunk, (end if end < total else None), links
