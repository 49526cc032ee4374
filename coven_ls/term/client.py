"""A small LSP client for coven-ls, used by `coven-ls demo`, `run` and `chat`: it starts the
server as a subprocess (or attaches to a running `--tcp` one) and talks to it exactly as an editor
would (initialize, custom requests, `coven/event` notifications, permission requests)."""

from __future__ import annotations

import asyncio
import inspect
import os
import sys
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypedDict

from lsprotocol import types
from pygls.lsp.client import LanguageClient

from .. import __version__, protocol
from .agents import Offer, offers_of


class _PermissionDecision(TypedDict):
    allow: bool


class PermissionAnswer(_PermissionDecision, total=False):
    """The answer to `coven/requestPermission`; `message` tells the model why it was denied,
    `optionId` names the option picked of those an ACP agent offered."""

    message: str
    optionId: str


EventHandler = Callable[[dict[str, Any]], None]
DeltaHandler = Callable[[dict[str, Any]], None]
PermissionHandler = Callable[[dict[str, Any]], "PermissionAnswer | Awaitable[PermissionAnswer]"]


class EventLog:
    """The `coven/event` notifications a client received, in order, and waiting for one that
    came already or is still to come (the tests' client keeps its events in one too)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._changed = asyncio.Event()

    def record(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        self._changed.set()

    def touch(self) -> None:
        """Something else arrived (a delta): waiters look again."""
        self._changed.set()

    async def wait_for(
        self,
        predicate: Callable[[dict[str, Any]], bool],
        timeout: float | None = None,
        what: str = "",
    ) -> dict[str, Any]:
        """The first event, received already or still to come, that matches; after `timeout`
        seconds, asyncio.TimeoutError naming `what` and the last events received."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        seen = 0
        while True:
            for event in self.events[seen:]:
                if predicate(event):
                    return event
            seen = len(self.events)
            self._changed.clear()
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                tail = "\n".join(str(e) for e in self.events[-15:])
                raise asyncio.TimeoutError(
                    f"timed out after {timeout:g}s waiting for {what or 'an event'}; "
                    f"last events:\n{tail}"
                )
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except asyncio.TimeoutError:
                pass


def serve_coven(
    lsp: LanguageClient,
    on_event: EventHandler,
    on_delta: DeltaHandler,
    on_permission: Callable[[dict[str, Any]], Any],
) -> None:
    """Hand what the server sends a coven client to plain-dict handlers: `coven/event` and
    `coven/delta` notifications, and `coven/requestPermission` requests, whose handler returns
    the answer or an awaitable of it."""

    @lsp.feature(protocol.EVENT)
    def _event(params: Any) -> None:
        on_event(protocol.to_plain(params))

    @lsp.feature(protocol.DELTA)
    def _delta(params: Any) -> None:
        on_delta(protocol.to_plain(params))

    @lsp.feature(protocol.REQUEST_PERMISSION)
    async def _permission(params: Any) -> Any:
        answer = on_permission(protocol.to_plain(params))
        return await answer if inspect.isawaitable(answer) else answer


