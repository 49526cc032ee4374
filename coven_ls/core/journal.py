"""The journal: every event on its way from a session to the clients passes here, and an event of
a stored session is committed to its store before any client is sent it (group commit: one
transaction per store for each burst). Fork rows ride along with the next burst."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
from anyio.abc import TaskGroup

from .. import protocol
from ..protocol import EventDict
from ..protocol.events import Delta
from .session import Session
from .store import Store

log = logging.getLogger(__name__)

# The most events one store transaction takes: bigger bursts are committed (and sent) in slices.
FLUSH_SLICE = 1000
# Bursts up to this many events are committed on the event loop, bigger ones in a worker thread.
# A commit lets the GIL go once (Store.write), and taking it back costs up to the interpreter's
# switch interval (5 ms) whenever another thread is busy; a hop to a worker thread and back
# costs that two or three times more. So the small bursts of agents at their usual pace (a
# few events each) go out soonest from the loop, and a commit there takes tens of
# microseconds (no fsync: WAL + synchronous=NORMAL, and checkpoints are not on this path).
# A big burst means the loop is saturated: committing it in a thread lets sqlite work on the
# other core while the loop goes on producing the next one (bench/store.py, part 1 and 2).
ON_LOOP_EVENTS = 64
# A turn of the loop that left this many events waiting means the loop is saturated.
GATHER_FROM = 16

# The interpreter's switch interval for a serving process (CPython's default: 5 ms). A thread
# that let the GIL go (sqlite at work on a commit, a pipe read) waits up to this long to take it
# back while the event loop is busy, and the sqlite module lets it go three times a statement
# (prepare, step, reset): beside a busy thread, a commit in a worker thread took twice its time.
# bench/store.py, paced 1,000 events/s beside a CPU-bound thread: p99 emit -> frame 16-18 ms
# at 5 ms, 4 ms at 1 ms.
SWITCH_INTERVAL = 0.001


def tune_interpreter() -> None:
    """Set what a process serving sessions needs of the interpreter (process-wide: called by
    the entry points, never by the library)."""
    sys.setswitchinterval(SWITCH_INTERVAL)


Deliver = Callable[[EventDict, bytes], None]
SendDelta = Callable[[bytes, Delta], None]  # its encoded frame, and itself
# A store could not be written (the error), or can be again (None).
StoreTrouble = Callable[[Store, Exception | None], None]


class StoredFork(Protocol):
    """What the journal needs of a fork (core/fork/state.py's `Fork`): which session's store
    keeps it, and its row."""

    @property
    def id(self) -> str: ...

    @property
    def parent_id(self) -> str: ...

    def record(self) -> dict[str, Any]:
        """The fork's row in the store."""


@dataclass(frozen=True)
class _Transient:
    """Something for the clients only (a streamed piece of text): in order with the events, but
    never stored."""

    frame: bytes
    delta: Delta


class Journal:
    def __init__(
        self,
        task_group: TaskGroup,
        deliver: Deliver,
        send_delta: SendDelta,
        on_trouble: StoreTrouble | None = None,
    ) -> None:
        self._tg = task_group
        self._deliver = deliver
        self._send_delta = send_delta
        self._on_trouble = on_trouble
        # What a store could not take (a full disk, a read-only folder): written with its next
        # burst, so that once it can be written again its sessions' logs have no gap.
        self._unsaved: dict[Store, _Batch] = {}
        self._stored: dict[str, tuple[Session, Store]] = {}  # session id -> it and its store
        self._rows: dict[str, dict[str, Any]] = {}  # session id -> its row as last written
        self._outbox: list[EventDict | _Transient] = []
        self._dirty_forks: dict[str, StoredFork] = {}
        self._flush_wanted = anyio.Event()
        self._flushed = anyio.Event()
        self._flushing = False
        self._checkpointing: set[Store] = set()
        task_group.start_soon(self._flush_loop, name="store writer")

    # --- which store keeps which session ---------------------------------------------------------

    def keep(self, session: Session, store: Store) -> None:
        """From now on, `session`'s events are committed to `store` before they are sent."""
        self._stored[session.id] = (session, store)
        session.store = store
        if session.committed_seq is None:
            session.committed_seq = 0

    def forget(self, session_ids: list[str]) -> None:
        """Deleted sessions: what of theirs still waits is dropped."""
        for sid in session_ids:
            self._stored.pop(sid, None)
            self._rows.pop(sid, None)
        gone = set(session_ids)
        for batch in self._unsaved.values():  # never written back after they were deleted
            batch.events = [(e, b) for e, b in batch.events if e["sessionId"] not in gone]
            batch.sessions = {k: v for k, v in batch.sessions.items() if k not in gone}
            batch.forks = [f for f in batch.forks if f["parent_id"] not in gone]

    def store_of(self, session_id: str) -> Store | None:
        kept = self._stored.get(session_id)
        return kept[1] if kept is not None else None

    # --- the event path --------------------------------------------------------------------------

    def publish(self, event: EventDict) -> None:
        if event["sessionId"] in self._stored:
            self._outbox.append(event)
            self._flush_wanted.set()
        else:
            self._deliver(event, protocol.event_body(event))

    def publish_delta(self, delta: Delta) -> None:
        """A piece of streamed text goes out at once, unless events published before it still
        wait for the store: then it waits behind them, so that no client sees it before them."""
        frame = protocol.delta_frame(delta)
        if self._outbox or self._flushing:
            self._outbox.append(_Transient(frame, delta))
            self._flush_wanted.set()
        else:
            self._send_delta(frame, delta)

    def fork_changed(self, fork: StoredFork) -> None:
        """A fork's row must be written (with the next burst of events)."""
        if fork.parent_id in self._stored:
            self._dirty_forks[fork.id] = fork
            self._flush_wanted.set()

    async def flushed(self) -> None:
        """Wait until everything published so far is stored and sent."""
        while self._outbox or self._dirty_forks or self._flushing:
            await self._flushed.wait()

    async def _flush_loop(self) -> None:
        while True:
            await self._flush_wanted.wait()
            self._flush_wanted = anyio.Event()
            self._flushing = True
            try:
                while self._outbox or self._dirty_forks:
                    await self._gather()
                    await self._flush_once()
            finally:
                self._flushing = False
                self._flushed.set()
                self._flushed = anyio.Event()

    async def _gather(self) -> None:
        """When the loop is saturated (a turn of it left many events), let the tasks that are
        ready run before committing, for as long as they add to the burst: one commit then
        takes hundreds of events instead of each turn's few (a commit's cost is mostly per page
        it touches, not per event). An agent at its pace leaves one or two events a turn, and
        they are committed at once."""
        if len(self._outbox) < GATHER_FROM:
            return
        while len(self._outbox) < FLUSH_SLICE:
            waiting = len(self._outbox)
            await anyio.lowlevel.checkpoint()
            if len(self._outbox) == waiting:
                return

    async def _flush_once(self) -> None:
        """Commit what the last burst produced in one transaction per store, then send it. A
        huge burst goes in slices, so that no commit (and no client) waits on a giant one."""
        items = self._outbox[:FLUSH_SLICE]
        del self._outbox[:FLUSH_SLICE]
        forks, self._dirty_forks = list(self._dirty_forks.values()), {}
        # Each event is encoded once: the same bytes go to the store and into the frames.
        events = [e for e in items if not isinstance(e, _Transient)]
        bodies = [protocol.event_body(e) for e in events]
        batches: dict[Store, _Batch] = {}
        for event, body in zip(events, bodies, strict=True):
            kept = self._stored.get(event["sessionId"])
            if kept is None:
                continue  # deleted meanwhile
            session, store = kept
            batch = batches.setdefault(store, _Batch())
            batch.events.append((event, body))
            batch.sessions[session.id] = session
        for fork in forks:
            fork_store = self.store_of(fork.parent_id)
            if fork_store is not None:
                batches.setdefault(fork_store, _Batch()).forks.append(fork.record())
        for store, batch in batches.items():
            earlier = self._unsaved.pop(store, None)
            if earlier is not None:
                batch = earlier.then(batch)
            # Most bursts change nothing of their sessions' rows; an unchanged row is not
            # written again (a commit costs about twice as much with one).
            rows = [
                row
                for session in batch.sessions.values()
                if (row := session.record()) != self._rows.get(session.id)
            ]
            try:
                await _write(store, batch.events, rows, batch.forks)
            except Exception as exc:
                # The events still go out (a session must not stall); they are kept here to be
                # written later, and the user is told that nothing is being saved meanwhile.
                log.exception("could not write %d events to %s", len(batch.events), store.path)
                self._unsaved[store] = batch
                if earlier is None and self._on_trouble is not None:
                    self._on_trouble(store, exc)
            else:
                self._rows.update((row["session_id"], row) for row in rows)
                if earlier is not None and self._on_trouble is not None:
                    self._on_trouble(store, None)
                if store.checkpoint_due() and store not in self._checkpointing:
                    self._checkpointing.add(store)
                    self._tg.start_soon(self._checkpoint, store, name="store checkpoint")
        encoded = iter(bodies)
        for item in items:
            if isinstance(item, _Transient):
                self._send_delta(item.frame, item.delta)
                continue
            body = next(encoded)
            kept = self._stored.get(item["sessionId"])
            if kept is not None:
                session = kept[0]
                session.committed_seq = max(session.committed_seq or 0, item["seq"])
            self._deliver(item, body)

    async def _checkpoint(self, store: Store) -> None:
        """Copy a store's WAL back into its database beside the event path, which goes on
        committing meanwhile."""
        try:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(store.checkpoint)
        except Exception:  # the WAL only grows until the next one succeeds: worth a line, no more
            log.warning("could not checkpoint %s", store.path, exc_info=True)
        finally:
            self._checkpointing.discard(store)


async def _write(
    store: Store,
    events: list[tuple[EventDict, bytes]],
    sessions: list[dict[str, Any]],
    forks: list[dict[str, Any]],
) -> None:
    if len(events) <= ON_LOOP_EVENTS:
        store.write(events, sessions, forks)
        return
    with anyio.CancelScope(shield=True):  # a cancelled flush must not leave a commit behind
        await anyio.to_thread.run_sync(store.write, events, sessions, forks)


class _Batch:
    """One store's share of a flush."""

    def __init__(self) -> None:
        self.events: list[tuple[EventDict, bytes]] = []
        self.sessions: dict[str, Session] = {}
        self.forks: list[dict[str, Any]] = []

    def then(self, later: _Batch) -> _Batch:
        """This batch (unsaved) followed by a later one, as one write."""
        self.events.extend(later.events)
        self.sessions.update(later.sessions)
        self.forks.extend(later.forks)  # upserted in order: the later row of a fork wins
        return self
