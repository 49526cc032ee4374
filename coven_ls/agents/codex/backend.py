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

from ...core.agent import (
    Abilities,
    AgentEvent,
    AgentSpec,
    AgentStartError,
    Conversation,
    Copy,
    Entry,
    New,
    PermissionAsker,
    Resume,
    TaskNotRunning,
)
from ...core.agent.outbox import Outbox
from ...core.fork.fence import SandboxSupport
from .. import binary
from ..binary import BinarySource
from .appserver import AppServer, AppServerGone, CodexRpcError
from .conversation import read_conversation
from .rollout import RolloutTail
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
# How often a minute an app-server that died is started again at once (after that, when a
# message needs it).
REVIVE_LIMIT = 3
# Long enough for a fork label or a first prompt's opening words; codex lists names on one line.
NAME_CHARS = 80
_SANDBOX_POLICY = {
    "read-only": {"type": "readOnly"},
    "workspace-write": {"type": "workspaceWrite"},
    "danger-full-access": {"type": "dangerFullAccess"},
}


# The variables a command reads for its temporary folder (mktemp, Python's tempfile, pip, npm).
TEMP_VARIABLES = ("TMPDIR", "TMP", "TEMP")


def sandbox_policy(sandbox: str, spec: AgentSpec) -> dict[str, Any]:
    """A turn's sandbox. One that may write its workspace writes only there (and in its own
    temporary folder) when the agent has folders it must not write (a worktree child): codex's
    workspace-write sandbox otherwise leaves /tmp and $TMPDIR writable too, and with them a
    repository that lies under them."""
    policy: dict[str, Any] = dict(_SANDBOX_POLICY[sandbox])
    if policy["type"] == "workspaceWrite" and spec.read_only_roots:
        policy.update(
            writableRoots=[spec.temp_dir] if spec.temp_dir else [],
            excludeSlashTmp=True,
            excludeTmpdirEnvVar=True,
        )
    return policy


def thread_config(spec: AgentSpec) -> dict[str, Any]:
    """Configuration a thread gets beside the user's own: an agent with a temporary folder of
    its own runs its commands with TMPDIR (TMP, TEMP) pointing there. Dotted keys, so that they
    join the user's `shell_environment_policy.set` rather than replace it; codex's sandbox
    decides what a command may write, not its environment (the app-server's TMPDIR would be the
    shared one)."""
    if not spec.temp_dir:
        return {}
    return {f"shell_environment_policy.set.{name}": spec.temp_dir for name in TEMP_VARIABLES}


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
        self._out = Outbox(f"codex thread {thread_id}")
        self._turn: str | None = None
        self._interrupt_due = False
        self._announced = False
        self._closed = False
        self._asking: set[anyio.CancelScope] = set()
        self.rollout: RolloutTail | None = None

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
        if method == "turn/completed" and self.rollout is not None:
            # A command codex reported no item for (it could not start it) is in the rollout;
            # translate.py shows the ones it has not seen (raw items may have said them).
            for item in self.rollout.new_tool_items():
                raw = {"threadId": self.thread_id, "item": item}
                for message in self.translator.feed("rawResponseItem/completed", raw):
                    self._put(message)
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
        await self._out.drained()
        allow = False
        with anyio.CancelScope() as scope:
            self._asking.add(scope)
            try:
                allow, _message, _ = await self._ask(name, tool_input, item_id)
            finally:
                self._asking.discard(scope)
        return {"decision": "accept" if allow else "decline"}

    def gone(self, error: AppServerGone) -> None:
        self._put(error)
        self._out.close()

    # --- Agent

    def _put(self, item: Any) -> None:
        self._out.put(item)

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
                    "sandboxPolicy": sandbox_policy(sandbox, self._spec),
                },
            )
        except (CodexRpcError, AppServerGone) as exc:
            raise AgentStartError(f"Codex could not start the turn: {exc}") from exc

    async def messages(self) -> AsyncGenerator[AgentEvent, None]:
        async for item in self._out:
            if isinstance(item, AppServerGone):
                raise AgentStartError(
                    f"{item} coven-ls starts it again: the next message goes on with this "
                    "conversation."
                )
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

    # codex starts no turn of its own to report a background command that ended.
    reports_ended_tasks = False

    async def stop_task(self, task_id: str) -> None:
        """Stop a command a turn left running (a background task); its end arrives as the
        task's end, `stopped`."""
        item = self.translator.background.get(task_id)
        if item is None:
            # This agent's translator knows only the commands its own turns left running: one
            # started before the agent was opened again (or its app-server started again) is
            # not codex's to stop any more.
            raise TaskNotRunning(
                f"Codex runs no background command '{task_id}' in thread {self.thread_id} (it "
                "ended, or it was started before the agent or its app-server was started again)."
            )
        self.translator.stopping.add(task_id)
        await self._terminate(task_id, item)

    async def _terminate(self, task_id: str, item: dict[str, Any]) -> None:
        try:
            answer = await self._server.request(
                "thread/backgroundTerminals/terminate",
                {"threadId": self.thread_id, "processId": str(item.get("processId") or "")},
            )
        except (CodexRpcError, AppServerGone) as exc:
            log.warning("codex thread %s: could not stop %s: %s", self.thread_id, task_id, exc)
            answer = {}
        if not answer.get("terminated"):
            # Not codex's any more (it ended meanwhile, or codex lost it): end it by its argv.
            self._server.kill_command(str(item.get("command") or ""))

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
        # Its background commands end with it, as a Claude process's background tasks do (the
        # session says they stopped): the shared app-server would keep them running.
        for task_id, item in list(self.translator.background.items()):
            if self._server.running:
                with anyio.move_on_after(5), anyio.CancelScope(shield=True):
                    await self._terminate(task_id, item)
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


