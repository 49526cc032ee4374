"""The `.worktreeinclude` copies a pool's spare is made with (pool._keep_copies, worktree_env's
keep_in_spare and prepare_copies, worktrees.adopt keeping them): used by a child only when the
parent's files are provably unchanged since, else copied again; never left stale."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from coven_ls.core.workspace import env_rewrite, pool, worktree_env
from coven_ls.core.workspace import worktrees as wt
from coven_ls.core.workspace.commits import commit_all, copied_paths, own_git_dir
from coven_ls.core.workspace.snapshots import snapshot
from tests.gitrepo import git
from tests.unit.test_pool import project_repo, repo_info, tree_files

pytestmark = pytest.mark.usefixtures("no_user_git_config")


@pytest.fixture(autouse=True)
def no_racy_window(monkeypatch: pytest.MonkeyPatch) -> None:
    # The files here were written a moment ago; the 2 s a real tree is given to settle would
    # keep every copy out of the spares (or need a sleep).
    monkeypatch.setattr(worktree_env, "_RACY_SECONDS", 0.0)


def with_dependencies(tmp_path: Path) -> Path:
    top = project_repo(tmp_path)
    (top / ".gitignore").write_text("*.log\ndeps/\n.env\n")
    (top / ".worktreeinclude").write_text("deps/\n.env\n")
    git(top, "add", "-A")
    git(top, "commit", "-q", "-m", "ignore deps")
    for i in range(5):
        (top / "deps" / f"p{i}").mkdir(parents=True)
        (top / "deps" / f"p{i}" / "index.js").write_text(f"module.exports = {i};\n")
    (top / ".env").write_text("TOKEN=1\n")
    (top / ".env").chmod(0o600)
    return top


async def adopted_child(tmp_path: Path, top: Path, state: str, n: int) -> Path:
    pools = pool.Pools()
    await pools.fill(state, str(top), 1)
    info = repo_info(top)
    base = snapshot(info)
    [spare] = pools.take(state, str(top), 1)
    assert (spare / "deps" / "p0" / "index.js").is_file()  # the spare was made with its copies
    child = wt.adopt(info, spare, base, tmp_path / "wt" / f"{n}", f"coven/f-{n}/1-a")
    # adopt cleaned everything but the copies
    assert (child.path / "deps" / "p0" / "index.js").is_file()
    return child.path


def plan_digest(top: Path) -> tuple[list[str], str | None]:
    entries = worktree_env.included(top)
    return entries, worktree_env.manifest(top, entries, racy_before=None)


async def test_a_child_uses_the_spares_copies_when_the_parents_files_are_unchanged(
    tmp_path: Path,
) -> None:
    top = with_dependencies(tmp_path)
    child = await adopted_child(tmp_path, top, str(tmp_path / "state"), 1)
    entries, digest = plan_digest(top)
    report = worktree_env.prepare_copies(top, child, entries, digest)
    assert report.reused and report.entries == [".env", "deps/"] and report.files == 6
    assert tree_files(child)["deps/p3/index.js"] == b"module.exports = 3;\n"
    assert (child / ".env").stat().st_mode & 0o777 == 0o600
    assert sorted(copied_paths(child)) == [".env", "deps"]
    # Its commit leaves the copies out, as for copies made on the fork's path.
    (child / "src" / "m0.py").write_text("x = 'child'\n")
    commit = commit_all(child, "work")
    assert commit is not None
    listed = git(child, "show", "--name-only", "--format=", commit).split()
    assert listed == ["src/m0.py"]
    # Used once: a second look copies anew rather than trusting a record of the spare's.
    assert not worktree_env.prepare_copies(top, child, entries, digest).reused


async def test_a_file_the_user_changed_after_the_spare_was_made_is_copied_again(
    tmp_path: Path,
) -> None:
    top = with_dependencies(tmp_path)
    child = await adopted_child(tmp_path, top, str(tmp_path / "state"), 1)
    # Same size, same content length: only its inode or change time can tell.
    (top / "deps" / "p2" / "index.js").write_text("module.exports = 9;\n")
    (top / "deps" / "p4" / "extra.js").write_text("new\n")
    entries, digest = plan_digest(top)
    report = worktree_env.prepare_copies(top, child, entries, digest)
    assert not report.reused and report.files == 7
    assert tree_files(child)["deps/p2/index.js"] == b"module.exports = 9;\n"
    assert tree_files(child)["deps/p4/extra.js"] == b"new\n"


async def test_copies_no_longer_wanted_go_and_a_touched_copy_is_not_trusted(
    tmp_path: Path,
) -> None:
    top = with_dependencies(tmp_path)
    state = str(tmp_path / "state")
    child = await adopted_child(tmp_path, top, state, 1)
    (top / ".worktreeinclude").write_text(".env\n")  # deps/ is no longer wanted
    entries, digest = plan_digest(top)
    assert entries == [".env"]
    report = worktree_env.prepare_copies(top, child, entries, digest)
    assert not report.reused and not (child / "deps").exists()
    assert copied_paths(child) == [".env"]

    (top / ".worktreeinclude").write_text("deps/\n.env\n")
    other = await adopted_child(tmp_path, top, state, 2)
    (other / "deps" / "p1" / "index.js").write_text("scribbled in the spare\n")
    entries, digest = plan_digest(top)
    report = worktree_env.prepare_copies(top, other, entries, digest)
    assert not report.reused
    assert tree_files(other)["deps/p1/index.js"] == b"module.exports = 1;\n"


def test_a_tree_changed_within_the_racy_window_is_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worktree_env, "_RACY_SECONDS", 2.0)
    top = with_dependencies(tmp_path)  # written just now
    spare = tmp_path / "spare"
    info = repo_info(top)
    wt.prepare(info, spare, info.head)
    assert not worktree_env.keep_in_spare(top, spare, worktree_env.included(top))
    assert not (own_git_dir(spare) / worktree_env.KEPT_RECORD).exists()
    assert worktree_env.manifest(top, [".env"], racy_before=None) is not None


def test_the_record_says_what_the_copies_were_made_of(tmp_path: Path) -> None:
    top = with_dependencies(tmp_path)
    spare = tmp_path / "spare"
    info = repo_info(top)
    wt.prepare(info, spare, info.head)
    entries = worktree_env.included(top)
    assert worktree_env.keep_in_spare(top, spare, entries)
    record = json.loads((own_git_dir(spare) / worktree_env.KEPT_RECORD).read_text())
    assert record["entries"] == entries
    assert record["source"] == worktree_env.manifest(top, entries)
    assert record["copy"] == worktree_env.manifest(spare, entries)
    assert (record["files"], record["bytes"]) == (6, 5 * len("module.exports = 0;\n") + 8)


async def test_links_into_the_parent_in_a_spares_copies_are_made_the_childs(
    tmp_path: Path,
) -> None:
    """A spare's copies are made before the child's place is known: which copied links point
    into the parent is kept with them, and rewritten once the spare is the child's."""
    top = with_dependencies(tmp_path)
    os.symlink(f"{top}/src", top / "deps" / "src")
    child = await adopted_child(tmp_path, top, str(tmp_path / "state"), 1)
    entries, digest = plan_digest(top)
    report = worktree_env.prepare_copies(top, child, entries, digest)
    assert report.reused and report.parent_links == ["deps/src"]
    done = env_rewrite.rewrite_copies(child, report.entries, top, report.parent_links)
    assert os.readlink(child / "deps" / "src") == f"{child}/src"
    assert os.readlink(top / "deps" / "src") == f"{top}/src"
    assert done.rewritten == ["deps/: 1 link rewritten to name the child's worktree"]
