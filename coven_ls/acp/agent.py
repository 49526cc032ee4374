"""coven-ls as an ACP agent: ACP's methods over the same hub (and store) as the LSP server. The
agent is also the hub's client: it turns events into `session/update`s and the hub's questions
(a tool's permission, a fork's approval, a child's changes) into `session/request_permission`."""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from acp import (
    PROTOCOL_VERSION,
    RequestError,
    text_block,
    tool_content,
    update_agent_message_text,
)
from acp.interfaces import Client as AcpClient
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    CloseSessionResponse,
    ForkSessionResponse,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PermissionOption,
    PromptCapabilities,
    PromptResponse,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
    SessionConfigOptionBoolean,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionForkCapabilities,
    SessionInfo,
    SessionListCapabilities,
    SessionMode,
    SessionModeState,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
    ToolCallUpdate,
)

from .. import __version__, protocol
from ..core.agent import Decision
from ..core.fork.estimate import fork_estimate
from ..core.hub import ClientSettings, Hub
from ..core.session import Session
from ..core.store import Store
from ..protocol.describe import fork_cost
from ..protocol.events import Delta, StatusChanged, TurnResult
from ..protocol.tree import decode
from ..protocol.types import AgentName, ForkChoices, ForkContext
from ..protocol.types import PermissionOption as OfferedOption
from . import updates

log = logging.getLogger(__name__)

# coven's permission modes (each agent's own mapping: protocol.md), as ACP session modes.
MODES = [
    SessionMode(id="default", name="Ask", description="Ask before each tool that changes anything"),
    SessionMode(id="acceptEdits", name="Accept edits", description="Edit files without asking"),
    SessionMode(id="plan", name="Plan", description="Plan only: no edits, no commands"),
    SessionMode(id="bypassPermissions", name="Bypass", description="Never ask (not as root)"),
]
# A prompt's answer waits until its session rests in one of these (a fork's results turn
# included: `forking` and `reviewing` are not rest).
AT_REST = frozenset({"idle", "failed", "closed", "interrupted"})
ALLOW_ONCE, ALLOW_ALWAYS, REJECT = "allow_once", "allow_always", "reject_once"
AGENT_OPTION = "agent"  # the session config option that picks the agent
# The one that picks how the children of the forks approved in a session start.
FORK_CONTEXT_OPTION = "forkContext"
FORK_CONTEXTS: dict[ForkContext, tuple[str, str]] = {
    "inherit": ("Inherit", "resuming this conversation"),
    "fresh": ("Fresh", "starting afresh with only their task"),
    "transcript": ("Transcript", "given this conversation written out"),
}


