"""A fork's worktrees made ahead of time: while a proposal's approval is asked (so that an
approved fork's children start at once), and the repository's pool of spares refilled once a
worktree fork's children are done (core/pool.py)."""

from __future__ import annotations

import logging
from pathlib import Path

from ...protocol.types import Worktree
from ..workspace import isolation, pool
from ..workspace.git import GitError
from ..workspace.isolation import ForkTrees, MadeAhead
from .fork import Fork
from .host import ForkJournal, Spawn

log = logging.getLogger(__name__)


class Ahead:
    """The worktrees made before a fork needs them: its own while it is proposed, and the pools'
    spares."""

    def __init__(self, journal: ForkJournal, spawn: Spawn) -> None:
        self._journal = journal
        self._spawn = spawn
        self.pools = pool.Pools()
        self._pools_resumed: set[Path] = set()

    def refill(self, fork: Fork) -> None:
        """After a worktree fork's children are done (the machine is the user's again), the
        repository's pool is made up for the next fork."""
        trees = fork.trees
        if trees is None or trees.mode != "worktree" or trees.repository is None:
            return
        self._spawn(self._fill(fork), name=f"worktree pool of {trees.repository}")

    async def _fill(self, fork: Fork) -> None:
        trees, config = fork.trees, fork.parent.config
        if trees is None or trees.mode != "worktree" or trees.repository is None:
            return
        await self.pools.fill(config.state_dir, trees.repository, config.worktree_pool)

    def resume_pools(self, state_dir: str | None, size: int) -> None:
        """Once per state folder, when a server first opens it: clean the pools a stopped server
        left and fill them again, in the background."""
        root = pool.state_root(state_dir)
        if root in self._pools_resumed:
            return
        self._pools_resumed.add(root)

        async def resume() -> None:
            for repository in await self.pools.resume(state_dir, size):
                await self.pools.fill(state_dir, repository, size)

        self._spawn(resume(), name=f"worktree pools of {root}")

    def make(self, fork: Fork) -> None:
        """While a proposed fork's approval is asked, make its worktrees (spares adopted at a
        snapshot of the moment) and their `.worktreeinclude` copies, so that an approved fork's
        children start at once. Nothing is made for a session whose forks share its folder."""
        config, chosen = fork.parent.config, fork.settings
        if chosen.isolation == "shared":
            return
        ahead = fork.ahead = MadeAhead()

        async def make_them() -> None:
            try:
                trees = await isolation.plan(
                    config.cwd, None, chosen.merge_mode, config.state_dir, fork.id
                )
                if trees.mode != "worktree" or trees.repository is None:
                    return
                places = [
                    isolation.place(trees, fork.id, n, t) for n, t in enumerate(fork.tasks, 1)
                ]
                # Stored before git makes them, as for a started fork: a crash leaves no orphan.
                trees.planned = [{"path": p, "branch": b} for p, b in places]
                if fork.state == "proposed":  # once started, the fork's own plan is stored
                    fork.trees = trees
                    self._journal.fork_changed(fork)
                    await self._journal.flushed()
                spares = self.pools.take(config.state_dir, trees.repository, len(places))
                ahead.made = await isolation.make(trees, places, spares)
                ahead.trees, ahead.places = trees, places
                await isolation.copy_ahead(trees, ahead.made)
            except (GitError, OSError):
                log.warning("fork %s: worktrees could not be made ahead", fork.id, exc_info=True)
            finally:
                ahead.ready.set()

        self._spawn(make_them(), name=f"fork {fork.id}: worktrees ahead")

    async def take(
        self, fork: Fork, trees: ForkTrees, places: list[tuple[str, str]]
    ) -> list[Worktree] | None:
        """The worktrees made ahead of this fork, brought to its snapshot, when they are for
        these very places; else (other tasks, or they failed) None, and they are removed."""
        ahead, fork.ahead = fork.ahead, None
        if ahead is None:
            return None
        await ahead.ready.wait()
        if ahead.trees is not None and ahead.made and ahead.places == places:
            try:
                return await isolation.catch_up(ahead, trees)
            except GitError as exc:
                log.warning("fork %s: worktrees made ahead not used: %s", fork.id, exc.message)
        await isolation.remove_ahead(ahead)
        return None

    def drop(self, fork: Fork) -> None:
        """A proposal that will not run: what was made ahead for it is removed (in the
        background), and the spares it took are made up."""
        if fork.ahead is not None:
            ahead, fork.ahead = fork.ahead, None

            async def remove_then_refill() -> None:
                # One after the other: the pool's `git worktree add`s racing the removal's
                # `git worktree remove`s in one repository left a spare half made.
                await isolation.remove_ahead(ahead)
                await self._fill(fork)  # the spares it took

            self._spawn(remove_then_refill(), name=f"fork {fork.id}: worktrees ahead")
