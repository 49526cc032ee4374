"""Spare worktrees, prepared ahead of forks so that a fork's children get theirs at once.

Writing every file of a big checkout (`git worktree add`) takes seconds per child; a fork should
not wait for it. So, for each repository that has forked, the server keeps up to
`initializationOptions.worktreePool` spare worktrees, made while it idles (after a fork has
ended, and when it starts again), each detached at the HEAD of its day. A fork takes as many as
it has children (`take`); `worktrees.adopt` moves each to its child's place and brings it to the
fork's snapshot, writing only the files that differ, and cleans whatever is not the snapshot:
the child sees exactly the parent's state when the fork starts, never the spare's older one.
A repository with a `.worktreeinclude` gets its copies made in each spare too; a child keeps
them only when the parent's files are provably what they were copied from (their inodes and
change times, `worktree_env.manifest`), else they are copied again.
Children the pool cannot serve get a worktree made as before.

On disk, in the state folder (`<stateDir>/pool`):

    <name>-<digest>/repository     the repository's top folder, written before any spare is made
    <name>-<digest>/<id>/          a spare worktree (git knows it: `git worktree list`)
    <name>-<digest>/<id>.ready     written once the spare is complete
    <name>-<digest>/.in-use        locked (shared) by every server using the pool, while it runs

Everything under a pool folder is the server's own: a spare without its `.ready` (a crash while
it was made, or after a fork took it) is removed when a server starts (`resume`), and a removed
repository takes its pool with it. `coven-ls prune` removes a pool's spares only while no
server holds `.in-use` (it takes it exclusively for the removal, `reserved`), so it never
removes a spare a running server is making, about to hand out, or adopting. Spares are on no
branch: they hold no work, and `coven/` branches stay the children's. `usage` is what
`coven-ls doctor` shows.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from .. import failpoints
from ..store import default_state_dir
from . import worktree_env, worktrees
from .git import GitError
from .repository import NotARepo, RepoInfo, inspect

log = logging.getLogger(__name__)

_REPOSITORY = "repository"
_READY = ".ready"
_IN_USE = ".in-use"


def state_root(state_dir: str | None) -> Path:
    return (Path(state_dir).expanduser() if state_dir else default_state_dir()).absolute()


def folder_of(state_dir: str | None, repository: str) -> Path:
    """The pool folder of a repository (its top folder), readable and unique."""
    top = os.path.realpath(repository)
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(top).name or "root").strip("-") or "root"
    digest = hashlib.sha256(top.encode()).hexdigest()[:12]
    return state_root(state_dir) / "pool" / f"{name}-{digest}"


@dataclass
class _Pool:
    folder: Path
    repository: str
    ready: list[Path] = field(default_factory=list)
    filling: anyio.Lock = field(default_factory=anyio.Lock)
    held: int | None = None
    """the open `.in-use` file this server holds a shared lock on (for as long as it runs)"""


@dataclass(frozen=True)
class PoolUsage:
    """One repository's pool, as `coven-ls doctor` reports it."""

    repository: str
    folder: Path
    spares: int
    """complete spares (a `.ready` each)"""
    bytes: int
    """what its folder takes on disk (blocks), every spare and leftover included"""


class Pools:
    """The pools of every repository this server has forked in, per state folder."""

    def __init__(self) -> None:
        self._pools: dict[Path, _Pool] = {}

    def _pool(self, state_dir: str | None, repository: str) -> _Pool:
        folder = folder_of(state_dir, repository)
        found = self._pools.get(folder)
        if found is None:
            found = self._pools[folder] = _Pool(folder, os.path.realpath(repository))
        return found

    def ready(self, state_dir: str | None, repository: str) -> int:
        """How many spares the repository's pool holds now."""
        return len(self._pool(state_dir, repository).ready)

    def take(self, state_dir: str | None, repository: str, count: int) -> list[Path]:
        """Up to `count` spares, out of the pool: from now on they are the caller's, to adopt
        (`worktrees.adopt`) or remove. Their `.ready` goes first: a crash before they are
        adopted leaves them to the next start's clean-up, never to another fork."""
        pool = self._pool(state_dir, repository)
        taken, pool.ready = pool.ready[:count], pool.ready[count:]
        for spare in taken:
            _marker(spare).unlink(missing_ok=True)
        return taken

    async def fill(self, state_dir: str | None, repository: str, size: int) -> None:
        """Bring the repository's pool to `size` spares, one at a time (it runs while the server
        idles: one git at a time leaves the machine to the user), each at the repository's HEAD
        of the moment. Spares beyond `size` (a smaller setting) are removed. A failure is
        logged and ends the filling: the next fork makes its worktrees as without a pool."""
        pool = self._pool(state_dir, repository)
        async with pool.filling:
            try:
                while len(pool.ready) > size:
                    await _discard(pool, pool.ready.pop())
                while len(pool.ready) < size:
                    repo = await anyio.to_thread.run_sync(inspect, pool.repository)
                    if isinstance(repo, NotARepo):
                        return
                    pool.folder.mkdir(parents=True, exist_ok=True)
                    (pool.folder / _REPOSITORY).write_text(pool.repository)
                    await anyio.to_thread.run_sync(_hold, pool)
                    spare = pool.folder / uuid.uuid4().hex[:12]
                    try:
                        await anyio.to_thread.run_sync(worktrees.prepare, repo, spare, repo.head)
                        await anyio.to_thread.run_sync(_keep_copies, repo.toplevel, spare)
                    except BaseException:
                        with anyio.CancelScope(shield=True):
                            await _discard(pool, spare)
                        raise
                    await failpoints.reached("pool")  # made, not yet marked complete
                    _marker(spare).write_text(repo.head)
                    pool.ready.append(spare)
            except (GitError, OSError):
                log.warning("the worktree pool of %s was not filled", repository, exc_info=True)

    async def resume(self, state_dir: str | None, size: int) -> list[str]:
        """After a start: keep the complete spares of every pool in the state folder, remove
        what a stopped server left half made, and drop the pools of repositories that are gone
        (or all of them, with `size` 0). Returns the repositories whose pools are to be filled
        (`fill`), which the caller does in the background."""
        base = state_root(state_dir) / "pool"
        found: list[str] = []
        for folder in sorted(base.iterdir()) if base.is_dir() else []:
            try:
                repository = (folder / _REPOSITORY).read_text().strip()
            except OSError:
                await anyio.to_thread.run_sync(shutil.rmtree, folder, True)
                continue
            repo = await anyio.to_thread.run_sync(inspect, repository)
            if isinstance(repo, NotARepo):
                await anyio.to_thread.run_sync(shutil.rmtree, folder, True)
                continue
            pool = self._pools.setdefault(folder, _Pool(folder, repository))
            async with pool.filling:
                if size > 0:
                    await anyio.to_thread.run_sync(_hold, pool)
                await anyio.to_thread.run_sync(_clean, repo, pool, size > 0)
            if size > 0:
                found.append(repository)
            else:
                await anyio.to_thread.run_sync(shutil.rmtree, folder, True)
        return found


