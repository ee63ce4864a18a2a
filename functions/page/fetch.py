"""One guarded GET: connect to the checked address, follow redirects by hand, stream a capped body.

The socket is pinned: urllib3 is handed the address the guard checked, never the name, and the name
goes only into the Host header, the TLS SNI and the certificate check. Nothing else leaves: no proxy
from the environment (urllib3 reads none), no cookies, no auth, no Referer, a fixed User-Agent.
One `Deadline` covers DNS, connect, TLS, every redirect and the body; when it passes, a watchdog
shuts the socket down, so a server that drips one byte a second cannot hold the fetch open.
"""

from __future__ import annotations

import heapq
import http.client
import socket
import ssl
import threading
import time
import zlib
from dataclasses import dataclass, field
from urllib.parse import urljoin

import certifi
import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.util.ssl_match_hostname import CertificateError

from . import guard
from .guard import IPAddress, Resolver, Target
from .refusals import Refusal

USER_AGENT = "agentfn-page/1.0 (+https://agentfn.dev/page)"
ACCEPT = "text/html,application/xhtml+xml,text/plain;q=0.9"
REDIRECTS = {301, 302, 303, 307, 308}
MAX_REDIRECTS = 5
READABLE = {"text/html", "application/xhtml+xml", "text/plain"}
CHUNK = 64 * 1024
MAX_HEADER_BYTES = 64 * 1024
SNIFF_BYTES = 512

