"""coven_ls.core.workspace.pool and worktrees.prepare/adopt against real git: a spare worktree
made before the user changed things still gives a child exactly the fork's snapshot; the pool
keeps to its size; a stopped server's half-made spares are cleaned; `usage` reports the disk."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from coven_ls.core.workspace import isolation, pool
from coven_ls.core.workspace import worktrees as wt
from coven_ls.core.workspace.repository import RepoInfo, inspect
from coven_ls.core.workspace.snapshots import snapshot

from ..gitrepo import git, make_repo

pytestmark = pytest.mark.usefixtures("no_user_git_config")


def project_repo(tmp_path: Path) -> Path:
    """A repository of 30 small files, one to delete later and a .gitignore, in one commit."""
    files = {f"src/m{i}.py": f"x = {i}\n" for i in range(30)}
    files.update({"keep.txt": "kept\n", "gone.txt": "to be deleted\n", ".gitignore": "*.log\n"})
    return make_repo(tmp_path / "repo", files)


def repo_info(top: Path) -> RepoInfo:
    found = inspect(top)
    assert isinstance(found, RepoInfo)
    return found


def tree_files(top: Path) -> dict[str, bytes]:
    """Every file under `top` but git's, with its bytes (what a child would read)."""
    found: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            if name == ".git":
                continue
            path = Path(dirpath, name)
            found[path.relative_to(top).as_posix()] = path.read_bytes()
    return found


def change_everything(top: Path) -> None:
    """What a user does between the spare's making and the fork: a new commit (HEAD moves), a
    staged edit, an unstaged edit, a deletion, an untracked file and an ignored one."""
    (top / "src" / "m1.py").write_text("x = 'committed later'\n")
    git(top, "commit", "-q", "-am", "later")
    (top / "src" / "m2.py").write_text("x = 'staged'\n")
    git(top, "add", "src/m2.py")
    (top / "src" / "m3.py").write_text("x = 'edited, not staged'\n")
    (top / "gone.txt").unlink()
    (top / "new.txt").write_text("untracked\n")
    (top / "debug.log").write_text("ignored: not in the snapshot\n")


async def test_a_spare_made_before_the_users_changes_gives_exactly_the_snapshot(
    tmp_path: Path,
) -> None:
    top = project_repo(tmp_path)
    pools = pool.Pools()
    state = str(tmp_path / "state")
    await pools.fill(state, str(top), 2)
    assert pools.ready(state, str(top)) == 2
    change_everything(top)
    info = repo_info(top)
    base = snapshot(info)
    # The reference: a worktree made as without a pool.
    fresh = wt.create(info, base, tmp_path / "fresh", "coven/f-0/1-fresh")
    [spare] = pools.take(state, str(top), 1)
    # Even a spare someone wrote into is reset to the snapshot.
    (spare / "src" / "m4.py").write_text("scribbled\n")
    (spare / "stray.txt").write_text("stray\n")
    (spare / "stray.log").write_text("ignored stray\n")
    before = dict(wt.paths_taken)
    child = wt.adopt(info, spare, base, tmp_path / "wt" / "1-a", "coven/f-1/1-a")
    # A tracked file written: every file is checked.
    assert wt.paths_taken["checkout"] == before.get("checkout", 0) + 1
    assert wt.paths_taken["read-tree"] == before.get("read-tree", 0)
    assert child.head == base == git(child.path, "rev-parse", "HEAD").strip()
    assert git(child.path, "symbolic-ref", "--short", "HEAD").strip() == "coven/f-1/1-a"
    assert tree_files(child.path) == tree_files(fresh.path)
    expected = tree_files(top)
    del expected["debug.log"]  # ignored files are not in a snapshot
    assert tree_files(child.path) == expected
    assert git(child.path, "status", "--porcelain") == ""
    assert not spare.exists()
    assert pools.ready(state, str(top)) == 1


def _edit_unchanged_path(spare: Path) -> None:
    # m4 is the same in the spare's commit and the snapshot: read-tree alone would leave it.
    (spare / "src" / "m4.py").write_text("scribbled\n")


def _edit_keeping_size_and_time(spare: Path) -> None:
    path = spare / "src" / "m5.py"
    was = path.stat()
    path.write_text("y = 5\n")  # as long as "x = 5"
    os.utime(path, ns=(was.st_atime_ns, was.st_mtime_ns))


def _stage(spare: Path) -> None:
    (spare / "src" / "m6.py").write_text("x = 'staged in the spare'\n")
    git(spare, "add", "src/m6.py")
    (spare / "src" / "m6.py").write_text("x = 6\n")  # the index differs, the file does not