class CovenClient:
    def __init__(
        self,
        on_event: EventHandler,
        on_permission: PermissionHandler | None = None,
        *,
        handles_forks: bool = False,
        handles_review: bool = False,
        on_delta: DeltaHandler | None = None,
    ) -> None:
        self._lsp = LanguageClient("coven-ls-client", __version__)
        self._on_event = on_event
        self._on_delta = on_delta
        self._on_permission = on_permission
        self._handles_forks = handles_forks
        # Whether the caller decides reviewed children itself (coven/applyChanges,
        # coven/discardChanges); else the server asks with window/showMessageRequest.
        self._handles_review = handles_review
        self._log = EventLog()
        self._stderr_task: asyncio.Task[None] | None = None
        # Attached to a server someone else runs (`--tcp`): leaving only disconnects.
        self.attached = False
        self.events = self._log.events
        # The server's last stderr lines, to explain a server that fails.
        self.server_stderr: deque[str] = deque(maxlen=40)
        # The initialize answer's `capabilities.experimental.coven` (its protocol version, agents).
        self.server_coven: dict[str, Any] = {}
        serve_coven(self._lsp, self._event, self._delta, self._permission)

        @self._lsp.feature(types.WINDOW_LOG_MESSAGE)
        def _log(params: types.LogMessageParams) -> None:
            pass  # the per-event log lines duplicate what on_event renders

        @self._lsp.feature(types.WINDOW_SHOW_MESSAGE)
        def _show(params: types.ShowMessageParams) -> None:
            print(f"coven-ls: {params.message}", file=sys.stderr)

    async def start(
        self,
        root: Path,
        env: dict[str, str] | None = None,
        init_options: dict[str, Any] | None = None,
        server_command: list[str] | None = None,
        *,
        own_session: bool = False,
    ) -> None:
        """Start the server and initialize it. `own_session` puts the server in a session (and
        process group) of its own, so that a Ctrl+C in the terminal reaches this client only:
        the client decides what an interrupt means and shuts the server down in order."""
        command = server_command or [sys.executable, "-m", "coven_ls"]
        await self._lsp.start_io(
            *command, env={**os.environ, **(env or {})}, start_new_session=own_session
        )
        server = self._lsp._server
        if server is not None and server.stderr is not None:
            # Nobody else reads the server's stderr pipe; a full pipe would block its logging.
            self._stderr_task = asyncio.create_task(self._drain_stderr(server.stderr))
        await self._initialize(root, init_options or {})

    async def connect(self, host: str, port: int, root: Path, token: str) -> None:
        """Attach to a running `coven-ls --tcp` server (the one an editor uses, say), let in by
        its token. Nothing but the token is sent as initializationOptions, so that attaching
        changes none of the server's settings; `stop` then only disconnects."""
        self.attached = True
        await self._lsp.start_tcp(host, port)
        await self._initialize(root, {"token": token})

    async def _initialize(self, root: Path, init_options: dict[str, Any]) -> None:
        result = await self._lsp.initialize_async(
            types.InitializeParams(
                process_id=os.getpid(),
                root_uri=root.as_uri(),
                capabilities=types.ClientCapabilities(
                    experimental={
                        "coven": {
                            "permissions": self._on_permission is not None,
                            "forks": self._handles_forks,
                            "review": self._handles_review,
                        }
                    }
                ),
                initialization_options=init_options,
            )
        )
        experimental = protocol.to_plain(result.capabilities.experimental)
        coven = experimental.get("coven") if isinstance(experimental, dict) else None
        self.server_coven = coven if isinstance(coven, dict) else {}
        self._lsp.initialized(types.InitializedParams())

    @property
    def agents(self) -> list[Offer] | None:
        """The agents the server offers (None: it does not say)."""
        return offers_of(self.server_coven)

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        return protocol.to_plain(await self._lsp.protocol.send_request_async(method, params))

    async def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float | None = None
    ) -> dict[str, Any]:
        """The first event, received already or still to come, that matches."""
        return await self._log.wait_for(predicate, timeout)

    def _event(self, event: dict[str, Any]) -> None:
        self._log.record(event)
        self._on_event(event)

    def _delta(self, delta: dict[str, Any]) -> None:
        # Streamed pieces of text and thinking; not events (no seq, not kept in `events`).
        if self._on_delta is not None:
            self._on_delta(delta)

    def _permission(
        self, request: dict[str, Any]
    ) -> PermissionAnswer | Awaitable[PermissionAnswer]:
        if self._on_permission is None:
            return {"allow": False, "message": "This client does not grant tool use."}
        return self._on_permission(request)

    async def _drain_stderr(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            self.server_stderr.append(line.decode(errors="replace").rstrip())

    async def wait_server_exit(self) -> int | None:
        """The server's exit code, once it has exited (None if it never started); attached,
        once the server has closed the connection (None)."""
        if self.attached:
            # wait(), not gather(): giving up on waiting must not cancel the connection's reader.
            await asyncio.wait(self._lsp._async_tasks)
            return None
        server = self._lsp._server
        return None if server is None else await server.wait()

    async def stop(self) -> None:
        """shutdown + exit, then wait for the server process to end; attached, only close the
        connection (the server, its sessions and its other clients go on)."""
        if self.attached:
            writer = self._lsp.protocol.writer
            if writer is not None:
                writer.close()  # pygls' client notices the end of a TCP connection only so
            await asyncio.wait_for(self._lsp.stop(), 30)
            return
        server = self._lsp._server
        try:
            if server is not None and server.returncode is None:
                await asyncio.wait_for(self._lsp.shutdown_async(None), 60)
                self._lsp.exit(None)
        finally:
            if server is not None:
                # SIGTERM still closes every session in order; SIGKILL is the last resort.
                for stop in (None, server.terminate, server.kill):
                    if stop is not None and server.returncode is None:
                        stop()
                    try:
                        await asyncio.wait_for(server.wait(), 30)
                        break
                    except asyncio.TimeoutError:
                        continue
            await self._lsp.stop()
            if self._stderr_task is not None:
                self._stderr_task.cancel()
