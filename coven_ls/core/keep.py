"""Nothing lost: which of a deleted session tree's fork branches hold work that never reached the
parent's working tree, so that `coven/deleteSession` keeps them (unless told `discardWork`).

Work never applied is a conflict, a failed or cancelled child's work, changes waiting for review,
or work a child did after its changes were brought back (a follow-up). Cleanup that deleted such
branches is how users of other agent tools lost work; a kept branch costs a ref.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ..protocol.types import KeptBranch
from .session import Session
from .workspace import isolation
from .workspace.git import GitError

log = logging.getLogger(__name__)


async def unapplied_branches(sessions: Iterable[Session]) -> list[KeptBranch]:
    """The branches of these sessions (closed: nothing writes to their worktrees any more) that
    hold unapplied work, each committed first. A branch git cannot read is kept too: when in
    doubt, keep."""
    kept: list[KeptBranch] = []
    for session in sessions:
        tree = session.worktree
        if tree is None:
            continue
        try:
            found = await isolation.unapplied(tree, session.changes, session.changes_since)
        except (GitError, OSError) as exc:
            log.warning("could not tell whether %s holds unapplied work: %s", tree.branch, exc)
            commit = session.changes.commit if session.changes is not None else None
            found = (
                "work that could not be read when the session was deleted",
                commit or tree.base,
                tree.base,
            )
        if found is None:
            continue
        reason, commit, base = found
        kept.append(
            KeptBranch(
                branch=tree.branch,
                repository=tree.repository,
                commit=commit,
                base=base,
                sessionId=session.id,
                label=session.label or "",
                reason=reason,
            )
        )
    return kept
