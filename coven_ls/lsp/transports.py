"""The transports: an LSP server on stdio (one editor) or on TCP (any number of editors, each
let in by a token), each connection served until it ends, every agent process closed on the way
out.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from typing import Any

import anyio
from pygls.exceptions import JsonRpcInvalidRequest, JsonRpcParseError

from ..cluster import make_cluster
from ..core.agent_registry import AgentRegistry
from ..core.hub import Hub
from . import framing
from .auth import TcpAuth, authenticate
from .jsonrpc import CovenProtocol
from .server import create_server

log = logging.getLogger(__name__)


# The readers' line limit (headers are far shorter: framing.MAX_HEADER_BYTES), and what they
# buffer before they stop reading from the client until the server catches up.
_READ_LIMIT = 2**16


async def _stdin_reader() -> Any:
    """An asyncio reader on stdin that needs no thread, so that nothing blocks interpreter exit
    while the editor keeps the pipe open."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_READ_LIMIT)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(sys.stdin.fileno(), "rb", 0)
    )
    return reader


async def _serve(reader: framing.Reader, protocol_: CovenProtocol) -> None:
    """Read messages until the stream ends or its framing is lost (then the client is told why,
    with a last ParseError, and the connection ends: no later byte can be trusted)."""
    while True:
        try:
            body = await framing.read_frame(reader)
        except framing.Oversized as big:
            protocol_._answer_error(
                None,
                JsonRpcInvalidRequest(
                    f"Invalid request: a message of {big.length} bytes is larger than the "
                    f"{framing.MAX_BODY_BYTES} bytes coven-ls reads; it was skipped unread"
                ),
            )
            continue
        except ConnectionError as exc:  # a TCP client that went away without closing in order
            log.info("the client's connection broke: %s", exc)
            return
        except framing.FramingLost as lost:
            log.error("closing the connection: its framing is lost (%s)", lost)
            protocol_._answer_error(
                None,
                JsonRpcParseError(
                    f"Parse error: {lost}; the framing of the input is lost, so coven-ls closes "
                    "the connection. Frame each message as 'Content-Length: N' (its body's "
                    "length in bytes), an empty line, and the body."
                ),
            )
            return
        if body is None:
            return
        try:
            protocol_.receive(body)
        except Exception:  # a bug of ours: the connection, and every other request, goes on
            log.exception("could not handle a message")


async def _run_connection(hub: Hub, reader: Any, writer: Any) -> int:
    """Serve one connection until it ends (EOF, lost framing or `exit`); returns the LSP exit
    code."""
    exit_code = 1  # LSP: exit without shutdown is an error
    scope = anyio.CancelScope()

    def on_exit(code: int) -> None:
        nonlocal exit_code
        exit_code = code
        scope.cancel()

    server = create_server(hub, on_exit)
    server.protocol.set_writer(writer)
    try:
        with scope:
            await _serve(reader, server.protocol)
    finally:
        hub.detach(server)
        server.protocol.connection_lost()
    return exit_code


async def _cancel_on_signal(scope: anyio.CancelScope) -> None:
    """SIGTERM/SIGINT/SIGHUP end the server in order, like `exit`: an editor that kills its
    server must not leave agent processes running."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            log.info("received %s; closing every session", signal.Signals(signum).name)
            scope.cancel()
            return


async def serve_stdio(agents: AgentRegistry) -> int:
    from pygls.io_ import StdoutWriter

    # Claude Code refuses to start when it thinks it is nested in another Claude Code session.
    for name in ("CLAUDECODE", "CLAUDE_CODE_SESSION_ID"):
        os.environ.pop(name, None)
    code = 1
    async with anyio.create_task_group() as tg:
        hub = Hub(tg, agents, make_cluster)
        try:
            with anyio.CancelScope() as serving:
                tg.start_soon(_cancel_on_signal, serving)
                reader = await _stdin_reader()
                code = await _run_connection(hub, reader, StdoutWriter(sys.stdout.buffer))
        finally:
            # The editor is gone (exit, EOF or a signal): no agent process may outlive it.
            with anyio.CancelScope(shield=True):
                await hub.close_all()
            tg.cancel_scope.cancel()
    return code


async def serve_tcp(host: str, port: int, auth: TcpAuth, agents: AgentRegistry) -> None:
    """Serve LSP on a socket, to any number of clients at once, until cancelled. Sessions outlive
    the connections that started them. Only connections that open with `auth`'s token get in."""
    for name in ("CLAUDECODE", "CLAUDE_CODE_SESSION_ID"):
        os.environ.pop(name, None)

    class _Writer:
        def __init__(self, w: asyncio.StreamWriter) -> None:
            self._w = w

        def write(self, data: bytes) -> None:
            self._w.write(data)

        def close(self) -> None:
            self._w.close()

    async with anyio.create_task_group() as tg:
        hub = Hub(tg, agents, make_cluster)

        async def connection(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            log.info("client connected from %s", w.get_extra_info("peername"))
            try:
                if (authenticated := await authenticate(r, w, auth.token)) is not None:
                    await _run_connection(hub, authenticated, _Writer(w))
            finally:
                w.close()
                log.info("client disconnected")

        srv = await asyncio.start_server(connection, host, port, limit=_READ_LIMIT)
        host_, port_ = srv.sockets[0].getsockname()[:2]
        # On stderr, one line, so that whoever started us with port 0 can learn the port.
        announce = auth.announce(port_)
        print(f"coven-ls listening on {host_}:{port_}{announce}", file=sys.stderr, flush=True)
        try:
            with anyio.CancelScope() as serving:
                tg.start_soon(_cancel_on_signal, serving)
                async with srv:
                    await srv.serve_forever()
        finally:
            auth.forget()
            with anyio.CancelScope(shield=True):
                await hub.close_all()
            tg.cancel_scope.cancel()
