"""Big trees: the git options coven sets on its own commands (each gated on the git that has it),
the fast way a worktree made ahead is brought to a later snapshot (`read-tree -m -u`, falling back
to `checkout --force`), and copies of `.worktreeinclude` files that never share the parent's
inode. Against real git repositories with the user's git configuration out of reach."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from coven_ls.core.workspace import worktree_env
from coven_ls.core.workspace import worktrees as wt
from coven_ls.core.workspace.git import private_index_options, worktree_options
from coven_ls.core.workspace.repository import RepoInfo, inspect
from coven_ls.core.workspace.snapshots import snapshot

from ..gitrepo import git, make_repo
from .test_pool import change_everything, project_repo, tree_files

pytestmark = pytest.mark.usefixtures("no_user_git_config")


def repo_info(top: Path) -> RepoInfo:
    found = inspect(top)
    assert isinstance(found, RepoInfo)
    return found


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ((2, 39, 5), ("-c", "index.version=4", "-c", "core.untrackedCache=true")),
        ((2, 45, 0), ("-c", "index.version=4", "-c", "core.untrackedCache=true")),
        ((2, 7, 4), ("-c", "index.version=4")),
        ((1, 9, 5), ()),
    ],
)
def test_worktree_options_are_those_the_git_has(
    version: tuple[int, int, int], expected: tuple[str, ...]
) -> None:
    assert worktree_options(version) == expected
    # Never the checksum-less index in a worktree: other tools read a child's index.
    assert "index.skipHash=true" not in worktree_options(version)


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ((2, 39, 5), ()),
        ((2, 40, 0), ("-c", "index.skipHash=true")),
        ((3, 0, 0), ("-c", "index.skipHash=true")),
    ],
)
def test_a_private_index_skips_its_hash_only_from_git_2_40(
    version: tuple[int, int, int], expected: tuple[str, ...]
) -> None:
    assert private_index_options(version) == expected


def test_the_git_version_is_read_from_the_git_at_hand(tmp_path: Path) -> None:
    info = repo_info(project_repo(tmp_path))
    said = git(tmp_path, "--version").split()[2]
    assert ".".join(map(str, info.git_version)).startswith(".".join(said.split(".")[:2]))


def test_a_worktree_gets_a_v4_index_with_an_untracked_cache(tmp_path: Path) -> None:
    top = project_repo(tmp_path)
    info = repo_info(top)
    child = wt.create(info, snapshot(info), tmp_path / "child", "coven/f-1/1-a")
    index = Path(git(child.path, "rev-parse", "--git-path", "index").strip())
    if not index.is_absolute():
        index = child.path / index
    data = index.read_bytes()
    assert data[:4] == b"DIRC"
    assert int.from_bytes(data[4:8], "big") == 4
    assert b"UNTR" in data  # the untracked cache, kept by git's default for later commands
    # The user's own index and configuration are untouched.
    user = (top / ".git" / "index").read_bytes()
    assert int.from_bytes(user[4:8], "big") != 4 and b"UNTR" not in user
    assert git(top, "config", "--get-regexp", "index|untracked", check=False).strip() == ""


def test_a_worktree_brought_to_a_snapshot_by_read_tree_equals_it(tmp_path: Path) -> None:
    top = project_repo(tmp_path)
    info = repo_info(top)
    ahead = wt.create(info, snapshot(info), tmp_path / "ahead", "coven/f-1/1-a")
    (ahead.path / "stray.txt").write_text("untracked stray\n")
    (ahead.path / "stray.log").write_text("ignored stray\n")
    change_everything(top)  # a commit, staged, unstaged, deleted, untracked, ignored
    info = repo_info(top)
    base = snapshot(info)
    fresh = wt.create(info, base, tmp_path / "fresh", "coven/f-0/1-fresh")
    before = dict(wt.paths_taken)
    wt.reset_to(ahead.path, "coven/f-1/1-a", base, info.git_version)
    assert wt.paths_taken["read-tree"] == before.get("read-tree", 0) + 1
    assert wt.paths_taken["checkout"] == before.get("checkout", 0)
    assert tree_files(ahead.path) == tree_files(fresh.path)
    assert not (ahead.path / "gone.txt").exists()
    assert not (ahead.path / "stray.txt").exists() and not (ahead.path / "stray.log").exists()
    assert git(ahead.path, "rev-parse", "HEAD").strip() == base
    assert git(ahead.path, "symbolic-ref", "--short", "HEAD").strip() == "coven/f-1/1-a"
    assert git(ahead.path, "status", "--porcelain", "--ignored") == ""


def test_a_changed_path_written_behind_gits_back_falls_back_to_checkout(tmp_path: Path) -> None:
    top = project_repo(tmp_path)
    info = repo_info(top)
    ahead = wt.create(info, snapshot(info), tmp_path / "ahead", "coven/f-1/1-a")
    (ahead.path / "src" / "m1.py").write_text("scribbled\n")  # m1 changes in the snapshot too
    change_everything(top)
    info = repo_info(top)
    base = snapshot(info)
    fresh = wt.create(info, base, tmp_path / "fresh", "coven/f-0/1-fresh")
    before = dict(wt.paths_taken)
    wt.reset_to(ahead.path, "coven/f-1/1-a", base, info.git_version)
    assert wt.paths_taken["checkout"] == before.get("checkout", 0) + 1
    assert tree_files(ahead.path) == tree_files(fresh.path)
    assert git(ahead.path, "status", "--porcelain", "--ignored") == ""


def test_a_copy_never_shares_the_parents_inode(tmp_path: Path) -> None:
    top = make_repo(tmp_path / "repo", {".gitignore": ".env\nbig/\n", "a.txt": "a\n"})
    (top / ".env").write_text("SECRET=1\n")
    os.chmod(top / ".env", 0o600)
    (top / "big").mkdir()
    (top / "big" / "blob.bin").write_bytes(os.urandom(3 << 20))
    info = repo_info(top)
    child = wt.create(info, snapshot(info), tmp_path / "child", "coven/f-1/1-a").path
    report = worktree_env.copy_into(top, child, [".env", "big/"])
    assert report.files == 2
    for name in (".env", "big/blob.bin"):
        parent, copy = os.stat(top / name), os.stat(child / name)
        assert (parent.st_dev, parent.st_ino) != (copy.st_dev, copy.st_ino)
        assert copy.st_nlink == 1
        assert (child / name).read_bytes() == (top / name).read_bytes()
    assert os.stat(child / ".env").st_mode & 0o777 == 0o600
    # Written in place, a copy changes only itself.
    with open(child / "big" / "blob.bin", "r+b") as copy_file:
        copy_file.write(b"child's bytes")
    assert not (top / "big" / "blob.bin").read_bytes().startswith(b"child's bytes")


@pytest.mark.parametrize("clone", [True, False])
def test_copy_file_makes_a_file_of_its_own_whichever_way_it_copies(
    tmp_path: Path, clone: bool
) -> None:
    src, dst = tmp_path / "a", tmp_path / "b"
    src.write_bytes(os.urandom(1 << 20))
    cloned = worktree_env.copy_file(src, dst, clone=clone)
    assert cloned is False if not clone else cloned in (True, False)
    assert dst.read_bytes() == src.read_bytes()
    assert os.stat(dst).st_ino != os.stat(src).st_ino and os.stat(src).st_nlink == 1
    with pytest.raises(FileExistsError):  # never over an existing file
        worktree_env.copy_file(src, dst, clone=False)


def test_copy_file_copies_where_the_kernel_cannot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, dst = tmp_path / "a", tmp_path / "b"
    src.write_bytes(b"y" * 100_000)

    def refuse(*_: object) -> int:
        raise OSError(18, "Invalid cross-device link")  # EXDEV

    monkeypatch.setattr(os, "copy_file_range", refuse, raising=False)
    assert worktree_env.copy_file(src, dst, clone=False) is False
    assert dst.read_bytes() == src.read_bytes()
