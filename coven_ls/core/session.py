"""One Claude Code session: its turns, its status, its numbered event log, and its agent process.

A session is driven by one runner task (`run`), which alone opens and closes the agent process,
because claude-agent-sdk's client must be connected and disconnected in the same task. Everything
else (a new message, cancel, close) only queues work for the runner or interrupts it.

No pygls here: events leave through the `Sink` the session is given.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import msgspec
from anyio.abc import TaskGroup
from claude_agent_sdk import AssistantMessage, ResultMessage, StreamEvent, SystemMessage

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
from ..protocol.types import Changes, Isolation, MergeMode, Origin, StreamKind, Usage, Worktree
from .agent import (
    Agent,
    AgentSpec,
    AgentStartError,
    Backend,
    describe_failure,
    meaningful_lines,
)
from .mapping import map_message
from .status import check_transition
from .store import Store
from .streaming import Streams

if sys.version_info < (3, 11):  # anyio brings the backport there
    from exceptiongroup import BaseExceptionGroup

log = logging.getLogger(__name__)

# A stored session keeps this many of its latest committed events in memory (up to twice as many
# between trims), for the clients that catch up on what they just missed; older ones are read
# from the store when asked for. A session without a store keeps all of its events.
RECENT_EVENTS = 100
# Assistant message events: the ones that carry the messageId a fork by hand may start at.
MESSAGE_KINDS = (protocol.Kind.TEXT, protocol.Kind.THINKING, protocol.Kind.TOOL_USE)

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
    child_idle_timeout: float = _DEFAULTS.childIdleTimeoutSeconds  # for its fork children; 0: off


@dataclass
class Turn:
    text: str
    origin: Origin = "user"  # who wrote it: a client, or the server itself (e.g. "forkResults")


@dataclass(frozen=True)
class Outcome:
    """How a session's last turn ended, as a fork reports it to the parent."""

    ok: bool
    text: str = ""
    error: str | None = None


