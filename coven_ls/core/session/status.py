"""A session's status machine: the allowed transitions, written once. `SessionState.set_status`
(state.py) is the only place a status changes; it checks each change against this table."""

from __future__ import annotations

import os

from ...protocol import Status

# Every session may end (`cancelled`, `closed`) or be cut off by a server stop (`interrupted`, set
# by the restart that finds it busy): those are allowed from anywhere but the final statuses.


def _to(*statuses: Status) -> frozenset[Status]:
    return frozenset(statuses)


_ENDINGS = _to("cancelled", "closed", "interrupted")

TRANSITIONS: dict[Status, frozenset[Status]] = {
    # a fork child waiting for a slot; a restarted child goes back here too; one whose
    # worktree setup failed ends failed without starting
    "queued": _to("starting", "running", "failed") | _ENDINGS,
    # the CLI is starting; a cancel while it starts leaves the session idle
    "starting": _to("running", "idle", "failed") | _ENDINGS,
    # a turn runs: it ends idle or failed, or its answer proposes or starts a fork
    "running": _to("idle", "failed", "awaitingApproval", "forking") | _ENDINGS,
    # between turns: a message runs a turn (starting the CLI again if it was stopped), a manual
    # fork starts, an interrupted fork child is run again
    "idle": _to("starting", "running", "forking", "queued") | _ENDINGS,
    "awaitingApproval": _to("idle", "forking") | _ENDINGS,
    # the children run; the results turn then starts the parent's CLI again (or, in merge mode
    # review, the user reviews their changes first)
    "forking": _to("starting", "running", "idle", "reviewing") | _ENDINGS,
    # every child's changes were applied or discarded: the results go to the parent
    "reviewing": _to("forking", "starting", "running", "idle") | _ENDINGS,
    "failed": _to("starting", "running", "forking", "queued") | _ENDINGS,
    # a restart found it busy: a message resumes it, a proposal is still open, a fork resumes
    "interrupted": _to(
        "starting", "running", "idle", "failed", "queued", "forking", "awaitingApproval"
    )
    | _ENDINGS,
    "cancelled": _to("closed"),
    "closed": _to(),
}

# Tests set this (their servers inherit it) so that a transition missing from the table fails
# loudly; a user's server only logs it.
STRICT = os.environ.get("COVEN_STRICT_STATUS") == "1"


class TransitionError(AssertionError):
    """A status change the table does not allow: a bug in coven-ls."""


def check_transition(old: Status, new: Status) -> str | None:
    """None when `old -> new` is allowed, else a sentence saying it is not (raised when STRICT)."""
    if new in TRANSITIONS[old]:
        return None
    problem = f"status {old} -> {new} is not an allowed transition"
    if STRICT:
        raise TransitionError(problem)
    return problem
