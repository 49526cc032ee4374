"""Where a fork's children work, and how their changes come back.

A fork in `worktree` mode gives each child a git worktree of its own (the git work is the
room's git layer: `snapshots`, `worktrees`, `commits`, `changes`, `merge`), started from one
snapshot of what the parent sees. When a child ends, its work is committed on its branch
(`collect`); when the fork ends, each child's changes are merged into the parent's working tree
(`merge`) or wait for the user's review. Everything here runs git in worker threads: a snapshot
of a big repository takes a while, and the event loop must not wait on it.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import msgspec

from ...protocol.types import (
    ChangedFile,
    Changes,
    ConflictFile,
    Isolation,
    MergeMode,
    MergeState,
    Worktree,
)
from ..store import default_state_dir
from . import pool, worktree_env, worktrees
from .changes import FileChange, changed_files
from .commits import commit_all, own_git_dir
from .git import GitError
from .merge import Conflict, merge_into_worktree
from .repository import (
    COVEN_BRANCH_PREFIX,
    NotARepo,
    RepoInfo,
    branches,
    inspect,
    resolve,
    same_tree,
    show,
)
from .snapshots import snapshot

log = logging.getLogger(__name__)

# Tools that write files, and the input field holding the path they write.
_WRITING_TOOLS = {
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "Write": "file_path",
    "NotebookEdit": "notebook_path",
}

# One merge into a working tree at a time: two forks of one repository ending together must not
# both read the same file and each write their own merge of it.
_merge_locks: dict[str, anyio.Lock] = {}


def _merge_lock(repository: str) -> anyio.Lock:
    return _merge_locks.setdefault(repository, anyio.Lock())


@dataclass
class ForkTrees:
    """A fork's isolation: the mode, why it is shared, and for worktrees the snapshot they start
    from and where they live. Stored with the fork (`record`)."""

    mode: Isolation
    reason: str | None = None
    merge_mode: MergeMode = "auto"
    repository: str | None = None
    """the parent's work tree (its top folder): where the changes are merged"""
    base: str | None = None
    root: str | None = None
    """`<stateDir>/worktrees/<forkId>`: every child's worktree is in it"""
    planned: list[dict[str, str]] = field(default_factory=list)
    """every worktree about to be made ({path, branch}), stored before git makes them, so that a
    restart can remove those a crash left without a session"""

    def record(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "reason": self.reason,
            "mergeMode": self.merge_mode,
            "repository": self.repository,
            "base": self.base,
            "root": self.root,
            "planned": self.planned,
        }

    @classmethod
    def from_record(cls, row: dict[str, Any]) -> ForkTrees:
        return cls(
            mode=row["mode"],
            reason=row.get("reason"),
            merge_mode=row.get("mergeMode") or "auto",
            repository=row.get("repository"),
            base=row.get("base"),
            root=row.get("root"),
            planned=list(row.get("planned") or []),
        )


def shared(reason: str, merge_mode: MergeMode = "auto") -> ForkTrees:
    return ForkTrees(mode="shared", reason=reason, merge_mode=merge_mode)


async def plan(
    cwd: str,
    requested: Isolation | None,
    merge_mode: MergeMode,
    state_dir: str | None,
    fork_id: str,
) -> ForkTrees:
    """Decide where a fork's children work and, for worktrees, snapshot the parent's tree. Never
    raises for the repository's sake: anything that keeps worktrees from working makes the fork
    shared, with the reason."""
    if requested == "shared":
        return shared("forkIsolation is shared", merge_mode)
    try:
        found = await anyio.to_thread.run_sync(inspect, cwd)
        if isinstance(found, NotARepo):
            return shared(found.reason, merge_mode)
        base = await anyio.to_thread.run_sync(snapshot, found)
    except GitError as exc:
        return shared(f"the parent's files could not be snapshotted: {exc.message}", merge_mode)
    root = Path(state_dir).expanduser() if state_dir else default_state_dir()
    return ForkTrees(
        mode="worktree",
        merge_mode=merge_mode,
        repository=str(found.toplevel),
        base=base,
        root=str((root / "worktrees" / fork_id).absolute()),
    )


