"""A running fork's limits (`ForkLimits`): what each child spends, told to the tree as it goes,
and the child (or the whole fork, at `forkCostUsd`) stopped when it reaches a limit. The sums
are pure (spend.py); this module watches the sessions."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import anyio

from ...protocol import events
from ...protocol.types import ForkLimits, LimitName, Usage
from ..session import Outcome, Session
from .fork import Fork, active_fork
from .spend import child_limit_reached, describe

log = logging.getLogger(__name__)


def tree_usage(sessions: Mapping[str, Session], session: Session) -> Usage:
    """A session's tokens and those of its fork children, theirs, and so on."""
    total = session.usage
    for child in sessions.values():
        if child.parent_id == session.id:
            total = total + tree_usage(sessions, child)
    return total


class Limits:
    """Watches what fork children spend against their forks' limits; `forks` is the manager's
    (by id), `sessions` the hub's."""

    def __init__(self, forks: Mapping[str, Fork], sessions: Mapping[str, Session]) -> None:
        self._forks = forks
        self._sessions = sessions

    async def time_limit(self, fork: Fork, child: Session, seconds: float) -> None:
        """Stop the child `seconds` after it started (not while it waits for a slot)."""
        await child.started.wait()
        assert child.started_at is not None
        await anyio.sleep_until(child.started_at + seconds)
        self.stop_at_limit(fork, child, "childSeconds")

    def on_spend(self, session: Session) -> None:
        """A fork child (or one of its own children, at any depth) made a model call: tell the
        tree how far it is, and stop what reached a limit: the child itself for its own limits,
        every child still at work for its fork's `forkCostUsd`."""
        node, direct = session, True
        while node.fork_id is not None:
            fork = self._forks.get(node.fork_id)
            if fork is None:
                return
            limits = fork.settings.limits
            if limits is not None and fork.state == "running":
                if direct:
                    seconds = running_seconds(node)
                    node.emit(
                        events.Spend(
                            usage=node.live_usage,
                            costUsd=round(node.live_cost_usd, 6),
                            seconds=round(seconds or 0.0, 3),
                        )
                    )
                    reached = child_limit_reached(limits, node.live_usage, node.live_cost_usd)
                    if reached is not None:
                        self.stop_at_limit(fork, node, reached)
                if limits.forkCostUsd:
                    spent = sum(self.tree_cost(c) for c in fork.children)
                    if spent >= limits.forkCostUsd:
                        for child in fork.children:
                            self.stop_at_limit(fork, child, "forkCostUsd")
            node, direct = fork.parent, False

    def tree_cost(self, session: Session) -> float:
        """A session's cost so far and that of its fork children, theirs, and so on."""
        total = session.live_cost_usd
        for child in self._sessions.values():
            if child.parent_id == session.id and child.branched_from is None:
                total += self.tree_cost(child)
        return total

    def stop_at_limit(
        self, fork: Fork, child: Session, limit: LimitName, limits: ForkLimits | None = None
    ) -> None:
        """Stop a child that reached a limit, as a cancel would (its process ends, its work stays
        on its branch), but with its words so far and the limit for the parent. A child that
        forked in turn has its own children stopped with it (`limits`: the fork's whose limit
        was reached, when it is an outer one)."""
        limits = limits or fork.settings.limits
        assert limits is not None
        if fork.state != "running" or child.closed:
            return
        inner = active_fork(self._forks.values(), child)
        if inner is None and (child.answered or (child.settled and child.last_outcome is not None)):
            return  # it had finished its task already
        if inner is not None:
            for grandchild in inner.children:
                self.stop_at_limit(inner, grandchild, limit, limits)
        child.last_outcome = Outcome(
            False, "\n\n".join(child.turn_text), describe(limit, limits), limit
        )
        log.info("fork %s: child %s reached %s", fork.id, child.id, limit)
        # At once: its turn must not end with another outcome, nor its CLI go on meanwhile.
        child.begin_close("cancelled", kill=True)


def running_seconds(child: Session) -> float | None:
    """How long the child has run since it started (None: it has not)."""
    if child.started_at is None:
        return None
    return anyio.current_time() - child.started_at
