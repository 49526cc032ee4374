"""Sessions of an agent that speaks the Agent Client Protocol (opencode, Gemini CLI, the ACP
adapters of Claude Code and Codex, ...), configured in `initializationOptions.agents`.

Each coven session runs its own agent process (a worktree child will need an environment of its
own, which `session/new` cannot carry): `initialize`, then `session/new` (New), `session/resume`
else `session/load` (Resume) or `session/fork` (Copy, where the agent advertises it), the session
put in a mode that asks, then a `session/prompt` a turn. coven-ls advertises neither `fs` nor
`terminal`: the agent reads, writes and runs commands itself, in its own cwd and sandbox, as
Claude Code and Codex do, and the editor's unsaved buffers are not coven's to offer.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncGenerator
from typing import Any, cast

import anyio
import anyio.lowlevel
from acp import RequestError, text_block
from acp.interfaces import Client
from acp.schema import (
    AllowedOutcome,
    DeniedOutcome,
    PermissionOption,
    RequestPermissionResponse,
    SessionModeState,
)
from anyio.abc import TaskGroup

from ...core.agent import (
    AgentEvent,
    AgentFailed,
    AgentSpec,
    AgentStartError,
    Conversation,
    Copy,
    Decision,
    Entry,
    New,
    PermissionAsker,
    TaskNotRunning,
)
from ...core.agent.events import AgentStarted
from ...core.agent.outbox import Outbox
from ...protocol.types import AcpAgentConfig
from .process import Connect, Link, command_problem, initialize, process_connector
from .purge import PurgeClient, purge_sessions
from .question import offered, question_input
from .translate import Translator

log = logging.getLogger(__name__)

INITIALIZE_SECONDS = 60.0
# How long a closing session's `session/close` may take before its process is ended anyway.
CLOSE_SESSION_SECONDS = 5.0
# Modes that ask before running a command, by the names agents give them, in order of
# preference: claude-agent-acp's and qwen-code's `default`, @zed-industries/codex-acp's
# `read-only`. An agent whose current mode is one of them keeps it.
ASKING_MODES = ("default", "read-only", "ask")
# What a permission answer becomes, by ACP's option kind (ids differ from agent to agent).
ALLOW_KINDS = ("allow_once", "allow_always")
REJECT_KINDS = ("reject_once", "reject_always")
# Updates that belong to a turn: outside one (a `session/load` replaying the history) they are
# not news.
# A `current_mode_update` outside a turn is the answer to coven's own `session/set_mode`.
TURN_UPDATES = frozenset(
    {
        "agent_message_chunk",
        "agent_thought_chunk",
        "tool_call",
        "tool_call_update",
        "plan",
        "current_mode_update",
    }
)


def chosen_option(options: list[PermissionOption], allow: bool) -> str | None:
    """The option an answer picks: allow once (else always), reject once (else always)."""
    for kind in ALLOW_KINDS if allow else REJECT_KINDS:
        for option in options:
            if option.kind == kind:
                return option.option_id
    return None


def asking_mode(name: str, modes: SessionModeState | None, configured: str | None) -> str | None:
    """The mode to put a session in (None: leave it): the configured one, else one that asks."""
    if modes is None:
        if configured:
            raise AgentStartError(
                f"ACP agent '{name}' lists no session modes, so its mode '{configured}' cannot "
                f"be set: remove `mode` from initializationOptions.agents.{name}."
            )
        return None
    ids = [mode.id for mode in modes.available_modes]
    if configured:
        if configured not in ids:
            raise AgentStartError(
                f"ACP agent '{name}' has no mode '{configured}' (it has: {', '.join(ids)}): fix "
                f"initializationOptions.agents.{name}.mode."
            )
        return None if configured == modes.current_mode_id else configured
    if modes.current_mode_id in ASKING_MODES:
        return None
    for mode in ASKING_MODES:
        if mode in ids:
            return mode
    log.warning(
        "ACP agent %s: none of its modes (%s) is known to ask before it acts; it stays in %s "
        "(set initializationOptions.agents.%s.mode)",
        name,
        ", ".join(ids),
        modes.current_mode_id,
        name,
    )
    return None


class AcpAgent:
    """One ACP session in its own agent process, seen as the session's Agent; also the ACP
    client that process talks to."""

    reports_ended_tasks = False  # ACP has no turn of the agent's own

    def __init__(
        self, name: str, spec: AgentSpec, ask: PermissionAsker, task_group: TaskGroup
    ) -> None:
        self.name = name
        self._spec = spec
        self._ask = ask
        self._tg = task_group
        self.link: Link | None = None
        self.session_id: str | None = None
        self.translator: Translator | None = None
        self.agent_version: str | None = None
        self._out = Outbox(f"ACP agent {name}")
        self._in_turn = False
        self._announced = False
        self._closed = False
        self._asking: set[anyio.CancelScope] = set()
        self.can_close = False  # the agent advertises session/close

    # --- the ACP client

    async def request_permission(
        self, options: list[PermissionOption], session_id: str, tool_call: Any, **_: Any
    ) -> RequestPermissionResponse:
        if session_id != self.session_id or self.translator is None or not self._in_turn:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        for event in self.translator.pending(tool_call):
            self._put(event)
        await self._out.drained()
        name = self.translator.open_tools.get(str(tool_call.tool_call_id), "tool")
        known = self.translator.inputs.get(str(tool_call.tool_call_id), {})
        tool_input = question_input(name, tool_call, known)
        answer: Decision | None = None
        with anyio.CancelScope() as scope:
            self._asking.add(scope)
            try:
                answer = Decision(
                    *await self._ask(
                        name, tool_input, str(tool_call.tool_call_id), offered(options)
                    )
                )
            finally:
                self._asking.discard(scope)
        option = None
        if answer is not None:
            option = answer.option_id or chosen_option(options, answer.allow)
        if option is None:
            # Interrupted, or the agent offers no option of that kind: ACP's "cancelled".
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=option)
        )

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        if session_id != self.session_id or self.translator is None:
            return
        kind = getattr(update, "session_update", None)
        if kind in TURN_UPDATES and not self._in_turn:
            log.debug("ACP agent %s: %s outside a turn, not shown", self.name, kind)
            return
        for event in self.translator.feed(update):
            self._put(event)

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        log.info("ACP agent %s asked %s, which coven-ls does not know", self.name, method)
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        log.info("ACP agent %s sent _%s, which coven-ls does not know", self.name, method)

    def gone(self, reason: str) -> None:
        """The process ended by itself: the session's stream ends with the reason."""
        self._put(AgentFailed(reason))
        self._out.close()

    # --- Agent

    def _put(self, item: Any) -> None:
        self._out.put(item)

    async def send(self, text: str) -> None:
        if self.link is None or self.session_id is None:
            raise AgentStartError(f"ACP agent '{self.name}' has no session open.")
        if not self._announced:
            self._announced = True
            self._put(
                AgentStarted(
                    conversation_id=self.session_id,
                    cwd=self._spec.cwd,
                    permission_mode=self._spec.permission_mode,
                    agent_version=self.agent_version,
                )
            )
        self._in_turn = True
        self._tg.start_soon(self._turn, text, name=f"ACP agent {self.name} turn")

    async def _turn(self, text: str) -> None:
        assert self.link is not None and self.translator is not None
        try:
            answer = await self.link.conn.prompt(
                session_id=self.session_id, prompt=[text_block(text)]
            )
        except RequestError as exc:
            said = self.translator.failed(f"ACP agent '{self.name}' failed the turn: {exc}")
        except Exception as exc:  # the connection broke: the process's end says why
            if self.link.closing or self._closed:
                return
            log.info("ACP agent %s: prompt failed: %r", self.name, exc)
            said = self.translator.failed(f"ACP agent '{self.name}' failed the turn: {exc!r}")
        else:
            said = self.translator.ended(str(answer.stop_reason), answer.usage)
        finally:
            self._in_turn = False

        for event in said:
            self._put(event)

    async def messages(self) -> AsyncGenerator[AgentEvent, None]:
        async for item in self._out:
            if isinstance(item, AgentFailed):
                raise item
            yield item

    async def interrupt(self) -> None:
        for scope in list(self._asking):
            scope.cancel()  # ACP: a cancelled turn's open questions are answered "cancelled"
        if self._in_turn and self.link is not None and self.session_id is not None:
            await self.link.conn.cancel(session_id=self.session_id)

    async def stop_task(self, task_id: str) -> None:
        raise TaskNotRunning(f"ACP agent '{self.name}' runs no background task '{task_id}'.")

    async def set_permission_mode(self, mode: Any) -> None:
        # The agent's own modes decide (the one that asks was chosen when it opened); coven's
        # permission modes have no mapping onto them yet.
        log.info("ACP agent %s: permission mode %s is not passed on", self.name, mode)

    async def close(self) -> None:
        if self._closed:
            return
        if self._in_turn:
            with anyio.move_on_after(5), anyio.CancelScope(shield=True):
                await self.interrupt()
        self._closed = True
        for scope in list(self._asking):
            scope.cancel()
        self._out.close()
        if self.link is not None:
            with anyio.CancelScope(shield=True):
                await self._close_session()
                await self.link.aclose()

    async def _close_session(self) -> None:
        """`session/close` where the agent has it: the agent frees the session before its process
        is ended (a later `session/resume` or `session/load` still takes it up)."""
        if not self.can_close or self.session_id is None or self.link is None:
            return
        if self.link.process is not None and self.link.process.returncode is not None:
            return
        try:
            with anyio.fail_after(CLOSE_SESSION_SECONDS):
                await self.link.conn.close_session(session_id=self.session_id)
        except Exception as exc:
            log.info("ACP agent %s: session/close of %s: %r", self.name, self.session_id, exc)

    def kill(self) -> None:
        self._out.close()
        if self.link is not None:
            self.link.kill()

    def stderr_tail(self) -> str:
        return self.link.stderr_tail() if self.link is not None else ""


