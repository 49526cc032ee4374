"""Isolation: what a git worktree per fork child costs, against children sharing the parent's
folder, on a large repository.

The repository
    Made once per bench in a temp dir (``--files``, default 10,000): small Python files (150-400
    bytes), 50 per folder, in src/pkgNN/modNN/, a README and a .gitignore, one commit. Then, as
    a user's checkout would be mid-work: 5 files edited and not staged, 1 edited and staged, 1
    deleted, 3 untracked files (one in a new folder), and an ignored build/ folder and log. Every
    run works on its own copy (``cp -a``, then ``git update-index --refresh`` outside the
    timings: a copy changes every file's inode and ctime, which an editor's ``git status`` would
    have refreshed in a real checkout). git runs with HOME, TMPDIR and its global configuration in
    the bench's temp dir, no system configuration: nothing of this machine's git setup counts.

    Every child edits one file with a Bash call, ``printf '...' >> <path>`` (relative: in its
    own cwd). The files cover what the merge handles: child 1 a file the user edited (a
    three-way merge of disjoint lines), child 2 a committed file, child 3 an untracked file,
    child 4 a new file in a new folder; more children edit further committed files.

1. the workspace's git layer directly (``--measure direct``)
    The git layer of a worktree fork, called in the order the server calls it, on a fresh copy,
    each step timed (``perf_counter``): ``inspect``, ``snapshot`` (the dirty tree above),
    ``create`` per child, the child's edit (not timed), ``commit_all`` per child,
    ``merge_into_worktree`` per child (in task order, into the copy), ``remove`` per child. One
    after the other, in one thread: the server may create or commit children in parallel, which
    on 2 cores gains little. Baseline in the same run: ``git status --porcelain`` on the same
    copy (what every claude CLI runs when it starts in a repository); and for ``create``, a
    ``cp -a`` of one worktree: the same files written without git, which tells what this
    machine's file system charges per file. Also timed: ``disk_usage`` of every worktree (what
    forkFinished.diskBytes adds up). Disk: that sum of file sizes, and the blocks the worktrees
    folder and git's own per-worktree folders (.git/worktrees/<name>: each holds an index of
    every file) take, against the blocks of the checkout (without .git).

2. A fork through the real server (``--measure fork``)
    ``python -m coven_ls`` on the copy, driven by the LSP client of bench/common.py, with the
    bundled ``claude`` CLI against a scripted model served by threads of this process. The
    parent's first turn answers at once; then ``coven/fork`` with ``--children`` tasks and
    ``isolation`` "worktree" or "shared" (initializationOptions.forkIsolation says the same;
    mergeMode "auto", maxParallel = the child count; childSandbox ``--child-sandbox``, off by
    default, so that worktree children are as unfenced as shared ones). A child's two model
    replies (the Bash call, then its answer) each take ``--latency`` seconds. Tool permission is
    asked of the client, which allows it (bypassPermissions is refused when running as root), in
    both modes.
    Each run has a fresh server, CLAUDE_CONFIG_DIR, stateDir, HOME, TMPDIR, workspace copy and
    model; it checks that every child succeeded (in worktree mode, that every merge was
    "applied"), that the parent's folder ends with every child's edit and every user's edit,
    HEAD and the index untouched, and waits for the parent's turn on the fork results. Then LSP
    shutdown/exit, and /proc is checked until no process of the run is left (stragglers are
    killed by pid and reported). After ``--warmup`` uncounted runs, each round runs both modes,
    which goes first alternating, for each ``--start``:
      warm  the server has forked in the repository before (a 1-task warm-up fork, then the
            parent's turn on its results) and idled until its worktree pool (coven_ls/core/
            pool.py, ``worktreePool`` = the child count) was ready, as a user's server that has
            been up a while; the time it idled and the pool's own time and disk are printed
            apart (they are not on the fork's path). Shared mode runs the same warm-up.
      cold  the measured fork is the server's first: no pool, every worktree made on the
            fork's path.
    ``--include-files N --include-mb M`` adds a gitignored ``deps/`` folder of N files and M MB
    listed in a committed ``.worktreeinclude``: whether each child's worktree had it is printed
    (a server that does not copy .worktreeinclude yet measures without the copy, and says so).
    A worktree fork that the server runs shared instead (forkStarted.isolation, with its
    isolationReason) is reported and run again, up to MAX_FALLBACKS times in all: it is a
    finding about the server, not a figure.

3. A copied virtual environment made the child's (``--measure venv``)
    bench/venv_copy.py: a project's ``.venv`` (a real venv, ``--venv-packages`` installed
    packages with their console scripts, the project editable) copied into a worktree as a fork
    copies ``.worktreeinclude`` entries, and its paths into the parent's checkout rewritten to
    the child's (coven_ls/core/workspace/env_rewrite.py); each timed, ``--rounds`` times, with
    the rewrite's share of the copy. Part of ``all``, after the forks.

How to read the output
    direct: milliseconds per step (per child for create, commit_all, merge, remove) and "x
    status" = that time / the ``git status`` of the same run. "on the fork's path" adds up what
    a fork of N children waits for: snapshot + N x (create + commit_all + merge), set against
    the shared fork's wall time when part 2 ran too.
    fork (medians per mode; "ratio" against shared mode, the baseline measured in the same run):
      wall    ``coven/fork`` sent -> forkFinished read (both on the client's clock): the fork
              as a user waits for it, snapshot and worktree creation included.
      start   ``coven/fork`` sent -> the last child's first model request: snapshot, worktrees,
              and the N CLIs starting and resuming the parent's conversation.
      tail    the last child's last model reply written -> forkFinished read: the CLI's end,
              and in worktree mode committing each child's work and merging it (the merge time).
      disk    forkFinished.diskBytes (the sizes of the worktrees' files); du = blocks of the
              worktrees folder (for small files, whole 4 KiB blocks: far more than diskBytes);
              .git+ = what the repository's .git folder grew by (each worktree's index, the
              snapshot's and children's objects).
    "per round" gives worktree / shared of each round (a pair run back to back), whose median is
    steadier on a busy machine than the ratio of medians. The target (issue #11): worktree
    isolation adds under 10% to the fork's wall time, judged on the ratio of the medians. What
    it adds in seconds does not depend on ``--latency``; its share does: the longer the
    children work, the smaller it is. Issue 21's targets are for a warm server: 10% (1.10x)
    with the defaults, 25% with a .worktreeinclude of 20,000 files / 200 MB; cold and other
    sizes are reported. No figure is asserted: the bench reports.

Usage: python bench/isolation.py [--files 10000] [--children 4] [--rounds 3] [--warmup 1]
           [--latency 3] [--measure all|direct|fork|venv] [--start both|warm|cold]
           [--venv-packages 50]
           [--include-files 20000 --include-mb 200] [--idle-limit 600] [--claude PATH]
           [--server-logs DIR]
"""

