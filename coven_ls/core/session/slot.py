"""A fork child's hold on one of the server's slots (maxParallel, core/slots.py): taken for a
turn, kept while the turn's background tasks run and for the turns the CLI starts to report
them, and given back, with the child's agent process, when it is quiet. Its place in line while
it waits is the session's (`queued`, `queuePosition`)."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

from ...protocol import events
from .state import SessionState

# Holds one of the server's slots for a fork child's turn; tells the session its place in line.
TurnGate = Callable[[str, Callable[[int | None], None]], AbstractAsyncContextManager[None]]


class SlotHold:
    def __init__(self, session: SessionState, gate: TurnGate | None) -> None:
        """`gate`: None for a session that needs no slot (not a fork child)."""
        self._session = session
        self._gate = gate
        self._stack: contextlib.AsyncExitStack | None = None  # a held slot, until given back

    async def take(self) -> None:
        """A fork child works only in one of the server's slots: it takes one for a turn. Its
        CLI goes with the slot (`give_back`), so the limit bounds processes (~200 MiB each),
        not only turns."""
        if self._gate is None or self._stack is not None:
            return
        stack = contextlib.AsyncExitStack()
        await stack.enter_async_context(self._gate(self._session.id, self._in_line))
        self._stack = stack

    async def give_back(self, close_agent: Callable[[], Awaitable[None]]) -> None:
        """Give the slot back, if held, once `close_agent` has stopped the agent process (the
        next turn resumes the conversation from disk)."""
        stack, self._stack = self._stack, None
        if stack is not None:
            try:
                await close_agent()
            finally:
                await stack.aclose()

    def _in_line(self, position: int | None) -> None:
        """Where this session waits for a slot (None: it has one)."""
        session = self._session
        if position is not None:
            session.set_status("queued")
            if position != session.queue_position:
                session.queue_position = position
                session.emit(events.QueuePosition(position=position))
        session.queue_position = position