async def _turn_ended_by(server: AppServer, thread_id: str, message_id: str) -> str | None:
    """The turn whose answer (its last agent message) is `message_id`, or None: codex forks
    after a whole turn (`lastTurnId`), so no other message can be a fork point."""
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
    return None


def _not_a_fork_point(message_id: str) -> str:
    return (
        f"A Codex session can be copied (forked, branched) only at the last message of a turn "
        f"(its answer, the last `text` event before a `turnResult`); '{message_id}' is not one."
    )


def _could_not_open(thread_id: str | None, detail: str) -> str:
    if "active writer" in detail:
        # Another codex (a `codex resume` in a terminal, another editor's server) has it open:
        # codex lets one process at a time write a thread.
        return (
            f"Codex thread {thread_id} is open in another codex process ({detail}). Close that "
            "codex (a `codex resume` in a terminal, or another editor's coven-ls) and send the "
            "message again, or branch this session to go on in a copy."
        )
    return f"Codex could not open the thread: {detail}"


async def _name(server: AppServer, thread_id: str, title: str) -> None:
    """Name the thread as coven shows it, so that the user's own `codex resume` list says what
    it is. A name is a courtesy: a codex that cannot take one still runs the thread."""
    name = " ".join(title.split())[:NAME_CHARS]
    try:
        await server.request("thread/name/set", {"threadId": thread_id, "name": name})
    except CodexRpcError as exc:
        log.warning("codex did not name thread %s: %s", thread_id, exc.detail)