from __future__ import annotations

import argparse
import os
import queue
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, Any

from common import (
    EXIT_TIMEOUT,
    EventClient,
    busy_cores,
    print_target,
    run_dirs,
    spawn_server,
    stderr_tail,
)
from venv_copy import run_venv

from coven_ls.agents.claude import resolve_claude
from coven_ls.core.workspace import commits, merge, repository, snapshots, worktrees
from coven_ls.testing.scripted_model import ModelRequest, Reply, ScriptedModel, Text, ToolUse
from tests.gitrepo import git, git_env

PROMPT = "isolation-bench: look around the repository, then wait for the tasks."
ASSIGNED = "You were assigned '"
EDITED = "isolation-bench: edited by "  # what a child's Bash call prints: its next request's text
STEP_TIMEOUT = 240.0  # seconds for one step of a run (a turn, a fork on a big repository)
FILES_PER_FOLDER = 50
TARGET_ADDED = 0.10  # worktree isolation may add under 10% to the fork's wall time
MIB = 1024 * 1024
MODES = ("shared", "worktree")
MAX_FALLBACKS = 3  # worktree forks the server may run shared before the bench gives up
TARGET_INCLUDE = 0.25  # with a .worktreeinclude of a big dependency folder: under 25%
INCLUDED = "deps"  # the gitignored dependency folder that .worktreeinclude brings
WARM_UP = "Warm-up"  # the task of the fork a warm server has run before the measured one
STARTS = ("warm", "cold")


def labels(n: int) -> list[str]:
    return [f"Task {k}" for k in range(1, n + 1)]


# --------------------------------------------------------------------------- the repository


def layout(i: int) -> str:
    leaf, n = divmod(i, FILES_PER_FOLDER)
    return f"src/pkg{leaf // 20:02d}/mod{leaf % 20:02d}/file{n:02d}.py"


def file_text(i: int, rng: random.Random) -> str:
    """A small module, 300-900 bytes: the size of most files in a real source tree."""
    lines = [f'"""Module {i} of the isolation bench."""', ""]
    for j in range(rng.randint(3, 9)):
        lines += [f"def f{j}(x):", f"    return x * {rng.randint(2, 99)} + {j}", ""]
    return "\n".join(lines)


@dataclass(frozen=True)
class Target:
    """The file a child edits and the line it appends."""

    path: str  # relative, `/`-separated
    line: str
    kind: str  # "edited by the user", "committed", "untracked", "new"

    def command(self, label: str) -> str:
        folder = os.path.dirname(self.path) or "."
        return (
            f"mkdir -p {shlex.quote(folder)} && printf '%s\\n' {shlex.quote(self.line)} >> "
            f"{shlex.quote(self.path)} && echo {shlex.quote(EDITED + label)}"
        )


@dataclass(frozen=True)
class Repo:
    """A generated repository, with what the user left uncommitted in it."""

    top: Path
    files: int
    user_edited: tuple[str, ...]  # edited, not staged
    staged: str
    deleted: str
    untracked: tuple[str, ...]
    user_line: str  # the first line of every user-edited file

    def targets(self, n: int) -> list[Target]:
        dirty = {*self.user_edited, self.staged, self.deleted}
        clean = [p for p in (layout(i) for i in range(101, self.files, 997)) if p not in dirty]
        found: list[Target] = []
        for k in range(1, n + 1):
            line = f"# appended by task {k}"
            slot = (k - 1) // 4
            kind = ("edited by the user", "committed", "untracked", "new")[(k - 1) % 4]
            if kind == "edited by the user" and slot < len(self.user_edited):
                path = self.user_edited[slot]
            elif kind == "untracked" and slot < len(self.untracked):
                path = self.untracked[slot]
            elif kind == "committed" and slot < len(clean):
                path = clean[slot]
            else:
                kind, path = "new", f"docs/task-{k}/notes.md"
            found.append(Target(path, line, kind))
        return found