def slug(label: str, limit: int = 40) -> str:
    """A label as a branch and folder name part: lower case letters, digits and dashes."""
    text = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
    return text[:limit].rstrip("-") or "task"


def place(trees: ForkTrees, fork_id: str, number: int, label: str) -> tuple[str, str]:
    """A child's worktree folder and branch."""
    assert trees.root is not None
    name = f"{number}-{slug(label)}"
    return str(Path(trees.root) / name), f"{COVEN_BRANCH_PREFIX}{fork_id}/{name}"


async def _repo(repository: str) -> RepoInfo:
    found = await anyio.to_thread.run_sync(inspect, repository)
    if isinstance(found, NotARepo):
        raise GitError(f"{repository} is no longer usable: {found.reason}.")
    return found


async def make(
    trees: ForkTrees, places: Sequence[tuple[str, str]], spares: Sequence[Path] = ()
) -> list[Worktree]:
    """Make the children's worktrees (in parallel), the first ones from `spares` (prepared
    worktrees out of the pool, which are the caller's no more: each is adopted, or removed and
    its child's worktree made as without it). All or none: when one cannot be made, those made
    are removed again and the GitError is raised."""
    assert trees.repository is not None and trees.base is not None
    repo = await _repo(trees.repository)
    base = trees.base
    made: list[tuple[str, str]] = []
    failure: list[GitError] = []

    async def one(path: str, branch: str, spare: Path | None = None) -> None:
        try:
            if spare is not None:
                try:
                    await anyio.to_thread.run_sync(worktrees.adopt, repo, spare, base, path, branch)
                    made.append((path, branch))
                    return
                except (GitError, OSError):
                    log.warning("a prepared worktree could not be used", exc_info=True)
                    await remove_quietly(trees.repository or "", path, branch)
                    await _remove_spare(repo, spare)
            await anyio.to_thread.run_sync(worktrees.create, repo, base, path, branch)
            made.append((path, branch))
        except GitError as exc:
            failure.append(exc)

    async with anyio.create_task_group() as tg:
        for n, (path, branch) in enumerate(places):
            tg.start_soon(one, path, branch, spares[n] if n < len(spares) else None)
        for spare in spares[len(places) :]:
            tg.start_soon(_remove_spare, repo, spare)
    if failure:
        # `git worktree add`s running side by side can trip over each other (one reads the
        # others' half-made administrative folders: "failed to read .git/worktrees/…/commondir"):
        # those that failed get a second go, one at a time.
        failure.clear()
        for path, branch in [p for p in places if p not in made]:
            await remove_quietly(trees.repository, path, branch)  # what the failed try left
            await one(path, branch)
    if failure:
        for path, branch in made:
            await remove_quietly(trees.repository, path, branch)
        raise failure[0]
    return [
        Worktree(path=path, branch=branch, base=base, repository=trees.repository)
        for path, branch in places
    ]


@dataclass
class MadeAhead:
    """A proposed fork's worktrees, made while its approval is asked (the user reads the tasks
    for seconds; making worktrees need not wait for the answer). When the fork starts they are
    brought to its own snapshot (`catch_up`): never a child sees the tree of the proposal's
    moment if the user changed something since."""

    ready: anyio.Event = field(default_factory=anyio.Event)
    trees: ForkTrees | None = None
    places: list[tuple[str, str]] = field(default_factory=list)
    made: list[Worktree] = field(default_factory=list)
    removed: anyio.Event = field(default_factory=anyio.Event)
    """set once `remove_ahead` is done with them"""


async def catch_up(ahead: MadeAhead, trees: ForkTrees) -> list[Worktree]:
    """The worktrees made ahead, for the fork whose snapshot is now `trees.base`: as they are
    when that snapshot holds the same files as the one they were made at (its commit then
    stands for both), else each reset to the new snapshot (in parallel). Raises GitError."""
    assert ahead.trees is not None and ahead.trees.base is not None
    assert trees.repository is not None and trees.base is not None
    repo = await _repo(trees.repository)
    old, new = ahead.trees.base, trees.base
    if old == new or await anyio.to_thread.run_sync(same_tree, repo, old, new):
        trees.base = old
        return list(ahead.made)
    async with anyio.create_task_group() as tg:
        for tree in ahead.made:
            tg.start_soon(
                anyio.to_thread.run_sync,
                worktrees.reset_to,
                tree.path,
                tree.branch,
                new,
                repo.git_version,
            )
    return [msgspec.structs.replace(t, base=new) for t in ahead.made]


