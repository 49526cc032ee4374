"""The events an agent living in the server's own event loop (a Codex thread on the shared
app-server, an ACP connection) has said and its session has not read yet.

Such an agent hears its program's notifications in a task of its own, while the session reads
`Agent.messages()` in another: the outbox sits between them. It never blocks the notifying side,
which must go on reading its program's output whatever the session does.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio

log = logging.getLogger(__name__)

# Events an outbox holds before it drops one (a session that stopped reading, not a slow one).
CAPACITY = 1000


class Outbox:
    def __init__(self, owner: str) -> None:
        """`owner` names the agent in log lines ("codex thread T", "ACP agent A")."""
        self._owner = owner
        self._send, self._receive = anyio.create_memory_object_stream[Any](CAPACITY)

    def put(self, item: Any) -> None:
        """Queue an event (or an error for the reader to raise); dropped once the outbox is
        closed: the session has stopped reading."""
        try:
            self._send.send_nowait(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        except anyio.WouldBlock:
            log.warning("%s: the session is not reading; dropped %r", self._owner, item)

    def close(self) -> None:
        """No more events: the reader's loop ends after what is queued."""
        self._send.close()

    async def drained(self) -> None:
        """Let the session publish what came before a question the agent is about to ask (the
        tool call the question is about comes first, as with Claude): both arrive at once, and
        the session's reader and runner each need a turn of the event loop or two."""
        for _ in range(10):
            if not self._send.statistics().current_buffer_used:
                break
            await anyio.lowlevel.checkpoint()
        for _ in range(3):
            await anyio.lowlevel.checkpoint()

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._receive.__aiter__()
