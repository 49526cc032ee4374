"""Reading LSP frames (`Content-Length` headers, a blank line, the body) off a stream, hostile
input included.

pygls' own loop (`pygls.io_.run_async`) reads only `Content-Length: N\\r\\n` spelled exactly so,
skips any other header line, and reads a body only when N > 0. A header it does not recognise (a
lowercase `content-length`, a negative or non-numeric length) therefore leaves it reading the
bodies that follow as headers: every later message is lost, silently, with the connection
apparently open. It also buffers a body of any size the client announces. This reader tells a
frame it can skip (a body too large: its length is known) from framing that is lost for good
(the client and the server no longer agree on where a message ends), which ends the connection.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

MAX_BODY_BYTES = 32 * 2**20
"""The largest body read; a larger one is skipped unread and answered with InvalidRequest. No
coven/* request needs more (a prompt this long is far past any model's context), and each byte
read is held several times over while it is decoded."""

MAX_HEADER_BYTES = 8 * 2**10
"""A header section longer than this is not an LSP header (LSP has two short header fields)."""

_SKIP_CHUNK = 2**20


class FramingLost(Exception):
    """The stream cannot be read on: where the next message starts is unknown. The message says
    what was wrong, for the log and for the client's last error."""


class Oversized(Exception):
    """A body longer than MAX_BODY_BYTES was skipped; the stream goes on after it."""

    def __init__(self, length: int) -> None:
        super().__init__(length)
        self.length = length


class Reader(Protocol):
    async def readline(self) -> bytes: ...

    async def readexactly(self, n: int, /) -> bytes: ...


async def read_frame(reader: Reader) -> bytes | None:
    """The next message's body; None at the end of the stream between messages.

    Raises Oversized for a body that was skipped, FramingLost when the stream cannot be read on
    (after which it must not be read again)."""
    length = await _read_header(reader)
    if length is None:
        return None
    try:
        if length > MAX_BODY_BYTES:
            # Read and drop it piecewise: its length is known, so the next frame can be found
            # without holding the body in memory.
            left = length
            while left:
                chunk = min(left, _SKIP_CHUNK)
                await reader.readexactly(chunk)
                left -= chunk
            raise Oversized(length)
        return await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise FramingLost(f"the input ended inside a body of {length} bytes") from None


async def _read_header(reader: Reader) -> int | None:
    length: int | None = None
    size = 0
    while True:
        try:
            line = await reader.readline()
        except (ValueError, asyncio.LimitOverrunError):  # a line longer than the reader's limit
            raise FramingLost("a header line is too long") from None
        if not line:
            if size:
                raise FramingLost("the input ended inside a header")
            return None
        size += len(line)
        if size > MAX_HEADER_BYTES:
            raise FramingLost(f"the header is longer than {MAX_HEADER_BYTES} bytes")
        if not line.endswith(b"\n"):
            raise FramingLost("the input ended inside a header")
        text = line.rstrip(b"\r\n")
        if not text.strip():
            if size == len(line):
                size = 0  # a stray blank line between messages: nothing lost, read on
                continue
            if length is None:
                raise FramingLost("a header without Content-Length")
            return length
        name, colon, value = text.partition(b":")
        if not colon or not name.strip():
            raise FramingLost(f"a header line that is not 'Name: value': {_show(text)}")
        # Header names are case-insensitive (LSP borrows HTTP's header syntax).
        if name.strip().lower() != b"content-length":
            continue  # Content-Type, or a field of the client's own
        digits = value.strip()
        # bytes.isdigit is ASCII only: no sign, no '١٢'. Fifteen digits is already a petabyte.
        if not digits.isdigit() or len(digits) > 15:
            raise FramingLost(f"Content-Length {_show(digits)} is not a number of bytes")
        if length is not None and length != int(digits):
            raise FramingLost("two Content-Length headers that disagree")
        length = int(digits)


def _show(raw: bytes) -> str:
    text = raw.decode("ascii", "replace")
    return repr(text if len(text) <= 60 else text[:60] + "…")