def _keep_copies(top: Path, spare: Path) -> None:
    """The repository's `.worktreeinclude` copies, made in the spare now rather than on a fork's
    path (a dependency folder takes seconds to copy); a child uses them only if the parent's
    files have not changed since (`worktree_env.prepare_copies`)."""
    entries = worktree_env.included(top)
    if entries and not worktree_env.keep_in_spare(top, spare, entries):
        log.info("the spare %s has no copies: %s changed lately", spare, ", ".join(entries))


def _hold(pool: _Pool) -> None:
    """Say, for as long as this server runs, that it uses the pool (a shared lock on its
    `.in-use`; the process's end releases it): `coven-ls prune` leaves its spares alone. Waits
    while a prune removes spares of it (blocking: call it from a worker thread)."""
    if pool.held is not None:
        return
    fd = os.open(pool.folder / _IN_USE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError:
        os.close(fd)
        raise
    pool.held = fd


def pool_of(state_dir: Path, path: Path) -> Path | None:
    """The pool folder a spare worktree at `path` belongs to, if it is in one under `state_dir`."""
    base = os.path.realpath(state_dir / "pool")
    where = os.path.realpath(path)
    if not where.startswith(base + os.sep):
        return None
    return Path(base) / os.path.relpath(where, base).split(os.sep, 1)[0]


def in_use(folder: Path) -> bool:
    """Whether a running server uses this pool (holds its `.in-use`)."""
    with reserved(folder) as mine:
        return not mine


@contextlib.contextmanager
def reserved(folder: Path) -> Iterator[bool]:
    """The pool to remove spares of, when no server uses it: True while this process holds its
    `.in-use` exclusively (a server starting meanwhile waits), False when a server holds it."""
    try:
        fd = os.open(folder / _IN_USE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except FileNotFoundError:
        yield True  # the pool folder is gone: nobody uses it
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _marker(spare: Path) -> Path:
    return spare.with_name(spare.name + _READY)


def _clean(repo: RepoInfo, pool: _Pool, keep: bool) -> None:
    """Remove every spare of `pool` that is not complete (or all, unless `keep`), and the
    registrations git keeps of spares whose folder is gone; list the complete ones as ready."""
    registered = {
        wt.path.resolve(): wt
        for wt in worktrees.list_worktrees(repo)
        if _is_within(wt.path.resolve(), pool.folder.resolve())
    }
    ready: list[Path] = []
    for path, wt in registered.items():
        complete = keep and wt.branch is None and not wt.missing and _marker(path).is_file()
        if complete:
            ready.append(path)
        else:
            discard_spare(repo, path)
    for entry in pool.folder.iterdir():
        if entry.name in (_REPOSITORY, _IN_USE):
            continue
        spare = entry.with_name(entry.name.removesuffix(_READY))
        if spare.resolve() not in {p for p in ready}:
            _remove_path(entry)
    pool.ready = sorted(ready)


async def _discard(pool: _Pool, spare: Path) -> None:
    repo = await anyio.to_thread.run_sync(inspect, pool.repository)
    if isinstance(repo, NotARepo):
        await anyio.to_thread.run_sync(_remove_path, spare)
    else:
        await anyio.to_thread.run_sync(discard_spare, repo, spare)
    _marker(spare).unlink(missing_ok=True)


def discard_spare(repo: RepoInfo, spare: Path) -> None:
    """Remove a spare (its folder and git's registration of it), whatever state it is in."""
    try:
        worktrees.remove(repo, spare, "", keep_branch=True)
    except GitError:
        log.warning("could not remove the spare worktree %s", spare, exc_info=True)
    _remove_path(spare)  # never registered (git stopped before), or removal failed half way
    _marker(spare).unlink(missing_ok=True)


def _remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _is_within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def usage(state_dir: str | None) -> Iterator[PoolUsage]:
    """Every pool in the state folder, with its disk (blocking: a walk of every file)."""
    base = state_root(state_dir) / "pool"
    for folder in sorted(base.iterdir()) if base.is_dir() else []:
        try:
            repository = (folder / _REPOSITORY).read_text().strip()
        except OSError:
            repository = "?"
        spares = sum(1 for p in folder.glob(f"*{_READY}"))
        yield PoolUsage(repository, folder, spares, _blocks(folder))


def _blocks(folder: Path) -> int:
    total = 0
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in [*dirnames, *filenames]:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                continue
    return total
