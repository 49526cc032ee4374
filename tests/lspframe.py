"""LSP's base protocol for the raw clients of the tests (tests/rawlsp.py) and the benches
(bench/common.py): a message framed with its Content-Length header, and a frame read back
from a stream, blocking or asyncio. The clients that need no raw bytes use pygls' framing
(coven_ls/term/client.py, and pytest-lsp's client in tests/harness.py)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any


def frame(body: bytes) -> bytes:
    """`body` as it goes on the wire: its Content-Length header, then the bytes."""
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def frame_message(message: Any) -> bytes:
    """A JSON-RPC message (a dict, or anything else a hostile test sends) framed."""
    return frame(json.dumps(message).encode())


def _length(line: bytes, length: int | None) -> int | None:
    """The Content-Length a header line gives, else what was known already."""
    name, _, value = line.decode("ascii").partition(":")
    return int(value) if name.strip().lower() == "content-length" else length


def read_frame(readline: Callable[[], bytes], read: Callable[[int], bytes]) -> bytes | None:
    """The next frame's body from a blocking stream; None once the stream has ended. Headers
    other than Content-Length are skipped, and so is a header block without one."""
    length = None
    while line := readline():
        if line in (b"\r\n", b"\n"):
            if length is not None:
                return read(length)
            continue
        length = _length(line, length)
    return None


async def aread_frame(
    readline: Callable[[], Awaitable[bytes]], readexactly: Callable[[int], Awaitable[bytes]]
) -> bytes | None:
    """:func:`read_frame` on an asyncio stream."""
    length = None
    while line := await readline():
        if line in (b"\r\n", b"\n"):
            if length is not None:
                return await readexactly(length)
            continue
        length = _length(line, length)
    return None