class CovenAgent:
    """One ACP connection's agent (the `acp.Agent` interface) and the hub's client for it."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.conn: AcpClient | None = None
        # hub.Client: where sessions start by default (ACP names a cwd with every session).
        self.settings = ClientSettings.parse({}, os.getcwd())
        self.store: Store | None = None
        self._pending: dict[str, _Pending] = {}  # sessions with no prompt yet
        # The forkContext chosen in a session (for this connection; absent: inherit).
        self._fork_contexts: dict[str, ForkContext] = {}
        self._open: set[str] = set()  # sessions whose updates this client gets
        self._views: dict[str, updates.SessionView] = {}
        self._rests: dict[str, asyncio.Future[str]] = {}  # session id -> its prompt's answer
        self._always: set[tuple[str, str]] = set()  # (asked-in session, tool) allowed for good
        self._cancelled: set[str] = set()  # sessions whose running prompt was cancelled
        self._updates: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._sender: asyncio.Task[None] | None = None

    def on_connect(self, conn: AcpClient) -> None:
        self.conn = conn
        # Updates go out in order, one at a time, from one task: events arrive synchronously.
        self._sender = asyncio.get_running_loop().create_task(self._send_updates())
        self.hub.attach(self)

    async def _send_updates(self) -> None:
        while True:
            session_id, update = await self._updates.get()
            try:
                assert self.conn is not None
                await self.conn.session_update(session_id=session_id, update=update)
            except Exception:  # a client that is gone: the next read of stdin ends us
                log.warning("could not send an update to the ACP client", exc_info=True)
            finally:
                self._updates.task_done()

    def _view(self, session_id: str) -> updates.SessionView:
        return self._views.setdefault(session_id, updates.SessionView())

    # --- ACP: the agent's methods --------------------------------------------------------------

    async def initialize(
        self, protocol_version: int, client_capabilities: Any = None, client_info: Any = None,
        **kwargs: Any,
    ) -> InitializeResponse:  # fmt: skip
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(embedded_context=True),
                session_capabilities=SessionCapabilities(
                    list=SessionListCapabilities(),
                    close=SessionCloseCapabilities(),
                    fork=SessionForkCapabilities(),
                ),
            ),
            agent_info=Implementation(name="coven-ls", title="coven-ls", version=__version__),
        )

    async def authenticate(self, method_id: str, **kwargs: Any) -> None:
        return None  # the CLI authenticates itself (its login or ANTHROPIC_API_KEY)

    async def new_session(
        self,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: Any = None,
        **kwargs: Any,
    ) -> NewSessionResponse:
        await self._open_workspace(cwd)
        session_id = f"s-{uuid.uuid4().hex[:12]}"
        agent = self.settings.options.agent
        self._pending[session_id] = _Pending(cwd, "default", agent)
        self._open.add(session_id)
        return NewSessionResponse(
            session_id=session_id,
            modes=_modes("default"),
            config_options=self._options(agent, self._fork_context(session_id)),
        )

    async def load_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: Any = None,
        additional_directories: list[str] | None = None,
        **kwargs: Any,
    ) -> LoadSessionResponse:
        await self._open_workspace(cwd)
        session = self._session(session_id)
        view = self._view(session_id)
        for event in await session.events_after(0):
            for update in updates.event_updates(event, view, replay=True):
                await self._send_now(session_id, update)
        self._open.add(session_id)
        return LoadSessionResponse(
            modes=_modes(session.config.permission_mode or "default"),
            config_options=self._options(session.config.agent, self._fork_context(session_id)),
        )

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> ListSessionsResponse:
        if cwd is not None:
            await self._open_workspace(cwd)
        listed = []
        for info in self.hub.list_sessions():
            session = self.hub.sessions.get(info.sessionId)
            where = session.config.cwd if session is not None else cwd or ""
            if cwd is not None and os.path.abspath(where) != os.path.abspath(cwd):
                continue
            branched = info.branchedFrom is not None
            meta = {"coven": {"status": info.status, "parentId": info.parentId,
                              "forkId": info.forkId, "label": info.label,
                              "branch": branched}}  # fmt: skip
            listed.append(
                SessionInfo(session_id=info.sessionId, cwd=where, title=info.title, field_meta=meta)
            )
        return ListSessionsResponse(sessions=listed)

    async def set_session_mode(
        self, session_id: str, mode_id: str, **kwargs: Any
    ) -> SetSessionModeResponse:
        if mode_id not in {m.id for m in MODES}:
            raise RequestError.invalid_params({"modeId": mode_id, "modes": [m.id for m in MODES]})
        if session_id in self._pending:
            self._pending[session_id].mode = mode_id
            return SetSessionModeResponse()
        try:
            await self._session(session_id).set_permission_mode(mode_id)  # type: ignore[arg-type]
        except protocol.CovenError as exc:  # an ACP agent with no matching mode, say
            raise RequestError(exc.code, exc.message, exc.data) from exc
        return SetSessionModeResponse()

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        text = _prompt_text(prompt)
        if not text.strip():
            raise RequestError.invalid_params({"prompt": "has no text"})
        if session_id in self._rests:
            raise RequestError.invalid_request(
                {"sessionId": session_id, "reason": "a prompt of this session is still running"}
            )
        rest: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._rests[session_id] = rest
        try:
            if session_id in self._pending:
                pending = self._pending.pop(session_id)
                params = protocol.StartSessionParams(
                    prompt=text,
                    cwd=pending.cwd,
                    permissionMode=pending.mode,  # type: ignore[arg-type]
                    agent=pending.agent,
                )
                try:
                    session = await self.hub.start_session(self, params, session_id=session_id)
                except protocol.CovenError:
                    self._pending[session_id] = pending
                    raise
                self._queue(session_id, updates.title_update(session.title))
            else:
                self._session(session_id).send(text)
            stop = await rest
        except protocol.CovenError as exc:
            raise RequestError(exc.code, exc.message, exc.data) from exc
        finally:
            self._rests.pop(session_id, None)
        return PromptResponse(stop_reason=stop)  # type: ignore[arg-type]

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self.hub.sessions.get(session_id)
        if session is None:
            return  # a notification: nothing to answer
        self._cancelled.add(session_id)
        await self.hub.cancel(session)

    async def close_session(self, session_id: str, **kwargs: Any) -> CloseSessionResponse:
        if self._pending.pop(session_id, None) is None:
            await self.hub.close(self._session(session_id))
        self._open.discard(session_id)
        return CloseSessionResponse()

    async def fork_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: Any = None,
        **kwargs: Any,
    ) -> ForkSessionResponse:
        """ACP's fork (one copy of a conversation) is a coven branch: a new session holding the
        parent's whole conversation, in the parent's folder, ready for `session/prompt`. The
        parent is left as it is and never hears of it."""
        session = self._session(session_id)
        try:
            branch = await self.hub.branch(self, session, None, None)
        except protocol.CovenError as exc:
            raise RequestError(exc.code, exc.message, exc.data) from exc
        self._open.add(branch.id)
        if session_id in self._fork_contexts:  # the user's line of work: their choice goes on
            self._fork_contexts[branch.id] = self._fork_contexts[session_id]
        return ForkSessionResponse(
            session_id=branch.id,
            modes=_modes(session.config.permission_mode),
            config_options=self._options(session.config.agent, self._fork_context(branch.id)),
        )

    async def resume_session(
        self,
        session_id: str,
        cwd: str,
        additional_directories: list[str] | None = None,
        mcp_servers: Any = None,
        **kwargs: Any,
    ) -> ResumeSessionResponse:
        """Like session/load, without the replay."""
        await self._open_workspace(cwd)
        session = self._session(session_id)
        self._open.add(session_id)
        return ResumeSessionResponse(
            modes=_modes(session.config.permission_mode),
            config_options=self._options(session.config.agent, self._fork_context(session_id)),
        )

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> SetSessionConfigOptionResponse | None:
        """The options: which agent runs the session (chosen before its first prompt), and how
        the children of the forks approved in it start (any time)."""
        if config_id == FORK_CONTEXT_OPTION:
            return self._set_fork_context(session_id, value)
        if config_id != AGENT_OPTION:
            raise RequestError.invalid_params(
                {
                    "configId": config_id,
                    "reason": f"the config options are '{AGENT_OPTION}' and "
                    f"'{FORK_CONTEXT_OPTION}'",
                }
            )
        offered = self._agents()
        if not isinstance(value, str) or value not in offered:
            raise RequestError.invalid_params(
                {"configId": config_id, "value": value, "agents": list(offered)}
            )
        pending = self._pending.get(session_id)
        if pending is not None:
            pending.agent = value
            return SetSessionConfigOptionResponse(
                config_options=self._options(pending.agent, self._fork_context(session_id))
            )
        session = self._session(session_id)
        if value != session.config.agent:
            raise RequestError.invalid_params(
                {
                    "configId": config_id,
                    "reason": f"session {session_id} runs {session.config.agent} since its first "
                    "prompt; its agent cannot change: start a new session for another",
                }
            )
        return SetSessionConfigOptionResponse(
            config_options=self._options(session.config.agent, self._fork_context(session_id))
        )

    def _agents(self) -> dict[str, str]:
        """The agents a session may run, by name, with their titles: Claude Code, Codex and the
        agents that speak ACP, as far as their programs are found here."""
        registry = self.hub.agents
        return {name: registry.title(name) for name in registry.available(self.settings.options)}

    def _options(
        self, agent: str, fork_context: ForkContext
    ) -> list[SessionConfigOptionSelect | SessionConfigOptionBoolean]:
        offered = self._agents()
        offered.setdefault(agent, self.hub.agents.title(agent))  # its own, found here or not
        return _options(agent, fork_context, offered)

    def _set_fork_context(
        self, session_id: str, value: str | bool
    ) -> SetSessionConfigOptionResponse:
        pending = self._pending.get(session_id)
        agent = pending.agent if pending is not None else self._session(session_id).config.agent
        for context in FORK_CONTEXTS:
            if value == context:
                self._fork_contexts[session_id] = context
                return SetSessionConfigOptionResponse(config_options=self._options(agent, context))
        raise RequestError.invalid_params(
            {"configId": FORK_CONTEXT_OPTION, "value": value, "values": list(FORK_CONTEXTS)}
        )

    def _fork_context(self, session_id: str) -> ForkContext:
        return self._fork_contexts.get(session_id, "inherit")

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None

    # --- hub.Client ------------------------------------------------------------------------------

    def send_frame(self, frame: bytes) -> None:
        pass  # an LSP frame: this client speaks ACP (observe and observe_delta)

    def show_message(self, message: str, warning: bool) -> None:
        # ACP has no notification for the agent itself: said in every open session.
        for session_id in self._open:
            self._queue(session_id, update_agent_message_text(f"\n{message}\n"))

    def observe_delta(self, delta: Delta) -> None:
        if delta.sessionId in self._open and delta.parentToolUseId is None:
            self._view(delta.sessionId).streamed.add(delta.blockId)
            self._queue(delta.sessionId, updates.delta_update(delta))

    def observe(self, event: dict[str, Any]) -> None:
        typed = decode(event)
        if typed is None:
            return  # a kind this front does not know
        sid = typed.session_id
        if sid in self._open:
            for update in updates.event_updates(typed, self._view(sid)):
                self._queue(sid, update)
        parent = self._parent_of(sid)
        if parent is not None and parent in self._open:
            for update in updates.child_updates(typed, self._view(parent)):
                self._queue(parent, update)
        match typed.payload:
            case TurnResult(cancelled=True):
                self._cancelled.add(sid)
            case StatusChanged(status=status) if status in AT_REST:
                rest = self._rests.get(sid)
                if rest is not None and not rest.done():
                    stop = "cancelled" if sid in self._cancelled else "end_turn"
                    self._cancelled.discard(sid)
                    rest.set_result(stop)

    async def ask_permission(
        self,
        session: Session,
        tool_name: str,
        tool_input: dict[str, Any],
        tool_use_id: str | None,
        options: Sequence[OfferedOption] = (),
    ) -> Decision:
        asked = self._asked_in(session)
        if not options and (asked, tool_name) in self._always:
            return Decision(True, "")
        tool_call = ToolCallUpdate(
            tool_call_id=tool_use_id or f"permission-{uuid.uuid4().hex[:8]}",
            title=updates.tool_title(tool_name, tool_input),
            kind=updates.tool_kind(tool_name),
            status="pending",
            raw_input=tool_input,
            locations=updates.tool_locations(tool_input),
        )
        if options:
            # The hosted ACP agent's own answers, passed on: it remembers an "always" itself.
            choice = await self._ask(
                asked,
                tool_call,
                [PermissionOption(option_id=o.optionId, name=o.name, kind=o.kind) for o in options],
            )
            if choice is None:
                return Decision(False, "Denied: the permission request was dismissed.")
            return Decision(False, "Denied by the user.", choice)  # its kind decides
        choice = await self._ask(
            asked,
            tool_call,
            [
                PermissionOption(option_id=ALLOW_ONCE, name="Allow", kind="allow_once"),
                PermissionOption(option_id=ALLOW_ALWAYS, name="Always allow", kind="allow_always"),
                PermissionOption(option_id=REJECT, name="Reject", kind="reject_once"),
            ],
        )
        if choice == ALLOW_ALWAYS:
            self._always.add((asked, tool_name))
        if choice in (ALLOW_ONCE, ALLOW_ALWAYS):
            return Decision(True, "")
        if choice == REJECT:
            return Decision(False, "Denied by the user.")
        return Decision(False, "Denied: the permission request was dismissed.")

    async def ask_fork_approval(self, session: Session, tasks: list[str]) -> bool | None:
        """Asked in the nearest session the client has open; approved, the fork starts as that
        session's forkContext says, its children running the parent's own agent (ACP has no way
        to pick another: a fork of another agent's children is never made unasked)."""
        listed = "\n".join(f"- {t}" for t in tasks)
        asked_in = self._asked_in(session)
        # Not chosen in the session: the fork's own default (an agent that cannot copy its
        # conversation gives its children a transcript; `inherit` would be refused).
        chosen = self._fork_contexts.get(asked_in)
        fork = self.hub.forks.active_fork(session)
        context = chosen or (fork.settings.context if fork is not None else "inherit")
        estimate = fork_estimate(session, tasks, context)  # as its children would start
        if estimate is not None:
            listed += "\n\n" + "\n".join(fork_cost(estimate))
        choice = await self._ask(
            asked_in,
            ToolCallUpdate(
                tool_call_id=f"fork-proposal-{uuid.uuid4().hex[:8]}",
                title=_fork_title(len(tasks), self.hub.agents.title(session.config.agent), context),
                kind="think",
                status="pending",
                raw_input={
                    "tasks": tasks,
                    **({"estimate": msgspec.to_builtins(estimate)} if estimate else {}),
                },
                content=[tool_content(text_block(listed))],
            ),
            [
                PermissionOption(option_id=ALLOW_ONCE, name="Approve fork", kind="allow_once"),
                PermissionOption(option_id=REJECT, name="Reject", kind="reject_once"),
            ],
        )
        if choice == ALLOW_ONCE:
            return self._approve(session, chosen)
        return False if choice == REJECT else None

    def _approve(self, session: Session, context: ForkContext | None) -> bool | None:
        """Approve the session's proposed fork with its children's context (the hub's own
        decision takes no context): None tells the hub it is decided."""
        fork = self.hub.forks.active_fork(session)
        if fork is None or fork.state != "proposed":
            return None  # decided meanwhile (elsewhere, or cancelled)
        try:
            self.hub.forks.decide(fork.id, True, choices=ForkChoices(context=context))
        except protocol.CovenError:
            log.warning("the fork of %s could not be approved", session.id, exc_info=True)
        return None

    async def ask_review(self, child: Session) -> bool | None:
        changes = child.changes
        if changes is None:
            return None
        files = "\n".join(f"{f.path} (+{f.linesAdded} -{f.linesRemoved})" for f in changes.files)
        choice = await self._ask(
            self._asked_in(child),
            ToolCallUpdate(
                tool_call_id=f"review-{child.id}",
                title=f"Apply the changes of fork child '{child.label}'",
                kind="edit",
                status="pending",
                content=[tool_content(text_block(files or "(no files)"))],
            ),
            [
                PermissionOption(option_id=ALLOW_ONCE, name="Apply", kind="allow_once"),
                PermissionOption(option_id=REJECT, name="Discard", kind="reject_once"),
            ],
        )
        return True if choice == ALLOW_ONCE else False if choice == REJECT else None

    # --- helpers ---------------------------------------------------------------------------------

    async def _open_workspace(self, cwd: str) -> None:
        if not os.path.isabs(cwd) or not os.path.isdir(cwd):
            raise RequestError.invalid_params(
                {"cwd": cwd, "reason": "not an existing absolute path"}
            )
        settings = ClientSettings.parse({}, cwd)
        try:
            store, warning = await self.hub.open_store(settings)
        except protocol.CovenError as exc:
            raise RequestError(exc.code, exc.message, exc.data) from exc
        if self.store is None:
            self.settings, self.store = settings, store
        if warning:
            log.warning("%s", warning)

    def _session(self, session_id: str) -> Session:
        try:
            return self.hub.get(session_id)
        except protocol.CovenError as exc:
            raise RequestError(exc.code, exc.message, exc.data) from exc

    def _parent_of(self, session_id: str) -> str | None:
        session = self.hub.sessions.get(session_id)
        return session.parent_id if session is not None else None

    def _asked_in(self, session: Session) -> str:
        """The ACP session a question about `session` is asked in: itself if the client has it
        open, else the nearest ancestor it has (a fork child's tool asks in its parent)."""
        current: Session | None = session
        while current is not None:
            if current.id in self._open:
                return current.id
            current = self.hub.sessions.get(current.parent_id) if current.parent_id else None
        return session.id

    async def _ask(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption]
    ) -> str | None:
        """The option the user picked, or None (cancelled, or the client is gone)."""
        if self.conn is None:
            return None
        await self._flush_updates()  # what led to the question is shown before it
        try:
            answer = await self.conn.request_permission(
                session_id=session_id, tool_call=tool_call, options=options
            )
        except Exception:
            log.warning("the ACP client did not answer a permission request", exc_info=True)
            return None
        outcome = answer.outcome
        return outcome.option_id if isinstance(outcome, AllowedOutcome) else None

    def _queue(self, session_id: str, update: Any) -> None:
        self._updates.put_nowait((session_id, update))

    async def _send_now(self, session_id: str, update: Any) -> None:
        if self.conn is not None:
            await self.conn.session_update(session_id=session_id, update=update)

    async def _flush_updates(self) -> None:
        await self._updates.join()

    async def close(self) -> None:
        if self._sender is not None:
            self._sender.cancel()
        self.hub.detach(self)