def _delete(spare: Path) -> None:
    (spare / "keep.txt").unlink()


def _make_executable(spare: Path) -> None:
    os.chmod(spare / "keep.txt", 0o755)


@pytest.mark.parametrize(
    "scribble",
    [_edit_unchanged_path, _edit_keeping_size_and_time, _stage, _delete, _make_executable],
)
def test_a_spare_written_into_is_reset_exactly_by_checking_every_file(
    tmp_path: Path, scribble: Callable[[Path], None]
) -> None:
    top = project_repo(tmp_path)
    info = repo_info(top)
    spare = wt.prepare(info, tmp_path / "spare", info.head)
    change_everything(top)
    info = repo_info(top)
    base = snapshot(info)
    fresh = wt.create(info, base, tmp_path / "fresh", "coven/f-0/1-fresh")
    scribble(spare)
    assert not wt.unchanged(spare)
    before = dict(wt.paths_taken)
    child = wt.adopt(info, spare, base, tmp_path / "wt" / "1-a", "coven/f-1/1-a")
    assert wt.paths_taken["checkout"] == before.get("checkout", 0) + 1
    assert wt.paths_taken["read-tree"] == before.get("read-tree", 0)
    assert tree_files(child.path) == tree_files(fresh.path)
    assert os.stat(child.path / "keep.txt").st_mode & 0o111 == 0
    assert git(child.path, "status", "--porcelain", "--ignored") == ""
    git(child.path, "diff", "--cached", "--exit-code", base)  # the index is the snapshot's


def test_a_spare_nobody_wrote_into_is_brought_with_read_tree(tmp_path: Path) -> None:
    top = project_repo(tmp_path)
    info = repo_info(top)
    spare = wt.prepare(info, tmp_path / "spare", info.head)
    change_everything(top)
    info = repo_info(top)
    base = snapshot(info)
    fresh = wt.create(info, base, tmp_path / "fresh", "coven/f-0/1-fresh")
    # Untracked and ignored strays leave the tracked files as git wrote them: clean removes them.
    (spare / "stray.txt").write_text("stray\n")
    (spare / "stray.log").write_text("ignored stray\n")
    assert wt.unchanged(spare)
    before = dict(wt.paths_taken)
    child = wt.adopt(info, spare, base, tmp_path / "wt" / "1-a", "coven/f-1/1-a")
    assert wt.paths_taken["read-tree"] == before.get("read-tree", 0) + 1
    assert wt.paths_taken["checkout"] == before.get("checkout", 0)
    assert child.head == base == git(child.path, "rev-parse", "HEAD").strip()
    assert git(child.path, "symbolic-ref", "--short", "HEAD").strip() == "coven/f-1/1-a"
    assert tree_files(child.path) == tree_files(fresh.path)
    assert git(child.path, "status", "--porcelain", "--ignored") == ""
    # The branch is new, as `checkout -b` makes it: its reflog starts at the snapshot.
    assert git(child.path, "rev-parse", "coven/f-1/1-a@{0}").strip() == base


async def test_make_uses_spares_first_and_creates_the_rest(tmp_path: Path) -> None:
    top = project_repo(tmp_path)
    pools = pool.Pools()
    state = str(tmp_path / "state")
    await pools.fill(state, str(top), 1)
    (top / "keep.txt").write_text("edited after the spare\n")
    trees = await isolation.plan(str(top), None, "auto", state, "f-2")
    places = [isolation.place(trees, "f-2", n, f"t{n}") for n in (1, 2)]
    spares = pools.take(state, str(top), 2)
    assert len(spares) == 1
    made = await isolation.make(trees, places, spares)
    for tree in made:
        assert (Path(tree.path) / "keep.txt").read_text() == "edited after the spare\n"
        assert git(Path(tree.path), "status", "--porcelain") == ""
    listed = wt.list_worktrees(repo_info(top))
    assert sorted(str(w.path) for w in listed[1:]) == sorted(p for p, _ in places)


async def test_a_spare_that_cannot_be_adopted_is_removed_and_the_worktree_made(
    tmp_path: Path,
) -> None:
    top = project_repo(tmp_path)
    trees = await isolation.plan(str(top), None, "auto", str(tmp_path / "state"), "f-3")
    [place] = [isolation.place(trees, "f-3", 1, "t")]
    gone = tmp_path / "state" / "pool" / "nothing-here"  # deleted by hand, say
    [tree] = await isolation.make(trees, [place], [gone])
    assert (Path(tree.path) / "keep.txt").read_text() == "kept\n"


