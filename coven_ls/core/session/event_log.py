"""A session's numbered event log: the latest events in memory, older ones in the store.

Events are numbered from 1 with no gap. A stored session keeps the RECENT_EVENTS latest
committed ones in memory (up to twice as many between trims) and every uncommitted one; what a
client asks for beyond that is read from the store. A session without a store keeps them all.
"""

from __future__ import annotations

import anyio

from ... import protocol
from ...protocol import EventDict, events
from ..store import Store

# A stored session keeps this many of its latest committed events in memory (up to twice as many
# between trims), for the clients that catch up on what they just missed; older ones are read
# from the store when asked for. A session without a store keeps all of its events.
RECENT_EVENTS = 100
# Assistant message events: the ones that carry the messageId a fork by hand may start at.
MESSAGE_KINDS = (protocol.Kind.TEXT, protocol.Kind.THINKING, protocol.Kind.TOOL_USE)


class EventLog:
    def __init__(self, session_id: str) -> None:
        self.id = session_id
        # The store has every event up to here (the journal advances it); None: no store.
        self.committed_seq: int | None = None
        self.store: Store | None = None  # where older events are read from (set by the journal)
        self.last_seq = 0  # the seq of the session's latest event
        # The latest events, up to last_seq with no gap: all of them without a store; with one,
        # those not committed yet and the RECENT_EVENTS before them (none of a restored log).
        self.recent: list[EventDict] = []

    def append(self, payload: events.Payload) -> EventDict:
        """The next event, numbered and dated."""
        self.last_seq += 1
        event = protocol.event_dict(self.id, self.last_seq, protocol.now_iso(), payload)
        self.recent.append(event)
        if self.committed_seq is not None and len(self.recent) >= 2 * RECENT_EVENTS:
            self._forget_committed()
        return event

    def _forget_committed(self) -> None:
        """Keep RECENT_EVENTS committed events in memory (and every uncommitted one)."""
        first = self.last_seq - len(self.recent) + 1
        committed = (self.committed_seq or 0) - first + 1
        drop = min(len(self.recent) - RECENT_EVENTS, committed)
        if drop > 0:
            del self.recent[:drop]

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

    async def everything(self) -> list[EventDict]:
        """Every event of the session, oldest first, those not stored yet included: what it
        recorded of its conversation (core/fork/recorded.py), never sent to a client."""
        stored = await self.events_after(0)
        upto = stored[-1]["seq"] if stored else 0
        return stored + [e for e in self.recent if e["seq"] > upto]
