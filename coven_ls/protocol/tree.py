"""The session tree that `coven/event`s describe, folded in one place: sessions, their forks and
children, statuses, what became of worktree children's changes, and tokens.

Every Python front end that needs more than one event at a time (the terminal tree, the ACP
front, the standard-LSP mirror) keeps a `SessionTree` and reads from it instead of keeping its own
books. Events come in decoded (`decode`: the envelope and the typed payload of `events.py`);
what comes out are frozen nodes, replaced whole when an event changes them, so a reader may hold
one without it changing under it.

The golden fixtures (tests/fixtures/events) are the spec: folded here, each one's events give what
its recorded `coven/listSessions` says (tests/unit/test_tree.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

import msgspec

from .events import (
    ENVELOPE_FIELDS,
    KINDS,
    AgentStarted,
    AnyPayload,
    ChangesEvent,
    ChildRef,
    Deleted,
    EventDict,
    ForkFinished,
    ForkInterrupted,
    ForkProposed,
    ForkRejected,
    ForkResumed,
    ForkReviewing,
    ForkStarted,
    Payload,
    Plan,
    QueuePosition,
    Spend,
    StatusChanged,
    Task,
    TaskOutcome,
    TurnResult,
)
from .types import (
    SETTLED_STATUSES,
    Changes,
    ForkLimits,
    ForkSource,
    ForkState,
    Isolation,
    MergeMode,
    Status,
    Usage,
    Worktree,
)

# The payloads of a fork's own events (those with a `forkId`).
ForkPayload = (
    ForkProposed
    | ForkRejected
    | ForkStarted
    | ForkFinished
    | ForkReviewing
    | ForkInterrupted
    | ForkResumed
)

# A background task in one of these has ended.
_TASK_ENDED = frozenset({"completed", "failed", "stopped"})


@dataclass(frozen=True, slots=True)
class Event:
    """A `coven/event`: its envelope and its typed payload (match on `payload`)."""

    session_id: str
    seq: int
    time: str
    payload: Payload

    @property
    def kind(self) -> str:
        return self.payload.kind


_decoder_fields = frozenset(ENVELOPE_FIELDS) - {"kind"}
_KNOWN = frozenset(KINDS)


def decode_payload(event: EventDict) -> Payload | None:
    """An event's payload, typed (the envelope, if there, is not needed); None for a kind this
    server does not know (clients must ignore those). Lenient like the rest of the wire: unknown
    fields are dropped. Raises ValueError for an event of a known kind that does not fit its
    type."""
    if event.get("kind") not in _KNOWN:
        return None
    payload_fields = {k: v for k, v in event.items() if k not in _decoder_fields}
    try:
        payload: Payload = msgspec.convert(payload_fields, AnyPayload)
    except msgspec.ValidationError as exc:
        raise ValueError(f"{event.get('kind')!r} event: {exc}") from exc
    return payload


def decode(event: EventDict) -> Event | None:
    """An event as it travels (a JSON object) as a typed `Event`, as `decode_payload` types its
    payload."""
    payload = decode_payload(event)
    if payload is None:
        return None
    return Event(str(event["sessionId"]), int(event["seq"]), str(event["time"]), payload)


def as_event(event: Event | EventDict) -> Event | None:
    """An event either way it is held: typed already, or as a JSON object (decoded)."""
    return event if isinstance(event, Event) else decode(event)


@dataclass(frozen=True, slots=True)
class SessionNode:
    """One session as its events describe it (the fields of `SessionInfo` that events carry)."""

    session_id: str
    parent_id: str | None = None
    fork_id: str | None = None
    """the fork it is a child of"""
    label: str | None = None
    """a fork child's task label"""
    status: Status | None = None
    """None until its first `status` event"""
    queue_position: int | None = None
    """a `queued` fork child's place in line"""
    agent_session_id: str | None = None
    cost_usd: float = 0.0
    """its turns' costs, added up"""
    usage: Usage = field(default_factory=Usage)
    """its turns' tokens, added up"""
    background_tasks: tuple[str, ...] = ()
    """ids of the CLI's background tasks that still run"""
    isolation: Isolation | None = None
    isolation_reason: str | None = None
    worktree: Worktree | None = None
    changes: Changes | None = None
    """a worktree child's latest changes (their `merge` says what became of them)"""
    forks: tuple[str, ...] = ()
    """the forks it started, in order"""
    spend: Spend | None = None
    """a fork child with limits: what it has spent so far (its latest `spend` event)"""
    plan: Plan | None = None
    """an ACP agent's plan (its latest `plan` event)"""