# Magic numbers of what is refused by content, whatever the page claims to be.
SIGNATURES = [
    (b"%PDF-", "a PDF"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"\x00\x00\x01\x00", "an icon"),
    (b"PK\x03\x04", "a ZIP archive"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"%!PS", "a PostScript file"),
    (b"\x7fELF", "a program"),
    (b"\x00asm", "a WebAssembly module"),
    (b"OggS", "an Ogg file"),
    (b"ID3", "an MP3 file"),
    (b"Rar!", "a RAR archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"\xd0\xcf\x11\xe0", "an Office document"),
]
BINARY = set(range(0x00, 0x09)) | {0x0B} | set(range(0x0E, 0x1B)) | set(range(0x1C, 0x20))  # WHATWG sniffing


@dataclass
class Trace:
    """What the audit records of one fetch, filled in as it goes (also when it is refused)."""

    host: str
    final_host: str | None = None
    status: int | None = None
    bytes: int = 0
    redirects: int = 0


@dataclass(frozen=True)
class Fetched:
    url: str
    final_url: str
    media_type: str
    charset: str | None
    body: bytes = field(repr=False)


class Deadline:
    """One clock for the whole fetch; when it runs out, the watchdog shuts down every socket it watches."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds
        self.closed = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        _WATCHDOG.add(self)

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self.end

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
        if self.expired:
            self.expire()

    def expire(self) -> None:
        with self._lock:
            for sock in self._sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.closed = True


class _Watchdog:
    """One thread for every fetch of the process: it wakes at the earliest deadline (no thread per fetch)."""

    def __init__(self):
        self._heap: list[tuple[float, int, Deadline]] = []
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def add(self, deadline: Deadline) -> None:
        with self._wake:
            heapq.heappush(self._heap, (deadline.end, id(deadline), deadline))
            if self._thread is None or not self._thread.is_alive():  # also after a fork (gunicorn workers)
                self._thread = threading.Thread(target=self._run, name="page-deadlines", daemon=True)
                self._thread.start()
            self._wake.notify()

    def _run(self) -> None:
        with self._wake:
            while True:
                while self._heap and (self._heap[0][2].closed or self._heap[0][0] <= time.monotonic()):
                    _, _, deadline = heapq.heappop(self._heap)
                    if not deadline.closed:
                        deadline.expire()
                self._wake.wait(self._heap[0][0] - time.monotonic() if self._heap else None)


_WATCHDOG = _Watchdog()


class _Watched:
    deadline: Deadline

    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()  # type: ignore[misc]
        self.deadline.watch(sock)
        return sock


class PinnedHTTPConnection(_Watched, HTTPConnection):
    """An HTTP connection to one checked address."""


class PinnedHTTPSConnection(_Watched, HTTPSConnection):
    """An HTTPS connection to one checked address, verifying the certificate for the URL's name."""


class Fetcher:
    def __init__(self, resolver: Resolver, *, ports: frozenset[int], ca_file: str | None, deadline: float, max_bytes: int):
        self.resolver, self.ports, self.deadline, self.max_bytes = resolver, ports, deadline, max_bytes
        self.tls = ssl.create_default_context(cafile=ca_file or certifi.where())
        self.tls.minimum_version = ssl.TLSVersion.TLSv1_2

    def get(self, target: Target, trace: Trace) -> Fetched:
        """The page at `target` after at most 5 checked redirects, or a Refusal saying why not."""
        deadline = Deadline(self.deadline)
        try:
            return self._follow(target, trace, deadline)
        except Refusal:
            raise
        except (OSError, urllib3.exceptions.HTTPError, http.client.HTTPException, zlib.error) as error:
            if deadline.expired:
                raise _timeout() from None
            if isinstance(error, zlib.error):
                raise Refusal("upstream-error", "the page's compressed body is corrupt") from None
            raise Refusal("upstream-error", "the connection to the page broke off; try again later") from None
        finally:
            deadline.close()

    def _follow(self, target: Target, trace: Trace, deadline: Deadline) -> Fetched:
        first, seen = target, {target.url}
        while True:
            addresses = guard.check_target(target, self.resolver, deadline.left(), redirected=target is not first)
            conn, response = self._open(target, addresses, deadline)
            try:
                trace.status = response.status
                if response.status in REDIRECTS:
                    target = self._redirect(target, response, seen, trace)
                    continue
                if not 200 <= response.status < 300:
                    raise Refusal(
                        "upstream-error", f"the page answered HTTP {response.status}", upstream_status=response.status
                    )
                media_type, charset = _content_type(response)
                body = self._body(response, media_type, charset, trace)
                if deadline.expired:
                    raise _timeout()
                return Fetched(first.url, target.url, media_type or _guess(body), charset, body)
            finally:
                response.release_conn()
                conn.close()

    def _open(self, target: Target, addresses: list[IPAddress], deadline: Deadline):
        """Connect to the first checked address that answers, send the GET, read the response head."""
        last: Exception | None = None
        for address in addresses:
            conn = self._connection(target, address, deadline)
            try:
                conn.connect()
            except (ssl.SSLError, CertificateError, urllib3.exceptions.SSLError):
                conn.close()
                if deadline.expired:
                    raise _timeout() from None
                raise Refusal(
                    "upstream-error",
                    "the page's TLS certificate is not valid for its host name, or the TLS handshake failed",
                ) from None
            except (OSError, urllib3.exceptions.HTTPError) as error:
                conn.close()
                last = error
                if deadline.expired:
                    raise _timeout() from None
                continue
            try:
                conn.request(
                    "GET", target.target, headers=self._headers(target), preload_content=False, decode_content=False
                )
                response = conn.getresponse()
                if sum(len(k) + len(v) + 4 for k, v in response.headers.items()) > MAX_HEADER_BYTES:
                    raise _huge_headers()
            except http.client.LineTooLong:
                conn.close()
                raise _huge_headers() from None
            except http.client.HTTPException as error:
                conn.close()
                if "headers" in str(error):  # "got more than 100 headers"
                    raise _huge_headers() from None
                raise
            except BaseException:
                conn.close()
                raise
            return conn, response
        if deadline.expired or isinstance(last, (socket.timeout, urllib3.exceptions.ConnectTimeoutError)):
            raise _timeout()
        raise Refusal("upstream-error", "the page's server refused the connection or cannot be reached")

    def _connection(self, target: Target, address: IPAddress, deadline: Deadline) -> HTTPConnection:
        timeout = max(0.01, deadline.left())
        if target.scheme == "https":
            conn = PinnedHTTPSConnection(
                str(address), target.port, timeout=timeout, ssl_context=self.tls, server_hostname=target.host
            )
        else:
            conn = PinnedHTTPConnection(str(address), target.port, timeout=timeout)
        conn.deadline = deadline
        return conn

    @staticmethod
    def _headers(target: Target) -> dict[str, str]:
        # The whole request: nothing of the caller, nothing of this service but a fixed User-Agent.
        return {
            "Host": target.netloc,
            "User-Agent": USER_AGENT,
            "Accept": ACCEPT,
            "Accept-Encoding": "gzip, deflate",
            "Connection": "close",
        }

    def _redirect(self, current: Target, response, seen: set[str], trace: Trace) -> Target:
        location = response.headers.get("Location")
        if not location:
            raise Refusal("upstream-error", f"the page answered HTTP {response.status} without a Location")
        trace.redirects += 1
        if trace.redirects > MAX_REDIRECTS:
            raise Refusal("too-many-redirects", f"the page redirected more than {MAX_REDIRECTS} times")
        try:
            following = urljoin(current.url, location.strip())
        except ValueError:
            raise guard.bad_url("the page redirected to an invalid URL") from None
        try:
            target = guard.parse_url(following, self.ports)
        except Refusal as refusal:
            raise Refusal(refusal.kind, f"the page redirected to a URL that cannot be opened: {refusal.detail}") from None
        if current.scheme == "https" and target.scheme == "http":
            raise guard.bad_url("the page redirected from https to http; a downgrade is refused")
        if target.url in seen:
            raise Refusal("too-many-redirects", "the page redirects in a loop")
        seen.add(target.url)
        trace.final_host = target.host
        return target

    def _body(self, response, media_type: str | None, charset: str | None, trace: Trace) -> bytes:
        """The decompressed body, counted while streaming; refused at the cap or when it is not text."""
        length = response.headers.get("Content-Length", "")
        if length.isdigit() and int(length) > self.max_bytes:
            raise _too_large(self.max_bytes)
        decoder = _decoder(response.headers.get("Content-Encoding", ""))
        parts: list[bytes] = []
        size, sniffed = 0, False
        for chunk in response.stream(CHUNK, decode_content=False):
            data = decoder.feed(chunk, self.max_bytes - size) if decoder else chunk
            size += len(data)
            trace.bytes = size
            if size > self.max_bytes:
                raise _too_large(self.max_bytes)
            parts.append(data)
            if not sniffed and size >= SNIFF_BYTES:
                _sniff(b"".join(parts)[:SNIFF_BYTES], media_type, charset)
                sniffed = True
        if decoder:
            tail = decoder.finish(self.max_bytes - size)
            size += len(tail)
            trace.bytes = size
            parts.append(tail)
        body = b"".join(parts)
        if not sniffed:
            _sniff(body[:SNIFF_BYTES], media_type, charset)
        return body


class _Inflater:
    """gzip or deflate (zlib-wrapped or raw, as servers send both), never more than `room` bytes out."""

    def __init__(self, gzip: bool):
        self._gzip = gzip
        self._z = zlib.decompressobj(16 + zlib.MAX_WBITS) if gzip else None
        self._first = b""

    def feed(self, data: bytes, room: int) -> bytes:
        if self._z is None:  # deflate: decide between zlib and raw on the first bytes
            self._first += data
            if len(self._first) < 2:
                return b""
            try:
                self._z = zlib.decompressobj()
                return self._z.decompress(self._first, room + 1)
            except zlib.error:
                self._z = zlib.decompressobj(-zlib.MAX_WBITS)
                return self._z.decompress(self._first, room + 1)
        # Past room + 1 bytes the caller refuses the page, so what is left unconsumed never matters.
        return self._z.decompress(data, room + 1)

    def finish(self, room: int) -> bytes:
        if self._z is None:
            return self.feed(b"", room) if self._first else b""
        return self._z.flush()[: room + 1]


def _decoder(encoding: str) -> _Inflater | None:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip"):
        return _Inflater(gzip=True)
    if encoding == "deflate":
        return _Inflater(gzip=False)
    raise Refusal("upstream-error", "the page uses a content encoding other than gzip or deflate")


def _content_type(response) -> tuple[str | None, str | None]:
    value = response.headers.get("Content-Type", "").split(",")[0]
    media_type, *params = (p.strip() for p in value.split(";"))
    media_type = media_type.lower()
    if not media_type:
        return None, None
    if media_type not in READABLE:
        shown = media_type if len(media_type) <= 60 and media_type.isascii() else "another type"
        raise Refusal(
            "unsupported-type", f"the page is {shown}; only HTML, XHTML and plain text can be read", media_type=shown
        )
    charset = next((p.split("=", 1)[1].strip().strip("\"'") for p in params if p.lower().startswith("charset=")), None)
    return media_type, charset


def _sniff(head: bytes, media_type: str | None, charset: str | None) -> None:
    """Refuse binary content whatever the page declared (a PDF sent as text/html is still a PDF)."""
    for magic, what in SIGNATURES:
        if head.startswith(magic):
            raise Refusal("unsupported-type", f"the page's content is {what}; only HTML, XHTML and plain text can be read")
    if head[4:8] == b"ftyp" or (head.startswith(b"RIFF") and head[8:12] in (b"WEBP", b"WAVE", b"AVI ")):
        raise Refusal("unsupported-type", "the page's content is a media file; only HTML, XHTML and plain text can be read")
    wide = (charset or "").lower().startswith(("utf-16", "utf-32")) or head.startswith((b"\xff\xfe", b"\xfe\xff"))
    if not wide and any(b in BINARY for b in head):
        raise Refusal("unsupported-type", "the page's content is binary; only HTML, XHTML and plain text can be read")


def _guess(body: bytes) -> str:
    """The media type of a page that declared none (after `_sniff` found it is text)."""
    start = body[:256].lstrip().lower()
    markup = (b"<!doctype html", b"<html", b"<head", b"<body", b"<?xml", b"<!--", b"<title", b"<p", b"<div")
    return "text/html" if start.startswith(markup) else "text/plain"


def _timeout() -> Refusal:
    return Refusal("timeout", "the page did not arrive within the deadline; try a lighter page or later")


def _too_large(limit: int) -> Refusal:
    return Refusal("too-large", f"the page is larger than {limit} bytes (decompressed); try a smaller page", max_bytes=limit)


def _huge_headers() -> Refusal:
    return Refusal("upstream-error", "the page's response headers are too large")
