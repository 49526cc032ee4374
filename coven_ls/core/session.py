"""One agent session (Claude Code, Codex): its turns, its status, its numbered event log, and
its agent process.

A session is driven by one runner task (`run`), which alone opens and closes the agent process,
because an agent may need that (claude-agent-sdk's client must be connected and disconnected in
the same task). Everything else (a new message, cancel, close) only queues work for the runner or
interrupts it.

What the agent says arrives as coven's own agent events (core/agent/events.py), whichever agent
it is: `_publish` makes coven events of them (core/mapping.py), `coven/delta` of the streamed
pieces (core/streaming.py), and counts each model call (a fork's limits, the context gauge).

Its parts, each in a module of its own: the agent process (`session_process.AgentProcess`: opened,
read, watched for silence, closed or killed), the CLI's background tasks
(`background.BackgroundTasks`), its numbered event log (`session_log.EventLog`) and its row in
the store (`session_record`).

No pygls here: events leave through the `Sink` the session is given.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import sys
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import msgspec

from .. import protocol
from ..protocol import (
    EventDict,
    ForkMode,
    InitializationOptions,
    PermissionMode,
    SessionInfo,
    Status,
    events,
)
from ..protocol.types import (
    BranchedFrom,
    Changes,
    ContextUsage,
    ForkLimits,
    Isolation,
    MergeMode,
    Origin,
    StreamKind,
    Usage,
    Worktree,
)
from . import session_record
from .agent import (
    Agent,
    AgentFailed,
    AgentSpec,
    Backend,
    New,
    Resume,
    TaskNotRunning,
    describe_failure,
)
from .agent import events as agent_events
from .agent.events import AgentEvent
from .background import BackgroundTasks
from .fork.spend import Meter, merge_limits
from .mapping import message_payloads, to_payloads
from .models import context_usage
from .session_log import EventLog
from .session_process import AgentProcess, ChildIdle, StreamEnded
from .session_record import Outcome as Outcome  # where forks and tests have always found it
from .status import check_transition
from .store import Store
from .streaming import Streams
from .workspace import worktrees

if sys.version_info < (3, 11):  # anyio brings the backport there
    from exceptiongroup import BaseExceptionGroup

log = logging.getLogger(__name__)

# How long an interrupt may take to end a turn before the agent process is stopped outright.
INTERRUPT_GRACE_SECONDS = 10.0
# How long a session waits for the CLI to start the turn that reports an ended background task.
REPORT_GRACE_SECONDS = 10.0
# How long `close` waits for the runner to stop the agent process (the SDK's own escalation from
# stdin EOF to SIGKILL is bounded at about 15 s).
CLOSE_SECONDS = 30.0


# Holds one of the server's slots for a fork child's turn; tells the session its place in line.
TurnGate = Callable[[str, Callable[[int | None], None]], AbstractAsyncContextManager[None]]


class Sink(Protocol):
    """Where a session's events and questions go (the hub, in the server)."""

    def publish(self, event: dict[str, Any]) -> None: ...

    def publish_delta(self, delta: events.Delta) -> None:
        """A streamed piece of text: to the clients, not to the store."""

    async def ask_permission(
        self, session: Session, tool_name: str, tool_input: dict[str, Any], tool_use_id: str | None
    ) -> tuple[bool, str]: ...


_DEFAULTS = InitializationOptions()  # the options' defaults, for sessions built without options


