"""The token a `--tcp` server asks of every connection, and the gate that checks it.

Whoever connects to a coven-ls socket can start agents that run tools as the server's user, and
any local user can connect to a TCP port: so a connection's first message must be an
`initialize` carrying `initializationOptions.token`. The gate reads that one frame itself, before
pygls or the hub see anything, so that a refused connection never gets a session, a store or an
agent. The token is taken out of the message it hands on: nothing after the gate (pygls' debug
log, the settings, anything echoed back) ever holds it.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..protocol import ErrorCode
from ..protocol.tokens import (
    TOKEN_ENV,
    read_token_file,
    token_file_path,
)

log = logging.getLogger(__name__)

# Generous for any editor's `initialize` (VS Code's is ~10 KiB), small enough that a stranger
# cannot make the server hold much before it is refused.
MAX_FIRST_FRAME = 4 * 2**20
MAX_HEADER_LINES = 16
# A connection that says nothing is refused after this long instead of holding a socket forever.
FIRST_MESSAGE_TIMEOUT = 30.0


@dataclass
class TcpAuth:
    """The token of a `--tcp` server and, for a generated one, the file it is written to."""

    token: str
    generated: bool = False
    written_to: Path | None = field(default=None, init=False)

    def announce(self, port: int) -> str:
        """What follows `listening on HOST:PORT` on stderr: a generated token and the file that
        holds it (written now, since only now is the port known); nothing for a token the user
        chose, which they already have."""
        if not self.generated:
            return ""
        self.written_to = write_token_file(token_file_path(port), self.token)
        return f" token {self.token} token-file {self.written_to}"

    def forget(self) -> None:
        """Remove the generated token file: the token dies with the server."""
        if self.written_to is not None:
            self.written_to.unlink(missing_ok=True)
            self.written_to = None


def resolve_token(token_file: str | None, environ: dict[str, str] | None = None) -> TcpAuth:
    """The token, from `--token-file`, else `$COVEN_TOKEN`, else a new one. `$COVEN_TOKEN` is
    taken out of `environ` (the process's own by default): agent processes inherit the server's
    environment, and a model has no business reading the door's key."""
    env: Any = os.environ if environ is None else environ
    from_env = env.pop(TOKEN_ENV, None)
    if token_file is not None:
        return TcpAuth(read_token_file(token_file))
    if from_env and from_env.strip():
        return TcpAuth(from_env.strip())
    return TcpAuth(secrets.token_urlsafe(32), generated=True)


def write_token_file(path: Path, token: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # A file left by an earlier server on this port is replaced, never written through: it
    # could be a link someone else placed there.
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return path


# --- the gate ------------------------------------------------------------------------------------


class _Refused(Exception):
    def __init__(self, message: str, msg_id: Any = None) -> None:
        super().__init__(message)
        self.message = message
        valid = isinstance(msg_id, (str, int)) and not isinstance(msg_id, bool)
        self.msg_id = msg_id if valid else None  # JSON-RPC: null when the id is unusable


class ReplayReader:
    """The connection's reader with the (token-free) first frame put back in front of it."""

    def __init__(self, first: bytes, rest: asyncio.StreamReader) -> None:
        self._buffer = first
        self._rest = rest

    def _take(self, n: int) -> bytes:
        data, self._buffer = self._buffer[:n], self._buffer[n:]
        return data

    async def readline(self) -> bytes:
        if not self._buffer:
            return await self._rest.readline()
        end = self._buffer.find(b"\n")
        if end >= 0:
            return self._take(end + 1)
        return self._take(len(self._buffer)) + await self._rest.readline()

    async def readexactly(self, n: int) -> bytes:
        head = self._take(n)
        return head + await self._rest.readexactly(n - len(head)) if len(head) < n else head

    async def read(self, n: int = -1) -> bytes:
        if self._buffer:
            return self._take(len(self._buffer) if n < 0 else n)
        return await self._rest.read(n)

    def at_eof(self) -> bool:
        return not self._buffer and self._rest.at_eof()


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    length = None
    for _ in range(MAX_HEADER_LINES):
        line = await reader.readline()
        if not line:
            raise _Refused("The connection ended before its first message.")
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length" and value.strip().isdigit():
            length = int(value.strip())
    else:
        raise _Refused("The first message's headers do not end.")
    if length is None:
        raise _Refused("The first message has no Content-Length header.")
    if length > MAX_FIRST_FRAME:
        raise _Refused(f"The first message is larger than {MAX_FIRST_FRAME} bytes.")
    return await reader.readexactly(length)


def _check(body: bytes, token: str) -> dict[str, Any]:
    """The initialize request, if it carries the right token; its `token` is taken out."""
    try:
        message = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise _Refused("The first message is not JSON.") from None
    if not isinstance(message, dict):
        raise _Refused("The first message is not a JSON-RPC request.")
    msg_id = message.get("id")
    if message.get("method") != "initialize" or "id" not in message:
        raise _Refused(
            "This coven-ls server takes nothing before an initialize request with "
            "initializationOptions.token.",
            msg_id,
        )
    params = message.get("params")
    options = params.get("initializationOptions") if isinstance(params, dict) else None
    given = options.pop("token", None) if isinstance(options, dict) else None
    if not isinstance(given, str) or not given:
        raise _Refused(
            "This coven-ls server (--tcp) needs initializationOptions.token in initialize: the "
            "token it printed when it started (also in the file it named), or the one given "
            "with --token-file or $COVEN_TOKEN.",
            msg_id,
        )
    if not hmac.compare_digest(given.encode(), token.encode()):
        raise _Refused(
            "Wrong initializationOptions.token for this coven-ls server: use the one it printed "
            "when it started (also in the file it named), or the one given with --token-file "
            "or $COVEN_TOKEN.",
            msg_id,
        )
    return message


async def authenticate(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, token: str
) -> ReplayReader | None:
    """Let a connection in only if its first message is an `initialize` with the right token:
    the reader to serve it from (that message first, without its token), or None once it has
    been answered with an Unauthorized error (the caller then closes it)."""
    try:
        body = await asyncio.wait_for(_read_frame(reader), FIRST_MESSAGE_TIMEOUT)
        message = _check(body, token)
    except (_Refused, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
        if isinstance(exc, _Refused):
            refusal = exc
        elif isinstance(exc, asyncio.TimeoutError):
            refusal = _Refused(f"No initialize request within {FIRST_MESSAGE_TIMEOUT:g}s.")
        else:  # a body cut short, a header line beyond the reader's limit
            refusal = _Refused("The first message could not be read.")
        log.warning(
            "refused a connection from %s: %s", writer.get_extra_info("peername"), refusal.message
        )
        error = {"code": int(ErrorCode.Unauthorized), "message": refusal.message}
        reply = json.dumps({"jsonrpc": "2.0", "id": refusal.msg_id, "error": error}).encode()
        try:
            writer.write(b"Content-Length: %d\r\n\r\n" % len(reply) + reply)
            await writer.drain()
        except ConnectionError:
            pass  # gone already: there is no one to tell
        return None
    body = json.dumps(message).encode()
    return ReplayReader(b"Content-Length: %d\r\n\r\n" % len(body) + body, reader)