async def copy_ahead(trees: ForkTrees, made: Sequence[Worktree]) -> None:
    """The `.worktreeinclude` copies of a proposed fork's worktrees, made while its approval is
    asked (a dependency folder takes seconds to copy) rather than on its children's path, kept
    as a pool's spare keeps them (`worktree_env.keep_in_spare`): a child uses them only if the
    parent's files are still what they were copied from, else copies anew
    (`worktree_env.prepare_copies`). A worktree adopted from a spare with copies keeps those.
    They go with their worktree when the fork does not use it (`remove_ahead`)."""
    if trees.repository is None or not made:
        return
    top = Path(trees.repository)
    entries = await anyio.to_thread.run_sync(worktree_env.included, top)
    if not entries:
        return

    def keep(path: Path) -> None:
        try:
            if (own_git_dir(path) / worktree_env.KEPT_RECORD).exists():
                return
            if not worktree_env.keep_in_spare(top, path, entries):
                log.info("%s: no copies made ahead: %s changed lately", path, ", ".join(entries))
        except (GitError, OSError):
            # The child copies them when it starts, and says so if that fails too.
            log.warning("%s: the copies could not be made ahead", path, exc_info=True)

    async with anyio.create_task_group() as tg:
        for tree in made:
            tg.start_soon(anyio.to_thread.run_sync, keep, Path(tree.path))


async def remove_ahead(ahead: MadeAhead) -> None:
    """Worktrees made ahead of a fork that will not use them (declined, or other tasks)."""
    await ahead.ready.wait()
    if ahead.trees is not None and ahead.trees.repository is not None:
        for tree in ahead.made:
            await remove_quietly(ahead.trees.repository, tree.path, tree.branch)
    ahead.made = []
    ahead.removed.set()


async def _remove_spare(repo: RepoInfo, spare: Path) -> None:
    """A spare not adopted: its folder (if it is still there) and git's record of it."""
    await anyio.to_thread.run_sync(pool.discard_spare, repo, spare)


def child_cwd(tree: Worktree, parent_cwd: str) -> str:
    """The child's working directory: the parent's, moved from its repository into the
    worktree (a parent working in `repo/src` has children in `worktree/src`)."""
    inside = os.path.relpath(os.path.realpath(parent_cwd), os.path.realpath(tree.repository))
    if inside.startswith(os.pardir):
        return tree.path
    return os.path.normpath(os.path.join(tree.path, inside))


async def collect(tree: Worktree, label: str, ok: bool, since: str | None = None) -> Changes:
    """Commit what a child changed in its worktree (any tool may have written files) and list it
    (from `since`, else the fork's snapshot): `pending` when it succeeded and has changes to
    bring back, `kept` when it failed (its work stays on its branch), `unchanged` when it
    changed nothing."""
    repo = await _repo(tree.repository)
    if Path(tree.path).is_dir():
        await anyio.to_thread.run_sync(commit_all, tree.path, f"coven: {label}")
    found = await anyio.to_thread.run_sync(changed_files, repo, since or tree.base, tree.branch)
    commit = await anyio.to_thread.run_sync(resolve, repo, tree.branch)
    merge: MergeState = "unchanged" if not found else "pending" if ok else "kept"
    return _changes(merge, found, commit)


def _changes(
    merge: MergeState,
    found: Sequence[FileChange],
    commit: str | None,
    conflicts: Sequence[Conflict] = (),
) -> Changes:
    files = [
        ChangedFile(
            path=f.path,
            status=f.status,
            oldPath=f.old_path if f.status == "renamed" else None,
            binary=f.binary,
            linesAdded=f.lines_added,
            linesRemoved=f.lines_removed,
        )
        for f in found
    ]
    return Changes(
        merge=merge,
        files=files,
        linesAdded=sum(f.linesAdded for f in files),
        linesRemoved=sum(f.linesRemoved for f in files),
        conflicts=[ConflictFile(path=c.path, reason=c.reason) for c in conflicts],
        commit=commit if files else None,
    )