class AcpBackend:
    """The sessions of one configured ACP agent."""

    def __init__(
        self,
        name: str,
        config: AcpAgentConfig,
        task_group: TaskGroup,
        connect: Connect | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self._tg = task_group
        self._connect = connect  # a test's in-process agent; None: the configured command

    def check(self) -> None:
        if self._connect is None:
            problem = command_problem(self.name, self.config)
            if problem is not None:
                raise problem

    async def open(self, spec: AgentSpec, ask_permission: PermissionAsker) -> AcpAgent:
        if isinstance(spec.start, Copy) and spec.start.up_to is not None:
            raise AgentStartError(
                f"ACP agent '{self.name}': a copy of a session up to one of its messages is not "
                "supported yet."
            )
        agent = AcpAgent(self.name, spec, ask_permission, self._tg)
        connect = self._connect or process_connector(
            self.name, self.config, spec.cwd, self._tg, dict(spec.env)
        )
        agent.link = await connect(cast(Client, agent), agent.gone)
        try:
            await self._start(agent, spec)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await agent.close()
            raise
        return agent

    def _failed(self, agent: AcpAgent, what: str, exc: BaseException) -> AgentStartError:
        tail = agent.stderr_tail().strip().splitlines()[-3:]
        return AgentStartError(
            f"ACP agent '{self.name}' ({' '.join(self.config.command)}) failed {what}: {exc}."
            + (f" Its last output: {' '.join(tail)}" if tail else "")
            + f" Check initializationOptions.agents.{self.name} (its command, env, and any "
            "login the agent needs)."
        )

    async def _start(self, agent: AcpAgent, spec: AgentSpec) -> None:
        assert agent.link is not None
        conn = agent.link.conn
        try:
            with anyio.fail_after(INITIALIZE_SECONDS):
                init = await initialize(conn)
        except Exception as exc:
            raise self._failed(agent, "to initialize", exc) from exc
        if init.agent_info is not None:
            agent.agent_version = init.agent_info.version
        caps = init.agent_capabilities
        sessions = caps.session_capabilities if caps is not None else None
        agent.can_close = sessions is not None and sessions.close is not None
        start = spec.start
        cwd = spec.cwd
        base: float | None = 0.0
        try:
            if isinstance(start, New):
                answer: Any = await conn.new_session(cwd=cwd, mcp_servers=[])
                session_id = str(answer.session_id)
            elif isinstance(start, Copy):
                if sessions is None or sessions.fork is None:
                    raise AgentStartError(
                        f"ACP agent '{self.name}' cannot fork a session (it has no "
                        'session/fork): its fork children need `context: "transcript"`, '
                        "which coven-ls does not offer for ACP agents yet."
                    )
                answer = await conn.fork_session(
                    session_id=start.conversation_id, cwd=cwd, mcp_servers=[]
                )
                session_id, base = str(answer.session_id), None
            else:
                session_id, base = start.conversation_id, None
                if sessions is not None and sessions.resume is not None:
                    answer = await conn.resume_session(
                        session_id=session_id, cwd=cwd, mcp_servers=[]
                    )
                elif caps is not None and caps.load_session:
                    agent.session_id = session_id  # its replay is dropped: no turn runs
                    agent.translator = Translator(session_id, self.name, cost_base=None)
                    answer = await conn.load_session(session_id=session_id, cwd=cwd, mcp_servers=[])
                else:
                    raise AgentStartError(
                        f"ACP agent '{self.name}' can neither resume nor load a session, so "
                        f"session {session_id} cannot go on."
                    )
        except RequestError as exc:
            raise self._failed(agent, f"to open its session in {cwd}", exc) from exc
        agent.session_id = session_id
        agent.translator = Translator(session_id, self.name, cost_base=base)
        mode = asking_mode(self.name, getattr(answer, "modes", None), self.config.mode)
        if mode is not None:
            try:
                await conn.set_session_mode(session_id=session_id, mode_id=mode)
            except RequestError as exc:
                raise self._failed(agent, f"to switch to its mode '{mode}'", exc) from exc
            log.info("ACP agent %s: session %s in mode %s", self.name, session_id, mode)

    async def conversation(
        self, agent_session_id: str, cwd: str, up_to: str | None = None
    ) -> list[Entry]:
        raise AgentStartError(
            f"The conversation of ACP agent '{self.name}' cannot be read back yet, so a fork "
            "child cannot be given it as a transcript."
        )

    async def fork_point_problem(self, conversation: str, message_id: str) -> str | None:
        return (
            f"ACP agent '{self.name}': a session can be copied only whole, not up to one of its "
            "messages (yet)."
        )

    async def purge(self, conversations: list[Conversation]) -> None:
        if not conversations:
            return
        # A worktree child's folder may be gone already; session/delete needs only the id.
        cwd = next((c.cwd for c in conversations if os.path.isdir(c.cwd)), os.path.expanduser("~"))
        connect = self._connect or process_connector(self.name, self.config, cwd, self._tg, {})
        try:
            link = await connect(cast(Client, PurgeClient()), lambda _reason: None)
        except Exception as exc:
            log.warning(
                "ACP agent %s could not be started to delete its sessions %s: %s",
                self.name,
                [c.agent_session_id for c in conversations],
                exc,
            )
            return
        try:
            await purge_sessions(self.name, link.conn, conversations)
        except Exception as exc:
            log.warning("ACP agent %s: its sessions could not be deleted: %s", self.name, exc)
        finally:
            with anyio.CancelScope(shield=True):
                await link.aclose()

    async def aclose(self) -> None:
        """Nothing shared: each session's process ends with its agent."""
