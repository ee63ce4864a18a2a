"""A test double of the public web (outside this project): the pages and the misbehaving servers the page
fetcher meets out there. It runs inside the lab's network namespace, at "public" addresses.

Every request is recorded (server address, Host, path, headers) so tests can see what the fetcher sent.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlsplit

SECRET_WORD = "marmalade-velvet"  # in the article's text: must never reach a log or the audit

ARTICLE = f"""<!doctype html><html><head><title>A public article</title></head><body>
<nav><a href="/nav-only">Home</a> <a href="/nav-about">About</a></nav>
<article><h1>A public article</h1>
<p>The first paragraph explains the subject at some length, so that the extractor takes it for the main text. It
has a <a href="rel/next.html">relative link</a>, an <a href="/rooted">absolute-path link</a> and an
<a href="https://elsewhere.example/page?x=1">external one</a>, all of which a reader may want to follow.</p>
<p>The second paragraph has <a href="#section">an anchor on this page</a>, <a href="mailto:someone@example.org">a
mail link</a>, <a href="javascript:alert(1)">a script link</a> and the <a href="rel/next.html">relative link
again</a>, which keeps its number. The secret word of this article is {SECRET_WORD}.</p>
<ul><li>One item with <a href="../up.html">a parent link</a></li><li>Another item without one</li></ul>
<p>A closing paragraph, long enough to count as content, with a <a href="second page.html">link with a space</a>
in its href, so that hrefs come back encoded and can be opened again as they are.</p>
</article></body></html>"""


def long_article(paragraphs: int = 60) -> str:
    body = "".join(
        f"<p>Paragraph {i} of the long page talks about topic {i} in plain words, one sentence after another, so "
        f"that a window of text ends somewhere inside it and the next window carries on. It points to "
        f"<a href='/topic/{i}'>topic {i}</a> and then goes on for a while longer about nothing much at all, "
        f"repeating itself the way long pages do, until the paragraph is done.</p>"
        for i in range(paragraphs)
    )
    return f"<!doctype html><html><head><title>The long page</title></head><body><article>{body}</article></body></html>"


def bench_page(size: int) -> str:
    """An article-like page of about `size` bytes: paragraphs with a link each, as a real page has."""
    paragraph = (
        "<p>Paragraph {i} of the benchmark page carries ordinary prose about engineering, with a "
        "<a href='/bench/link/{i}'>link number {i}</a> in it, and then enough words after the link "
        "to make the paragraph look like a real one in a real article.</p>"
    )
    parts, total, i = [], 0, 0
    while total < size:
        parts.append(paragraph.format(i=i))
        total += len(parts[-1])
        i += 1
    return (
        f"<!doctype html><html><head><title>Benchmark page</title></head><body><article>{''.join(parts)}"
        f"</article></body></html>"
    )


BOMB = b"<html><body><p>" + b"a" * (32 * 1024 * 1024)
GZIP_BOMB = gzip.compress(BOMB, 9)
DEFLATE_BOMB = zlib.compress(BOMB, 9)
RAW_DEFLATE_BOMB = (lambda c: c.compress(BOMB) + c.flush())(zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS))
PDF = b"%PDF-1.7\n1 0 obj << /Type /Catalog >> endobj\n" + b"0" * 2000
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + b"\x00" * 2000


class PublicWeb(BaseHTTPRequestHandler):
    """Routes by path; the same routes on every public address and on https."""

    protocol_version = "HTTP/1.1"
    hits_path: str = ""
    _lock = threading.Lock()
    max_body = 1 << 20  # the page fetcher's cap in the tests

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        with self._lock, open(self.hits_path, "a") as f:
            f.write(
                json.dumps(
                    {
                        "server": self.server.server_address[0],
                        "port": self.server.server_address[1],
                        "host": self.headers.get("Host"),
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                    }
                )
                + "\n"
            )
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        path = parts.path
        for prefix, route in ROUTES:
            if path == prefix or (prefix.endswith("/") and path.startswith(prefix)):
                return route(self, path[len(prefix) :], query)
        self.send(404, b"<html><body><p>not here</p></body></html>")

    def send(
        self,
        status: int,
        body: bytes | str,
        content_type: str | None = "text/html; charset=utf-8",
        headers: dict[str, str] | None = None,
    ) -> None:
        body = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def head_only(self, status: int, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def drip(self, data: bytes, every: float) -> None:
        try:
            for byte in data:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(every)
        except OSError:
            pass  # the fetcher gave up, as it should


def _article(h, rest, q):
    h.send(200, ARTICLE)


def _redirect(h, rest, q):
    h.send(int(q.get("code", "302")), b"", headers={"Location": q.get("to", "/article")})


def _hops(h, rest, q):
    n = int(rest or "0")
    if n <= 0:
        return h.send(200, ARTICLE)
    h.send(302, b"", headers={"Location": f"/hops/{n - 1}"})


def _encoded(body: bytes, encoding: str):
    return lambda h, rest, q: h.send(200, body, headers={"Content-Encoding": encoding})


def _big(h, rest, q):
    size = 2 * h.max_body
    if rest == "declared":
        h.head_only(200, {"Content-Type": "text/html", "Content-Length": str(size)})
    else:
        h.head_only(200, {"Content-Type": "text/html", "Transfer-Encoding": "chunked"})
    chunk = b"<p>" + b"b" * 65533
    try:
        for _ in range(size // len(chunk) + 1):
            h.wfile.write(chunk if rest == "declared" else b"%x\r\n%s\r\n" % (len(chunk), chunk))
    except OSError:
        pass


def _slow(h, rest, q):
    if rest == "headers":
        h.wfile.write(b"HTTP/1.1 200 OK\r\n")
        h.drip(b"X-Drip: " + b"d" * 1000, 0.05)
        return
    h.head_only(200, {"Content-Type": "text/html"})
    h.drip(b"<html><body><p>" + b"s" * 1000, 0.05)


def _silent(h, rest, q):
    time.sleep(20)


def _headers(h, rest, q):
    if rest == "many":
        extra = {f"X-Many-{i}": "v" for i in range(150)}
    elif rest == "long":
        extra = {"X-Long": "l" * 100_000}
    else:  # under http.client's own limits, over the fetcher's 64 KiB
        extra = {f"X-Big-{i}": "b" * 2000 for i in range(40)}
    h.send(200, ARTICLE, headers=extra)


def _typed(body: bytes, content_type: str | None):
    return lambda h, rest, q: h.send(200, body, content_type)


def _status(h, rest, q):
    h.send(int(rest), b"<html><body><p>an error page</p></body></html>")


def _cookie(h, rest, q):
    h.send(302, b"", headers={"Location": "/echo", "Set-Cookie": "session=s3cr3t; Path=/"})


LATIN1 = (
    "<html><head><title>Caf\xe9</title></head><body><article><p>Un caf\xe9 cr\xe8me, s'il vous pla\xeet: "
    "this paragraph is written in Latin-1 and declares it only in the Content-Type header, so the "
    "fetcher has to honour the header to get the accents right.</p></article></body></html>"
).encode("latin-1")
META_1252 = (
    b'<html><head><meta charset="windows-1252"><title>Quotes</title></head><body><article><p>'
    b"\x93Curly quotes\x94 come from windows-1252, declared only in a meta tag, and this paragraph goes on "
    b"long enough to be the main text of the page it is on.</p></article></body></html>"
)
BASE = (
    '<html><head><title>Based</title><base href="/other/place/"></head><body><article><p>This page sets a '
    'base for its links, so <a href="x.html">a relative link</a> resolves against the base, not against '
    "the page's own URL, the way a browser would resolve it for a reader.</p></article></body></html>"
)
PLAIN = "Plain text page.\nIt has two lines and no markup at all, which is fine.\n"

ROUTES = [
    ("/article", _article),
    ("/deep/dir/article", _article),
    ("/echo", _article),
    ("/deep/dir/rel/", _article),
    ("/deep/dir/second%20page.html", _article),
    ("/go/article", lambda h, r, q: h.send(302, b"", headers={"Location": "/deep/dir/article"})),
    ("/long", lambda h, r, q: h.send(200, long_article())),
    ("/bench/", lambda h, r, q: h.send(200, bench_page(int(r)) if r.isdigit() else ARTICLE)),
    ("/redirect", _redirect),
    ("/hops/", _hops),
    ("/loop", lambda h, r, q: h.send(302, b"", headers={"Location": "/loop"})),
    ("/bomb/gzip", _encoded(GZIP_BOMB, "gzip")),
    ("/bomb/deflate", _encoded(DEFLATE_BOMB, "deflate")),
    ("/bomb/raw-deflate", _encoded(RAW_DEFLATE_BOMB, "deflate")),
    ("/gzip/article", _encoded(gzip.compress(ARTICLE.encode()), "gzip")),
    ("/big/", _big),
    ("/slow/", _slow),
    ("/silent", _silent),
    ("/headers/", _headers),
    ("/pdf", _typed(PDF, "application/pdf")),
    ("/png", _typed(PNG, "image/png")),
    ("/pdf-as-html", _typed(PDF, "text/html")),
    ("/png-untyped", _typed(PNG, None)),
    ("/zip-as-text", _typed(b"PK\x03\x04" + b"\x00" * 600, "text/plain")),
    ("/binary-as-html", _typed(b"<html>" + bytes(range(32)) * 40, "text/html")),
    ("/latin1", _typed(LATIN1, "text/html; charset=iso-8859-1")),
    ("/meta-charset", _typed(META_1252, "text/html")),
    ("/base", _typed(BASE.encode(), "text/html")),
    ("/text", _typed(PLAIN.encode(), "text/plain; charset=utf-8")),
    ("/untyped-html", _typed(ARTICLE.encode(), None)),
    ("/status/", _status),
    ("/cookie", _cookie),
]
