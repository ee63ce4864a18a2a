"""What a page's body is: its encoding undone within a cap, its declared type read, and its content sniffed.

Only HTML, XHTML and plain text are read; anything else is refused by what it declares or, whatever it
declares, by what it starts with (a PDF sent as text/html is still a PDF).
"""

from __future__ import annotations

import re
import zlib

from .refusals import Refusal

READABLE = {"text/html", "application/xhtml+xml", "text/plain"}
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
# WHATWG sniffing's binary data bytes: 0x00-0x08, 0x0B, 0x0E-0x1A, 0x1C-0x1F (one regex, not a loop over each byte)
BINARY = re.compile(rb"[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f]")


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


def decoder(encoding: str) -> _Inflater | None:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip"):
        return _Inflater(gzip=True)
    if encoding == "deflate":
        return _Inflater(gzip=False)
    raise Refusal("upstream-error", "the page uses a content encoding other than gzip or deflate")


def declared_type(response) -> tuple[str | None, str | None]:
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


def sniff(head: bytes, media_type: str | None, charset: str | None) -> None:
    """Refuse binary content whatever the page declared (a PDF sent as text/html is still a PDF)."""
    for magic, what in SIGNATURES:
        if head.startswith(magic):
            raise Refusal("unsupported-type", f"the page's content is {what}; only HTML, XHTML and plain text can be read")
    if head[4:8] == b"ftyp" or (head.startswith(b"RIFF") and head[8:12] in (b"WEBP", b"WAVE", b"AVI ")):
        raise Refusal("unsupported-type", "the page's content is a media file; only HTML, XHTML and plain text can be read")
    wide = (charset or "").lower().startswith(("utf-16", "utf-32")) or head.startswith((b"\xff\xfe", b"\xfe\xff"))
    if not wide and BINARY.search(head):
        raise Refusal("unsupported-type", "the page's content is binary; only HTML, XHTML and plain text can be read")


def guess(body: bytes) -> str:
    """The media type of a page that declared none (after `sniff` found it is text)."""
    start = body[:256].lstrip().lower()
    markup = (b"<!doctype html", b"<html", b"<head", b"<body", b"<?xml", b"<!--", b"<title", b"<p", b"<div")
    return "text/html" if start.startswith(markup) else "text/plain"