async def merge(tree: Worktree, changes: Changes, label: str, since: str | None = None) -> Changes:
    """Merge a child's committed changes (from `since`, else the fork's snapshot) into the
    parent's working tree: `applied`, or `conflict` with the files (then nothing was written;
    when git itself failed, every file is in conflict with git's message)."""
    base = since or tree.base
    try:
        async with _merge_lock(tree.repository):
            repo = await _repo(tree.repository)
            result = await anyio.to_thread.run_sync(
                lambda: merge_into_worktree(repo, base, tree.branch, label=label)
            )
    except GitError as exc:
        return _with_merge(
            changes,
            "conflict",
            [ConflictFile(path=f.path, reason=exc.message) for f in changes.files],
        )
    if not result.ok:
        return _with_merge(
            changes,
            "conflict",
            [ConflictFile(path=c.path, reason=c.reason) for c in result.conflicts],
        )
    return _with_merge(changes, "applied", [])


def discarded(changes: Changes) -> Changes:
    """The user said no to a reviewed child's changes (they stay on its branch)."""
    return _with_merge(changes, "discarded")


def unreadable() -> Changes:
    """A child whose changes git could not read: whatever it did stays on its branch."""
    return Changes(merge="kept", files=[], linesAdded=0, linesRemoved=0, conflicts=[], commit=None)


def _with_merge(
    changes: Changes, merge: MergeState, conflicts: list[ConflictFile] | None = None
) -> Changes:
    """What became of a child's changes: with `collect`, the only places a MergeState is set."""
    if conflicts is None:
        return msgspec.structs.replace(changes, merge=merge)
    return msgspec.structs.replace(changes, merge=merge, conflicts=conflicts)


# Changes in these states were brought back (or turned down) as they were: later work of the
# child counts from their commit.
_SETTLED_MERGES = ("applied", "discarded")


async def later_work(
    tree: Worktree, changes: Changes, since: str | None, label: str
) -> tuple[Changes, str | None] | None:
    """A child that already ended worked on (a follow-up in its worktree): commit that work and,
    when there is new work, its changes (`pending`) and the commit they count from: after
    changes that were applied or discarded, their commit (only the later work comes back,
    merged against what was applied last); else where they counted from (the snapshot), the
    new work joining what was never applied. None when nothing changed."""
    repo = await _repo(tree.repository)
    if Path(tree.path).is_dir():
        await anyio.to_thread.run_sync(commit_all, tree.path, f"coven: {label}")
    tip = await anyio.to_thread.run_sync(resolve, repo, tree.branch)
    last = changes.commit or since or tree.base
    if tip == last:
        return None
    if changes.merge in _SETTLED_MERGES and changes.commit is not None:
        since = changes.commit
    start = since or tree.base
    found = await anyio.to_thread.run_sync(changed_files, repo, start, tip)
    if not found:
        return None
    return _changes("pending", found, tip), since


def kept_reason(changes: Changes | None) -> str:
    """What a branch kept for its work holds, as a phrase."""
    merge = changes.merge if changes is not None else None
    if merge == "pending":
        return "changes waiting for review"
    if merge == "conflict":
        return "changes that conflicted with the working tree"
    if merge == "kept" or merge is None:
        return "work of a child that failed or was cancelled, never applied"
    return "work done after its changes were brought back, never applied"