@dataclass
class SessionConfig:
    """What a session runs with; fixed when it is created."""

    cwd: str
    model: str | None = None
    permission_mode: PermissionMode | None = None
    fork_mode: ForkMode = _DEFAULTS.forkMode
    max_children: int = _DEFAULTS.maxChildren
    max_parallel: int = _DEFAULTS.maxParallel
    max_depth: int = _DEFAULTS.maxDepth
    append_system_prompt: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    fork_isolation: Isolation | None = _DEFAULTS.forkIsolation  # None: worktree in a git repo
    merge_mode: MergeMode = _DEFAULTS.mergeMode
    state_dir: str | None = None  # where forks' worktrees go (None: the default state folder)
    worktree_pool: int = _DEFAULTS.worktreePool  # spare worktrees per repository that forked
    child_idle_timeout: float = _DEFAULTS.childIdleTimeoutSeconds  # for its fork children; 0: off
    worktree_setup: str = (
        _DEFAULTS.worktreeSetup
    )  # for its forks' worktrees ("auto", "", a command)
    worktree_setup_timeout: float = _DEFAULTS.worktreeSetupTimeoutSeconds
    agent: protocol.AgentName = "claude"  # which agent runs it (coven_ls/agents)
    # What its forks' children may spend (the client's forkLimits); a fork may say otherwise.
    fork_limits: ForkLimits | None = None

    @classmethod
    def from_options(
        cls,
        options: InitializationOptions,
        cwd: str,
        agent: protocol.AgentName | None = None,
        model: str | None = None,
        permission_mode: PermissionMode | None = None,
        fork_mode: ForkMode | None = None,
    ) -> SessionConfig:
        """What a session started by a client with these options runs with, but for what its
        start named (`coven/startSession`'s params). The one place options become a config: a
        restored session takes what it stored over this (dataclasses.replace)."""
        return cls(
            cwd=cwd,
            agent=agent or options.agent,
            model=model or options.model,
            permission_mode=permission_mode or options.permissionMode,
            fork_mode=fork_mode or options.forkMode,
            max_children=options.maxChildren,
            max_parallel=options.maxParallel,
            max_depth=options.maxDepth,
            fork_limits=merge_limits(None, options.forkLimits),
            fork_isolation=options.forkIsolation,
            merge_mode=options.mergeMode,
            state_dir=options.stateDir,
            worktree_pool=options.worktreePool,
            child_idle_timeout=options.childIdleTimeoutSeconds,
            worktree_setup=options.worktreeSetup,
            worktree_setup_timeout=options.worktreeSetupTimeoutSeconds,
        )


@dataclass
class Turn:
    text: str
    origin: Origin = "user"  # who wrote it: a client, or the server itself (e.g. "forkResults")


