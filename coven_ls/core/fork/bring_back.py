"""Bringing a fork's work back once its children have ended: each worktree child's changes
committed on its branch and described (`collect`), merged into the parent's folder in task order
or left for the user's review, what the worktrees take on disk, and the results given to the
parent (`finish`)."""

from __future__ import annotations

import logging
from typing import Any

import anyio

from ...protocol import events
from ...protocol.types import Changes, Usage
from .. import failpoints
from ..session import Outcome, Session
from ..workspace import isolation
from ..workspace.git import GitError
from .child_env import ChildEnvironments
from .fork import Fork
from .host import ForkHost, ForkJournal
from .limits import tree_usage
from .results import TaskResult, compose_results

log = logging.getLogger(__name__)


class BringBack:
    """What happens to a fork's children's work when they end."""

    def __init__(self, host: ForkHost, journal: ForkJournal, envs: ChildEnvironments) -> None:
        self._host = host
        self._journal = journal
        self._envs = envs

    async def bring_back(self, fork: Fork, interrupted: str | None = None) -> None:
        """Every child has ended: in worktree mode, merge their changes in task order (merge mode
        `auto`) or wait for the user's review; then give the parent the results."""
        for child in fork.children:
            if child.worktree is not None and child.changes is None:
                await self.collect(fork, child, interrupted)
        trees = fork.trees
        if trees is not None and trees.mode == "worktree" and trees.merge_mode == "review":
            pending = [c for c in fork.children if is_pending(c)]
            if pending:
                fork.move_to("reviewing")
                self._journal.fork_changed(fork)
                fork.parent.set_status("reviewing")
                fork.parent.emit(
                    events.ForkReviewing(
                        forkId=fork.id, state=fork.state, pending=[c.id for c in pending]
                    )
                )
                self._host.ask_review(fork, pending)
                return
        async with anyio.create_task_group() as tg:
            for child in fork.children:
                if child.worktree is not None and child.id not in fork.disk:
                    tg.start_soon(self.measure, fork, child)
            for child in fork.children:
                if is_pending(child):
                    await self.merge(child)
                    await failpoints.reached("merge")  # one child merged, the next not yet
        await self.finish_measured(fork, interrupted)

    async def finish_measured(self, fork: Fork, interrupted: str | None = None) -> None:
        """`finish`, with what the worktrees take on disk (a walk of every file: not on the
        event loop)."""
        disk: int | None = None
        for child in fork.children:
            if child.worktree is not None:
                if child.id not in fork.disk:
                    await self.measure(fork, child)
                disk = (disk or 0) + fork.disk[child.id]
        self.finish(fork, interrupted, disk)

    @staticmethod
    async def measure(fork: Fork, child: Session) -> None:
        assert child.worktree is not None
        paths = [child.worktree.path]
        fork.disk[child.id] = await anyio.to_thread.run_sync(isolation.disk_usage, paths)

    async def collect(self, fork: Fork, child: Session, interrupted: str | None = None) -> None:
        """A worktree child has ended: commit its work on its branch and say what it changed."""
        tree = child.worktree
        assert tree is not None
        ok = result_of(child, interrupted).ok
        await failpoints.reached("commit")
        try:
            changes = await isolation.collect(tree, child.label or "", ok, child.changes_since)
        except GitError as exc:
            log.warning("session %s: its changes could not be read: %s", child.id, exc)
            child.emit(events.Error(message=f"Its changes could not be read: {exc.message}"))
            changes = isolation.unreadable()
        self.set_changes(child, changes)

    def set_changes(self, child: Session, changes: Changes) -> None:
        assert child.worktree is not None
        child.changes = changes  # stored with the event's burst (its row goes with it)
        child.emit(events.ChangesEvent(worktree=child.worktree, changes=changes))

    async def merge(self, child: Session) -> Changes:
        tree, changes = child.worktree, child.changes
        assert tree is not None and changes is not None
        merged = await isolation.merge(tree, changes, child.label or "child", child.changes_since)
        self.set_changes(child, merged)
        return merged

    def finish(
        self, fork: Fork, interrupted: str | None = None, disk_bytes: int | None = None
    ) -> None:
        """Every child has ended: report, and give the parent the results (ahead of anything
        that waited)."""
        parent = fork.parent
        self._envs.forget(fork.id)
        fork.results = [result_of(child, interrupted) for child in fork.children]
        if fork.state != "finished":  # a restart finds it finished, its results not given
            fork.move_to("finished")
        self._journal.fork_changed(fork)
        usage = sum((tree_usage(self._host.sessions, c) for c in fork.children), Usage())
        parent.emit(
            events.ForkFinished(
                forkId=fork.id,
                state=fork.state,
                results=[r.wire() for r in fork.results],
                usage=usage,
                diskBytes=disk_bytes,
            )
        )
        if not parent.closed:
            # The parent stays `forking` until its runner takes this turn and starts it.
            parent.send(compose_results(fork.results), origin="forkResults", first=True)
        parent.release()


def result_of(child: Session, interrupted: str | None = None) -> TaskResult:
    """What became of a child, for `<fork-results>` and `coven/forkFinished`."""
    label, sid = child.label or "", child.id
    changes, tree = child.changes, child.worktree
    merge: dict[str, Any] = {}
    if changes is not None and tree is not None:
        merge = {
            "merge": changes.merge,
            "files": tuple(changes.files),
            "conflicts": tuple(changes.conflicts),
            "branch": tree.branch,
            "base": tree.base,
        }
    stopped = child.last_outcome
    if stopped is not None and stopped.limit is not None:
        return TaskResult(
            label, sid, False, stopped.text, stopped.error, limit=stopped.limit, **merge
        )
    if child.status == "cancelled":
        return TaskResult(label, sid, False, error="cancelled by the user", **merge)
    if interrupted is not None and child.status == "interrupted":
        return TaskResult(label, sid, False, error=interrupted, **merge)
    outcome: Outcome | None = child.last_outcome
    if outcome is None:
        reason = interrupted or ("it was closed" if child.closed else "it never ran")
        return TaskResult(label, sid, False, error=f"did not finish: {reason}", **merge)
    return TaskResult(label, sid, outcome.ok, outcome.text, outcome.error, **merge)


def is_pending(child: Session) -> bool:
    """Whether the child's changes wait to be merged (or reviewed)."""
    return child.changes is not None and child.changes.merge == "pending"