class CodexBackend:
    """Codex sessions of one server, for one codex binary: one app-server process for all."""

    name = "codex"

    def __init__(self, codex_path: str | None, task_group: TaskGroup) -> None:
        self._explicit = codex_path
        self._tg = task_group
        self._checked: str | None = None
        self._server: AppServer | None = None
        self._lock = anyio.Lock()
        # How each thread was opened (cwd, policies, instructions): a new app-server resumes
        # it the same way.
        self._opened: dict[str, dict[str, Any]] = {}
        self._rollouts: dict[str, str] = {}  # thread -> its rollout file, as codex said
        self._revived: list[float] = []  # when app-servers that died were started again
        self._reviving: anyio.Event | None = None

    def abilities(self) -> Abilities:
        return Abilities("codex")

    async def find_abilities(self) -> Abilities:
        return self.abilities()

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
                server = AppServer(shutil.which(path) or path, self._tg, on_gone=self._died)
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

    def _died(self, gone: AppServerGone, held: list[str]) -> None:
        """The app-server ended by itself: start another at once and resume the threads the
        sessions held, so that the next message finds them loaded (each session is told through
        its agent's stream). Not more than REVIVE_LIMIT times a minute: one that keeps dying is
        started again only when a message needs it."""
        now = anyio.current_time()
        self._revived = [t for t in self._revived if now - t < 60.0]
        if len(self._revived) >= REVIVE_LIMIT:
            log.warning("%s; not started again at once (%d times this minute)", gone, REVIVE_LIMIT)
            return
        self._revived.append(now)
        self._reviving = anyio.Event()
        self._tg.start_soon(self._revive, held, name="codex app-server revival")

    async def _revive(self, threads: list[str]) -> None:
        reviving = self._reviving
        try:
            server = await self._app_server()
            for thread_id in threads:
                if thread_id in server.loaded or thread_id not in self._opened:
                    continue
                try:
                    result = await server.request(
                        "thread/resume",
                        {"threadId": thread_id, "excludeTurns": True, **self._opened[thread_id]},
                    )
                except CodexRpcError as exc:
                    log.warning("codex thread %s was not resumed: %s", thread_id, exc.detail)
                    continue
                model = result.get("model")
                server.loaded[thread_id] = model if isinstance(model, str) else None
            log.info("codex app-server started again; %d threads resumed", len(threads))
        except (AgentStartError, AppServerGone) as exc:
            log.warning("the codex app-server could not be started again: %s", exc)
        finally:
            if reviving is not None:
                reviving.set()
            if self._reviving is reviving:
                self._reviving = None

    async def open(self, spec: AgentSpec, ask_permission: PermissionAsker) -> CodexAgent:
        await anyio.to_thread.run_sync(self.check)
        if self._reviving is not None:
            await self._reviving.wait()  # its threads are being resumed: not twice
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
        config = thread_config(spec)
        if config:
            settings["config"] = config
        if spec.temp_dir:
            # Again at every open: after a restart, its worktree may have been made again.
            await anyio.to_thread.run_sync(
                lambda: Path(spec.temp_dir or "").mkdir(parents=True, exist_ok=True)
            )
        start = spec.start
        # codex chooses a new thread's id itself: a `New`'s or a `Copy`'s own id goes unused.
        try:
            if isinstance(start, New):
                # Raw Responses items too: a command codex could not start reports no item, only
                # the output its model is given (translate.py). Forks and resumes cannot ask for
                # them: their agent reads the rollout file at the turn's end instead.
                result = await server.request(
                    "thread/start", {**settings, "experimentalRawEvents": True}
                )
                thread_id = str(result["thread"]["id"])
            elif isinstance(start, Copy):
                # A new thread with the parent's whole conversation (codex makes no model
                # request for it), or up to the turn that `up_to` ends; the parent is left
                # as it was.
                fork: dict[str, Any] = {"threadId": start.conversation_id, "excludeTurns": True}
                if start.up_to:
                    turn = await _turn_ended_by(server, start.conversation_id, start.up_to)
                    if turn is None:
                        raise AgentStartError(_not_a_fork_point(start.up_to))
                    fork["lastTurnId"] = turn
                result = await server.request("thread/fork", {**fork, **settings})
                thread_id = str(result["thread"]["id"])
            elif start.conversation_id in server.loaded:
                # Still loaded in this process (a closed agent does not unload it): its
                # settings go with every turn.
                result = {"model": server.loaded[start.conversation_id]}
                thread_id = start.conversation_id
            else:
                result = await server.request(
                    "thread/resume",
                    {"threadId": start.conversation_id, "excludeTurns": True, **settings},
                )
                thread_id = start.conversation_id
        except CodexRpcError as exc:
            opened = None if isinstance(start, New) else start.conversation_id
            raise AgentStartError(_could_not_open(opened, exc.detail)) from exc
        except AppServerGone as exc:
            raise AgentStartError(str(exc)) from exc
        if spec.title and not isinstance(start, Resume):
            await _name(server, thread_id, spec.title)
        model = result.get("model") if isinstance(result.get("model"), str) else None
        server.loaded[thread_id] = model
        self._opened[thread_id] = settings
        agent = CodexAgent(server, thread_id, spec, model or spec.model, ask_permission)
        thread = result.get("thread")
        path = thread.get("path") if isinstance(thread, dict) else None
        if isinstance(path, str) and path:
            self._rollouts[thread_id] = path
        if thread_id in self._rollouts:
            agent.rollout = RolloutTail(self._rollouts[thread_id])
        server.listen(thread_id, agent)
        return agent

    def sandbox_support(self) -> SandboxSupport:
        """codex runs every command in its own sandbox (read-only or workspace-write, by the
        permission mode; a worktree child's narrowed to its worktree: `sandbox_policy`), but
        bypassPermissions' danger-full-access."""
        return SandboxSupport(by="codex", always_on=True, unfenced_modes=("bypassPermissions",))

    async def fork_point_problem(self, conversation: str, message_id: str) -> str | None:
        try:
            server = await self._app_server()
            found = await _turn_ended_by(server, conversation, message_id)
        except (AgentStartError, AppServerGone, CodexRpcError) as exc:
            # Not known here: the child's own start says what is wrong.
            log.warning("codex: could not look up the turns of %s: %s", conversation, exc)
            return None
        return None if found is not None else _not_a_fork_point(message_id)

    async def purge(self, conversations: list[Conversation]) -> None:
        """`thread/delete` each thread, in the order given (forks before the threads they were
        forked from: codex refuses to delete a thread that a fork's history still references)."""
        if not conversations:
            return
        server = await self._app_server()
        for conversation in conversations:
            thread_id = conversation.agent_session_id
            try:
                await server.request("thread/delete", {"threadId": thread_id})
            except CodexRpcError as exc:
                log.warning("codex could not delete thread %s: %s", thread_id, exc.detail)
            server.loaded.pop(thread_id, None)
            self._opened.pop(thread_id, None)

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