@dataclass(frozen=True, slots=True)
class ForkNode:
    """One fork of a parent session."""

    fork_id: str
    parent_id: str
    state: ForkState
    tasks: tuple[str, ...]
    children: tuple[ChildRef, ...] = ()
    """in task order (none while it is only proposed)"""
    source: ForkSource | None = None
    isolation: Isolation | None = None
    isolation_reason: str | None = None
    merge_mode: MergeMode | None = None
    limits: ForkLimits | None = None
    """what each child, and the whole fork, may spend (None: no limit)"""
    settled: tuple[str, ...] = ()
    """children that have stopped working on their task since the fork (re)started, in the
    order they did"""
    results: tuple[TaskOutcome, ...] = ()
    """from `forkFinished`, in task order"""
    pending: tuple[str, ...] = ()
    """children whose changes wait for the user's review"""
    unfinished: tuple[str, ...] = ()
    """children a restarted server found cut off"""
    usage: Usage | None = None
    """the children's tokens, from `forkFinished`"""
    disk_bytes: int | None = None
    reason: str | None = None
    """why it was rejected"""

    def child_index(self, session_id: str) -> int | None:
        for n, child in enumerate(self.children):
            if child.sessionId == session_id:
                return n
        return None


def fork_state(payload: ForkPayload) -> ForkState:
    """A fork's state after one of its events: the server says it on each of them (never
    derived here from the event's kind, so that the tree and the server agree)."""
    return payload.state