async def test_the_pool_keeps_to_its_size(tmp_path: Path) -> None:
    top = project_repo(tmp_path)
    pools = pool.Pools()
    state = str(tmp_path / "state")
    await pools.fill(state, str(top), 3)
    folder = pool.folder_of(state, str(top))
    assert len(list(folder.glob("*.ready"))) == 3
    await pools.fill(state, str(top), 1)
    assert pools.ready(state, str(top)) == 1
    assert len(list(folder.glob("*.ready"))) == 1
    assert len(wt.list_worktrees(repo_info(top))) == 2  # the user's and one spare
    [usage] = list(pool.usage(state))
    assert usage.spares == 1 and usage.repository == os.path.realpath(top) and usage.bytes > 0


async def test_a_restart_keeps_complete_spares_and_cleans_half_made_ones(tmp_path: Path) -> None:
    top = project_repo(tmp_path)
    state = str(tmp_path / "state")
    first = pool.Pools()
    await first.fill(state, str(top), 3)
    folder = pool.folder_of(state, str(top))
    # As a killed server leaves them: one spare taken (its .ready gone) but never adopted, one
    # made by git and never marked, and a folder git never registered.
    first.take(state, str(top), 1)
    info = repo_info(top)
    wt.prepare(info, folder / "halfmade", info.head)
    (folder / "unregistered").mkdir()
    (folder / "unregistered" / "f").write_text("x")

    second = pool.Pools()
    assert await second.resume(state, 3) == [os.path.realpath(top)]
    assert second.ready(state, str(top)) == 2
    names = sorted(p.name for p in folder.iterdir())
    kept = sorted(p.name for p in folder.glob("*.ready"))
    assert len(kept) == 2
    spares = [k.removesuffix(".ready") for k in kept]
    assert names == sorted([".in-use", "repository", *kept, *spares])
    assert len(wt.list_worktrees(info)) == 3

    third = pool.Pools()  # worktreePool 0: the pools go
    assert await third.resume(state, 0) == []
    assert not folder.exists()
    assert len(wt.list_worktrees(info)) == 1


async def test_a_repository_that_is_gone_takes_its_pool_with_it(tmp_path: Path) -> None:
    top = project_repo(tmp_path)
    state = str(tmp_path / "state")
    await pool.Pools().fill(state, str(top), 1)
    folder = pool.folder_of(state, str(top))
    assert folder.is_dir()
    await anyio.to_thread.run_sync(lambda: subprocess.run(["rm", "-rf", str(top)], check=True))
    assert await pool.Pools().resume(state, 4) == []
    assert not folder.exists()


async def test_prune_leaves_a_running_servers_spares_alone(tmp_path: Path) -> None:
    from coven_ls.core.workspace import prune

    top = project_repo(tmp_path)
    state = tmp_path / "state"
    pools = pool.Pools()
    await pools.fill(str(state), str(top), 2)  # this "server" uses the pool from now on
    report, stored = prune.plan(state, repositories=[str(top)])
    assert report.items == []
    prune.apply(report, stored)
    assert pools.ready(str(state), str(top)) == 2
    for spare in pools.take(str(state), str(top), 2):
        assert spare.is_dir()
        pool.discard_spare(repo_info(top), spare)

    # The server stops (its lock goes with its process): its spares are prune's to remove...
    await pools.fill(str(state), str(top), 2)
    [held] = [p.held for p in pools._pools.values()]
    assert held is not None
    os.close(held)
    report, stored = prune.plan(state, repositories=[str(top)])
    spares = sorted(Path(i.worktree or "") for i in report.items)
    assert len(spares) == 2
    assert all(s.parent == pool.folder_of(str(state), str(top)) for s in spares)

    # ...unless a server starts using the pool between prune's plan and its removal.
    again = pool.Pools()
    assert await again.resume(str(state), 2) == [os.path.realpath(top)]
    prune.apply(report, stored)
    assert [i.action for i in report.items] == ["failed", "failed"]
    assert "started using this worktree pool" in (report.items[0].error or "")
    assert all(s.is_dir() for s in spares) and again.ready(str(state), str(top)) == 2
    [held] = [p.held for p in again._pools.values()]
    assert held is not None
    os.close(held)
    report, stored = prune.plan(state, repositories=[str(top)])
    prune.apply(report, stored)
    assert [i.action for i in report.items] == ["remove", "remove"]
    assert not any(s.exists() for s in spares)
    assert wt.list_worktrees(repo_info(top))[1:] == []