def make_repo(
    top: Path, files: int, env: Mapping[str, str], deps: tuple[int, int] | None = None
) -> Repo:
    """The repository; with `deps` (files, bytes), a gitignored dependency folder that a
    committed `.worktreeinclude` lists."""
    rng = random.Random(11)
    top.mkdir(parents=True)
    for i in range(files):
        path = top / layout(i)
        if i % FILES_PER_FOLDER == 0:
            path.parent.mkdir(parents=True)
        path.write_text(file_text(i, rng))
    (top / "README.md").write_text("# isolation bench\n\nA generated repository.\n")
    (top / ".gitignore").write_text("build/\n*.log\n" + (f"{INCLUDED}/\n" if deps else ""))
    if deps:
        write_dependencies(top, *deps)
        (top / ".worktreeinclude").write_text(f"{INCLUDED}/\n")
    git(top, "init", "-q", "-b", "main", env=env)
    # No `gc --auto` in the background: it would pack and delete loose objects while a run
    # copies the repository (and take the machine while a run measures).
    git(top, "config", "gc.auto", "0", env=env)
    git(top, "add", "-A", env=env)
    git(top, "commit", "-q", "-m", f"{files} generated files", env=env)

    user_line = '"""Edited by the user, not committed yet."""'
    # Spread over the tree, away from the ends (the deleted file is the last one).
    user_edited = tuple(layout(k * files // 5 + 3) for k in range(5))
    for rel in user_edited:
        lines = (top / rel).read_text().split("\n")
        (top / rel).write_text("\n".join([user_line, *lines[1:]]))
    staged = layout(files // 2 + 7)
    with (top / staged).open("a") as out:
        out.write("\nSTAGED = True\n")
    git(top, "add", staged, env=env)
    deleted = layout(files - 1)
    (top / deleted).unlink()
    untracked = ("scratch.txt", "src/pkg00/new_helper.py", "notes/todo.md")
    for rel in untracked:
        (top / rel).parent.mkdir(parents=True, exist_ok=True)
        (top / rel).write_text(f"# {rel}: not in git yet\n")
    (top / "build").mkdir()
    for i in range(20):
        (top / "build" / f"out{i}.o").write_bytes(bytes(512))
    (top / "debug.log").write_text("ignored\n")
    return Repo(top, files, user_edited, staged, deleted, untracked, user_line)


def write_dependencies(top: Path, files: int, size: int) -> None:
    """A gitignored dependency folder (`deps/`, as node_modules or .venv would be) of `files`
    files and `size` bytes in all, 100 to a folder: what a `.worktreeinclude` listing it should
    bring into each child's worktree as a copy (issue 21, "The environment comes along")."""
    each = max(1, size // files)
    rng = random.Random(5)
    chunk = rng.randbytes(64 * 1024) * (each // (64 * 1024) + 2)
    for i in range(files):
        folder = top / INCLUDED / f"pkg{i // 100:04d}"
        if i % 100 == 0:
            folder.mkdir(parents=True)
        (folder / f"mod{i % 100:02d}.js").write_bytes(chunk[i % 977 : i % 977 + each])


def copy_repo(repo: Repo, where: Path, env: Mapping[str, str]) -> Repo:
    """`repo` copied into the (empty) folder `where`, its index refreshed as a `git status` of
    the user's editor would have it."""
    subprocess.run(["cp", "-a", f"{repo.top}/.", str(where)], check=True)
    git(where, "update-index", "-q", "--refresh", env=env)
    return Repo(
        where,
        repo.files,
        repo.user_edited,
        repo.staged,
        repo.deleted,
        repo.untracked,
        repo.user_line,
    )


@dataclass(frozen=True)
class UserState:
    head: str
    staged: str

    @staticmethod
    def of(top: Path, env: Mapping[str, str]) -> UserState:
        return UserState(
            git(top, "rev-parse", "HEAD", env=env),
            git(top, "diff", "--cached", "--name-only", env=env),
        )


def check_result(
    repo: Repo, targets: list[Target], before: UserState, env: Mapping[str, str]
) -> None:
    """Raise when the parent's folder is not what the fork should leave: every child's line at
    the end of its file, the user's edits, deletion and staged file still there."""
    problems = []
    for t in targets:
        path = repo.top / t.path
        if not path.is_file() or path.read_text().rstrip("\n").split("\n")[-1] != t.line:
            problems.append(f"{t.path} ({t.kind}) lacks the line of its child")
    for rel in repo.user_edited:
        if not (repo.top / rel).read_text().startswith(repo.user_line):
            problems.append(f"{rel} lost the user's edit")
    if (repo.top / repo.deleted).exists():
        problems.append(f"{repo.deleted}, deleted by the user, is back")
    if UserState.of(repo.top, env) != before:
        problems.append("HEAD or the index changed")
    if problems:
        raise RuntimeError("the parent's folder after the fork: " + "; ".join(problems))


def du(path: Path, skip: str | None = None) -> int:
    """Bytes on disk (allocated blocks, as `du` counts them) under `path`, links not followed;
    `skip` leaves out one entry of the top folder."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(path):
        if skip and Path(dirpath) == path:
            dirnames[:] = [d for d in dirnames if d != skip]
            filenames = [f for f in filenames if f != skip]
        for name in [*filenames, *dirnames]:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                continue
    return total


# ------------------------------------------------------------------ 1. the workspace's git layer


@dataclass
class Direct:
    status: float  # git status --porcelain, the baseline (seconds)
    inspect: float
    snapshot: float
    create: list[float]  # per child
    commit: list[float]
    merge: list[float]
    remove: list[float]
    copy: float  # cp -a of one worktree's files: the same files written without git
    disk_usage: float  # worktrees.disk_usage of every worktree (forkFinished.diskBytes)
    files_bytes: int  # disk_usage of all the worktrees
    du_bytes: int  # blocks of the worktrees and git's folders for them
    checkout_bytes: int  # blocks of the checkout, .git left out
    prepare: float = 0.0  # worktrees.prepare of a pool's spare (at HEAD: while the server idles)
    adopt: float = 0.0  # worktrees.adopt of that spare to the dirty tree's snapshot

    @property
    def on_path(self) -> float:
        """What a fork waits for: snapshot + N x (create + commit_all + merge)."""
        return self.snapshot + sum(self.create) + sum(self.commit) + sum(self.merge)


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    value = call()
    return value, time.perf_counter() - started


def run_direct(template: Repo, n: int) -> Direct:
    with tempfile.TemporaryDirectory(prefix="isolation-bench-direct-") as tmp:
        root = Path(tmp)
        env = git_env(root)
        (root / "workspace").mkdir()
        repo = copy_repo(template, root / "workspace", env)
        before = UserState.of(repo.top, env)
        targets = template.targets(n)
        # The workspace runs git with this process's environment: the same isolated one.
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(env)
        try:
            porcelain = ["git", "status", "--porcelain"]
            _, status = timed(lambda: subprocess.run(porcelain, cwd=repo.top, capture_output=True))
            info, inspect = timed(lambda: repository.inspect(repo.top))
            assert isinstance(info, repository.RepoInfo), info
            base, snapshot = timed(lambda: snapshots.snapshot(info))
            creates, committed, merges, removes = [], [], [], []
            trees = []
            for k in range(1, n + 1):
                where = root / "state" / "worktrees" / "f-bench" / f"{k}"
                branch = f"coven/f-bench/{k}-task-{k}"
                tree, took = timed(partial(worktrees.create, info, base, where, branch))
                creates.append(took)
                trees.append(tree)
            for tree, target, label in zip(trees, targets, labels(n), strict=True):
                path = tree.path / target.path
                path.parent.mkdir(parents=True, exist_ok=True)
                with path.open("a") as out:
                    out.write(target.line + "\n")
                commit, took = timed(partial(commits.commit_all, tree.path, label))
                assert commit is not None
                committed.append(took)
            for tree, label in zip(trees, labels(n), strict=True):
                result, took = timed(
                    partial(merge.merge_into_worktree, info, base, tree.branch, label=label)
                )
                if not result.ok:
                    raise RuntimeError(f"{label} did not merge: {result.conflicts}")
                merges.append(took)
            files_bytes, disk_usage = timed(
                lambda: sum(worktrees.disk_usage(t.path) for t in trees)
            )
            # The baseline for create: what writing a worktree's files costs on this machine
            # without git (a copy, whose reads come from the page cache).
            copy = ["cp", "-a", str(trees[0].path), str(root / "copy")]
            _, copied = timed(lambda: subprocess.run(copy, check=True))
            du_bytes = du(root / "state" / "worktrees") + du(repo.top / ".git" / "worktrees")
            for tree in trees:
                assert tree.branch is not None
                _, took = timed(partial(worktrees.remove, info, tree.path, tree.branch))
                removes.append(took)
            # The pool's way: a spare made ahead (off the fork's path), adopted by a child.
            spare = root / "state" / "pool" / "spare"
            _, prepared = timed(partial(worktrees.prepare, info, spare, info.head))
            place = root / "state" / "worktrees" / "f-pool" / "1"
            adopted, adopt = timed(
                partial(worktrees.adopt, info, spare, base, place, "coven/f-pool/1-task")
            )
            worktrees.remove(info, adopted.path, "coven/f-pool/1-task")
        finally:
            os.environ.clear()
            os.environ.update(saved)
        check_result(repo, targets, before, env)
        return Direct(
            status,
            inspect,
            snapshot,
            creates,
            committed,
            merges,
            removes,
            copied,
            disk_usage,
            files_bytes,
            du_bytes,
            du(repo.top, skip=".git"),
            prepared,
            adopt,
        )


def report_direct(runs: list[Direct], n: int, files: int, shared_wall: float | None) -> None:
    med = statistics.median
    status = med(r.status for r in runs)
    print()
    print(
        f"The workspace's git layer on the repository: a fork of {n}, steps one after the other, "
        f"median of {len(runs)} run(s)"
    )
    print(f"{'step':<28}{'ms':>9}{'x status':>10}")
    rows: list[tuple[str, float]] = [
        ("git status (baseline)", status),
        ("inspect", med(r.inspect for r in runs)),
        ("snapshot", med(r.snapshot for r in runs)),
        ("create, per child", med(x for r in runs for x in r.create)),
        ("pool: prepare, per spare", med(r.prepare for r in runs)),
        ("pool: adopt, per child", med(r.adopt for r in runs)),
        ("commit_all, per child", med(x for r in runs for x in r.commit)),
        ("merge_into_worktree, each", med(x for r in runs for x in r.merge)),
        ("remove, per child", med(x for r in runs for x in r.remove)),
        ("disk_usage, all worktrees", med(r.disk_usage for r in runs)),
        ("cp -a of a worktree", med(r.copy for r in runs)),
    ]
    for name, value in rows:
        print(f"{name:<28}{1000 * value:>9.0f}{value / status:>9.1f}x")
    on_path = med(r.on_path for r in runs)
    merge = med(sum(r.merge) for r in runs)
    line = (
        f"on the fork's path: snapshot + {n} x (create + commit_all + merge) = "
        f"{1000 * on_path:.0f} ms ({on_path / status:.1f}x git status), of which the merges "
        f"{1000 * merge:.0f} ms"
    )
    if shared_wall:
        line += f"; {100 * on_path / shared_wall:.1f}% of the shared fork's wall time"
    print(line)
    adopt = med(r.adopt for r in runs)
    pooled = on_path - sum(med(r.create[k] for r in runs) for k in range(n)) + n * adopt
    print(
        f"with a warm pool (a spare adopted per child instead of create): {1000 * pooled:.0f} ms "
        f"on the fork's path; the spares cost {1000 * med(r.prepare for r in runs):.0f} ms each, "
        "made while the server idles"
    )
    create = med(x for r in runs for x in r.create)
    copy = med(r.copy for r in runs)
    print(
        f"create = {create / copy:.2f}x a plain copy of a worktree's files (cp -a, "
        f"{1000 * copy:.0f} ms, {1e6 * copy / files:.0f} us a file on this machine): what a "
        "worktree costs is mostly writing its files"
    )
    checkout = med(r.checkout_bytes for r in runs)
    written = med(r.files_bytes for r in runs) / n
    blocks = med(r.du_bytes for r in runs) / n
    print(
        f"disk per worktree: {written / MIB:.1f} MiB of files (disk_usage), {blocks / MIB:.1f} MiB "
        f"on disk with git's folder for it = {blocks / checkout:.2f}x the checkout's "
        f"{checkout / MIB:.1f} MiB"
    )


# --------------------------------------------------------------------------- 2. the fork


@dataclass
class ForkRun:
    mode: str
    start_kind: str  # "warm": the server ran a fork and idled first; "cold": its first fork
    wall: float  # coven/fork sent -> forkFinished read
    start: float  # coven/fork sent -> the last child's first model request
    tail: float  # the last child's last model reply written -> forkFinished read
    disk_bytes: int | None  # forkFinished.diskBytes
    du_bytes: int  # blocks of <stateDir>/worktrees at forkFinished
    git_growth: int  # what .git grew by during the fork
    idle: float = 0.0  # warm: seconds from the warm-up fork's end to the measured fork
    pool_fill: float | None = None  # warm worktree: seconds the pool took to fill, while idle
    pool_bytes: int = 0  # warm worktree: blocks of <stateDir>/pool + .git growth for it
    spares: int = 0  # spares ready when the measured fork was sent
    included: bool | None = None  # with a .worktreeinclude: the children's worktrees had it
    ahead: int = 0  # children whose copies were made ahead, in their pool spare (copiedAhead)


class FellBack(RuntimeError):
    """The server ran a worktree fork shared, and says why (forkStarted.isolationReason)."""


def scripted_model(targets: list[Target], latency: float) -> ScriptedModel:
    model = ScriptedModel()
    # First: the <fork-results> message quotes the children's answers.
    model.on("<fork-results>", "Every task is done and merged.")
    by_label = dict(zip(labels(len(targets)), targets, strict=True))

    def assigned(request: ModelRequest) -> Reply:
        label = request.last_user_text.split(ASSIGNED, 1)[1].split("'", 1)[0]
        bash = ToolUse("Bash", {"command": by_label[label].command(label)})
        return Reply((bash,), latency=latency)

    def edited(request: ModelRequest) -> Reply:
        label = request.last_user_text.split(EDITED, 1)[1].strip()
        return Reply((Text(f"{label} is done: one line appended."),), latency=latency)

    model.on(f"{ASSIGNED}{WARM_UP}'", "Nothing to do for the warm-up.")
    model.on(ASSIGNED, assigned)
    model.on(EDITED, edited)
    model.on(PROMPT, "I have looked around; ready for the tasks.")
    return model


def spares_ready(state: Path) -> int:
    """Complete spare worktrees in the server's pool (core/workspace/pool.py's `.ready` files)."""
    return len(list((state / "pool").glob("*/*.ready")))


def run_fork(
    mode: str,
    start_kind: str,
    template: Repo,
    n: int,
    latency: float,
    claude: str,
    stderr: IO[bytes],
    idle_limit: float,
    included: bool,
    server_logs: Path | None = None,
    child_sandbox: str = "off",
) -> ForkRun:
    targets = template.targets(n)
    # Leaving run_dirs waits for (or kills) whatever the run left.
    with (
        scripted_model(targets, latency) as model,
        run_dirs(f"isolation-bench-{mode}-", f"the {mode} run") as dirs,
    ):
        env = git_env(dirs.root, dirs.environ(model))
        repo = copy_repo(template, dirs.workspace, env)
        log_file = None
        if server_logs is not None:
            server_logs.mkdir(parents=True, exist_ok=True)
            log_file = server_logs / f"{start_kind}-{mode}-{time.strftime('%H%M%S')}.log"
        proc = spawn_server(dirs.workspace, env, stderr, log_file)
        client = EventClient(proc, timeout=STEP_TIMEOUT)
        try:
            client.initialize(
                dirs.workspace,
                {
                    "claudePath": claude,
                    "maxParallel": n,
                    "maxChildren": max(n, 8),
                    "stateDir": str(dirs.state),
                    "forkIsolation": mode,
                    "childSandbox": child_sandbox,
                    "mergeMode": "auto",
                    "worktreePool": n,
                },
            )
            client.notify("initialized", {})
            sid = client.request("coven/startSession", {"prompt": PROMPT})["sessionId"]

            def on_parent(kind: str, after: int = 0) -> Callable[[dict[str, Any]], bool]:
                return lambda e: e["sessionId"] == sid and e["kind"] == kind and e["seq"] > after

            _, first = client.wait_event(on_parent("turnResult"), "the parent's first turn")
            if first.get("isError"):
                raise RuntimeError(f"the parent's first turn failed: {first}")
            _, mark = client.wait_event(
                on_parent("status", first["seq"]), "the parent's status after its first turn"
            )
            idle, pool_fill, pool_bytes = 0.0, None, 0
            if start_kind == "warm":
                # As a user's server is: it has forked in this repository before (so it keeps a
                # pool for it) and idled since.
                client.request(
                    "coven/fork", {"sessionId": sid, "tasks": [WARM_UP], "isolation": mode}
                )
                client.wait_event(on_parent("forkFinished", mark["seq"]), "the warm-up fork")
                ended = time.monotonic()
                mark = wait_answer(client, sid, mark["seq"])
                if mode == "worktree":
                    while spares_ready(dirs.state) < n:
                        if time.monotonic() - ended > idle_limit:
                            break
                        time.sleep(0.2)
                    pool_fill = time.monotonic() - ended
                    pool_bytes = du(dirs.state / "pool") + du(repo.top / ".git" / "worktrees")
                idle = time.monotonic() - ended
            spares = spares_ready(dirs.state)
            # The user's state as the measured fork finds it (a warm-up child changed nothing).
            before = UserState.of(repo.top, env)
            git_before = du(repo.top / ".git")
            sent = time.monotonic()
            client.request("coven/fork", {"sessionId": sid, "tasks": labels(n), "isolation": mode})
            _, started = client.wait_event(on_parent("forkStarted", mark["seq"]), "forkStarted")
            ran = started.get("isolation", "shared")
            if ran != mode:
                why = started.get("isolationReason", "the server does not say why")
                raise FellBack(f"asked for a {mode} fork, the server ran it {ran}: {why}")
            finished_at, finished = client.wait_event(
                on_parent("forkFinished", started["seq"]), "forkFinished"
            )
            du_bytes = du(dirs.state / "worktrees")
            git_growth = du(repo.top / ".git") - git_before
            had = None
            if included and mode == "worktree":
                children = list((dirs.state / "worktrees" / started["forkId"]).iterdir())
                had = bool(children) and all((c / INCLUDED).is_dir() for c in children)
            ahead = sum(
                1
                for at, e in client.events
                if at >= sent and e["kind"] == "worktreeEnv" and e.get("copiedAhead")
            )
            failed = [r for r in finished["results"] if not r["ok"]]
            if len(finished["results"]) != n or failed:
                raise RuntimeError(f"the fork of {n} did not succeed: {finished['results']}")
            if mode == "worktree":
                unmerged = [r for r in finished["results"] if r.get("merge") != "applied"]
                if unmerged:
                    raise RuntimeError(f"children not merged: {unmerged}")
            check_result(repo, targets, before, env)
            wait_answer(client, sid, started["seq"])
        finally:
            client.close(EXIT_TIMEOUT + 30)
    requests = [r for r in model.requests if f"{ASSIGNED}{WARM_UP}'" not in r.last_user_text]
    firsts = [r.time for r in requests if ASSIGNED in r.last_user_text]
    lasts = [r.finished for r in requests if EDITED in r.last_user_text]
    if len(firsts) != n or len(lasts) != n or None in lasts:
        raise RuntimeError(f"expected 2 model calls of each of {n} children: {len(requests)} calls")
    return ForkRun(
        mode=mode,
        start_kind=start_kind,
        wall=finished_at - sent,
        start=max(firsts) - sent,
        tail=finished_at - max(t for t in lasts if t is not None),
        disk_bytes=finished.get("diskBytes"),
        du_bytes=du_bytes,
        git_growth=git_growth,
        idle=idle,
        pool_fill=pool_fill,
        pool_bytes=pool_bytes,
        spares=spares,
        included=had,
        ahead=ahead,
    )


def wait_answer(client: EventClient, sid: str, after: int) -> dict[str, Any]:
    """The parent's turn on the results of the fork after event `after`; returns its
    turnResult."""
    _, prompt = client.wait_event(
        lambda e: (
            e["sessionId"] == sid
            and e["kind"] == "prompt"
            and e.get("origin") == "forkResults"
            and e["seq"] > after
        ),
        "the <fork-results> prompt",
    )
    _, answer = client.wait_event(
        lambda e: e["sessionId"] == sid and e["kind"] == "turnResult" and e["seq"] > prompt["seq"],
        "the parent's turn after the fork",
    )
    if answer.get("isError"):
        raise RuntimeError(f"the parent's turn on the fork's results failed: {answer}")
    return answer


def report_fork(
    rounds: list[dict[tuple[str, str], ForkRun]],
    args: argparse.Namespace,
    checkout: int,
    start_kind: str,
) -> None:
    """The table of one start kind (warm or cold), what worktree mode adds, and the target."""
    med = statistics.median
    by_mode = {m: [r[(start_kind, m)] for r in rounds if (start_kind, m) in r] for m in MODES}
    if not all(by_mode.values()):
        return
    cores = os.cpu_count() or 1
    print()
    scenario = f"{args.files:,} files"
    if args.include_files:
        scenario += (
            f" + a gitignored {INCLUDED}/ of {args.include_files:,} files / "
            f"{args.include_mb} MB in .worktreeinclude"
        )
    how = (
        "a WARM server (it ran a 1-task fork in this repository, then idled until its pool was "
        "ready)"
        if start_kind == "warm"
        else "a COLD server (its first fork)"
    )
    print(
        f"{how}: a fork of {args.children} on {scenario}, child model latency "
        f"{args.latency:g} s per reply (2 replies each), {cores} CPUs, median of "
        f"{len(by_mode['worktree'])} round(s)"
    )
    print(
        f"{'mode':<10}{'wall s':>8}{'ratio':>8}{'start s':>9}{'tail s':>8}"
        f"{'disk MiB':>10}{'du MiB':>8}{'.git+ MiB':>10}{'idle s':>8}"
    )
    base = {
        "wall": med(r.wall for r in by_mode["shared"]),
        "start": med(r.start for r in by_mode["shared"]),
        "tail": med(r.tail for r in by_mode["shared"]),
    }
    for mode, runs in by_mode.items():
        wall = med(r.wall for r in runs)
        sizes = [r.disk_bytes for r in runs if r.disk_bytes is not None]
        print(
            f"{mode:<10}{wall:>8.2f}{wall / base['wall']:>7.2f}x"
            f"{med(r.start for r in runs):>9.2f}{med(r.tail for r in runs):>8.2f}"
            f"{(f'{med(sizes) / MIB:.1f}' if sizes else '-'):>10}"
            f"{med(r.du_bytes for r in runs) / MIB:>8.1f}"
            f"{med(r.git_growth for r in runs) / MIB:>10.1f}"
            f"{med(r.idle for r in runs):>8.1f}"
        )
    worktree = by_mode["worktree"]
    wall = med(r.wall for r in worktree)
    start = med(r.start for r in worktree)
    tail = med(r.tail for r in worktree)
    paired = [
        r[(start_kind, "worktree")].wall / r[(start_kind, "shared")].wall
        for r in rounds
        if (start_kind, "worktree") in r and (start_kind, "shared") in r
    ]
    print(
        "  per round (worktree / shared): "
        + ", ".join(f"{p:.2f}x" for p in paired)
        + f"; median {med(paired):.2f}x"
    )
    print(
        f"  worktree mode adds {wall - base['wall']:+.2f} s: {start - base['start']:+.2f} s "
        f"before the last child's first model call (snapshot, worktrees, CLIs starting), "
        f"{tail - base['tail']:+.2f} s after its last reply (commits and merges: tail "
        f"{tail:.2f} s vs {base['tail']:.2f} s)"
    )
    disk = med(r.du_bytes + r.git_growth for r in worktree)
    print(
        f"  disk: {disk / MIB:.1f} MiB for {args.children} worktrees with git's folders for "
        f"them = {disk / checkout:.2f}x the checkout's {checkout / MIB:.1f} MiB "
        f"({disk / args.children / checkout:.2f}x per child); shared mode adds none"
    )
    fills = [r.pool_fill for r in worktree if r.pool_fill is not None]
    if fills:
        pool_disk = med(r.pool_bytes for r in worktree)
        print(
            f"  the pool, apart (not in the fork's time): {args.children} spares made in "
            f"{med(fills):.1f} s while the server idled (after the warm-up fork), "
            f"{pool_disk / MIB:.1f} MiB on disk with git's folders for them; spares ready at the "
            f"fork: {', '.join(str(r.spares) for r in worktree)}"
        )
    copied = [r.included for r in worktree if r.included is not None]
    if args.include_files:
        print(
            f"  {INCLUDED}/ in every child's worktree: "
            + (
                ", ".join("yes" if c else "no" for c in copied)
                + (
                    ""
                    if all(copied)
                    else " (this server does not copy .worktreeinclude yet: the figure is "
                    "without the copy)"
                )
            )
            + "; children whose copies were made ahead in their pool spare (copiedAhead): "
            + ", ".join(f"{r.ahead}/{args.children}" for r in worktree)
        )
    target = TARGET_INCLUDE if args.include_files else TARGET_ADDED
    added = wall / base["wall"] - 1
    print()
    print_target(
        f"{start_kind}: worktree isolation adds under {100 * target:.0f}% to the fork's wall time"
        + ("" if start_kind == "warm" else " (reported: the target is for a warm server)"),
        added < target,
        f" ({100 * added:+.1f}%: {wall:.2f} s vs {base['wall']:.2f} s in shared mode, "
        f"{wall - base['wall']:+.2f} s; the margin is {100 * (target - added):+.1f} points)",
    )


# --------------------------------------------------------------------------- main


@contextmanager
def template_repo(files: int, deps: tuple[int, int] | None) -> Iterator[tuple[Repo, float]]:
    """The generated repository, in a temp dir of its own, and how long it took to make."""
    with tempfile.TemporaryDirectory(prefix="isolation-bench-repo-") as tmp:
        env = git_env(Path(tmp))
        started = time.monotonic()
        repo = make_repo(Path(tmp, "repo"), files, env, deps)
        yield repo, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--files", type=int, default=10_000, help="files in the repository (default 10000)"
    )
    parser.add_argument("--children", type=int, default=4, help="children per fork (default 4)")
    parser.add_argument(
        "--rounds", type=int, default=3, help="measured rounds, each mode once (default 3)"
    )
    parser.add_argument(
        "--warmup", type=int, default=1, help="uncounted fork runs first, one per mode (default 1)"
    )
    parser.add_argument(
        "--latency", type=float, default=3.0, help="seconds per child model reply (default 3)"
    )
    parser.add_argument(
        "--measure",
        choices=("all", "direct", "fork", "venv"),
        default="all",
        help="the workspace's git layer alone, the fork through the server alone, a copied "
        "venv's rewrite alone, or all three (default)",
    )
    parser.add_argument(
        "--venv-packages",
        type=int,
        default=50,
        help="packages in the venv of --measure venv (default 50)",
    )
    parser.add_argument(
        "--start",
        choices=("both", "warm", "cold"),
        default="both",
        help="the server of a measured fork: warm (it forked in the repository before and "
        "idled until its worktree pool was ready), cold (its first fork), or both (default)",
    )
    parser.add_argument(
        "--idle-limit",
        type=float,
        default=600.0,
        help="the most seconds a warm server idles waiting for its pool (default 600)",
    )
    parser.add_argument(
        "--include-files",
        type=int,
        default=0,
        help="a gitignored deps/ folder of this many files, listed in .worktreeinclude "
        "(issue 21 uses 20000; default none)",
    )
    parser.add_argument(
        "--include-mb", type=int, default=200, help="the deps/ folder's size in MB (default 200)"
    )
    parser.add_argument("--claude", help="CLI to run (default: as coven-ls would pick it)")
    parser.add_argument(
        "--child-sandbox",
        choices=("off", "auto"),
        default="off",
        help="initializationOptions.childSandbox of the fork runs (default off: worktree "
        "children unfenced, as shared ones are; auto: fenced by Claude Code's sandbox)",
    )
    parser.add_argument(
        "--server-logs",
        type=Path,
        help="write each run's server log (INFO: the fork's phases, timed) into this folder",
    )
    args = parser.parse_args(argv)
    if args.files < 200 or args.children < 1 or args.rounds < 1 or args.warmup < 0:
        parser.error("--files must be at least 200, --children and --rounds at least 1")
    if args.latency < 0:
        parser.error("--latency must not be negative")
    if args.include_files < 0 or args.include_mb < 1:
        parser.error("--include-files must not be negative, --include-mb at least 1")
    if args.venv_packages < 0:
        parser.error("--venv-packages must not be negative")
    if args.measure == "venv":
        run_venv(args.venv_packages, args.rounds)
        return 0
    deps = (args.include_files, args.include_mb * 1_000_000) if args.include_files else None
    starts = STARTS if args.start == "both" else (args.start,)

    claude = args.claude or resolve_claude(None)[0]
    idle_busy = busy_cores(1.0)
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"before the runs: load average {load}; {idle_busy:.2f} cores busy (1 s)", end="")
    print(": the machine is not quiet, figures will suffer" if idle_busy > 0.25 else "")
    started = time.monotonic()
    with template_repo(args.files, deps) as (template, made):
        print(
            f"made the repository ({args.files:,} files, one commit, a dirty tree"
            + (f", {args.include_files:,} files in {INCLUDED}/" if deps else "")
            + f") in {made:.1f} s"
        )
        direct: list[Direct] = []
        rounds: list[dict[tuple[str, str], ForkRun]] = []
        plan: list[tuple[int | None, str, str]] = [
            (None, starts[0], m) for _ in range(args.warmup) for m in MODES
        ]
        for r in range(args.rounds):
            for start_kind in starts:
                order = MODES if r % 2 == 0 else MODES[::-1]
                plan += [(r, start_kind, m) for m in order]
        for r in range(args.rounds if args.measure in ("all", "direct") else 0):
            result = run_direct(template, args.children)
            direct.append(result)
            print(
                f"direct {r + 1}: snapshot {1000 * result.snapshot:.0f} ms, create "
                f"{1000 * sum(result.create):.0f} ms, commit_all {1000 * sum(result.commit):.0f} "
                f"ms, merge {1000 * sum(result.merge):.0f} ms (git status "
                f"{1000 * result.status:.0f} ms)",
                flush=True,
            )
        fell_back: list[str] = []
        for number, start_kind, mode in plan if args.measure in ("all", "fork") else []:
            label = "warm-up" if number is None else f"round {number + 1} {start_kind}"
            run = None
            while run is None:
                with tempfile.TemporaryFile(prefix="isolation-bench-stderr-") as stderr:
                    try:
                        run = run_fork(
                            mode,
                            start_kind,
                            template,
                            args.children,
                            args.latency,
                            claude,
                            stderr,
                            args.idle_limit,
                            deps is not None,
                            args.server_logs,
                            args.child_sandbox,
                        )
                    except FellBack as exc:
                        # A finding, not a figure: said, counted, and the run made again, at
                        # most MAX_FALLBACKS times in all.
                        fell_back.append(str(exc))
                        print(f"{label} {mode}: {exc}", flush=True)
                        if len(fell_back) <= MAX_FALLBACKS:
                            continue
                        print("too many fallbacks: giving up", file=sys.stderr)
                        return 1
                    # A failed git call of the bench's own is an AssertionError (tests/gitrepo.py).
                    except (RuntimeError, AssertionError, queue.Empty) as exc:
                        tail = stderr_tail(stderr, 2000)
                        problem = str(exc).splitlines()[0][:500] if str(exc) else "timed out"
                        print(
                            f"{label} {mode} failed: {problem}\nserver stderr:\n{tail}",
                            file=sys.stderr,
                        )
                        return 1
            if number is not None:
                if len(rounds) <= number:
                    rounds.append({})
                rounds[number][(start_kind, mode)] = run
            disk = "" if run.disk_bytes is None else f", diskBytes {run.disk_bytes / MIB:.1f} MiB"
            pooled = (
                ""
                if run.pool_fill is None
                else f", pool filled in {run.pool_fill:.1f} s ({run.spares} spares, "
                f"{run.pool_bytes / MIB:.1f} MiB)"
            )
            ahead = f", copies made ahead {run.ahead}" if run.included is not None else ""
            print(
                f"{label:<14} {mode:<8}: wall {run.wall:.2f} s, start {run.start:.2f} s, tail "
                f"{run.tail:.2f} s{disk}, du {run.du_bytes / MIB:.1f} MiB, .git "
                f"{run.git_growth / MIB:+.1f} MiB, idled {run.idle:.1f} s{pooled}{ahead}"
                f" (load {os.getloadavg()[0]:.2f})",
                flush=True,
            )
        checkout = du(template.top, skip=".git")
        shared = [r[k].wall for r in rounds for k in r if k[1] == "shared"]
        if direct:
            shared_wall = statistics.median(shared) if shared else None
            report_direct(direct, args.children, args.files, shared_wall)
        for start_kind in starts if rounds else ():
            report_fork(rounds, args, checkout, start_kind)
        if fell_back:
            runs = len([m for _, _, m in plan if m == "worktree"]) + len(fell_back)
            print(
                f"the server ran {len(fell_back)} of {runs} worktree forks shared (each was run "
                "again): " + " | ".join(sorted(set(fell_back)))
            )
    if args.measure == "all":
        run_venv(args.venv_packages, args.rounds)
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"(took {time.monotonic() - started:.0f} s; load average at the end {load})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