class SessionTree:
    """Sessions and forks as the events so far describe them. `apply` folds one event in."""

    def __init__(self) -> None:
        self._sessions: dict[str, SessionNode] = {}
        self._forks: dict[str, ForkNode] = {}
        self._fork_of_child: dict[str, str] = {}

    # --- reading ---------------------------------------------------------------------------------

    @property
    def sessions(self) -> Mapping[str, SessionNode]:
        """Every session seen, in the order it was first seen (a fork's children when it
        started)."""
        return self._sessions

    @property
    def forks(self) -> Mapping[str, ForkNode]:
        return self._forks

    def session(self, session_id: str) -> SessionNode:
        """The session, or an empty node for one no event has named yet."""
        return self._sessions.get(session_id) or SessionNode(session_id)

    def roots(self) -> list[SessionNode]:
        return [s for s in self._sessions.values() if s.parent_id is None]

    def children(self, session_id: str) -> list[SessionNode]:
        """A session's fork children, fork by fork, in task order."""
        return [
            self.session(child.sessionId)
            for fork_id in self.session(session_id).forks
            for child in self._forks[fork_id].children
        ]

    def fork_of(self, child_id: str) -> ForkNode | None:
        """The fork a session is a child of."""
        fork_id = self._fork_of_child.get(child_id)
        return self._forks.get(fork_id) if fork_id is not None else None

    def depth(self, session_id: str) -> int:
        """0 for a top-level session, 1 for its children, and so on."""
        depth, parent = 0, self.session(session_id).parent_id
        while parent is not None:
            depth, parent = depth + 1, self.session(parent).parent_id
        return depth

    def subtree(self, session_id: str) -> Iterator[SessionNode]:
        """The session, then its children's subtrees."""
        yield self.session(session_id)
        for child in self.children(session_id):
            yield from self.subtree(child.session_id)

    def tree_usage(self, session_id: str) -> Usage:
        """The session's tokens and those of its fork children, theirs, and so on."""
        total = Usage()
        for node in self.subtree(session_id):
            total = total + node.usage
        return total

    # --- folding ---------------------------------------------------------------------------------

    def apply(self, event: Event | EventDict) -> Event | None:
        """Fold one event in; returns it typed (None for a kind this server does not know)."""
        typed = as_event(event)
        if typed is None:
            return None
        sid, payload = typed.session_id, typed.payload
        node = self.session(sid)
        self._sessions.setdefault(sid, node)
        match payload:
            case StatusChanged(status=status):
                queue = node.queue_position if status == "queued" else None
                self._set(replace(node, status=status, queue_position=queue))
                if status in SETTLED_STATUSES:
                    self._settle(sid)
            case QueuePosition(position=position):
                self._set(replace(node, queue_position=position))
            case Spend():
                self._set(replace(node, spend=payload))
            case Plan():
                self._set(replace(node, plan=payload))
            case AgentStarted(agentSessionId=agent) if agent:
                self._set(replace(node, agent_session_id=agent))
            case TurnResult():
                self._set(
                    replace(
                        node,
                        agent_session_id=payload.agentSessionId or node.agent_session_id,
                        cost_usd=node.cost_usd + (payload.costUsd or 0.0),
                        usage=node.usage + payload.usage if payload.usage else node.usage,
                    )
                )
            case Task(taskId=task_id, status=task_status):
                running = tuple(t for t in node.background_tasks if t != task_id)
                if task_status not in _TASK_ENDED:
                    running += (task_id,)
                self._set(replace(node, background_tasks=running))
            case ChangesEvent(worktree=worktree, changes=changes):
                self._set(replace(node, worktree=worktree, changes=changes))
            case Deleted(sessionIds=deleted):
                self._delete(deleted)
            case ForkProposed(forkId=fork_id, tasks=tasks):
                self._fork(ForkNode(fork_id, sid, fork_state(payload), tuple(tasks)), parent=node)
            case ForkStarted():
                self._start_fork(node, payload)
            case ForkResumed(forkId=fork_id, children=resumed):
                fork = self._forks.get(fork_id)
                if fork is not None:
                    again = {c.sessionId for c in resumed}
                    settled = tuple(c for c in fork.settled if c not in again)
                    self._fork(replace(fork, state=fork_state(payload), settled=settled))
            case (
                ForkRejected(forkId=fork_id)
                | ForkFinished(forkId=fork_id)
                | ForkReviewing(forkId=fork_id)
                | ForkInterrupted(forkId=fork_id)
            ):
                fork = self._forks.get(fork_id) or ForkNode(fork_id, sid, "running", ())
                self._fork(self._ended_fork(fork, payload), parent=node)
        return typed

    def _set(self, node: SessionNode) -> None:
        self._sessions[node.session_id] = node

    def _fork(self, fork: ForkNode, parent: SessionNode | None = None) -> None:
        if parent is not None and fork.fork_id not in parent.forks:
            self._set(replace(parent, forks=(*parent.forks, fork.fork_id)))
        self._forks[fork.fork_id] = fork

    def _start_fork(self, parent: SessionNode, started: ForkStarted) -> None:
        fork = self._forks.get(started.forkId) or ForkNode(
            started.forkId, parent.session_id, "running", ()
        )
        self._fork(
            replace(
                fork,
                state=fork_state(started),
                tasks=tuple(started.tasks),
                children=tuple(started.children),
                source=started.source,
                isolation=started.isolation,
                isolation_reason=started.isolationReason,
                merge_mode=started.mergeMode,
                limits=started.limits,
                settled=(),
            ),
            parent=parent,
        )
        for child in started.children:
            self._fork_of_child[child.sessionId] = started.forkId
            node = self._sessions.get(child.sessionId) or SessionNode(child.sessionId)
            self._set(
                replace(
                    node,
                    parent_id=parent.session_id,
                    fork_id=started.forkId,
                    label=child.label,
                    isolation=started.isolation,
                    isolation_reason=started.isolationReason,
                )
            )

    def _ended_fork(
        self, fork: ForkNode, payload: ForkRejected | ForkFinished | ForkReviewing | ForkInterrupted
    ) -> ForkNode:
        fork = replace(fork, state=fork_state(payload))
        match payload:
            case ForkRejected(reason=reason):
                return replace(fork, reason=reason)
            case ForkFinished(results=results, usage=usage, diskBytes=disk):
                return replace(fork, results=tuple(results), usage=usage, disk_bytes=disk)
            case ForkReviewing(pending=pending):
                return replace(fork, pending=tuple(pending))
            case ForkInterrupted(unfinished=unfinished):
                return replace(fork, unfinished=tuple(unfinished))

    def _settle(self, child_id: str) -> None:
        fork = self.fork_of(child_id)
        if fork is not None and fork.state == "running" and child_id not in fork.settled:
            self._fork(replace(fork, settled=(*fork.settled, child_id)))

    def _delete(self, session_ids: list[str]) -> None:
        gone = set(session_ids)
        for sid in session_ids:
            node = self._sessions.pop(sid, None)
            self._fork_of_child.pop(sid, None)
            for fork_id in node.forks if node is not None else ():
                self._forks.pop(fork_id, None)
        for sid, node in list(self._sessions.items()):
            if any(f not in self._forks for f in node.forks) and sid not in gone:
                self._set(replace(node, forks=tuple(f for f in node.forks if f in self._forks)))
