"""What a session is and has: who it is, its figures (status, cost, usage, context, outcome),
its place (a fork child's worktree and changes) and the parts it owns (its event log, inbox,
agent process, background tasks, streams, meter). `emit` and `set_status` are the one way its
events and status change.

The session's collaborators (its record, the publisher of agent events, the runner) read and
write this, and `Session` (session.py) adds the commands; none of them imports the session.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

import anyio

from ...protocol import EventDict, SessionInfo, Status, events
from ...protocol.types import (
    BranchedFrom,
    Changes,
    ClusterPlacement,
    ContextUsage,
    Isolation,
    LimitName,
    Sandbox,
    Usage,
    Worktree,
)
from ..agent import AgentSpec, Backend
from ..fork.spend import Meter
from ..store import Store
from .background import BackgroundTasks
from .config import SessionConfig
from .event_log import EventLog
from .inbox import Inbox
from .process import AgentProcess
from .status import check_transition
from .streaming import Streams

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    """How a session's last turn ended, as a fork reports it to the parent."""

    ok: bool
    text: str = ""
    error: str | None = None
    limit: LimitName | None = None  # the fork limit that stopped it (see spend.py)


class EventSink(Protocol):
    """Where a session's events go (the hub, in the server)."""

    def publish(self, event: dict[str, Any]) -> None: ...

    def publish_delta(self, delta: events.Delta) -> None:
        """A streamed piece of text: to the clients, not to the store."""


class SessionState:
    def __init__(
        self,
        session_id: str,
        config: SessionConfig,
        backend: Backend,
        sink: EventSink,
        *,
        title: str,
        created_at: str,
        parent_id: str | None,
        fork_id: str | None,
        label: str | None,
        branched_from: BranchedFrom | None,
        depth: int,
        status: Status,
        start: AgentSpec | None,
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
        # How full its context is: its last main-thread model request (see publishing.py).
        self.context: ContextUsage | None = None
        # The output tokens of that request's answer (the call `answer_call`; at least its final
        # text's estimate): what the next request adds to the prompt beyond `context`, or a fork
        # child's copy of it writes to the prompt cache (estimate.py).
        self.answer_tokens = 0
        self.answer_call: str | None = None
        # The model calls of the turn under way, counted as they come (see spend.py).
        self.meter = Meter()
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
        # A fork child's: how the operating system holds it (core/fork/fence.py).
        self.sandbox: Sandbox | None = None
        # A fork child's on a cluster: which, and its node once placed (fork/placement.py).
        self.placement: ClusterPlacement | None = None
        self.changes: Changes | None = None
        # The commit its `changes` count from: None for the fork's snapshot (`worktree.base`);
        # after its changes were applied or discarded and it worked on (a follow-up), that
        # commit, so that only the later work comes back.
        self.changes_since: str | None = None
        self.backend = backend
        self.inbox = Inbox()
        self.process = AgentProcess(session_id, backend, self.inbox.wake)
        self.background = BackgroundTasks(lambda: self.notify_changed())
        self.sink = sink
        self._first_start = start  # how to start the very first agent process (forks differ)
        self.queue_position: int | None = None
        self.streams = Streams()
        # Its lifecycle, which the runner and the commands share.
        self.in_turn = False
        self.cancel_requested = anyio.Event()  # set: the running turn was cancelled
        self.closing = False
        self.final_status: Status | None = "closed"
        self.done = anyio.Event()  # the runner has ended
        self._changed = anyio.Event()  # set (and replaced) whenever the session may have settled

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
            queued=len(self.inbox),
            queuePosition=self.queue_position,
            usage=self.usage,
            treeUsage=self.usage if tree_usage is None else tree_usage,
            contextUsage=self.context,
            backgroundTasks=list(self.tasks),
            isolation=self.isolation,
            isolationReason=self.isolation_reason,
            worktree=self.worktree,
            sandbox=self.sandbox,
            placement=self.placement,
            changes=self.changes,
            branchedFrom=self.branched_from,
        )

    @property
    def first_start(self) -> AgentSpec | None:
        """How its very first agent process starts, when that differs from a fresh conversation
        (a fork child's, a branch's); None once it has a conversation of its own."""
        return self._first_start if self.agent_session_id is None else None

    def emit(self, payload: events.Payload) -> EventDict:
        event = self.event_log.append(payload)
        self.sink.publish(event)
        return event

    def set_status(self, status: Status) -> None:
        """The one place a session's status changes (and says so in a `status` event)."""
        if status == self.status:
            return
        problem = check_transition(self.status, status)
        if problem is not None:  # a bug in coven-ls: say so, but keep the session going
            log.error("session %s: %s", self.id, problem)
        self.status = status
        self.emit(events.StatusChanged(status=status))

    def notify_changed(self) -> None:
        """The session may have settled: wake whoever waits for that."""
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_changed(self) -> None:
        await self._changed.wait()

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
