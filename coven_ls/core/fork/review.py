"""The user's review of a fork's changes (merge mode `review`): a worktree child's changes shown
(coven/getChanges), applied or discarded (coven/applyChanges, coven/discardChanges), and later
work a child did in its worktree brought up for review again."""

from __future__ import annotations

from collections.abc import Mapping

from ... import protocol
from ...protocol import events
from ...protocol.types import Changes, FileText, GetChangesResult
from ..session import Session
from ..workspace import isolation
from ..workspace.git import GitError
from .bring_back import BringBack, is_pending
from .fork import Fork
from .host import ForkHost, Spawn


class Review:
    """Decisions on children's changes; the fork's results go to the parent once none waits."""

    def __init__(
        self, forks: Mapping[str, Fork], host: ForkHost, spawn: Spawn, back: BringBack
    ) -> None:
        self._forks = forks
        self._host = host
        self._spawn = spawn
        self._back = back

    async def bring_later_work(self, child: Session) -> None:
        """A worktree child whose changes were already collected (its fork has ended, or waits
        for review) did more work in its worktree (a follow-up): its changes are that work,
        `pending` again until coven/applyChanges brings them back."""
        fork = self._forks.get(child.fork_id or "")
        if (
            fork is None
            or child.worktree is None
            or child.changes is None
            or fork.state not in ("finished", "reviewing")
        ):
            return
        try:
            later = await isolation.later_work(
                child.worktree, child.changes, child.changes_since, child.label or ""
            )
        except GitError as exc:
            child.emit(events.Error(message=f"Its later work could not be read: {exc.message}"))
            return
        if later is None:
            return
        changes, child.changes_since = later
        self._back.set_changes(child, changes)
        self._host.ask_review(fork, [child])

    def _target(self, child: Session, method: str) -> Fork | None:
        if child.worktree is None or child.changes is None or child.changes.merge != "pending":
            merge = child.changes.merge if child.changes is not None else None
            what = (
                "did not work in a worktree"
                if child.worktree is None
                else "has not ended yet"
                if child.changes is None
                else f"has changes that are {merge}, not pending"
            )
            raise protocol.CovenError(
                protocol.ErrorCode.InvalidState,
                f"{method}: session {child.id} {what}; only a fork child whose changes wait "
                "for review can be applied or discarded.",
                {"sessionId": child.id, "merge": merge},
            )
        return self._forks.get(child.fork_id or "")

    async def get_changes(self, child: Session, path: str | None) -> GetChangesResult:
        """coven/getChanges: a worktree child's changes, and one file's two texts."""
        tree, changes = child.worktree, child.changes
        if tree is None or changes is None:
            raise protocol.CovenError(
                protocol.ErrorCode.InvalidState,
                f"Session {child.id} "
                + ("did not work in a worktree" if tree is None else "has not ended yet")
                + "; only a worktree fork child that has ended has changes to show.",
                {"sessionId": child.id, "status": child.status},
            )
        text = None
        if path is not None:
            try:
                changed, base, mine = await isolation.file_text(
                    tree, changes, path, child.changes_since
                )
            except KeyError:
                raise protocol.invalid_params(
                    protocol.GET_CHANGES,
                    f"'path' {path!r} is not one of the files session {child.id} changed; "
                    "coven/getChanges without 'path' lists them.",
                    "path",
                ) from None
            text = FileText(
                path=changed.path,
                oldPath=changed.oldPath,
                binary=changed.binary,
                base=None if changed.binary or base is None else base.decode(errors="replace"),
                child=None if changed.binary or mine is None else mine.decode(errors="replace"),
            )
        return GetChangesResult(sessionId=child.id, worktree=tree, changes=changes, file=text)

    async def apply_changes(self, child: Session) -> Changes:
        """The user applies a reviewed child's changes (all of them, or none on a conflict)."""
        fork = self._target(child, protocol.APPLY_CHANGES)
        merged = await self._back.merge(child)
        if fork is not None:
            self._reviewed(fork)
        return merged

    def discard_changes(self, child: Session) -> None:
        fork = self._target(child, protocol.DISCARD_CHANGES)
        assert child.changes is not None
        self._back.set_changes(child, isolation.discarded(child.changes))
        if fork is not None:
            self._reviewed(fork)

    def _reviewed(self, fork: Fork) -> None:
        """A child's changes were decided: once none waits, the parent gets the results."""
        if fork.state == "reviewing" and not any(is_pending(c) for c in fork.children):
            fork.move_to("running")  # decided; a second decision must not finish it again
            fork.parent.set_status("forking")
            self._spawn(self._back.finish_measured(fork), name=f"fork {fork.id}")
