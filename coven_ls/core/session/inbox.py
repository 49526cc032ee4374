"""A session's inbox: the turns queued for its runner, the holds that keep them waiting (a fork
proposed or running), and the event that wakes the runner (a new turn, a release, a pause, what
the agent said between turns)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import anyio

from ...protocol.types import Origin


@dataclass
class Turn:
    text: str
    origin: Origin = "user"  # who wrote it: a client, or the server itself (e.g. "forkResults")


class Inbox:
    def __init__(self) -> None:
        self.turns: deque[Turn] = deque()
        self.holds = 0
        # Stop the agent process as soon as no turn runs (see `Session.pause_agent`).
        self.pause_requested = False
        self._wakeup = anyio.Event()

    def __len__(self) -> int:
        return len(self.turns)

    def put(self, turn: Turn, *, busy: bool, first: bool = False) -> int:
        """Queue a turn; returns how many turns are ahead of it (`busy`: one runs or is held).
        `first` puts it ahead of the queued ones."""
        if first:
            self.turns.appendleft(turn)
            ahead = int(busy)
        else:
            ahead = len(self.turns) + int(busy)
            self.turns.append(turn)
        self.wake()
        return ahead

    def next(self) -> Turn | None:
        """The next turn, unless none is queued or a hold keeps them waiting."""
        return self.turns.popleft() if self.turns and not self.holds else None

    def clear(self) -> None:
        self.turns.clear()

    def wake(self) -> None:
        self._wakeup.set()

    async def wait(self) -> None:
        """Until something woke the runner since the last `rearm`."""
        await self._wakeup.wait()

    def rearm(self) -> None:
        self._wakeup = anyio.Event()