class ChildIdle(Exception):
    """A fork child's CLI said nothing for `childIdleTimeoutSeconds` in a turn."""


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
        depth: int = 0,
        status: Status = "starting",
        turn_gate: TurnGate | None = None,
        start: AgentSpec | None = None,
        on_turn_end: Callable[[Session, dict[str, Any]], Awaitable[None]] | None = None,
    ) -> None:
        self.id = session_id
        self.config = config
        self.title = title
        self.created_at = created_at
        self.parent_id = parent_id
        self.fork_id = fork_id
        self.label = label
        self.depth = depth  # 0 for a top-level session, 1 for its fork children, ...
        self.status: Status = status
        self.last_outcome: Outcome | None = None
        # The store has every event up to here (the journal advances it); None: no store.
        self.committed_seq: int | None = None
        self.store: Store | None = None  # where older events are read from (set by the journal)
        self.last_seq = 0  # the seq of the session's latest event
        self.agent_session_id: str | None = None
        self.cost_usd: float = 0.0
        self.usage = Usage()
        # The CLI's background tasks that still run (task id -> the last word on each).
        self.tasks: dict[str, events.Task] = {}
        # The latest events, up to last_seq with no gap: all of them without a store; with one,
        # those not committed yet and the RECENT_EVENTS before them (none of a restored log).
        self.recent: list[EventDict] = []
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
        self._sink = sink
        self._first_start = start  # how to start the very first agent process (forks differ)
        self._turn_gate = turn_gate
        self._slot: contextlib.AsyncExitStack | None = None  # a held slot, until it is given back
        self.queue_position: int | None = None
        # The CLI is read all the time, not only during a turn: a reader task puts what it says
        # here, and the runner takes it from here (in a turn, or between turns).
        self._incoming: deque[Any] = deque()
        self._arrived = anyio.Event()
        self._reader: anyio.CancelScope | None = None
        self._task_group: TaskGroup | None = None
        self.streams = Streams()
        self._ended_tasks: list[events.Task] = []  # since the last turn, for a CLI-started one
        self._ended: dict[str, events.Task] = {}  # every task that ended, by id
        # A task ended and the CLI is about to start a turn to report it: the session is not
        # done yet (nor may its CLI stop), though nothing runs for a moment.
        self._report_due = False
        self._on_turn_end = on_turn_end
        self._agent: Agent | None = None
        self._agent_info: events.AgentStarted | None = None
        self._process_cost = 0.0  # total_cost_usd the current process has reported so far
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
        self._asking = 0  # permission questions waiting for the user (the CLI waits silently)
        self._heard_at = 0.0  # when the CLI last said something, or the user last answered it
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
            createdAt=self.created_at,
            costUsd=round(self.cost_usd, 6),
            queued=len(self._inbox),
            queuePosition=self.queue_position,
            usage=self.usage,
            treeUsage=self.usage if tree_usage is None else tree_usage,
            backgroundTasks=list(self.tasks),
            isolation=self.isolation,
            isolationReason=self.isolation_reason,
            worktree=self.worktree,
            changes=self.changes,
        )

    async def events_after(self, after_seq: int, limit: int | None = None) -> list[EventDict]:
        """Events after `after_seq` (the first `limit` of them) that are safely stored (a client
        must never hold an event that a crash could take back): from memory, and from the store
        what memory no longer holds."""
        after = max(after_seq, 0)
        older: list[EventDict] = []
        while limit is None or len(older) < limit:
            # Everything before the memory's first event is committed (only committed events
            # are dropped from memory), so the store has it.
            first = self.last_seq - len(self.recent) + 1
            store = self.store
            if after + 1 >= first or store is None:
                break
            wanted = None if limit is None else limit - len(older)
            read = await anyio.to_thread.run_sync(
                store.events_between, self.id, after, first - 1, wanted
            )
            older += read
            if wanted is not None and len(read) == wanted:
                return older
            after = first - 1  # memory may have dropped more meanwhile: go round again
        upto = self.last_seq if self.committed_seq is None else self.committed_seq
        first = self.last_seq - len(self.recent) + 1
        start = max(after + 1 - first, 0)
        end = max(upto + 1 - first, start)
        if limit is not None:
            end = min(end, start + limit - len(older))
        return older + self.recent[start:end]

    async def has_message(self, message_id: str) -> bool:
        """Whether an assistant message of this session has this id."""
        if any(e.get("messageId") == message_id for e in self.recent if e["kind"] in MESSAGE_KINDS):
            return True
        first = self.last_seq - len(self.recent) + 1
        store = self.store
        if store is None or first <= 1:
            return False
        seq = await anyio.to_thread.run_sync(
            lambda: store.first_seq(
                self.id, MESSAGE_KINDS, {"messageId": message_id}, upto_seq=first - 1
            )
        )
        return seq is not None

    def record(self) -> dict[str, Any]:
        """The session's row in the store."""
        outcome = self.last_outcome
        return {
            "session_id": self.id,
            "parent_id": self.parent_id,
            "fork_id": self.fork_id,
            "label": self.label,
            "title": self.title,
            "status": self.status,
            "agent_session_id": self.agent_session_id,
            "cwd": self.config.cwd,
            "model": self.config.model,
            "permission_mode": self.config.permission_mode,
            "fork_mode": self.config.fork_mode,
            "created_at": self.created_at,
            "cost_usd": self.cost_usd,
            "usage": msgspec.to_builtins(self.usage),
            "depth": self.depth,
            "max_children": self.config.max_children,
            "max_parallel": self.config.max_parallel,
            "max_depth": self.config.max_depth,
            "outcome": None
            if outcome is None
            else {"ok": outcome.ok, "text": outcome.text, "error": outcome.error},
            "isolation": None
            if self.isolation is None
            else {
                "mode": self.isolation,
                "reason": self.isolation_reason,
                "worktree": msgspec.to_builtins(self.worktree),
                "changes": msgspec.to_builtins(self.changes),
                "since": self.changes_since,
            },
        }

    def restart_as_fork(self, start: AgentSpec) -> None:
        """Make an interrupted fork child run again from scratch: a fresh fork of its parent."""
        self._first_start = start
        self.agent_session_id = None
        self._agent_info = None
        self.last_outcome = None
        self.set_status("queued")

    def restore(self, row: dict[str, Any]) -> None:
        """Take up where a stopped server left off: its log (where it ends; the events stay in
        the store until a client asks for them), cost, agent session and outcome. Whatever was
        under way is `interrupted`, and says so in a new event."""
        self.recent = []
        self.last_seq = self.committed_seq = row["last_seq"] or 0
        self.agent_session_id = row["agent_session_id"]
        self.cost_usd = row["cost_usd"] or 0.0
        if row.get("usage"):
            self.usage = msgspec.convert(row["usage"], Usage)
        outcome = row.get("outcome")
        if outcome is not None:
            self.last_outcome = Outcome(
                outcome["ok"], outcome.get("text") or "", outcome.get("error")
            )
        isolation = row.get("isolation")
        if isolation is not None:
            self.isolation = isolation["mode"]
            self.isolation_reason = isolation.get("reason")
            if isolation.get("worktree"):
                self.worktree = msgspec.convert(isolation["worktree"], Worktree)
            if isolation.get("changes"):
                self.changes = msgspec.convert(isolation["changes"], Changes)
            self.changes_since = isolation.get("since")
        if self.status in protocol.BUSY_STATUSES:
            self.set_status("interrupted")

    def emit(self, payload: events.Payload) -> EventDict:
        self.last_seq += 1
        event = protocol.event_dict(self.id, self.last_seq, protocol.now_iso(), payload)
        self.recent.append(event)
        if self.committed_seq is not None and len(self.recent) >= 2 * RECENT_EVENTS:
            self._forget_committed()
        self._sink.publish(event)
        return event

    def _forget_committed(self) -> None:
        """Keep RECENT_EVENTS committed events in memory (and every uncommitted one)."""
        first = self.last_seq - len(self.recent) + 1
        committed = (self.committed_seq or 0) - first + 1
        drop = min(len(self.recent) - RECENT_EVENTS, committed)
        if drop > 0:
            del self.recent[:drop]

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
        return not (self._in_turn or self._inbox or self._holds or self.tasks or self._report_due)

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
        if task_id not in self.tasks or self._agent is None:
            raise protocol.CovenError(
                protocol.ErrorCode.InvalidState,
                f"Session {self.id} has no running background task '{task_id}'; the `task` "
                "events say which run (SessionInfo.backgroundTasks lists them).",
                {"sessionId": self.id, "taskId": task_id},
            )
        await self._agent.stop_task(task_id)

    async def set_permission_mode(self, mode: PermissionMode) -> None:
        """From now on: the running CLI's next tool call, and every later start of it."""
        self.config.permission_mode = mode
        if self._agent is not None:
            await self._agent.set_permission_mode(mode)

    async def cancel(self) -> int:
        """Interrupt the running turn and drop queued ones; returns how many were dropped. The
        session stays usable: its agent conversation is kept and the next message resumes it."""
        dropped = len(self._inbox)
        self._inbox.clear()
        if not self._in_turn:
            return dropped
        self._cancel_requested.set()
        agent, scope, turn_no = self._agent, self._turn_scope, self._turn_no
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
        if not self._closing:
            self._closing = True
            self._final_status = final_status
            self._inbox.clear()
            for scope in (self._turn_scope, self._hook_scope):
                if scope is not None:
                    scope.cancel()
            self._wakeup.set()
        with anyio.move_on_after(CLOSE_SECONDS):
            await self._done.wait()

    # --- the runner ------------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            async with anyio.create_task_group() as readers:
                self._task_group = readers
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
            while self._incoming:
                item = self._incoming[0]
                if _starts_a_turn(item):
                    return _CLI_TURN  # the turn reads it
                self._incoming.popleft()
                if isinstance(item, _StreamEnded):
                    log.info("session %s: the CLI ended between turns (%s)", self.id, item)
                    await self._close_agent()
                else:
                    self._publish(item)
            if self._inbox and not self._holds:
                return self._inbox.popleft()
            if not self.tasks and not self._report_due:
                # Quiet (or waiting for its own fork): a fork child's slot, and its CLI, go to
                # whoever waits for one.
                await self._give_back_slot()
            if self._report_due:
                # The CLI reports an ended task in a turn of its own, soon; if it does not
                # (it folded the news into a turn already under way), stop waiting for it.
                with anyio.move_on_after(REPORT_GRACE_SECONDS) as waited:
                    await self._wakeup.wait()
                if waited.cancelled_caught:
                    self._report_due = False
                    self._notify_changed()
                    continue
            else:
                await self._wakeup.wait()
            self._wakeup = anyio.Event()

    def _next_spec(self) -> AgentSpec:
        if self.agent_session_id is None and self._first_start is not None:
            return self._first_start
        return AgentSpec(
            cwd=self.config.cwd,
            model=self.config.model,
            permission_mode=self.config.permission_mode,
            resume=self.agent_session_id,
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
        self._asking += 1
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
            self._asking -= 1
            self._heard_at = anyio.current_time()
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
        self._report_due = False  # whatever ended so far, this turn is where the CLI says so
        if turn is not None:
            self.emit(events.Prompt(text=turn.text, origin=turn.origin))
        else:
            self.emit(events.Prompt(text=self._task_report(), origin="task"))
        result: dict[str, Any] | None = None
        failure: str | None = None
        try:
            with anyio.CancelScope() as scope:
                self._turn_scope = scope
                await self._take_slot()
                if turn is not None:
                    if self._agent is None:
                        self.set_status("starting")
                        spec = self._next_spec()
                        self._agent = await self.backend.open(spec, self._ask_permission)
                        self._process_cost = 0.0
                        self._start_reader(self._agent)
                    self.set_status("running")
                    await self._agent.send(turn.text)
                else:
                    self.set_status("running")
                assert self._agent is not None
                self._heard_at = anyio.current_time()
                async with anyio.create_task_group() as watchers:
                    watchers.start_soon(self._repeat_interrupt, self._agent)
                    result = await self._relay()
                    watchers.cancel_scope.cancel()
                if result is None:
                    failure = (
                        "The Claude Code process ended in the middle of a turn." + self._tail()
                    )
        except Exception as group:
            exc = _first_error(group)
            if isinstance(exc, protocol.CovenError):
                failure = exc.message
            elif isinstance(exc, ChildIdle):
                failure = str(exc)
                if self._agent is not None:
                    self._agent.kill()  # silent this long: it would not heed a graceful close
            elif isinstance(exc, AgentStartError):
                failure = str(exc)
            else:
                log.warning("session %s: turn failed", self.id, exc_info=True)
                failure = describe_failure(exc, self._stderr())
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
            if result.get("cancelled"):
                self.last_outcome = Outcome(False, result["text"], "cancelled by the user")
            elif result["isError"]:
                self.last_outcome = Outcome(False, result["text"], result["text"] or "failed")
            else:
                self.last_outcome = Outcome(True, result["text"])
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

    async def _run_hook(self, result: dict[str, Any]) -> None:
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

    def _stderr(self) -> str:
        return self._agent.stderr_tail() if self._agent is not None else ""

    def _tail(self) -> str:
        reason = meaningful_lines(self._stderr())
        return f" Its last output: {reason}" if reason else ""

    def _start_reader(self, agent: Agent) -> None:
        """Read the CLI for as long as its process lives, turn or no turn."""
        assert self._task_group is not None
        scope = anyio.CancelScope()
        self._reader = scope

        async def read() -> None:
            with scope:
                try:
                    async with contextlib.aclosing(agent.messages()) as stream:
                        async for message in stream:
                            self._push(message)
                except Exception as exc:
                    self._push(_StreamEnded(exc))
                else:
                    self._push(_StreamEnded(None))

        self._task_group.start_soon(read, name=f"reader of {self.id}")

    def _push(self, item: Any) -> None:
        self._incoming.append(item)
        self._arrived.set()
        self._wakeup.set()

    async def _next_message(self) -> Any:
        while not self._incoming:
            self._arrived = anyio.Event()
            await self._arrived.wait()
        return self._incoming.popleft()

    async def _next_message_or_idle(self) -> Any:
        """The CLI's next message; a fork child whose CLI stays silent too long (a frozen
        process, a connection that hangs without an error) must not hold its fork forever.
        Silence is counted from its last message or the user's last permission answer."""
        limit = self.config.child_idle_timeout if self.fork_id else 0
        if limit <= 0:
            return await self._next_message()
        while True:
            wait = self._heard_at + limit - anyio.current_time()
            with anyio.move_on_after(max(wait, 0.0)):
                item = await self._next_message()
                self._heard_at = anyio.current_time()
                return item
            if self._asking:  # the CLI waits for the user, not the other way round
                log.debug("session %s: quiet while the user answers a permission question", self.id)
                self._heard_at = anyio.current_time()
            elif anyio.current_time() >= self._heard_at + limit:
                raise ChildIdle(
                    f"Claude Code said nothing for {limit:g} seconds (childIdleTimeoutSeconds), "
                    "so the fork child was stopped."
                )

    async def _relay(self) -> EventDict | None:
        """Publish the CLI's messages until the turn's result event; None if the process ends
        first (an error it died of is raised)."""
        while True:
            item = await self._next_message_or_idle()
            if isinstance(item, _StreamEnded):
                if item.error is not None:
                    raise item.error
                return None
            result = self._publish(item)
            if isinstance(item, ResultMessage):
                if item.session_id:
                    self.agent_session_id = item.session_id
                self.streams.clear(None)  # what the cut-off turn was still streaming is moot
                return result

    def _publish(self, message: Any) -> EventDict | None:
        """Publish what one CLI message says: streamed pieces as deltas, the rest as events.
        Returns the turn's result event, if the message ends a turn."""
        if isinstance(message, StreamEvent):
            piece = self.streams.feed(message.event, message.parent_tool_use_id)
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
        result: EventDict | None = None
        for payload in map_message(message):
            if isinstance(payload, events.AgentStarted):
                # The CLI announces itself at every turn; clients need it once per change.
                if payload == self._agent_info:
                    continue
                self._agent_info = payload
                self.agent_session_id = payload.agentSessionId or self.agent_session_id
            elif isinstance(payload, (events.Text, events.Thinking)):
                kind: StreamKind = "text" if isinstance(payload, events.Text) else "thinking"
                block = self.streams.finish(getattr(message, "message_id", None), kind)
                if block is not None:
                    payload = msgspec.structs.replace(payload, blockId=block)
            elif isinstance(payload, events.TurnResult):
                payload = self._account(payload)
                if payload.usage is not None:
                    self.usage = self.usage + payload.usage
                if self._cancel_requested.is_set():
                    # The user stopped it: that is no error, and the CLI's text for it
                    # ("[ede_diagnostic] result_type=user ...") is no answer.
                    payload = msgspec.structs.replace(
                        payload, cancelled=True, isError=False, text=""
                    )
            elif isinstance(payload, events.Task):
                tracked = self._track_task(payload)
                if tracked is None:
                    continue
                payload = tracked
            event = self.emit(payload)
            if isinstance(payload, events.TurnResult):
                result = event
        return result

    def _task_report(self) -> str:
        """The prompt event of a turn the CLI started: which background tasks it reports on."""
        ended, self._ended_tasks = self._ended_tasks, []
        if not ended:
            return "Claude Code started a turn by itself."
        return "\n".join(
            f"Background task {t.status}: {t.description or t.summary or t.taskId}" for t in ended
        )

    def _track_task(self, task: events.Task) -> events.Task | None:
        """What to publish of a task's news, with what the CLI leaves out of its later messages
        filled in from earlier ones (description, toolUseId); None when it says nothing new.
        The CLI often reports an end twice: a bare `task_updated`, then a `task_notification`
        with the summary and the figures; the second completes the first."""
        known = self.tasks.get(task.taskId) or self._ended.get(task.taskId)
        if known is not None:
            # The task's description is what it was started with; progress messages put what
            # it is doing now there ("Running …"), which is no name for it.
            task = msgspec.structs.replace(
                task,
                description=known.description or task.description,
                toolUseId=task.toolUseId or known.toolUseId,
            )
        if task.status in ("started", "running"):
            if task.taskId in self._ended:
                return None  # late progress of a task that has ended
            self.tasks[task.taskId] = task
            return task
        if self.tasks.pop(task.taskId, None) is not None:
            self._ended[task.taskId] = task
            self._ended_tasks.append(task)
            self._report_due = True
            self._notify_changed()
            return task
        earlier = self._ended.get(task.taskId)
        if earlier is None or not _adds_to(task, earlier):
            return None
        fuller = msgspec.structs.replace(
            earlier,
            summary=task.summary or earlier.summary,
            totalTokens=task.totalTokens if task.totalTokens is not None else earlier.totalTokens,
            toolUses=task.toolUses if task.toolUses is not None else earlier.toolUses,
            durationMs=task.durationMs if task.durationMs is not None else earlier.durationMs,
        )
        self._ended[task.taskId] = fuller
        return fuller

    def _publish_task_end(self, task: events.Task) -> None:
        ended = events.Task(
            taskId=task.taskId,
            status="stopped",
            toolUseId=task.toolUseId,
            description=task.description,
            summary="stopped with the Claude Code process",
        )
        published = self._track_task(ended)
        if published is not None:
            self.emit(published)
        self._report_due = False  # the process is gone: no turn will report it

    def _account(self, result: events.TurnResult) -> events.TurnResult:
        """The CLI reports the process's running total; turn it into this turn's cost."""
        total = result.costUsd
        if total is None or not math.isfinite(total):
            return result
        turn_cost = max(total - self._process_cost, 0.0)
        self._process_cost = total
        self.cost_usd += turn_cost
        return msgspec.structs.replace(result, costUsd=round(turn_cost, 6))

    async def _close_agent(self) -> None:
        agent, self._agent = self._agent, None
        if self._reader is not None:
            self._reader.cancel()
            self._reader = None
        self._incoming.clear()  # what it says once we stop listening is moot
        self.streams.clear_all()
        for task in list(self.tasks.values()):  # background tasks die with the process
            self._publish_task_end(task)
        if agent is not None:
            try:
                await agent.close()
            except Exception:
                log.warning("session %s: closing the agent failed", self.id, exc_info=True)


class _StreamEnded:
    """The CLI's message stream ended: the process is gone (`error`: what the SDK raised)."""

    def __init__(self, error: Exception | None) -> None:
        self.error = error

    def __repr__(self) -> str:
        return f"stream ended: {self.error!r}" if self.error else "stream ended"


class _CliTurn:
    """`_next_work`'s answer when the CLI started a turn by itself."""


_CLI_TURN = _CliTurn()


def _starts_a_turn(message: Any) -> bool:
    """Whether a message that arrives between turns opens a turn of the CLI's own: its `init`,
    or the main agent's words (a subagent's words and task news do not)."""
    if isinstance(message, SystemMessage):
        return message.subtype == "init"
    if isinstance(message, (AssistantMessage, StreamEvent)):
        return message.parent_tool_use_id is None
    return isinstance(message, ResultMessage)


def _adds_to(news: events.Task, earlier: events.Task) -> bool:
    """Whether a second report of a task's end says more than the first."""
    return bool(news.summary and not earlier.summary) or (
        news.totalTokens is not None and earlier.totalTokens is None
    )


def _first_error(exc: BaseException) -> BaseException:
    """The error itself, out of the exception groups that task groups wrap it in."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