async def unapplied(
    tree: Worktree, changes: Changes | None, since: str | None
) -> tuple[str, str, str] | None:
    """Whether a child's branch holds work that never reached the parent's working tree (work
    still in its worktree is committed first): (the reason, as `kept_reason` says it, the
    branch's commit, the commit the work counts from), or None when everything on it was
    applied, discarded by the user, or is no change at all."""
    found = await anyio.to_thread.run_sync(inspect, tree.repository)
    if isinstance(found, NotARepo):
        return None  # the repository itself is gone: there is no branch to keep
    repo = found
    if Path(tree.path).is_dir():
        await anyio.to_thread.run_sync(commit_all, tree.path, "coven: unfinished work")
    tips = await anyio.to_thread.run_sync(branches, repo)
    tip = tips.get(tree.branch)
    if tip is None:
        return None
    if changes is not None and changes.merge in (*_SETTLED_MERGES, "unchanged"):
        last = changes.commit or since or tree.base
    else:
        last = since or tree.base
    if tip == last or await anyio.to_thread.run_sync(same_tree, repo, tip, last):
        return None
    return kept_reason(changes), tip, last


async def file_text(
    tree: Worktree, changes: Changes, path: str, since: str | None = None
) -> tuple[ChangedFile, bytes | None, bytes | None]:
    """A changed file's content where the changes count from (`since`, else the snapshot) and
    in the child's commit."""
    changed = next((f for f in changes.files if f.path == path), None)
    if changed is None:
        raise KeyError(path)
    repo = await _repo(tree.repository)
    rev = changes.commit or tree.branch
    old = changed.oldPath or changed.path
    base = (
        None
        if changed.status == "added"
        else await anyio.to_thread.run_sync(show, repo, since or tree.base, old)
    )
    child = (
        None
        if changed.status == "deleted"
        else await anyio.to_thread.run_sync(show, repo, rev, path)
    )
    return changed, base, child


def outside_write(tree: Worktree, tool_name: str, tool_input: dict[str, Any]) -> str | None:
    """When a worktree child's tool call would write a file of the parent's repository (a path it
    remembers from the conversation it was forked from), the path it should write instead. A
    file change that lists its files (`changes`, Codex's) is checked file by file."""
    key = _WRITING_TOOLS.get(tool_name)
    paths = [tool_input.get(key) if key else None]
    changes = tool_input.get("changes")
    if isinstance(changes, list):
        paths += [c.get("path") for c in changes if isinstance(c, dict)]
    for value in paths:
        if isinstance(value, str) and os.path.isabs(value):
            instead = _in_worktree(tree, value)
            if instead is not None:
                return instead
    return None


def outside_command(
    tree: Worktree, tool_name: str, tool_input: dict[str, Any], cwd: str | None = None
) -> str | None:
    """When a worktree child's command would run in, or name a path of, the parent's repository
    (outside the child's own worktree), that place in the child's worktree. A sandbox does not
    cover a command the user allows (Codex runs an approved escalation outside its sandbox), so
    it is refused before anyone is asked. `cwd`: where the command runs when its input does not
    say (the session's folder); relative paths are followed from there (`_relative_reach`)."""
    if tool_name != "Bash":
        return None
    given = tool_input.get("cwd")
    if isinstance(given, str) and os.path.isabs(given):
        cwd = given
        instead = _in_worktree(tree, given)
        if instead is not None:
            return instead
    command = tool_input.get("command")
    if not isinstance(command, str):
        return None
    if cwd is not None and os.path.isabs(cwd):
        instead = _relative_reach(tree, command, cwd)
        if instead is not None:
            return instead
    # The worktree may lie inside the repository's folder: its own paths are no stray.
    command = command.replace(tree.path, "")
    for repository in dict.fromkeys((tree.repository, os.path.realpath(tree.repository))):
        named = re.search(
            r"(?<![\w.\-/])" + re.escape(repository.rstrip(os.sep)) + r"(/[\w.\-/]*)?(?![\w.\-])",
            command,
        )
        if named is not None:
            rest = (named.group(1) or "").strip("/")
            return os.path.join(tree.path, rest) if rest else tree.path
    return None


# A word that a plain shell expands (a variable, a substitution, a glob, a home folder): where it
# leads is not known without running the shell.
_EXPANDS = re.compile(r"[$`*?\[{~]")
_CHANGES_FOLDER = ("cd", "pushd")
_SHELLS = ("bash", "sh", "zsh", "dash")


