"""One guarded GET: connect to the checked address, follow redirects by hand, stream a capped body.

The socket is pinned: urllib3 is handed the address the guard checked, never the name, and the name
goes only into the Host header, the TLS SNI and the certificate check. Nothing else leaves: no proxy
from the environment (urllib3 reads none), no cookies, no auth, no Referer, a fixed User-Agent.
One `Deadline` (`deadline`) covers DNS, connect, TLS, every redirect and the body; when it passes, a
watchdog shuts the socket down, so a server that drips one byte a second cannot hold the fetch open.
The body is decoded, typed and sniffed as it streams (`content`). urllib3 and the CA bundle are loaded on
the first fetch (or by the app's warm-up), not on the way to ready.
"""

from __future__ import annotations

import functools
import http.client
import os
import socket
import ssl
import threading
import zlib
from dataclasses import dataclass, field
from urllib.parse import urljoin

from . import content, guard
from .deadline import Deadline
from .guard import IPAddress, Resolver, Target
from .refusals import Refusal

USER_AGENT = "agentfn-page/1.0 (+https://agentfn.dev/page)"
ACCEPT = "text/html,application/xhtml+xml,text/plain;q=0.9"
REDIRECTS = {301, 302, 303, 307, 308}
MAX_REDIRECTS = 5
CHUNK = 64 * 1024
MAX_HEADER_BYTES = 64 * 1024


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


@functools.cache
def _connections() -> tuple[type, type]:
    """The pinned HTTP and HTTPS connection classes: urllib3's, whose sockets the fetch's deadline watches."""
    from urllib3.connection import HTTPConnection, HTTPSConnection

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

    return PinnedHTTPConnection, PinnedHTTPSConnection


class Fetcher:
    def __init__(self, resolver: Resolver, *, ports: frozenset[int], ca_file: str | None, deadline: float, max_bytes: int):
        self.resolver, self.ports, self.deadline, self.max_bytes = resolver, ports, deadline, max_bytes
        if ca_file and not os.path.isfile(ca_file):  # read on the first fetch: a wrong path still fails the start
            raise ValueError(f"the CA file {ca_file} does not exist")
        self.ca_file = ca_file
        self._tls: ssl.SSLContext | None = None
        self._tls_made = threading.Lock()

    def warm_up(self) -> None:
        """Load what the first fetch would: urllib3, the CA bundle, dnspython."""
        _connections()
        self.tls  # noqa: B018
        self.resolver.warm_up()

    @property
    def tls(self) -> ssl.SSLContext:
        with self._tls_made:
            if self._tls is None:
                import certifi

                tls = ssl.create_default_context(cafile=self.ca_file or certifi.where())
                tls.minimum_version = ssl.TLSVersion.TLSv1_2
                self._tls = tls
            return self._tls

    def get(self, target: Target, trace: Trace) -> Fetched:
        """The page at `target` after at most 5 checked redirects, or a Refusal saying why not."""
        import urllib3

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
                media_type, charset = content.declared_type(response)
                body = self._body(response, media_type, charset, trace)
                if deadline.expired:
                    raise _timeout()
                return Fetched(first.url, target.url, media_type or content.guess(body), charset, body)
            finally:
                response.release_conn()
                conn.close()

    def _open(self, target: Target, addresses: list[IPAddress], deadline: Deadline):
        """Connect to the first checked address that answers, send the GET, read the response head."""
        import urllib3
        from urllib3.util.ssl_match_hostname import CertificateError

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

    def _connection(self, target: Target, address: IPAddress, deadline: Deadline):
        timeout = max(0.01, deadline.left())
        pinned_http, pinned_https = _connections()
        if target.scheme == "https":
            conn = pinned_https(
                str(address), target.port, timeout=timeout, ssl_context=self.tls, server_hostname=target.host
            )
        else:
            conn = pinned_http(str(address), target.port, timeout=timeout)
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
        decoder = content.decoder(response.headers.get("Content-Encoding", ""))
        parts: list[bytes] = []
        size, sniffed = 0, False
        for chunk in response.stream(CHUNK, decode_content=False):
            data = decoder.feed(chunk, self.max_bytes - size) if decoder else chunk
            size += len(data)
            trace.bytes = size
            if size > self.max_bytes:
                raise _too_large(self.max_bytes)
            parts.append(data)
            if not sniffed and size >= content.SNIFF_BYTES:
                content.sniff(b"".join(parts)[: content.SNIFF_BYTES], media_type, charset)
                sniffed = True
        if decoder:
            tail = decoder.finish(self.max_bytes - size)
            size += len(tail)
            trace.bytes = size
            parts.append(tail)
        body = b"".join(parts)
        if not sniffed:
            content.sniff(body[: content.SNIFF_BYTES], media_type, charset)
        return body


def _timeout() -> Refusal:
    return Refusal("timeout", "the page did not arrive within the deadline; try a lighter page or later")


def _too_large(limit: int) -> Refusal:
    return Refusal("too-large", f"the page is larger than {limit} bytes (decompressed); try a smaller page", max_bytes=limit)


def _huge_headers() -> Refusal:
    return Refusal("upstream-error", "the page's response headers are too large")
