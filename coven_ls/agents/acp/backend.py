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

import dataclasses
import logging
import os
from collections.abc import AsyncGenerator, Awaitable, Callable
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
    Abilities,
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
    Resume,
    TaskNotRunning,
)
from ...core.agent.events import AgentStarted, ModeChanged
from ...core.agent.outbox import Outbox
from ...protocol.types import AcpAgentConfig
from .abilities import Learned, advertises_fork, probe
from .instructions import first_prompt_preamble
from .known import copy_problem
from .known import reports_cost as known_reports_cost
from .modes import ASKING_MODES, matching_mode, refusal
from .process import Connect, Link, command_problem, initialize, process_connector
from .purge import PurgeClient, purge_sessions
from .question import offered, question_input
from .restart import MAX_RESTARTS, revive
from .translate import CostReports, Translator

log = logging.getLogger(__name__)

INITIALIZE_SECONDS = 60.0
# How long a turn whose connection broke waits to hear how the process ended.
DEATH_WAIT_SECONDS = 2.0
# How long a closing session's `session/close` may take before its process is ended anyway.
CLOSE_SESSION_SECONDS = 5.0
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
        self,
        name: str,
        spec: AgentSpec,
        ask: PermissionAsker,
        task_group: TaskGroup,
        configured_mode: str | None = None,
    ) -> None:
        self.name = name
        self._configured_mode = configured_mode
        self.spec = spec
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
        # coven's instructions, ahead of the first prompt (instructions.py)
        self._preamble = first_prompt_preamble(spec)
        self.costs = CostReports()  # the backend's, shared by its sessions
        self.can_close = False  # the agent advertises session/close
        # Starting the process again after it ended by itself (restart.py).
        self.reopen: Callable[[], Awaitable[None]] | None = None
        self.restarts = 0
        self.max_restarts = MAX_RESTARTS
        self._ready = anyio.Event()
        self._ready.set()
        self._died = anyio.Event()
        self._death: str | None = None
        self._turn_scope: anyio.CancelScope | None = None
        self._turn_ended = anyio.Event()
        self.mode_ids: list[str] = []  # the session's modes, as the agent lists them
        self.mode: str | None = None  # the one it is in

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
        if kind == "current_mode_update":
            self.mode = str(update.current_mode_id)
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
        """The process ended by itself: it is started again (restart.py), else the session's
        stream ends with the reason."""
        if self._closed:
            return
        self._death = reason
        self._died.set()
        limit = self.max_restarts
        if self.reopen is None or self.session_id is None or self.restarts >= limit:
            if self.reopen is not None and self.restarts >= limit:
                reason += f" It was started again {limit} times already: not again."
            self._put(AgentFailed(reason))
            self._out.close()
            return
        if self._turn_scope is not None:
            self._turn_scope.cancel()  # the turn ends failed with the reason
        for scope in list(self._asking):
            scope.cancel()  # nobody is left to hear the answer
        self._ready = anyio.Event()
        self._tg.start_soon(
            revive, self, reason, self.reopen, self._ready, name=f"ACP agent {self.name} restart"
        )

    # --- restart.Revivable

    def put(self, item: object) -> None:
        self._out.put(item)

    def end(self) -> None:
        self._out.close()

    async def turn_over(self) -> None:
        if self._in_turn:
            await self._turn_ended.wait()

    @property
    def closed(self) -> bool:
        return self._closed

    def revived(self) -> None:
        """A new process is being started: its end is news again."""
        self._died = anyio.Event()
        self._death = None

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
                    cwd=self.spec.cwd,
                    permission_mode=self.spec.permission_mode,
                    agent_version=self.agent_version,
                )
            )
        if self._preamble is not None:
            text, self._preamble = self._preamble + text, None
        self._in_turn = True
        if self.translator is not None:
            self.translator.turn_started()
        self._turn_ended = anyio.Event()
        self._tg.start_soon(self._turn, text, name=f"ACP agent {self.name} turn")

    async def _turn(self, text: str) -> None:
        try:
            await self._ready.wait()  # a process being started again
            for event in await self._prompt(text):
                self._put(event)
        finally:
            self._in_turn = False
            self._turn_ended.set()

    async def _prompt(self, text: str) -> list[AgentEvent]:
        """The turn's end as the agent's answer to `session/prompt` says it, or its failure."""
        link, translator = self.link, self.translator
        if link is None or translator is None:
            return []
        failed = f"ACP agent '{self.name}' failed the turn:"
        with anyio.CancelScope() as scope:
            self._turn_scope = scope  # cancelled when the process ends (`gone`)
            try:
                answer = await link.conn.prompt(
                    session_id=self.session_id, prompt=[text_block(text)]
                )
            except RequestError as exc:
                return translator.failed(f"{failed} {exc}")
            except Exception as exc:  # the connection broke: the process's end says why
                if link.closing or self._closed:
                    return []
                log.info("ACP agent %s: prompt failed: %r", self.name, exc)
                with anyio.move_on_after(DEATH_WAIT_SECONDS):
                    await self._died.wait()
                return translator.failed(f"{failed} {self._death or repr(exc)}")
            finally:
                self._turn_scope = None
            said = translator.ended(str(answer.stop_reason), answer.usage)
            if answer.stop_reason == "end_turn":
                self.costs.saw(translator)
            return said
        return translator.failed(f"{failed} {self._death}")  # the process ended meanwhile

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
        """The agent's mode that matches coven's permission mode; none is a refusal."""
        target = matching_mode(str(mode), self.mode_ids, self._configured_mode)
        if target is None:
            raise refusal(self.name, str(mode), self.mode_ids)
        if target != self.mode and self.link is not None and self.session_id is not None:
            await self.link.conn.set_session_mode(session_id=self.session_id, mode_id=target)
            self.mode = target
            if not self._in_turn:  # the agent's own report of it comes outside a turn: dropped
                self._put(ModeChanged(target))
        self.spec = dataclasses.replace(self.spec, permission_mode=mode)  # a restart keeps it
        log.info("ACP agent %s: session %s in mode %s", self.name, self.session_id, target)

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
        self._closed = True  # its end is no news: not started again
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
        self.learned = Learned()
        self.costs = CostReports()

    def abilities(self) -> Abilities:
        able = self.learned.abilities(self.name)
        return dataclasses.replace(able, reports_cost=self.reports_cost())

    async def find_abilities(self) -> Abilities:
        if self.learned.copies is None and copy_problem(self.name) is None:
            home = os.path.expanduser("~")
            connect = self._connect or process_connector(self.name, self.config, home, self._tg, {})
            await probe(self.name, connect, self.learned)
        return self.abilities()

    def reports_cost(self) -> bool | None:
        """Whether this agent tells its cost in USD: as its sessions showed, else as the known
        agents' table says, else not known (a fork's cost limit is then refused)."""
        if self.costs.usd is not None:
            return self.costs.usd
        return known_reports_cost(self.name)

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
        agent = AcpAgent(self.name, spec, ask_permission, self._tg, self.config.mode)
        agent.costs = self.costs
        agent.link = await self._connector(spec)(cast(Client, agent), agent.gone)
        try:
            await self._start(agent, spec)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await agent.close()
            raise
        agent.reopen = lambda: self._reopen(agent)
        return agent

    def _connector(self, spec: AgentSpec) -> Connect:
        return self._connect or process_connector(
            self.name, self.config, spec.cwd, self._tg, dict(spec.env)
        )

    async def _reopen(self, agent: AcpAgent) -> None:
        """A new process for `agent`, whose process ended: its session taken up again."""
        assert agent.session_id is not None
        old = agent.link
        if old is not None:
            old.closing = True
            with anyio.CancelScope(shield=True):
                await old.aclose()
        if agent.closed:
            return  # closed meanwhile: nothing to take up
        agent.revived()
        spec = dataclasses.replace(agent.spec, start=Resume(agent.session_id))
        link = agent.link = await self._connector(spec)(cast(Client, agent), agent.gone)
        try:
            await self._start(agent, spec)
            if agent.closed:
                raise AgentStartError(f"ACP agent '{self.name}': the session closed meanwhile.")
        except BaseException:
            link.closing = True
            with anyio.CancelScope(shield=True):
                await link.aclose()
            raise

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
        self.learned.copies = advertises_fork(init)
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
                        'session/fork): its fork children need `context: "transcript"`.'
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
        modes: SessionModeState | None = getattr(answer, "modes", None)
        mode = self._first_mode(agent, spec, modes)
        if mode is not None:
            try:
                await conn.set_session_mode(session_id=session_id, mode_id=mode)
            except RequestError as exc:
                raise self._failed(agent, f"to switch to its mode '{mode}'", exc) from exc
            log.info("ACP agent %s: session %s in mode %s", self.name, session_id, mode)
            agent.mode = mode

    def _first_mode(
        self, agent: AcpAgent, spec: AgentSpec, modes: SessionModeState | None
    ) -> str | None:
        """The mode a session opens in (None: the one it is in): the agent's match for coven's
        permission mode when that is not `default`, else one that asks (`asking_mode`)."""
        if modes is not None:
            agent.mode_ids = [m.id for m in modes.available_modes]
            agent.mode = modes.current_mode_id
        wanted = spec.permission_mode
        if wanted is not None and wanted != "default":
            target = matching_mode(wanted, agent.mode_ids, self.config.mode)
            if target is not None:
                return None if target == agent.mode else target
            log.warning(
                "ACP agent %s has no mode matching permission mode %s (its modes: %s): it is put "
                "in a mode that asks",
                self.name,
                wanted,
                ", ".join(agent.mode_ids) or "none",
            )
        return asking_mode(self.name, modes, self.config.mode)

    async def conversation(
        self, agent_session_id: str, cwd: str, up_to: str | None = None
    ) -> list[Entry]:
        # `abilities().reads_conversations` is False: the core reads what it recorded.
        raise AgentStartError(
            f"ACP agent '{self.name}' cannot give a session's conversation back; coven-ls "
            "writes it out from its own record of the session."
        )

    async def fork_point_problem(self, conversation: str, message_id: str) -> str | None:
        return (
            f"ACP agent '{self.name}' copies a session only whole (session/fork), not up to one "
            'of its earlier messages: fork at its last message, or with `context: "transcript"`.'
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
