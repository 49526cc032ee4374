"""coven_ls.core.workspace.worktrees against real git repositories, each in the test's tmp_path,
with the user's git configuration out of reach (HOME and GIT_CONFIG_GLOBAL point at empty places).

Every operation that must not touch the user's repository is checked byte for byte: HEAD (file
and reflog), the branch, the index (its file and `git diff --cached`), the stash and the refs.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from coven_ls.core.workspace import merge as merging
from coven_ls.core.workspace import worktrees as wt
from coven_ls.core.workspace.changes import changed_files
from coven_ls.core.workspace.commits import commit_all
from coven_ls.core.workspace.git import MIN_GIT_VERSION, GitError
from coven_ls.core.workspace.merge import merge_into_worktree
from coven_ls.core.workspace.repository import NotARepo, RepoInfo, inspect, show
from coven_ls.core.workspace.snapshots import snapshot

from ..gitrepo import git, make_repo

pytestmark = pytest.mark.usefixtures("no_user_git_config")

A_TXT = "".join(f"line {i}\n" for i in range(1, 21))
RENAME_ME = "".join(f"rename me, line {i}\n" for i in range(1, 11))
BINARY = bytes(range(256)) * 4


def user_repo(tmp_path: Path, *, dirty: bool = True) -> Path:
    """A repository with one commit of text, binary, executable and link files, a .gitignore, a
    stash entry and (when `dirty`) a staged new file."""
    top = tmp_path / "repo"
    top.mkdir()
    os.symlink("a.txt", top / "link")
    files: dict[str, str | bytes] = {
        "a.txt": A_TXT,
        "b.txt": "b\n",
        "gone.txt": "to be deleted\n",
        "renamed-from.txt": RENAME_ME,
        "script.sh": "#!/bin/sh\necho hi\n",
        "bin.dat": BINARY,
        ".gitignore": "*.log\nbuild/\n",
    }
    make_repo(top, files)
    (top / "b.txt").write_text("stashed\n")
    git(top, "stash", "-q")
    if dirty:
        (top / "staged.txt").write_text("staged\n")
        git(top, "add", "staged.txt")
    return top


def user_state(top: Path) -> dict[str, Any]:
    """Everything of the user's repository that only the user may change (coven-ls's own
    branches left out)."""
    gitdir = top / ".git"
    index = (gitdir / "index").read_bytes()
    refs = git(top, "for-each-ref", "--format=%(refname) %(objectname)").splitlines()
    return {
        "HEAD file": (gitdir / "HEAD").read_bytes(),
        "HEAD": git(top, "rev-parse", "HEAD"),
        "branch": git(top, "symbolic-ref", "-q", "HEAD", check=False),
        "index": index,
        "staged": git(top, "diff", "--cached", "--binary"),
        "stash": git(top, "stash", "list", "--format=%H %gs"),
        "refs": [r for r in refs if not r.startswith("refs/heads/coven/")],
        "HEAD log": (gitdir / "logs" / "HEAD").read_bytes(),
    }


def info_of(top: Path) -> RepoInfo:
    found = inspect(top)
    assert isinstance(found, RepoInfo), found
    return found


def child(info: RepoInfo, base: str, tmp_path: Path, n: int) -> wt.Worktree:
    return wt.create(info, base, tmp_path / "state" / "wt" / f"f1-{n}", f"coven/f1/{n}-child")


def edit_line(path: Path, number: int, text: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[number - 1] = text + "\n"
    path.write_text("".join(lines))


# --- inspect -----------------------------------------------------------------------------------


def test_inspect_a_repository_from_a_subfolder(tmp_path: Path) -> None:
    top = user_repo(tmp_path)
    (top / "sub").mkdir()
    info = info_of(top / "sub")
    assert info.toplevel == top
    assert info.git_dir == top / ".git"
    assert info.common_dir == top / ".git"
    assert info.head == git(top, "rev-parse", "HEAD").strip()
    assert info.branch == "main"
    assert info.submodules == ()
    assert info.git_version >= MIN_GIT_VERSION


def test_inspect_says_why_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "plain").mkdir()
    assert inspect(tmp_path / "plain") == NotARepo(tmp_path / "plain", "not a git repository")
    git(tmp_path, "init", "-q", "fresh")
    found = inspect(tmp_path / "fresh")
    assert isinstance(found, NotARepo)
    assert found.reason == "the repository has no commits yet"
    found = inspect(tmp_path / "fresh" / ".git")
    assert isinstance(found, NotARepo) and "not a work tree" in found.reason
    found = inspect(tmp_path / "nowhere")
    assert isinstance(found, NotARepo) and found.reason == "the folder does not exist"

    old = tmp_path / "old-git"
    old.mkdir()
    (old / "git").write_text("#!/bin/sh\necho 'git version 2.20.1'\n")
    (old / "git").chmod(0o755)
    monkeypatch.setenv("PATH", str(old))
    found = inspect(tmp_path / "fresh")
    assert isinstance(found, NotARepo)
    assert found.reason == "git 2.20.1 is too old (need ≥ 2.25.0)"
    monkeypatch.setenv("PATH", str(tmp_path / "plain"))
    found = inspect(tmp_path / "fresh")
    assert isinstance(found, NotARepo) and found.reason == "git is not installed"


# --- snapshot ----------------------------------------------------------------------------------


def test_snapshot_is_exactly_the_working_tree_and_touches_nothing(tmp_path: Path) -> None:
    top = user_repo(tmp_path)
    (top / "a.txt").write_text("staged version\n")
    git(top, "add", "a.txt")
    (top / "a.txt").write_text("working version\n")  # staged, then changed again
    (top / "b.txt").write_text("unstaged\n")
    (top / "gone.txt").unlink()
    git(top, "mv", "renamed-from.txt", "renamed-to.txt")
    (top / "new dir").mkdir()
    (top / "new dir" / "untracked.txt").write_text("untracked\n")
    (top / "debug.log").write_text("ignored\n")
    (top / "build").mkdir()
    (top / "build" / "out.o").write_bytes(b"ignored")
    (top / "keep.log").write_text("force-added\n")
    git(top, "add", "-f", "keep.log")
    (top / "bin.dat").write_bytes(BINARY[::-1])
    (top / "script.sh").chmod(0o755)
    os.symlink("b.txt", top / "link2")
    (top / "link").unlink()
    os.symlink("renamed-to.txt", top / "link")
    # Files git is told to look away from: the snapshot is what is on disk all the same.
    git(top, "update-index", "--assume-unchanged", "staged.txt")
    (top / "staged.txt").write_text("changed behind assume-unchanged\n")
    git(top, "update-index", "--skip-worktree", ".gitignore")
    (top / ".gitignore").write_text("*.log\nbuild/\n# changed behind skip-worktree\n")
    before = user_state(top)

    info = info_of(top)
    base = snapshot(info)

    assert user_state(top) == before
    assert git(top, "rev-parse", f"{base}^").strip() == info.head
    assert git(top, "stash", "list") != ""
    listing = {
        line.split("\t")[1]: line.split(" ")[0]
        for line in git(top, "ls-tree", "-r", base).splitlines()
    }
    assert listing == {
        ".gitignore": "100644",
        "a.txt": "100644",
        "b.txt": "100644",
        "bin.dat": "100644",
        "keep.log": "100644",
        "link": "120000",
        "link2": "120000",
        "new dir/untracked.txt": "100644",
        "renamed-to.txt": "100644",
        "script.sh": "100755",
        "staged.txt": "100644",
    }
    assert show(info, base, "a.txt") == b"working version\n"
    assert show(info, base, "b.txt") == b"unstaged\n"
    assert show(info, base, "bin.dat") == BINARY[::-1]
    assert show(info, base, "link") == b"renamed-to.txt"
    assert show(info, base, "staged.txt") == b"changed behind assume-unchanged\n"
    assert show(info, base, ".gitignore") == b"*.log\nbuild/\n# changed behind skip-worktree\n"
    assert show(info, base, "gone.txt") is None
    assert show(info, base, "debug.log") is None


def test_snapshot_of_a_clean_working_tree_is_head(tmp_path: Path) -> None:
    top = user_repo(tmp_path, dirty=False)
    info = info_of(top)
    assert snapshot(info) == info.head


# --- create, commit_all ------------------------------------------------------------------------


def test_create_a_worktree_and_commit_a_childs_work(tmp_path: Path) -> None:
    top = user_repo(tmp_path)
    (top / "untracked.txt").write_text("seen by the child\n")
    info = info_of(top)
    base = snapshot(info)
    before = user_state(top)

    kid = child(info, base, tmp_path, 1)

    assert user_state(top) == before
    assert kid.branch == "coven/f1/1-child" and kid.head == base
    assert (kid.path / "untracked.txt").read_text() == "seen by the child\n"
    assert (kid.path / "staged.txt").read_text() == "staged\n"
    assert os.readlink(kid.path / "link") == "a.txt"
    assert git(kid.path, "symbolic-ref", "HEAD").strip() == "refs/heads/coven/f1/1-child"
    assert commit_all(kid.path, "nothing yet") is None

    (kid.path / "new.txt").write_text("new\n")
    (kid.path / "b.txt").unlink()
    (kid.path / "a.txt").write_text("changed\n")
    (kid.path / "ignored.log").write_text("stays out\n")
    commit = commit_all(kid.path, "coven: child 1")

    assert commit is not None
    assert git(top, "rev-parse", "coven/f1/1-child").strip() == commit
    assert git(top, "log", "-1", "--format=%an <%ae>|%cn|%s|%P", commit).strip() == (
        f"coven-ls <coven-ls@localhost>|coven-ls|coven: child 1|{base}"
    )
    assert git(kid.path, "status", "--porcelain") == ""
    assert show(info, commit, "b.txt") is None
    assert show(info, commit, "ignored.log") is None
    assert commit_all(kid.path, "again") is None
    assert user_state(top) == before


def test_create_refuses_what_would_hurt(tmp_path: Path) -> None:
    top = user_repo(tmp_path)
    info = info_of(top)
    base = snapshot(info)
    with pytest.raises(GitError, match="inside"):
        wt.create(info, base, top / "children" / "1", "coven/f1/1-x")
    child(info, base, tmp_path, 1)
    with pytest.raises(GitError, match="already"):
        wt.create(info, base, tmp_path / "elsewhere", "coven/f1/1-child")
    with pytest.raises(GitError, match="something is already there"):
        child(info, base, tmp_path, 1)
    with pytest.raises(GitError, match="not a valid branch name"):
        wt.create(info, base, tmp_path / "x", "coven/bad..name")


# --- changes, show -----------------------------------------------------------------------------


def test_changes_lists_what_a_child_did(tmp_path: Path) -> None:
    top = user_repo(tmp_path)
    info = info_of(top)
    base = snapshot(info)
    kid = child(info, base, tmp_path, 1)
    edit_line(kid.path / "a.txt", 3, "three")
    (kid.path / "added.txt").write_text("one\ntwo\n")
    (kid.path / "gone.txt").unlink()
    (kid.path / "renamed-from.txt").rename(kid.path / "renamed-to.txt")
    (kid.path / "bin.dat").write_bytes(BINARY + b"\0")
    (kid.path / "script.sh").chmod(0o755)
    commit = commit_all(kid.path, "work")
    assert commit

    found = {c.path: c for c in changed_files(info, base, commit)}

    assert {p: (c.status, c.old_path) for p, c in found.items()} == {
        "a.txt": ("modified", "a.txt"),
        "added.txt": ("added", None),
        "bin.dat": ("modified", "bin.dat"),
        "gone.txt": ("deleted", "gone.txt"),
        "renamed-to.txt": ("renamed", "renamed-from.txt"),
        "script.sh": ("modified", "script.sh"),
    }
    assert (found["a.txt"].lines_added, found["a.txt"].lines_removed) == (1, 1)
    assert (found["added.txt"].lines_added, found["added.txt"].lines_removed) == (2, 0)
    assert (found["gone.txt"].lines_added, found["gone.txt"].lines_removed) == (0, 1)
    assert found["bin.dat"].binary and not found["a.txt"].binary
    assert found["renamed-to.txt"].similarity == 100
    assert (found["script.sh"].old_mode, found["script.sh"].new_mode) == ("100644", "100755")
    assert show(info, base, "a.txt") == A_TXT.encode()
    assert show(info, commit, "a.txt") == A_TXT.replace("line 3\n", "three\n").encode()
    assert show(info, commit, "gone.txt") is None
    assert show(info, commit, "no such file") is None


# --- merge -------------------------------------------------------------------------------------


def test_a_childs_new_files_merge_into_the_working_tree(tmp_path: Path) -> None:
    top = user_repo(tmp_path)
    info = info_of(top)
    base = snapshot(info)
    kid = child(info, base, tmp_path, 1)
    (kid.path / "src" / "deep").mkdir(parents=True)
    (kid.path / "src" / "deep" / "new.py").write_text("print('hi')\n")
    (kid.path / "notes.md").write_text("# notes\n\nmore\n")
    commit_all(kid.path, "work")
    before = user_state(top)

    result = merge_into_worktree(info, base, kid.branch or "")

    assert result.ok and result.skipped == ()
    assert [(f.path, f.status, f.how) for f in result.applied] == [
        ("notes.md", "added", "child"),
        ("src/deep/new.py", "added", "child"),
    ]
    assert (result.lines_added, result.lines_removed) == (4, 0)
    assert (top / "src" / "deep" / "new.py").read_text() == "print('hi')\n"
    assert (top / "notes.md").read_text() == "# notes\n\nmore\n"
    assert user_state(top) == before
    assert not list(top.rglob(".coven-*"))  # no temporary file left behind


def test_two_children_editing_disjoint_parts_of_one_file_both_merge(tmp_path: Path) -> None:
    top = user_repo(tmp_path)
    info = info_of(top)
    base = snapshot(info)
    one, two = child(info, base, tmp_path, 1), child(info, base, tmp_path, 2)
    edit_line(one.path / "a.txt", 2, "two, by child 1")
    edit_line(two.path / "a.txt", 18, "eighteen, by child 2")
    first, second = commit_all(one.path, "1"), commit_all(two.path, "2")
    assert first and second
    before = user_state(top)

    r1 = merge_into_worktree(info, base, first)
    r2 = merge_into_worktree(info, base, second)

    assert r1.ok and [f.how for f in r1.applied] == ["child"]
    assert r2.ok and [f.how for f in r2.applied] == ["merged"]
    expected = A_TXT.replace("line 2\n", "two, by child 1\n").replace(
        "line 18\n", "eighteen, by child 2\n"
    )
    assert (top / "a.txt").read_text() == expected
    assert user_state(top) == before


def test_overlapping_edits_conflict_and_nothing_of_that_child_is_applied(tmp_path: Path) -> None:
    top = user_repo(tmp_path)
    info = info_of(top)
    base = snapshot(info)
    one, two = child(info, base, tmp_path, 1), child(info, base, tmp_path, 2)
    edit_line(one.path / "a.txt", 5, "five, by child 1")
    edit_line(two.path / "a.txt", 5, "five, by child 2")
    (two.path / "also-new.txt").write_text("from child 2\n")
    (two.path / "b.txt").unlink()
    commit_all(one.path, "1")
    second = commit_all(two.path, "2")
    assert merge_into_worktree(info, base, one.branch or "").ok
    after_first = (top / "a.txt").read_bytes()
    before = user_state(top)

    result = merge_into_worktree(info, base, two.branch or "", label="child 2")

    assert not result.ok and result.applied == ()
    assert [c.path for c in result.conflicts] == ["a.txt"]
    conflict = result.conflicts[0]
    assert "same lines" in conflict.reason
    assert conflict.text is not None
    assert (
        b"<<<<<<< working tree\nfive, by child 1\n=======\nfive, by child 2\n>>>>>>> child 2\n"
        in (conflict.text)
    )
    assert (top / "a.txt").read_bytes() == after_first
    assert not (top / "also-new.txt").exists()
    assert (top / "b.txt").read_text() == "b\n"
    assert user_state(top) == before
    # The child's work is still on its branch, for the user to take by hand.
    assert git(top, "rev-parse", "coven/f1/2-child").strip() == second
    assert show(info, "coven/f1/2-child", "also-new.txt") == b"from child 2\n"


def test_a_childs_deletion_and_rename_follow_the_users_edits(tmp_path: Path) -> None:
    top = user_repo(tmp_path)
    info = info_of(top)
    base = snapshot(info)
    kid = child(info, base, tmp_path, 1)
    (kid.path / "gone.txt").unlink()
    (kid.path / "moved").mkdir()
    (kid.path / "renamed-from.txt").rename(kid.path / "moved" / "renamed-to.txt")
    edit_line(kid.path / "moved" / "renamed-to.txt", 10, "last line, by the child")
    commit_all(kid.path, "work")
    edit_line(top / "renamed-from.txt", 1, "first line, by the user")  # during the fork
    before = user_state(top)

    result = merge_into_worktree(info, base, kid.branch or "")

    assert result.ok
    assert sorted((f.path, f.status, f.how) for f in result.applied) == [
        ("gone.txt", "deleted", "child"),
        ("moved/renamed-to.txt", "renamed", "merged"),
    ]
    assert not (top / "gone.txt").exists()
    assert not (top / "renamed-from.txt").exists()
    assert (top / "moved" / "renamed-to.txt").read_text() == RENAME_ME.replace(
        "rename me, line 1\n", "first line, by the user\n"
    ).replace("rename me, line 10\n", "last line, by the child\n")
    assert user_state(top) == before


def test_a_binary_file(tmp_path: Path) -> None:
    top = user_repo(tmp_path)
    info = info_of(top)
    base = snapshot(info)
    one, two = child(info, base, tmp_path, 1), child(info, base, tmp_path, 2)
    (one.path / "bin.dat").write_bytes(BINARY * 2)
    (two.path / "bin.dat").write_bytes(b"\0" + BINARY)
    commit_all(one.path, "1")
    commit_all(two.path, "2")
    before = user_state(top)

    first = merge_into_worktree(info, base, one.branch or "")
    second = merge_into_worktree(info, base, two.branch or "")

    assert first.ok and (top / "bin.dat").read_bytes() == BINARY * 2
    assert [(c.path, c.reason) for c in second.conflicts] == [
        ("bin.dat", "a binary file changed both in the working tree and by the child")
    ]
    assert (top / "bin.dat").read_bytes() == BINARY * 2
    assert user_state(top) == before


def test_executable_bits_and_symbolic_links(tmp_path: Path) -> None:
    top = user_repo(tmp_path)
    info = info_of(top)
    base = snapshot(info)
    kid = child(info, base, tmp_path, 1)
    (kid.path / "script.sh").chmod(0o755)
    (kid.path / "tool.sh").write_text("#!/bin/sh\n")
    (kid.path / "tool.sh").chmod(0o755)
    (kid.path / "link").unlink()
    os.symlink("b.txt", kid.path / "link")
    os.symlink("script.sh", kid.path / "new-link")
    commit_all(kid.path, "work")
    (top / "script.sh").write_text("#!/bin/sh\necho edited by the user\n")  # content: theirs
    before = user_state(top)

    result = merge_into_worktree(info, base, kid.branch or "")

    assert result.ok
    assert {f.path: f.how for f in result.applied} == {
        "link": "child",
        "new-link": "child",
        "script.sh": "merged",
        "tool.sh": "child",
    }
    assert (top / "script.sh").stat().st_mode & stat.S_IXUSR
    assert (top / "script.sh").read_text() == "#!/bin/sh\necho edited by the user\n"
    assert (top / "tool.sh").stat().st_mode & stat.S_IXUSR
    assert os.readlink(top / "link") == "b.txt"
    assert os.readlink(top / "new-link") == "script.sh"
    assert user_state(top) == before


def test_the_merge_uses_the_working_tree_as_it_is_at_merge_time(tmp_path: Path) -> None:
    top = user_repo(tmp_path)
    info = info_of(top)
    base = snapshot(info)
    one, two = child(info, base, tmp_path, 1), child(info, base, tmp_path, 2)
    edit_line(one.path / "a.txt", 3, "three, by child 1")
    (one.path / "b.txt").write_text("b, by child 1\n")
    edit_line(two.path / "a.txt", 12, "twelve, by child 2")
    (two.path / "c.txt").write_text("new, by child 2\n")
    commit_all(one.path, "1")
    commit_all(two.path, "2")
    # The user works on during the fork: a disjoint edit, then an overlapping one.
    edit_line(top / "a.txt", 10, "ten, by the user")
    (top / "b.txt").write_text("b, by the user\n")
    before = user_state(top)

    clashing = merge_into_worktree(info, base, one.branch or "")
    clean = merge_into_worktree(info, base, two.branch or "")

    assert [(c.path, c.reason) for c in clashing.conflicts] == [
        ("b.txt", "changed on the same lines in the working tree and by the child")
    ]
    assert clean.ok
    assert (top / "a.txt").read_text() == A_TXT.replace("line 10\n", "ten, by the user\n").replace(
        "line 12\n", "twelve, by child 2\n"
    )
    assert (top / "b.txt").read_text() == "b, by the user\n"
    assert (top / "c.txt").read_text() == "new, by child 2\n"
    assert user_state(top) == before


def test_a_file_saved_while_the_merge_is_planned_is_not_overwritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    top = user_repo(tmp_path)
    info = info_of(top)
    base = snapshot(info)
    kid = child(info, base, tmp_path, 1)
    edit_line(kid.path / "a.txt", 1, "one, by the child")
    commit_all(kid.path, "work")
    plan = merging._plan
    calls = []

    def save_during_the_first_plan(*args: Any) -> Any:
        planned = plan(*args)
        if not calls:  # the user's editor saves just after the file was read
            edit_line(top / "a.txt", 20, "twenty, saved by the user meanwhile")
        calls.append(planned)
        return planned

    monkeypatch.setattr(merging, "_plan", save_during_the_first_plan)
    result = merge_into_worktree(info, base, kid.branch or "")

    assert result.ok and len(calls) == 2
    assert (top / "a.txt").read_text() == A_TXT.replace("line 1\n", "one, by the child\n").replace(
        "line 20\n", "twenty, saved by the user meanwhile\n"
    )


def test_what_the_working_tree_has_in_the_way_is_a_conflict(tmp_path: Path) -> None:
    top = user_repo(tmp_path)
    info = info_of(top)
    base = snapshot(info)
    kid = child(info, base, tmp_path, 1)
    (kid.path / "dir").mkdir()
    (kid.path / "dir" / "file.txt").write_text("child\n")
    (kid.path / "same.txt").write_text("both\n")
    (kid.path / "other.txt").write_text("child's\n")
    (kid.path / "gone.txt").unlink()
    edit_line(kid.path / "b.txt", 1, "b, by the child")
    commit_all(kid.path, "work")
    (top / "dir").write_text("a file where the child has a folder\n")
    (top / "same.txt").write_text("both\n")
    (top / "other.txt").write_text("the user's\n")
    (top / "gone.txt").write_text("edited by the user\n")
    (top / "b.txt").unlink()

    result = merge_into_worktree(info, base, kid.branch or "")

    assert sorted((c.path, c.reason) for c in result.conflicts) == [
        ("b.txt", "deleted in the working tree but changed by the child"),
        ("dir/file.txt", "the working tree has a file or a symbolic link at dir"),
        ("gone.txt", "changed in the working tree but deleted by the child"),
        ("other.txt", "created by the child, but the working tree has a different file there"),
    ]
    assert result.applied == () and not (top / "dir").is_dir()
    (top / "b.txt").write_text("b\n")
    (top / "gone.txt").write_text("to be deleted\n")
    (top / "other.txt").unlink()
    result = merge_into_worktree(info, base, kid.branch or "")
    assert [(c.path, c.reason) for c in result.conflicts] == [
        ("dir/file.txt", "the working tree has a file or a symbolic link at dir")
    ]
    (top / "dir").unlink()
    result = merge_into_worktree(info, base, kid.branch or "")
    assert result.ok
    assert {f.path: f.how for f in result.applied}["same.txt"] == "same"
    assert (top / "dir" / "file.txt").read_text() == "child\n"


def test_line_endings_and_filters_are_honoured(tmp_path: Path) -> None:
    top = user_repo(tmp_path, dirty=False)
    (top / ".gitattributes").write_text("*.crlf text eol=crlf\n")
    (top / "win.crlf").write_bytes(b"".join(b"row %d\r\n" % i for i in range(1, 11)))
    git(top, "add", "-A")
    git(top, "commit", "-q", "-m", "crlf")
    info = info_of(top)
    base = snapshot(info)
    assert base == info.head  # the CRLF file is clean, as git sees it
    kid = child(info, base, tmp_path, 1)
    assert (kid.path / "win.crlf").read_bytes().startswith(b"row 1\r\n")
    (kid.path / "win.crlf").write_bytes(
        (kid.path / "win.crlf").read_bytes().replace(b"row 9", b"CHILD")
    )
    commit_all(kid.path, "work")
    (top / "win.crlf").write_bytes((top / "win.crlf").read_bytes().replace(b"row 2", b"USER"))

    result = merge_into_worktree(info, base, kid.branch or "")

    assert result.ok and [f.how for f in result.applied] == ["merged"]
    assert (top / "win.crlf").read_bytes() == b"".join(
        b"%s\r\n" % (b"USER" if i == 2 else b"CHILD" if i == 9 else b"row %d" % i)
        for i in range(1, 11)
    )


def test_detached_head(tmp_path: Path) -> None:
    top = user_repo(tmp_path)
    git(top, "checkout", "-q", "--detach")
    info = info_of(top)
    assert info.branch is None
    (top / "a.txt").write_text("user's\n")
    before = user_state(top)
    assert before["branch"] == ""

    base = snapshot(info)
    kid = child(info, base, tmp_path, 1)
    (kid.path / "new.txt").write_text("new\n")
    commit_all(kid.path, "work")
    result = merge_into_worktree(info, base, kid.branch or "")

    assert result.ok and (top / "new.txt").read_text() == "new\n"
    assert (top / "a.txt").read_text() == "user's\n"
    assert user_state(top) == before


def test_submodules_are_checked_out_from_the_parents_and_left_alone(tmp_path: Path) -> None:
    lib = make_repo(tmp_path / "lib", {"lib.txt": "lib\n"}, message="lib")
    top = user_repo(tmp_path, dirty=False)
    git(top, "-c", "protocol.file.allow=always", "submodule", "-q", "add", str(lib), "vendor/lib")
    git(top, "commit", "-q", "-m", "submodule")
    info = info_of(top)
    assert info.submodules == ("vendor/lib",)

    recorded = git(top, "rev-parse", "HEAD:vendor/lib").strip()
    # The library moves on after the pointer was recorded; its clone in the parent fetched it.
    (lib / "lib.txt").write_text("newer\n")
    git(lib, "commit", "-q", "-am", "newer")
    git(top / "vendor" / "lib", "fetch", "-q")
    user_config = (top / ".git" / "config").read_text()

    base = snapshot(info)
    kid = child(info, base, tmp_path, 1)
    # Checked out from the parent's submodule (no network), at the commit the snapshot records.
    assert (kid.path / "vendor" / "lib" / "lib.txt").read_text() == "lib\n"
    assert git(kid.path / "vendor" / "lib", "rev-parse", "HEAD").strip() == recorded
    assert (top / ".git" / "config").read_text() == user_config
    (kid.path / "a.txt").write_text("child\n")
    (kid.path / "vendor" / "lib" / "lib.txt").write_text("changed in the child\n")
    commit_all(kid.path, "work")
    result = merge_into_worktree(info, base, kid.branch or "")
    assert result.ok and (top / "a.txt").read_text() == "child\n"
    assert (top / "vendor" / "lib" / "lib.txt").read_text() == "lib\n"

    wt.remove(info, kid.path, kid.branch or "")
    assert not kid.path.exists()
    assert str(kid.path) not in git(top / "vendor" / "lib", "worktree", "list")


def test_a_submodule_the_parent_has_not_initialised_stays_empty(tmp_path: Path) -> None:
    lib = make_repo(tmp_path / "lib", {"lib.txt": "lib\n"}, message="lib")
    top = user_repo(tmp_path, dirty=False)
    git(top, "-c", "protocol.file.allow=always", "submodule", "-q", "add", str(lib), "vendor/lib")
    git(top, "commit", "-q", "-m", "submodule")
    git(top, "submodule", "deinit", "-q", "--force", "vendor/lib")
    info = info_of(top)

    kid = child(info, snapshot(info), tmp_path, 1)

    assert list((kid.path / "vendor" / "lib").iterdir()) == []
    wt.remove(info, kid.path, kid.branch or "")
    assert not kid.path.exists()


# --- remove, prune, list, disk usage -----------------------------------------------------------


def test_remove_deletes_the_worktree_and_its_branch(tmp_path: Path) -> None:
    top = user_repo(tmp_path)
    info = info_of(top)
    base = snapshot(info)
    one, two = child(info, base, tmp_path, 1), child(info, base, tmp_path, 2)
    git(top, "worktree", "add", "-q", "-b", "mine", str(tmp_path / "users-own"))
    (one.path / "scratch.log").write_text("ignored, and removed all the same\n")
    scratch = wt.temp_folder(one.path)
    assert scratch.parent == one.path.parent and not scratch.is_relative_to(one.path)
    (scratch / "deep").mkdir(parents=True)
    (scratch / "deep" / "tmp.XYZ").write_text("a command's temporary file\n")
    (two.path / "work.txt").write_text("kept on the branch\n")
    commit_all(two.path, "work")
    before = user_state(top)
    assert [(w.path, w.branch) for w in wt.list_coven_worktrees(info)] == [
        (one.path, "coven/f1/1-child"),
        (two.path, "coven/f1/2-child"),
    ]

    wt.remove(info, one.path, one.branch or "")
    wt.remove(info, two.path, two.branch or "", keep_branch=True)

    assert not one.path.exists() and not two.path.exists() and not scratch.exists()
    assert wt.list_coven_worktrees(info) == []
    assert git(top, "branch", "--list", "coven/*").split() == ["coven/f1/2-child"]
    assert show(info, "coven/f1/2-child", "work.txt") == b"kept on the branch\n"
    assert (tmp_path / "users-own").is_dir()
    assert user_state(top) == before
    wt.remove(info, two.path, two.branch or "")  # the branch now; the folder is already gone
    assert git(top, "branch", "--list", "coven/*") == ""
    with pytest.raises(GitError, match="not a worktree"):
        wt.remove(info, tmp_path / "users-own" / "..", "coven/none")


def test_prune_forgets_a_worktree_deleted_by_hand(tmp_path: Path) -> None:
    top = user_repo(tmp_path)
    info = info_of(top)
    base = snapshot(info)
    kid, kept = child(info, base, tmp_path, 1), child(info, base, tmp_path, 2)
    git(top, "worktree", "add", "-q", "-b", "mine", str(tmp_path / "users-own"))
    shutil.rmtree(kid.path)
    shutil.rmtree(tmp_path / "users-own")  # the user's: on a drive not mounted right now, say
    assert [w.missing for w in wt.list_coven_worktrees(info)] == [True, False]

    pruned = wt.prune(info)

    assert [(w.path, w.branch) for w in pruned] == [(kid.path, "coven/f1/1-child")]
    assert [w.path for w in wt.list_coven_worktrees(info)] == [kept.path]
    assert str(tmp_path / "users-own") in git(top, "worktree", "list")
    assert "coven/f1/1-child" in git(top, "branch", "--list", "coven/*")
    assert wt.prune(info) == []


def test_disk_usage_counts_what_du_counts_without_git(tmp_path: Path) -> None:
    top = user_repo(tmp_path)
    info = info_of(top)
    base = snapshot(info)
    kid = child(info, base, tmp_path, 1)

    def du(path: Path) -> int:
        out = subprocess.run(
            ["du", "-s", "-B1", "--exclude=.git", str(path)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return int(out.split()[0])

    assert wt.disk_usage(kid.path) == du(kid.path)
    before = wt.disk_usage(kid.path)
    (kid.path / "build").mkdir()
    (kid.path / "build" / "big.bin").write_bytes(b"x" * 100_000)
    assert wt.disk_usage(kid.path) == du(kid.path) >= before + 100_000
    assert wt.disk_usage(top) == du(top)  # a main worktree: its .git folder is left out
