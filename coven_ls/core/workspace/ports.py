"""Ports for fork children: each child gets a block of its own (`COVEN_PORT` is the first), so that
two children starting a dev server or a test database do not fight over one port.

Blocks are distinct across every child this server runs at once; a block is also skipped when
any of its ports is taken on this machine right now (another program, another server's child).
"""

from __future__ import annotations

import random
import socket
import threading

BLOCK = 10
"""ports per child: `COVEN_PORT` to `COVEN_PORT + 9`"""

_FIRST, _LAST = 20000, 59990  # below the usual ephemeral range (Linux: 32768+ is shared, fine)


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class PortBlocks:
    """Blocks of `BLOCK` ports, reserved until released. Thread-safe (reserved from worker
    threads and the event loop alike)."""

    def __init__(self, first: int = _FIRST, last: int = _LAST, block: int = BLOCK) -> None:
        self._first, self._block = first, block
        self._count = (last - first) // block
        if self._count < 1:
            raise ValueError("the port range holds no block")
        # A random start: two servers on one machine rarely pick the same blocks.
        self._next = random.randrange(self._count)
        self._taken: set[int] = set()
        self._lock = threading.Lock()

    def reserve(self) -> int:
        """The first port of a block no child of this server holds and no program uses now."""
        with self._lock:
            for _ in range(self._count):
                base = self._first + self._next * self._block
                self._next = (self._next + 1) % self._count
                if base in self._taken:
                    continue
                if all(_free(p) for p in range(base, base + self._block)):
                    self._taken.add(base)
                    return base
        raise OSError(
            f"no block of {self._block} free ports between {self._first} and "
            f"{self._first + self._count * self._block}: close some servers and try again"
        )

    def release(self, base: int) -> None:
        with self._lock:
            self._taken.discard(base)

    @property
    def reserved(self) -> frozenset[int]:
        with self._lock:
            return frozenset(self._taken)


PORTS = PortBlocks()
"""the server's blocks (one process, one set)"""