def _relative_reach(tree: Worktree, command: str, cwd: str) -> str | None:
    """Where a command line reaches the parent's repository by relative paths: a `cd`/`pushd`
    chain followed from `cwd` (`cd ../.. && cd repo/src; make`), and any word with a `..`
    component, resolved where the command then is (`cat ../../repo/README`). Conservative: the
    line is read as one sequence of simple commands (a subshell's `cd` counts for what follows
    it), and a `cd` whose target a shell would expand (`$HOME`, `~`, `-`, a glob, none) ends the
    following; absolute paths are the caller's. What a command does by itself (`git -C`, a
    script's own `cd`, `find ..`) is not seen."""
    try:
        lexer = shlex.shlex(command.replace("\n", " ; "), posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        return None  # unbalanced quotes: not a line this can read
    if (
        len(words) == 3
        and os.path.basename(words[0]) in _SHELLS
        and words[1].startswith("-")
        and "c" in words[1]
    ):
        return _relative_reach(tree, words[2], cwd)  # codex's `/bin/bash -lc '<the line>'`
    here: str | None = os.path.normpath(cwd)
    starts = True  # the next word is a command's name
    changing = False  # the next operand is the folder a `cd` goes to
    for word in words:
        if word and all(c in "();<>|&" for c in word):
            redirect = "<" in word or ">" in word
            starts, changing = not redirect, changing and redirect
            continue
        if starts and word in _CHANGES_FOLDER:
            starts, changing = False, True
            continue
        if starts and here is not None:
            # A command runs here (a `cd` on the way, back into the worktree, does nothing).
            instead = _in_worktree(tree, here)
            if instead is not None:
                return instead
        starts = False
        if changing:
            if word.startswith("-") and word != "-":
                continue  # cd -P, -L
            changing = False
            if here is None or word == "-" or _EXPANDS.search(word):
                here = None  # somewhere this cannot tell: follow no further
                continue
            here = os.path.normpath(os.path.join(here, word))
        elif (
            here is not None
            and not os.path.isabs(word)
            and ".." in word.split("/")
            and not _EXPANDS.search(word)
        ):
            instead = _in_worktree(tree, os.path.normpath(os.path.join(here, word)))
            if instead is not None:
                return instead
    # Where the line leaves the shell (Claude Code's shell keeps it for its next command).
    return None if here is None or changing else _in_worktree(tree, here)


def _in_worktree(tree: Worktree, value: str) -> str | None:
    """Where `value` (an absolute path in the parent's repository, outside the child's worktree)
    is in the child's worktree; None when it is not such a path."""
    target = os.path.realpath(value)
    repository = os.path.realpath(tree.repository)
    mine = os.path.realpath(tree.path)
    if _within(target, mine) or not _within(target, repository):
        return None
    rest = os.path.relpath(target, repository)
    return tree.path if rest == "." else os.path.join(tree.path, rest)


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


async def remove_quietly(
    repository: str, path: str, branch: str, keep_branch: bool = False
) -> None:
    """Remove a child's worktree and (unless `keep_branch`) its branch; a failure is logged
    (deleting a session must not fail because git did)."""
    try:
        found = await anyio.to_thread.run_sync(inspect, repository)
        if isinstance(found, NotARepo):
            return  # the repository itself is gone: nothing of it to clean
        await anyio.to_thread.run_sync(
            lambda: worktrees.remove(found, path, branch, keep_branch=keep_branch)
        )
    except (GitError, OSError):
        log.warning("could not remove the worktree %s (branch %s)", path, branch, exc_info=True)
    _remove_if_empty(Path(path).parent)


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass  # not empty (other children's worktrees), or already gone


async def ensure(tree: Worktree) -> None:
    """Make sure a child's worktree is there before it runs again (after a restart, its folder may
    have been deleted by hand): made again from its branch when it is gone."""
    if Path(tree.path).is_dir():
        return
    repo = await _repo(tree.repository)
    await anyio.to_thread.run_sync(worktrees.restore, repo, tree.path, tree.branch)


def disk_usage(paths: Sequence[str]) -> int:
    """What these worktrees take on disk (blocking: a walk of every file)."""
    return sum(worktrees.disk_usage(p) for p in paths if Path(p).is_dir())