@dataclass
class _Pending:
    """A session ACP named that has had no prompt yet: what it will start with."""

    cwd: str
    mode: str
    agent: AgentName


def _fork_title(count: int, agent_title: str, context: ForkContext) -> str:
    """What the approval says of the children: how many, which agent, how they start."""
    tasks = f"{count} parallel task{'s' if count != 1 else ''}"
    children = f"{agent_title} children, {FORK_CONTEXTS[context][1]}"
    return f"Fork into {tasks} ({children})"


def _options(
    agent: str, fork_context: ForkContext, offered: dict[str, str]
) -> list[SessionConfigOptionSelect | SessionConfigOptionBoolean]:
    """The session's settings: which agent runs it (a choice until its first prompt), and how
    the children of the forks approved in it start."""
    return [
        SessionConfigOptionSelect(
            type="select",
            id=AGENT_OPTION,
            name="Agent",
            description="The coding agent that runs the session; chosen before its first prompt.",
            current_value=agent,
            options=[
                SessionConfigSelectOption(value=name, name=title) for name, title in offered.items()
            ],
        ),
        SessionConfigOptionSelect(
            type="select",
            id=FORK_CONTEXT_OPTION,
            name="Fork context",
            description="How the children of a fork approved here start: inherit (resume this "
            "conversation), fresh (only their task) or transcript (this conversation written "
            "into their first prompt). They run this session's agent.",
            current_value=fork_context,
            options=[
                SessionConfigSelectOption(value=value, name=name)
                for value, (name, _) in FORK_CONTEXTS.items()
            ],
        ),
    ]


def _modes(current: str | None) -> SessionModeState:
    return SessionModeState(current_mode_id=current or "default", available_modes=MODES)


def _prompt_text(blocks: list[Any]) -> str:
    """The prompt as text: text blocks as they are, embedded text resources with their URI,
    links to resources as @-mentions (the CLI reads the file when it needs it)."""
    parts = []
    for block in blocks:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and hasattr(block.resource, "text"):
            parts.append(f'<context uri="{block.resource.uri}">\n{block.resource.text}\n</context>')
        elif kind == "resource_link":
            uri = str(block.uri)
            parts.append("@" + (uri[len("file://") :] if uri.startswith("file://") else uri))
    return "\n".join(parts)
