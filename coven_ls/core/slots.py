"""Slots: how many fork children may run a turn at once, across the whole server (every fork,
nested ones included). The rest wait in order, and each knows its place in the queue.

A slot is held for one turn, not for a child's whole life: a child that forks in turn gives its
slot back while its own children run (holding it would deadlock nested forks under a small
limit), and takes one again for the turn that reads their results.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio


@dataclass
class _Waiter:
    key: str
    on_position: Callable[[int | None], None]
    granted: anyio.Event


class Slots:
    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._holders: set[str] = set()
        self._waiting: list[_Waiter] = []

    @property
    def limit(self) -> int:
        return self._limit

    @limit.setter
    def limit(self, value: int) -> None:
        self._limit = max(value, 1)
        self._grant()

    @property
    def running(self) -> int:
        return len(self._holders)

    def position(self, key: str) -> int | None:
        """1 for the next to start, None when not waiting."""
        for number, waiter in enumerate(self._waiting, 1):
            if waiter.key == key:
                return number
        return None

    @asynccontextmanager
    async def hold(
        self, key: str, on_position: Callable[[int | None], None]
    ) -> AsyncIterator[None]:
        """Hold a slot for the body; wait in line first when none is free. `on_position` hears
        the place in the line each time it changes, and None once the slot is taken."""
        if len(self._holders) < self._limit and not self._waiting:
            self._holders.add(key)
        else:
            waiter = _Waiter(key, on_position, anyio.Event())
            self._waiting.append(waiter)
            self._announce()
            try:
                await waiter.granted.wait()
            except BaseException:
                if waiter in self._waiting:  # cancelled while it waited: leave the line
                    self._waiting.remove(waiter)
                    self._announce()
                else:  # granted, but cancelled before it could run: give the slot on
                    self._holders.discard(key)
                    self._grant()
                raise
        try:
            yield
        finally:
            self._holders.discard(key)
            self._grant()

    def _grant(self) -> None:
        granted = False
        while self._waiting and len(self._holders) < self._limit:
            waiter = self._waiting.pop(0)
            self._holders.add(waiter.key)
            waiter.on_position(None)
            waiter.granted.set()
            granted = True
        if granted:
            self._announce()

    def _announce(self) -> None:
        for number, waiter in enumerate(self._waiting, 1):
            waiter.on_position(number)