class Session:
    def __init__(
        self,
        session_id: str,
        config: SessionConfig,
        backend: Backend,
        sink: Sink,
        *,
        title: str,
        created_at: str,
        parent_id: str | None = None,
        fork_id: str | None = None,
        label: str | None = None,
        branched_from: BranchedFrom | None = None,
        depth: int = 0,
        status: Status = "starting",
        turn_gate: TurnGate | None = None,
        start: AgentSpec | None = None,
        on_turn_end: Callable[[Session, events.TurnResult], Awaitable[None]] | None = None,
    ) -> None:
        self.id = session_id
        self.config = config
        self.title = title
        self.created_at = created_at
        self.parent_id = parent_id
        self.fork_id = fork_id
        self.label = label
        self.branched_from = branched_from  # a branch's: where it left its parent
        self.depth = depth  # 0 for a top-level session, 1 for its fork children, ...
        self.status: Status = status
        self.last_outcome: Outcome | None = None
        self.event_log = EventLog(session_id)  # its numbered events (`recent`, `last_seq`, ...)
        self.agent_session_id: str | None = None
        self.cost_usd: float = 0.0
        self.usage = Usage()
        # How full its context is: its last main-thread model request (see `_gauge`).
        self.context: ContextUsage | None = None
        # The model calls of the turn under way, counted as they come (see spend.py), and who
        # wants to hear of them (its fork's limits).
        self.meter = Meter()
        self.on_spend: Callable[[Session], None] | None = None
        # When it first ran (took its slot) since it was launched or restarted: a fork child's
        # time limit counts from there, not from when it was queued.
        self.started_at: float | None = None
        self.started = anyio.Event()
        # The main agent's words in the turn under way, kept for a child stopped mid-turn, and
        # whether the turn has its result (a limit no longer stops it then: it has answered).
        self.turn_text: list[str] = []
        self.answered = False
        # A fork child's place: its fork's isolation mode (and why it is shared), its worktree,
        # and its changes once it has ended (set by the fork's Isolation).
        self.isolation: Isolation | None = None
        self.isolation_reason: str | None = None
        self.worktree: Worktree | None = None
        self.changes: Changes | None = None
        # The commit its `changes` count from: None for the fork's snapshot (`worktree.base`);
        # after its changes were applied or discarded and it worked on (a follow-up), that
        # commit, so that only the later work comes back.
        self.changes_since: str | None = None
        self.backend = backend
        self.process = AgentProcess(session_id, backend, lambda: self._wakeup.set())
        self.background = BackgroundTasks(lambda: self._notify_changed())
        self._sink = sink
        self._first_start = start  # how to start the very first agent process (forks differ)
        self._turn_gate = turn_gate
        self._slot: contextlib.AsyncExitStack | None = None  # a held slot, until it is given back
        self.queue_position: int | None = None
        self.streams = Streams()
        self._on_turn_end = on_turn_end
        self._agent_info: events.AgentStarted | None = None
        self._inbox: deque[Turn] = deque()
        self._wakeup = anyio.Event()
        self._holds = 0
        self._pause_requested = False
        self._changed = anyio.Event()  # set (and replaced) whenever the session may have settled
        self._closing = False
        self._final_status: Status | None = "closed"
        self._turn_scope: anyio.CancelScope | None = None
        self._hook_scope: anyio.CancelScope | None = None
        self._in_turn = False
        self._turn_no = 0
        self._cancel_requested = anyio.Event()  # set: the running turn was cancelled
        self._done = anyio.Event()

    # --- what clients see ------------------------------------------------------------------------

    def info(self, tree_usage: Usage | None = None) -> SessionInfo:
        return SessionInfo(
            sessionId=self.id,
            parentId=self.parent_id,
            forkId=self.fork_id,
            label=self.label,
            title=self.title,
            status=self.status,
            cwd=self.config.cwd,
            model=self.config.model,
            permissionMode=self.config.permission_mode,
            forkMode=self.config.fork_mode,
            agentSessionId=self.agent_session_id,
            agent=self.config.agent,
            createdAt=self.created_at,
            costUsd=round(self.cost_usd, 6),
            queued=len(self._inbox),
            queuePosition=self.queue_position,
            usage=self.usage,
            treeUsage=self.usage if tree_usage is None else tree_usage,
            contextUsage=self.context,
            backgroundTasks=list(self.tasks),
            isolation=self.isolation,
            isolationReason=self.isolation_reason,
            worktree=self.worktree,
            changes=self.changes,
            branchedFrom=self.branched_from,
        )

    async def events_after(self, after_seq: int, limit: int | None = None) -> list[EventDict]:
        """Events after `after_seq` that are safely stored (see `EventLog.events_after`)."""
        return await self.event_log.events_after(after_seq, limit)

    async def has_message(self, message_id: str) -> bool:
        """Whether an assistant message of this session has this id."""
        return await self.event_log.has_message(message_id)

    def record(self) -> dict[str, Any]:
        """The session's row in the store."""
        return session_record.record(self)

    @property
    def first_start(self) -> AgentSpec | None:
        """How its very first agent process starts, when that differs from a fresh conversation
        (a fork child's, a branch's); None once it has a conversation of its own."""
        return self._first_start if self.agent_session_id is None else None

    def restart_as_fork(self, start: AgentSpec) -> None:
        """Make an interrupted fork child run again from scratch: a fresh fork of its parent."""
        self._first_start = start
        self.agent_session_id = None
        self._agent_info = None
        self.last_outcome = None
        self.started_at, self.started = None, anyio.Event()
        self.set_status("queued")

    def add_env(self, extra: Mapping[str, str]) -> None:
        """Variables for its agent from now on (a fork child's COVEN_PORT, ...); before its first
        turn, so that its first process has them too."""
        self.config.env = {**self.config.env, **extra}  # a new dict: the parent's is shared
        if self._first_start is not None:
            self._first_start = dataclasses.replace(
                self._first_start, env={**self._first_start.env, **extra}
            )

    def restore(self, row: dict[str, Any]) -> None:
        """Take up where a stopped server left off (see `session_record.restore`)."""
        session_record.restore(self, row)

    def emit(self, payload: events.Payload) -> EventDict:
        event = self.event_log.append(payload)
        self._sink.publish(event)
        return event

    # The log's figures, which the journal and the hub read and advance.

    @property
    def last_seq(self) -> int:
        return self.event_log.last_seq

    @property
    def recent(self) -> list[EventDict]:
        return self.event_log.recent

    @property
    def committed_seq(self) -> int | None:
        return self.event_log.committed_seq

    @committed_seq.setter
    def committed_seq(self, seq: int | None) -> None:
        self.event_log.committed_seq = seq

    @property
    def store(self) -> Store | None:
        return self.event_log.store

    @store.setter
    def store(self, store: Store | None) -> None:
        self.event_log.store = store

    @property
    def tasks(self) -> dict[str, events.Task]:
        """The CLI's background tasks that still run (task id -> the last word on each)."""
        return self.background.running

    @property
    def live_usage(self) -> Usage:
        """Its tokens so far, the calls of the turn under way included."""
        return self.usage + self.meter.usage

    @property
    def live_cost_usd(self) -> float:
        """Its cost so far, the calls of the turn under way included (as far as priced)."""
        return self.cost_usd + self.meter.cost_usd

    def set_status(self, status: Status) -> None:
        """The one place a session's status changes (and says so in a `status` event)."""
        if status == self.status:
            return
        problem = check_transition(self.status, status)
        if problem is not None:  # a bug in coven-ls: say so, but keep the session going
            log.error("session %s: %s", self.id, problem)
        self.status = status
        self.emit(events.StatusChanged(status=status))

    def _notify_changed(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    @property
    def settled(self) -> bool:
        """Nothing running, queued or held: the session's work, forks included, is done."""
        if self._closing:  # settled once it is closed, with its final status
            return self._done.is_set()
        return not (
            self._in_turn or self._inbox or self._holds or self.tasks or self.background.report_due
        )

    async def wait_settled(self) -> None:
        while not self.settled:
            await self._changed.wait()

    @property
    def closed(self) -> bool:
        return self.status in protocol.FINAL_STATUSES or self._closing

    @property
    def stopped_with_server(self) -> bool:
        """Closed because the server is stopping (not by a user): a restart takes it up again."""
        return self._closing and self._final_status is None

    @property
    def busy(self) -> bool:
        return self._in_turn

    # --- commands (called from request handlers) -------------------------------------------------

    def send(self, text: str, origin: Origin = "user", *, first: bool = False) -> int:
        """Queue a turn; returns how many turns are ahead of it (0: it starts now). `first` puts
        it ahead of the queued ones (fork results go before messages sent during the fork)."""
        if self.closed:
            raise protocol.CovenError(
                protocol.ErrorCode.InvalidState,
                f"Session {self.id} is "
                f"{self.status if self.status in protocol.FINAL_STATUSES else 'closing'}; "
                "it takes no more messages. Start a new session with coven/startSession.",
                {"sessionId": self.id, "status": self.status},
            )
        busy = 1 if self._in_turn or self._holds else 0
        if first:
            self._inbox.appendleft(Turn(text, origin))
            ahead = busy
        else:
            ahead = len(self._inbox) + busy
            self._inbox.append(Turn(text, origin))
        self._wakeup.set()
        return ahead

    def hold(self) -> None:
        """Keep queued turns waiting (while a fork is proposed or runs) until `release`."""
        self._holds += 1

    def release(self) -> None:
        self._holds = max(self._holds - 1, 0)
        self._wakeup.set()
        self._notify_changed()

    def pause_agent(self) -> None:
        """Stop the agent process as soon as no turn runs (a forking parent must not keep working
        invisibly); the next turn resumes the conversation from disk."""
        self._pause_requested = True
        self._wakeup.set()

    async def stop_task(self, task_id: str) -> None:
        """Stop one background task of the CLI (a subagent): the CLI reports its end as usual."""
        if task_id not in self.tasks or self.process.agent is None:
            raise protocol.CovenError(
                protocol.ErrorCode.InvalidState,
                f"Session {self.id} has no running background task '{task_id}'; the `task` "
                "events say which run (SessionInfo.backgroundTasks lists them).",
                {"sessionId": self.id, "taskId": task_id},
            )
        try:
            await self.process.agent.stop_task(task_id)
        except TaskNotRunning as exc:
            # Nothing will ever report its end: it no longer runs, as far as anyone can tell.
            task, due = self.tasks.get(task_id), self.background.report_due
            if task is not None:
                self._publish_task_end(task, "no longer run by the agent")
                self.background.report_due = due  # nor will the agent report it
            raise protocol.CovenError(
                protocol.ErrorCode.InvalidState,
                f"Session {self.id}'s agent no longer runs the background task '{task_id}': "
                f"{exc} It is no longer listed as running.",
                {"sessionId": self.id, "taskId": task_id},
            ) from exc

    async def set_permission_mode(self, mode: PermissionMode) -> None:
        """From now on: the running CLI's next tool call, and every later start of it."""
        self.config.permission_mode = mode
        if self.process.agent is not None:
            await self.process.agent.set_permission_mode(mode)

    async def cancel(self) -> int:
        """Interrupt the running turn and drop queued ones; returns how many were dropped. The
        session stays usable: its agent conversation is kept and the next message resumes it."""
        dropped = len(self._inbox)
        self._inbox.clear()
        if not self._in_turn:
            return dropped
        self._cancel_requested.set()
        agent, scope, turn_no = self.process.agent, self._turn_scope, self._turn_no
        if agent is not None and self.status == "running":
            try:
                with anyio.fail_after(INTERRUPT_GRACE_SECONDS):
                    await agent.interrupt()
            except Exception as exc:  # the process may be gone already; stop it outright below
                log.warning("session %s: interrupt failed (%s); stopping the agent", self.id, exc)
                if scope is not None:
                    scope.cancel()
                return dropped
            # The CLI answers an interrupt with a result that ends the turn; if it does not come,
            # stop the process (the conversation is on disk and the next turn resumes it).
            if scope is not None and self._turn_no == turn_no:
                scope.deadline = min(scope.deadline, anyio.current_time() + INTERRUPT_GRACE_SECONDS)
        elif scope is not None:
            scope.cancel()  # still starting: nothing to interrupt yet
        return dropped

    async def close(self, final_status: Status | None = "closed") -> None:
        """End the session and its agent process; returns when the process is gone. A fork child
        stopped by the user ends as `cancelled` rather than `closed`; `None` (the server shutting
        down) leaves the status as it is, so a restart can take the session up again."""
        self.begin_close(final_status)
        with anyio.move_on_after(CLOSE_SECONDS):
            await self._done.wait()

    def begin_close(self, final_status: Status | None = "closed", *, kill: bool = False) -> None:
        """`close` without waiting: from here on the session takes no more turns, and the one
        under way ends without an outcome of its own (a fork limit has set it). `kill`: its
        process is killed at once rather than given time to end (the CLI keeps working while it
        is, and a child that reached its limit must not spend more)."""
        if kill:
            self.process.kill()
        if not self._closing:
            self._closing = True
            self._final_status = final_status
            self._inbox.clear()
            for scope in (self._turn_scope, self._hook_scope):
                if scope is not None:
                    scope.cancel()
            self._wakeup.set()

    # --- the runner ------------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            async with anyio.create_task_group() as readers:
                self.process.task_group = readers
                try:
                    while True:
                        work = await self._next_work()
                        if work is None:
                            break
                        await self._run_turn(work if isinstance(work, Turn) else None)
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._give_back_slot()
                        await self._close_agent()
        except Exception as exc:  # a bug; say so rather than let the session hang silently
            log.exception("session %s crashed", self.id)
            self.emit(events.Error(message=f"internal error in coven-ls: {exc!r}"))
            self.set_status("failed")
        finally:
            with anyio.CancelScope(shield=True):
                await self._close_agent()
            self._closing = True
            self._in_turn = False
            self._inbox.clear()
            if self._final_status is not None:
                self.set_status(self._final_status)
            self._done.set()
            self._notify_changed()

    async def _next_work(self) -> Turn | _CliTurn | None:
        """What the runner does next: a queued turn, a turn the CLI started by itself
        (`_CLI_TURN`), or nothing more (None: the session is closing). Meanwhile it publishes
        what the CLI says between turns: its background tasks' news and their subagents'
        messages."""
        while True:
            if self._closing:
                return None
            if self._pause_requested:
                self._pause_requested = False
                await self._close_agent()
            while self.process.incoming:
                item = self.process.incoming[0]
                if _starts_a_turn(item):
                    return _CLI_TURN  # the turn reads it
                self.process.incoming.popleft()
                if isinstance(item, StreamEnded):
                    log.info("session %s: the CLI ended between turns (%s)", self.id, item)
                    if item.error is not None:
                        # Died while idle (killed, crashed): said now, not at the next message.
                        self.emit(events.Error(message=self._ended_by(item.error)))
                    await self._close_agent()
                else:
                    self._publish(item)
            if self._inbox and not self._holds:
                return self._inbox.popleft()
            if not self.tasks and not self.background.report_due:
                # Quiet (or waiting for its own fork): a fork child's slot, and its CLI, go to
                # whoever waits for one.
                await self._give_back_slot()
            if self.background.report_due:
                # The CLI reports an ended task in a turn of its own, soon; if it does not
                # (it folded the news into a turn already under way), stop waiting for it.
                with anyio.move_on_after(REPORT_GRACE_SECONDS) as waited:
                    await self._wakeup.wait()
                if waited.cancelled_caught:
                    self.background.report_due = False
                    self._notify_changed()
                    continue
            else:
                await self._wakeup.wait()
            self._wakeup = anyio.Event()

    def _ended_by(self, error: Exception) -> str:
        # An AgentFailed says it in the agent's own words (how codex's app-server ended, say).
        return describe_failure(error, self.process.stderr())

    def _next_spec(self) -> AgentSpec:
        if self.agent_session_id is None and self._first_start is not None:
            return self._first_start
        return AgentSpec(
            cwd=self.config.cwd,
            model=self.config.model,
            permission_mode=self.config.permission_mode,
            start=Resume(self.agent_session_id) if self.agent_session_id is not None else New(),
            append_system_prompt=self.config.append_system_prompt,
            env=self.config.env,
        )

    async def _ask_permission(
        self, tool_name: str, tool_input: dict[str, Any], tool_use_id: str | None
    ) -> tuple[bool, str]:
        self.emit(
            events.PermissionRequest(toolUseId=tool_use_id, toolName=tool_name, input=tool_input)
        )
        # Every request gets a decision event, even when the turn is cut off while the user
        # thinks, so that no client is left showing a question nobody will answer.
        allow, message = False, "Denied: the turn ended before the user answered."
        self.process.asking += 1
        try:
            allow, message = await self._sink.ask_permission(
                self, tool_name, tool_input, tool_use_id
            )
        except ConnectionError as exc:  # the editor went away while the user thought
            allow, message = False, f"Denied: {exc}."
        except Exception as exc:
            log.exception("session %s: permission request failed", self.id)
            allow, message = False, f"The editor could not be asked for permission: {exc}"
        finally:
            self.process.asking -= 1
            self.process.heard_at = anyio.current_time()
            self.emit(
                events.PermissionDecision(
                    toolUseId=tool_use_id, toolName=tool_name, allow=allow, message=message or None
                )
            )
        return allow, message

    async def _repeat_interrupt(self, agent: Agent) -> None:
        """An interrupt that reaches the CLI before it has taken up the turn's message is lost;
        while a cancelled turn goes on, ask again every second (cancel() stops the process when
        the grace period is over)."""
        await self._cancel_requested.wait()
        while True:
            await anyio.sleep(1.0)
            try:
                await agent.interrupt()
            except Exception:
                log.debug("session %s: repeated interrupt failed", self.id, exc_info=True)

    async def _run_turn(self, turn: Turn | None) -> None:
        """One turn: a message of ours (`turn`), or one the CLI started by itself (None) to
        report on background tasks that ended."""
        self._in_turn = True
        self._turn_no += 1
        self._cancel_requested = anyio.Event()
        self.background.report_due = (
            False  # whatever ended so far, this turn is where the CLI says so
        )
        self.turn_text, self.answered = [], False
        if turn is not None:
            self.emit(events.Prompt(text=turn.text, origin=turn.origin))
        else:
            self.emit(events.Prompt(text=self.background.report(), origin="task"))
        result: events.TurnResult | None = None
        failure: str | None = None
        try:
            with anyio.CancelScope() as scope:
                self._turn_scope = scope
                await self._take_slot()
                if self.started_at is None:
                    self.started_at = anyio.current_time()
                    self.started.set()
                if turn is not None:
                    agent = self.process.agent
                    if agent is None:
                        self.set_status("starting")
                        spec = self._next_spec()
                        if not isinstance(spec.start, Resume):  # a conversation of its own
                            spec = dataclasses.replace(spec, title=self.label or self.title)
                        if self.worktree is not None:
                            spec = dataclasses.replace(
                                spec,
                                read_only_roots=(self.worktree.repository,),
                                temp_dir=str(worktrees.temp_folder(self.worktree.path)),
                            )
                        agent = await self.process.open(spec, self._ask_permission)
                    self.set_status("running")
                    await agent.send(turn.text)
                else:
                    self.set_status("running")
                assert self.process.agent is not None
                self.process.heard_at = anyio.current_time()
                async with anyio.create_task_group() as watchers:
                    watchers.start_soon(self._repeat_interrupt, self.process.agent)
                    result = await self._relay()
                    watchers.cancel_scope.cancel()
                if result is None:
                    failure = (
                        "The agent process ended in the middle of a turn." + self.process.tail()
                    )
        except Exception as group:
            exc = _first_error(group)
            if isinstance(exc, protocol.CovenError):
                failure = exc.message
            elif isinstance(exc, ChildIdle):
                failure = str(exc)
                self.process.kill()  # silent this long: it would not heed a graceful close
            elif isinstance(exc, AgentFailed):
                failure = str(exc)
            else:
                log.warning("session %s: turn failed", self.id, exc_info=True)
                failure = describe_failure(exc, self.process.stderr())
        finally:
            self._turn_scope = None
        if result is None and failure is None and not self._closing:
            failure = (
                "The turn was stopped."
                if self._cancel_requested.is_set()
                else "The turn did not finish."
            )
        if result is None or failure is not None:
            # The process is in an unknown state: stop it; the next turn resumes the conversation.
            with anyio.CancelScope(shield=True):
                await self._close_agent()
        try:
            if self._closing:
                return
            if result is None:
                if self._cancel_requested.is_set():
                    self.last_outcome = Outcome(False, error="cancelled by the user")
                    self.emit(
                        events.TurnResult(
                            text="", isError=False, subtype="cancelled", cancelled=True, costUsd=0.0
                        )
                    )
                    self.set_status("idle")
                else:
                    failure = failure or "The turn failed."
                    self.last_outcome = Outcome(False, error=failure)
                    self.emit(events.Error(message=failure))
                    self.set_status("failed")
                return
            match result:
                case events.TurnResult(cancelled=True):
                    self.last_outcome = Outcome(False, result.text, "cancelled by the user")
                case events.TurnResult(isError=True):
                    self.last_outcome = Outcome(False, result.text, result.text or "failed")
                case _:
                    self.last_outcome = Outcome(True, result.text)
            if self._on_turn_end is not None:
                # Before `idle`: the hook may move the session on (a proposed or started fork).
                await self._run_hook(result)
            if self.status == "running":
                self.set_status("idle")
        finally:
            self._in_turn = False
            self._notify_changed()

    async def _take_slot(self) -> None:
        """A fork child works only in one of the server's slots (maxParallel): it takes one for
        a turn, and keeps it while the turn's background tasks run and for the turns the CLI
        starts to report them. Its CLI goes with the slot (`_give_back_slot`), so the limit
        bounds processes (~200 MiB each), not only turns."""
        if self._turn_gate is None or self._slot is not None:
            return
        stack = contextlib.AsyncExitStack()
        await stack.enter_async_context(self._turn_gate(self.id, self._in_line))
        self._slot = stack

    async def _give_back_slot(self) -> None:
        slot, self._slot = self._slot, None
        if slot is not None:
            try:
                await self._close_agent()  # the next turn resumes the conversation from disk
            finally:
                await slot.aclose()

    def _in_line(self, position: int | None) -> None:
        """Where this session waits for a slot (None: it has one)."""
        if position is not None:
            self.set_status("queued")
            if position != self.queue_position:
                self.queue_position = position
                self.emit(events.QueuePosition(position=position))
        self.queue_position = position

    async def _run_hook(self, result: events.TurnResult) -> None:
        """The turn-end hook (fork detection) is part of the turn: messages sent meanwhile queue
        behind it, and close() stops it."""
        assert self._on_turn_end is not None
        try:
            with anyio.CancelScope() as scope:
                self._hook_scope = scope
                await self._on_turn_end(self, result)
        except Exception as exc:
            log.exception("session %s: turn-end hook failed", self.id)
            self.emit(events.Error(message=f"internal error in coven-ls after the turn: {exc!r}"))
        finally:
            self._hook_scope = None

    async def _relay(self) -> events.TurnResult | None:
        """Publish the agent's events until the turn's end; None if the process ends first (an
        error it died of is raised)."""
        while True:
            limit = self.config.child_idle_timeout if self.fork_id else 0
            item = await self.process.next_message_or_idle(limit)
            if self._closing:
                return None  # stopped (a fork limit): what the agent says after that is not shown
            if isinstance(item, StreamEnded):
                if item.error is not None:
                    raise item.error
                return None
            result = self._publish(item)
            if isinstance(item, agent_events.TurnEnded):
                if item.conversation_id:
                    self.agent_session_id = item.conversation_id
                self.streams.clear(None)  # what the cut-off turn was still streaming is moot
                return result

    def _publish(self, event: AgentEvent) -> events.TurnResult | None:
        """Publish what one agent event says: streamed pieces as deltas, the rest as events.
        Returns the turn's result (as published), if the event ends a turn."""
        match event:
            case agent_events.BlockStarted():
                self.streams.start(event)
                return None
            case agent_events.Delta():
                piece = self.streams.feed(event)
                if piece is not None:
                    self._sink.publish_delta(
                        events.Delta(
                            sessionId=self.id,
                            afterSeq=self.last_seq,
                            blockId=piece.block_id,
                            kind=piece.kind,
                            text=piece.text,
                            parentToolUseId=piece.parent_tool_use_id,
                        )
                    )
                return None
            case agent_events.ModelCall():
                self._gauge(event)
                self._count_call(event)
                return None
            case agent_events.AgentMessage():
                self._gauge(event.call)
                for payload in message_payloads(event):
                    if isinstance(payload, (events.Text, events.Thinking)):
                        kind: StreamKind = (
                            "text" if isinstance(payload, events.Text) else "thinking"
                        )
                        block = self.streams.finish(event.call_id, kind)
                        if block is not None:
                            payload = msgspec.structs.replace(payload, blockId=block)
                        if isinstance(payload, events.Text) and payload.parentToolUseId is None:
                            self.turn_text.append(payload.text)
                    self.emit(payload)
                self._count_call(event.call)  # after its parts: a child stopped here keeps them
                return None
        result: events.TurnResult | None = None
        for payload in to_payloads(event):
            if isinstance(payload, events.AgentStarted):
                # The CLI announces itself at every turn; clients need it once per change.
                if payload == self._agent_info:
                    continue
                self._agent_info = payload
                self.agent_session_id = payload.agentSessionId or self.agent_session_id
            elif isinstance(payload, events.TurnResult):
                payload = self._account(payload)
                if payload.usage is not None:
                    self.usage = self.usage + payload.usage
                if self.context is not None:
                    payload = msgspec.structs.replace(payload, contextUsage=self.context)
                self.meter.clear()  # the turn's own figures replace its calls'
                if self._cancel_requested.is_set():
                    # The user stopped it: that is no error, and the CLI's text for it
                    # ("[ede_diagnostic] result_type=user ...") is no answer.
                    payload = msgspec.structs.replace(
                        payload, cancelled=True, isError=False, text=""
                    )
            elif isinstance(payload, events.Task):
                tracked = self.background.track(payload)
                if tracked is None:
                    continue
                agent = self.process.agent
                if agent is not None and not agent.reports_ended_tasks:
                    self.background.report_due = False  # no turn of its own will report it
                payload = tracked
            self.emit(payload)
            if isinstance(payload, events.TurnResult):
                result = payload
                self.answered = True
                self._spent()
        return result

    def _count_call(self, call: agent_events.ModelCall | None) -> None:
        """A model call's tokens (and cost, when known), as soon as the agent reports them: a
        fork's limits count them."""
        if call is None or not call.call_id:
            return
        if self.meter.add(call.call_id, call.usage, call.cost_usd):
            self._spent()

    def _spent(self) -> None:
        if self.on_spend is not None:
            self.on_spend(self)

    def _gauge(self, call: agent_events.ModelCall | None) -> None:
        """Each model call of the session's own (not a subagent's) sets its context: what the
        request put in (input, cache read, cache creation)."""
        if call is None or call.parent_tool_call_id is not None or not call.context_tokens:
            return
        self.context = context_usage(call.context_tokens, call.model or None)
        if call.context_size is not None:
            self.context = msgspec.structs.replace(self.context, window=call.context_size)

    def _publish_task_end(
        self, task: events.Task, summary: str = "stopped with the agent process"
    ) -> None:
        ended = events.Task(
            taskId=task.taskId,
            status="stopped",
            toolUseId=task.toolUseId,
            description=task.description,
            summary=summary,
        )
        published = self.background.track(ended)
        if published is not None:
            self.emit(published)
        self.background.report_due = False  # the process is gone: no turn will report it

    def _account(self, result: events.TurnResult) -> events.TurnResult:
        """The CLI reports the process's running total; turn it into this turn's cost."""
        total = result.costUsd
        if total is None or not math.isfinite(total):
            return result
        turn_cost = max(total - self.process.cost, 0.0)
        self.process.cost = total
        self.cost_usd += turn_cost
        return msgspec.structs.replace(result, costUsd=round(turn_cost, 6))

    async def _close_agent(self) -> None:
        agent = self.process.stop_reading()
        self.streams.clear_all()
        for task in list(self.tasks.values()):  # background tasks die with the process
            self._publish_task_end(task)
        await self.process.close(agent)


class _CliTurn:
    """`_next_work`'s answer when the CLI started a turn by itself."""


_CLI_TURN = _CliTurn()


def _starts_a_turn(event: AgentEvent | StreamEnded) -> bool:
    """Whether an event that arrives between turns opens a turn of the agent's own: its start,
    the main agent's words or streaming, or a turn's end (a subagent's words and task news do
    not)."""
    if isinstance(event, (agent_events.AgentStarted, agent_events.TurnEnded)):
        return True
    if isinstance(
        event,
        (
            agent_events.AgentMessage,
            agent_events.BlockStarted,
            agent_events.Delta,
            agent_events.Activity,
            agent_events.ModelCall,
        ),
    ):
        return event.parent_tool_call_id is None
    return False


def _first_error(exc: BaseException) -> BaseException:
    """The error itself, out of the exception groups that task groups wrap it in."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
