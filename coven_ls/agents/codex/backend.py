"""Codex sessions: one thread each (a fork child: a `thread/fork` of its parent's), in the
app-server process the backend shares among them."""

from __future__ import annotations

import logging
import shutil
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from claude_agent_sdk import Message

from ...core.agent import AgentSpec, AgentStartError, PermissionAsker
from ...core.transcript import Entry
from .. import binary
from ..binary import BinarySource
from .appserver import AppServer, AppServerGone, CodexRpcError
from .conversation import read_conversation
from .translate import COMMAND_TOOL, EDIT_TOOL, Translator, command_input, file_change_input

log = logging.getLogger(__name__)

INSTALL_HINT = (
    "Install it with `pip install coven-ls[codex]` (the openai-codex-cli-bin wheel bundles it) "
    "or `npm install -g @openai/codex`, or point initializationOptions.codexPath (or the "
    "COVEN_CODEX_PATH environment variable) at a working `codex` binary."
)

# coven's permissionMode -> codex's (approvalPolicy, sandbox), set on every thread and turn
# whatever the user's own config says: "allow" then means the command runs with the access it
# asked for (on-request escalations run outside the sandbox). protocol.md has the table.
PERMISSIONS: dict[str | None, tuple[str, str]] = {
    None: ("on-request", "read-only"),
    "default": ("on-request", "read-only"),
    "acceptEdits": ("on-request", "workspace-write"),
    "auto": ("on-request", "workspace-write"),
    "plan": ("never", "read-only"),
    "dontAsk": ("never", "read-only"),
    "bypassPermissions": ("never", "danger-full-access"),
}
_SANDBOX_POLICY = {
    "read-only": {"type": "readOnly"},
    "workspace-write": {"type": "workspaceWrite"},
    "danger-full-access": {"type": "dangerFullAccess"},
}


def bundled_codex() -> Path | None:
    try:
        import codex_cli_bin  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        return None
    path = Path(codex_cli_bin.__file__).parent / "bin" / "codex"
    return path if path.is_file() else None


CODEX = BinarySource(
    name="codex",
    command="codex",
    option="codexPath",
    variable="COVEN_CODEX_PATH",
    wheel="the openai-codex-cli-bin wheel",
    bundled=bundled_codex,
    missing="No codex binary found (openai-codex-cli-bin is not installed, none on PATH).",
    install_hint=INSTALL_HINT,
    data={"agent": "codex"},
)


def resolve_codex(explicit: str | None) -> tuple[str, str]:
    """Pick the binary: (path, where the choice came from). Does not check that it runs."""
    return binary.resolve(CODEX, explicit)


def probe_codex(path: str, source: str) -> str:
    """Run `codex --version`; its output, or a CovenError that says what to install. Blocking."""
    return binary.probe(CODEX, path, source)


