"""A fork's state machine: the states are `protocol.ForkState` (the words clients see in fork
events and `SessionInfo.lastFork`), the allowed moves are written here once. `Fork.move_to`
(fork.py) is the only place a fork's state changes; it checks each move against this table,
strictly when tests run (`COVEN_STRICT_STATUS`, as for sessions' statuses in status.py)."""

from __future__ import annotations

from ...protocol import ForkState
from ..session.status import STRICT, TransitionError

MOVES: dict[ForkState, frozenset[ForkState]] = {
    # the model asked (fork mode approve), or, for an instant, one that starts at once: approved
    # or started by hand it runs; declined, withdrawn by a cancel, it is rejected
    "proposed": frozenset({"running", "rejected"}),
    # its children run: all ended, it finishes or waits for the user's review; it could not
    # start (no worktree, no children), it is rejected; the server stopped, it is interrupted
    "running": frozenset({"reviewing", "finished", "rejected", "interrupted"}),
    # every child's changes were decided: it runs on to give the parent the results
    "reviewing": frozenset({"running"}),
    # coven/resumeFork runs its unfinished children again; coven/abandonFork brings back what
    # finished
    "interrupted": frozenset({"running"}),
    "rejected": frozenset(),
    "finished": frozenset(),
}


def check_move(old: ForkState, new: ForkState) -> str | None:
    """None when `old -> new` is allowed, else a sentence saying it is not (raised when STRICT)."""
    if new in MOVES[old]:
        return None
    problem = f"fork state {old} -> {new} is not an allowed move"
    if STRICT:
        raise TransitionError(problem)
    return problem
