"""Nothing lost, against real git repositories: which branches hold work never applied
(isolation.unapplied, keep.unapplied_branches), a child's later work (isolation.later_work),
the store's record of kept branches, and what `coven-ls prune` removes (core/workspace/prune.py)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from coven_ls.core.store import Store, read_trees
from coven_ls.core.workspace import isolation, prune
from coven_ls.core.workspace import worktrees as wt
from coven_ls.core.workspace.commits import commit_all
from coven_ls.core.workspace.repository import branches
from coven_ls.core.workspace.snapshots import snapshot
from coven_ls.protocol.types import Changes, Worktree

from ..gitrepo import git
from .test_worktrees import info_of, user_repo

pytestmark = pytest.mark.usefixtures("no_user_git_config")


def child_tree(top: Path, tmp_path: Path, n: int = 1) -> Worktree:
    info = info_of(top)
    base = snapshot(info)
    path = tmp_path / "state" / "worktrees" / "f-1" / f"{n}-task"
    wt.create(info, base, path, f"coven/f-1/{n}-task")
    return Worktree(path=str(path), branch=f"coven/f-1/{n}-task", base=base, repository=str(top))


def collected(tree: Worktree, ok: bool = True) -> Changes:
    return anyio.run(isolation.collect, tree, "task", ok)


def run(fn: Any, *args: Any) -> Any:
    return anyio.run(fn, *args)


def test_a_conflicting_or_pending_or_failed_childs_branch_holds_unapplied_work(
    tmp_path: Path,
) -> None:
    top = user_repo(tmp_path)
    tree = child_tree(top, tmp_path)
    (Path(tree.path) / "new.txt").write_text("new\n")
    changes = collected(tree)
    assert changes.merge == "pending"

    for merge, reason in (
        ("pending", "changes waiting for review"),
        ("conflict", "changes that conflicted with the working tree"),
        ("kept", "work of a child that failed or was cancelled, never applied"),
    ):
        found = run(isolation.unapplied, tree, msgspec.structs.replace(changes, merge=merge), None)
        assert found == (reason, changes.commit, tree.base)
    # Applied or discarded by the user: nothing unapplied.
    for merge in ("applied", "discarded"):
        done = msgspec.structs.replace(changes, merge=merge)
        assert run(isolation.unapplied, tree, done, None) is None


def test_work_left_uncommitted_in_a_worktree_is_committed_and_kept(tmp_path: Path) -> None:
    top = user_repo(tmp_path)
    tree = child_tree(top, tmp_path)
    (Path(tree.path) / "half.txt").write_text("half done\n")

    found = run(isolation.unapplied, tree, None, None)

    assert found is not None and found[0].startswith("work of a child that failed")
    assert git(top, "show", f"{tree.branch}:half.txt") == "half done\n"
    # A child that changed nothing holds nothing.
    other = child_tree(top, tmp_path, 2)
    assert run(isolation.unapplied, other, None, None) is None


def test_later_work_counts_from_what_was_applied_last(tmp_path: Path) -> None:
    top = user_repo(tmp_path)
    info = info_of(top)
    tree = child_tree(top, tmp_path)
    (Path(tree.path) / "first.txt").write_text("first\n")
    changes = collected(tree)
    applied = run(isolation.merge, tree, changes, "task")
    assert applied.merge == "applied" and (top / "first.txt").read_text() == "first\n"
    assert run(isolation.later_work, tree, applied, None, "task") is None  # nothing new yet

    (Path(tree.path) / "first.txt").write_text("first\nand more\n")
    (Path(tree.path) / "second.txt").write_text("second\n")
    later = run(isolation.later_work, tree, applied, None, "task")

    assert later is not None
    pending, since = later
    assert since == applied.commit and pending.merge == "pending"
    assert [(f.path, f.linesAdded) for f in pending.files] == [("first.txt", 1), ("second.txt", 1)]
    assert run(isolation.unapplied, tree, pending, since)[0] == "changes waiting for review"
    # Merged against what was applied last: the user's edit of first.txt since then stays.
    (top / "first.txt").write_text("edited by the user\nfirst\n")
    merged = run(isolation.merge, tree, pending, "task", since)
    assert merged.merge == "applied"
    assert (top / "first.txt").read_text() == "edited by the user\nfirst\nand more\n"
    assert (top / "second.txt").read_text() == "second\n"
    assert run(isolation.unapplied, tree, merged, since) is None
    # Follow-up work after applied but never brought back is kept.
    (Path(tree.path) / "third.txt").write_text("third\n")
    reason = run(isolation.unapplied, tree, merged, since)[0]
    assert reason == "work done after its changes were brought back, never applied"
    assert info.toplevel == top


def test_a_conflicted_childs_later_work_joins_its_earlier_work(tmp_path: Path) -> None:
    top = user_repo(tmp_path)
    tree = child_tree(top, tmp_path)
    (Path(tree.path) / "one.txt").write_text("one\n")
    conflict = msgspec.structs.replace(collected(tree), merge="conflict")
    (Path(tree.path) / "two.txt").write_text("two\n")

    pending, since = run(isolation.later_work, tree, conflict, None, "task")

    assert since is None
    assert [f.path for f in pending.files] == ["one.txt", "two.txt"]


def test_the_store_records_kept_branches_and_a_restart_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    store, _ = Store.open(path)
    kept = {"repository": "/r", "branch": "coven/f-1/1-a", "reason": "x", "commit": "c"}
    store.keep_branches([kept])
    store.write(
        [],
        [],
        forks=[
            {
                "fork_id": "f-1",
                "parent_id": "s-1",
                "source": "user",
                "state": "running",
                "tasks_proposed": ["a", "b"],
                "children": [],
                "reintegrated": False,
                "isolation": {
                    "repository": "/r",
                    "planned": [
                        {"path": "/w/1-a", "branch": "coven/f-1/1-a"},
                        {"path": "/w/2-b", "branch": "coven/f-1/2-b"},
                    ],
                },
            }
        ],
    )
    assert store.kept_branches() == [kept]
    store.close()

    again, _ = Store.open(path)
    assert again.load().kept == [kept]
    # A running fork's planned worktrees are needed, but not a kept branch's.
    trees = read_trees(path)
    assert trees.kept == [kept]
    assert trees.needed == [{"path": "/w/2-b", "branch": "coven/f-1/2-b", "repository": "/r"}]
    again.close()


def test_the_store_migrates_to_the_kept_branches_table(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    store, _ = Store.open(path)
    store.close()
    db = sqlite3.connect(path)
    db.executescript(
        "DROP TABLE kept_branches; UPDATE meta SET value = '8' WHERE key = 'schema_version';"
    )
    db.close()

    store, _ = Store.open(path)

    assert store.kept_branches() == []
    store.close()


@pytest.fixture
def state(tmp_path: Path) -> Path:
    folder = tmp_path / "state"
    folder.mkdir(exist_ok=True)
    return folder


def stored_session(state: Path, tree: Worktree) -> None:
    """A store in `state` with one session that works in `tree`."""
    store, _ = Store.open(state / "ws-1.sqlite3")
    row = {
        "session_id": "s-1",
        "title": "t",
        "status": "idle",
        "cwd": tree.path,
        "fork_mode": "auto",
        "created_at": "now",
        "cost_usd": 0,
        "depth": 1,
        "max_children": 8,
        "max_parallel": 4,
        "max_depth": 1,
        "isolation": {"mode": "worktree", "worktree": msgspec.to_builtins(tree)},
    }
    store.write([], [row], [])
    store.close()


def test_prune_keeps_what_sessions_need_and_unapplied_work(tmp_path: Path, state: Path) -> None:
    top = user_repo(tmp_path)
    used = child_tree(top, tmp_path, 1)
    stored_session(state, used)
    empty = child_tree(top, tmp_path, 2)  # no session, no work
    worked = child_tree(top, tmp_path, 3)  # no session, work never applied
    (Path(worked.path) / "w.txt").write_text("w\n")
    commit_all(worked.path, "work")
    git(top, "branch", "coven/f-9/1-plain")  # a bare branch with no work
    # The user checked a coven branch out in a worktree of their own: theirs, left alone.
    git(top, "worktree", "add", "-q", "-b", "coven/f-8/1-mine", str(tmp_path / "mine"))

    report, stored = prune.plan(state)

    assert [(i.branch, i.action, i.unapplied) for i in report.items] == [
        (empty.branch, "remove", False),
        (worked.branch, "keep", True),
        ("coven/f-9/1-plain", "remove", False),
    ]
    prune.apply(report, stored)
    assert sorted(branches(info_of(top))) == [used.branch, worked.branch, "coven/f-8/1-mine"]
    assert not Path(empty.path).exists() and Path(used.path).is_dir()

    report, stored = prune.plan(state, discard_work=True)
    assert [(i.branch, i.action) for i in report.items] == [(worked.branch, "remove")]
    prune.apply(report, stored)
    assert sorted(branches(info_of(top))) == [used.branch, "coven/f-8/1-mine"]
    assert json.loads(json.dumps(report.to_json()))["items"][0]["worktree"] == worked.path


def test_prune_forgets_the_record_of_a_kept_branch_it_deletes(tmp_path: Path, state: Path) -> None:
    top = user_repo(tmp_path)
    tree = child_tree(top, tmp_path)
    (Path(tree.path) / "c.txt").write_text("c\n")
    commit_all(tree.path, "work")
    wt.remove(info_of(top), tree.path, tree.branch, keep_branch=True)
    store, _ = Store.open(state / "ws-1.sqlite3")
    record = {"repository": str(top), "branch": tree.branch, "reason": "changes waiting for review"}
    store.keep_branches([record])
    store.close()

    report, stored = prune.plan(state)
    [item] = report.items
    assert item.action == "keep"
    assert item.reason == "kept when its session was deleted: changes waiting for review"

    report, stored = prune.plan(state, discard_work=True)
    prune.apply(report, stored)

    assert branches(info_of(top)) == {}
    assert read_trees(state / "ws-1.sqlite3").kept == []