class CodexAgent:
    """One Codex thread, seen as the session's Agent."""

    def __init__(
        self,
        server: AppServer,
        thread_id: str,
        spec: AgentSpec,
        model: str | None,
        ask_permission: PermissionAsker,
    ) -> None:
        self._server = server
        self.thread_id = thread_id
        self._spec = spec
        self._mode: str | None = spec.permission_mode
        self._ask = ask_permission
        self.translator = Translator(thread_id, model=model)
        send, receive = anyio.create_memory_object_stream[Any](1000)
        self._out: MemoryObjectSendStream[Any] = send
        self._in: MemoryObjectReceiveStream[Any] = receive
        self._turn: str | None = None
        self._interrupt_due = False
        self._announced = False
        self._closed = False
        self._asking: set[anyio.CancelScope] = set()

    # --- ThreadListener

    def notify(self, method: str, params: dict[str, Any]) -> None:
        if method == "turn/started":
            self._turn = str((params.get("turn") or {}).get("id") or "") or None
            if self._interrupt_due and self._turn:
                self._interrupt_due = False
                self._server.task_group.start_soon(self._send_interrupt, self._turn)
        running = [
            str(item.get("command") or "")
            for item in self.translator.items.values()
            if item.get("type") == "commandExecution"
        ]
        for message in self.translator.feed(method, params):
            self._put(message)
        if method == "turn/completed":
            self._turn = None
            if (params.get("turn") or {}).get("status") == "interrupted":
                for command in running:
                    killed = self._server.kill_command(command)
                    log.info(
                        "codex thread %s: stopped %s (%d processes)",
                        self.thread_id,
                        command,
                        killed,
                    )
            # An interrupted turn withdraws its open questions without a serverRequest/resolved.
            for scope in list(self._asking):
                scope.cancel()

    async def server_request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        item_id = str(params.get("itemId") or "") or None
        if method == "item/commandExecution/requestApproval":
            name, tool_input = COMMAND_TOOL, command_input(params)
        elif method == "item/fileChange/requestApproval":
            item = self.translator.items.get(item_id or "") or {}
            name, tool_input = EDIT_TOOL, file_change_input(item)
            if params.get("reason"):
                tool_input["description"] = params["reason"]
        else:
            # Questions coven cannot put to the user yet (MCP elicitations, user input): no.
            log.info("codex asked %s, which coven-ls does not handle: declined", method)
            return {"decision": "decline"}
        await self._drained()
        allow = False
        with anyio.CancelScope() as scope:
            self._asking.add(scope)
            try:
                allow, _message = await self._ask(name, tool_input, item_id)
            finally:
                self._asking.discard(scope)
        return {"decision": "accept" if allow else "decline"}

    async def _drained(self) -> None:
        """Let the session publish what codex said before its question (the tool call the
        question is about comes first, as with Claude): codex sends both at once, and the
        session's reader and runner each need a turn of the event loop or two."""
        for _ in range(10):
            if not self._out.statistics().current_buffer_used:
                break
            await anyio.lowlevel.checkpoint()
        for _ in range(3):
            await anyio.lowlevel.checkpoint()

    def gone(self, error: AppServerGone) -> None:
        self._put(error)
        self._out.close()

    # --- Agent

    def _put(self, item: Any) -> None:
        if self._closed:
            return
        try:
            self._out.send_nowait(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # killed: nobody reads any more
        except anyio.WouldBlock:
            log.warning(
                "codex thread %s: the session is not reading; dropped %r", self.thread_id, item
            )

    async def send(self, text: str) -> None:
        if not self._announced:
            self._announced = True
            self._put(self.translator.started(self._spec.cwd, self._spec.permission_mode))
        approval, sandbox = PERMISSIONS.get(self._mode, PERMISSIONS[None])
        try:
            # The turn's id comes with turn/started (notify), which may arrive before this
            # answer or after it; an interrupt asked for in between waits for it.
            await self._server.request(
                "turn/start",
                {
                    "threadId": self.thread_id,
                    "input": [{"type": "text", "text": text}],
                    "cwd": self._spec.cwd,
                    "approvalPolicy": approval,
                    "sandboxPolicy": _SANDBOX_POLICY[sandbox],
                },
            )
        except (CodexRpcError, AppServerGone) as exc:
            raise AgentStartError(f"Codex could not start the turn: {exc}") from exc

    async def messages(self) -> AsyncGenerator[Message, None]:
        async for item in self._in:
            if isinstance(item, AppServerGone):
                raise AgentStartError(str(item))
            yield item

    async def interrupt(self) -> None:
        if self._turn is None:
            self._interrupt_due = True  # the turn has not started yet: interrupt it when it does
            return
        await self._send_interrupt(self._turn)

    async def _send_interrupt(self, turn: str) -> None:
        try:
            await self._server.request(
                "turn/interrupt", {"threadId": self.thread_id, "turnId": turn}
            )
        except CodexRpcError as exc:
            log.info("codex thread %s: interrupt: %s", self.thread_id, exc)

    async def stop_task(self, task_id: str) -> None:
        return None  # codex has no background tasks of its own

    async def set_permission_mode(self, mode: Any) -> None:
        self._mode = mode  # from the next turn on (turn/start carries it)

    async def close(self) -> None:
        """Leave the thread (it stays loaded in the shared app-server, which goes on); a turn
        still running is interrupted so that nothing acts after the session stopped listening."""
        if self._closed:
            return
        turn = self._turn
        if turn is not None and self._server.running:
            with anyio.move_on_after(5), anyio.CancelScope(shield=True):
                await self._send_interrupt(turn)
        self._closed = True
        for scope in list(self._asking):
            scope.cancel()
        self._server.forget(self.thread_id, self)
        self._out.close()

    def kill(self) -> None:
        # The process is shared: only this thread's reading stops; close() interrupts its turn.
        self._out.close()

    def stderr_tail(self) -> str:
        return self._server.stderr_tail()


async def _turn_ended_by(server: AppServer, thread_id: str, message_id: str) -> str:
    """The turn whose answer (its last agent message) is `message_id`: codex forks after a whole
    turn (`lastTurnId`), so no other message can be a fork point."""
    cursor: str | None = None
    for _page in range(100):
        params: dict[str, Any] = {"threadId": thread_id, "limit": 100, "itemsView": "summary"}
        if cursor:
            params["cursor"] = cursor
        page = await server.request("thread/turns/list", params)
        for turn in page.get("data") or []:
            answers = [i for i in turn.get("items") or [] if i.get("type") == "agentMessage"]
            if answers and answers[-1].get("id") == message_id:
                return str(turn["id"])
        cursor = page.get("nextCursor")
        if not cursor:
            break
    raise AgentStartError(
        f"A Codex session can be forked only at the last message of a turn (its answer); "
        f"'{message_id}' is not one."
    )


class CodexBackend:
    """Codex sessions of one server, for one codex binary: one app-server process for all."""

    name = "codex"

    def __init__(self, codex_path: str | None, task_group: TaskGroup) -> None:
        self._explicit = codex_path
        self._tg = task_group
        self._checked: str | None = None
        self._server: AppServer | None = None
        self._lock = anyio.Lock()

    def check(self) -> None:
        path, source = resolve_codex(self._explicit)
        if self._checked != path:
            version = probe_codex(path, source)
            log.info("using %s at %s (from %s)", version, path, source)
            self._checked = path

    async def _app_server(self) -> AppServer:
        async with self._lock:
            if self._server is None or not self._server.running:
                path = resolve_codex(self._explicit)[0]
                server = AppServer(shutil.which(path) or path, self._tg)
                try:
                    await server.ensure_started()
                except Exception as exc:
                    await server.aclose()
                    raise AgentStartError(
                        f"The codex app-server could not start: {exc}"
                        + (f" Its last output: {server.stderr_tail()}" if server.stderr else "")
                    ) from exc
                self._server = server
            return self._server

    async def open(self, spec: AgentSpec, ask_permission: PermissionAsker) -> CodexAgent:
        await anyio.to_thread.run_sync(self.check)
        server = await self._app_server()
        approval, sandbox = PERMISSIONS.get(spec.permission_mode, PERMISSIONS[None])
        settings: dict[str, Any] = {
            "cwd": spec.cwd,
            "approvalPolicy": approval,
            "sandbox": sandbox,
            # Questions go to the user through coven, never to codex's reviewer model.
            "approvalsReviewer": "user",
        }
        if spec.model:
            settings["model"] = spec.model
        if spec.append_system_prompt:
            settings["developerInstructions"] = spec.append_system_prompt
        try:
            if spec.resume is None:
                result = await server.request("thread/start", settings)
                thread_id = str(result["thread"]["id"])
            elif spec.fork_session:
                # A new thread with the parent's whole conversation (codex makes no model
                # request for it), or up to the turn that `resume_at` ends; the parent is left
                # as it was.
                fork: dict[str, Any] = {"threadId": spec.resume, "excludeTurns": True}
                if spec.resume_at:
                    fork["lastTurnId"] = await _turn_ended_by(server, spec.resume, spec.resume_at)
                result = await server.request("thread/fork", {**fork, **settings})
                thread_id = str(result["thread"]["id"])
            elif spec.resume in server.loaded:
                # Still loaded in this process (a closed agent does not unload it): its
                # settings go with every turn.
                result = {"model": server.loaded[spec.resume]}
                thread_id = spec.resume
            else:
                result = await server.request(
                    "thread/resume", {"threadId": spec.resume, "excludeTurns": True, **settings}
                )
                thread_id = spec.resume
        except CodexRpcError as exc:
            raise AgentStartError(f"Codex could not open the thread: {exc.detail}") from exc
        except AppServerGone as exc:
            raise AgentStartError(str(exc)) from exc
        model = result.get("model") if isinstance(result.get("model"), str) else None
        server.loaded[thread_id] = model
        agent = CodexAgent(server, thread_id, spec, model or spec.model, ask_permission)
        server.listen(thread_id, agent)
        return agent

    async def conversation(
        self, agent_session_id: str, cwd: str, up_to: str | None = None
    ) -> list[Entry]:
        server = await self._app_server()
        try:
            return await read_conversation(server, agent_session_id, up_to)
        except CodexRpcError as exc:
            raise AgentStartError(
                f"Codex could not read thread {agent_session_id}: {exc.detail}"
            ) from exc
        except AppServerGone as exc:
            raise AgentStartError(str(exc)) from exc

    async def aclose(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.aclose()
