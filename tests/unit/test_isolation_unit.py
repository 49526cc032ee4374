"""The pure parts of fork isolation: what the model is told, where a child works, which writes
are redirected. (The git work itself: test_worktrees.py; the whole flow: test_isolation_e2e.py.)"""

from __future__ import annotations

from pathlib import Path

from coven_ls.core.fork.results import TaskResult, compose_results
from coven_ls.core.workspace import isolation
from coven_ls.protocol.types import ChangedFile, ConflictFile, Worktree


def changed(path: str, added: int, removed: int) -> ChangedFile:
    return ChangedFile(
        path=path,
        status="modified",
        oldPath=None,
        binary=False,
        linesAdded=added,
        linesRemoved=removed,
    )


def tree(tmp_path: Path) -> Worktree:
    return Worktree(
        path=str(tmp_path / "state" / "worktrees" / "f-1" / "1-docs"),
        branch="coven/f-1/1-docs",
        base="abc123",
        repository=str(tmp_path / "repo"),
    )


def test_results_say_what_became_of_each_childs_changes() -> None:
    applied = TaskResult(
        "Docs", "s-1", True, "Written.", merge="applied", files=(changed("a.md", 3, 1),)
    )
    conflict = TaskResult(
        "Bugs",
        "s-2",
        True,
        "Fixed.",
        merge="conflict",
        files=(changed("app.py", 2, 2),),
        conflicts=(ConflictFile(path="app.py", reason="changed on the same lines"),),
        branch="coven/f-1/2-bugs",
        base="0123456789abcdef",
    )
    kept = TaskResult(
        "Tidy",
        "s-3",
        False,
        error="cancelled by the user",
        merge="kept",
        files=(changed("u.py", 0, 4),),
        branch="coven/f-1/3-tidy",
    )
    shared = TaskResult("Plain", "s-4", True, "Plain answer.")

    message = compose_results([applied, conflict, kept, shared])

    assert '<task label="Docs" merge="applied" files="a.md (+3 -1)">\nWritten.\n</task>' in message
    assert (
        '<task label="Bugs" merge="conflict" conflicts="app.py" branch="coven/f-1/2-bugs">\n'
        "[Not merged: these files conflict with changes already in the working tree: app.py "
        "(changed on the same lines). None of this task's changes were applied. They are on the "
        "branch coven/f-1/2-bugs (see them with `git diff 0123456789ab coven/f-1/2-bugs`).]\n"
        "Fixed.\n</task>"
    ) in message
    assert (
        '<task label="Tidy" error="cancelled by the user" merge="kept" files="u.py (+0 -4)" '
        'branch="coven/f-1/3-tidy">\n</task>'
    ) in message
    assert '<task label="Plain">\nPlain answer.\n</task>' in message
    # The wire's results keep the branch only where the work stays on it.
    assert applied.wire().branch is None and conflict.wire().branch == "coven/f-1/2-bugs"
    assert [c.path for c in conflict.wire().conflicts or []] == ["app.py"]


def test_a_childs_cwd_is_the_parents_place_in_its_worktree(tmp_path: Path) -> None:
    t = tree(tmp_path)
    (tmp_path / "repo" / "src" / "pkg").mkdir(parents=True)
    assert isolation.child_cwd(t, str(tmp_path / "repo")) == t.path
    assert isolation.child_cwd(t, str(tmp_path / "repo" / "src" / "pkg")) == str(
        Path(t.path) / "src" / "pkg"
    )


def test_writes_into_the_parents_repository_are_redirected_into_the_worktree(
    tmp_path: Path,
) -> None:
    t = tree(tmp_path)
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    Path(t.path).mkdir(parents=True)
    stray = {"file_path": str(repo / "src" / "a.py"), "content": "x"}
    assert isolation.outside_write(t, "Write", stray) == str(Path(t.path) / "src" / "a.py")
    assert isolation.outside_write(t, "Edit", stray) == str(Path(t.path) / "src" / "a.py")
    notebook = {"notebook_path": str(repo / "n.ipynb")}
    assert isolation.outside_write(t, "NotebookEdit", notebook) == str(Path(t.path) / "n.ipynb")
    # Its own files, files elsewhere, relative paths and tools that write nothing pass.
    assert isolation.outside_write(t, "Write", {"file_path": str(Path(t.path) / "a.py")}) is None
    assert isolation.outside_write(t, "Write", {"file_path": str(tmp_path / "other.txt")}) is None
    assert isolation.outside_write(t, "Write", {"file_path": "src/a.py"}) is None
    assert isolation.outside_write(t, "Read", stray) is None


def test_branch_and_folder_names_come_from_the_label() -> None:
    assert isolation.slug('Fix <bugs> & "tests"') == "fix-bugs-tests"
    assert isolation.slug("!!!") == "task"
    assert len(isolation.slug("x" * 100)) == 40
    trees = isolation.ForkTrees(mode="worktree", root="/state/worktrees/f-9")
    assert isolation.place(trees, "f-9", 2, "Write the docs") == (
        "/state/worktrees/f-9/2-write-the-docs",
        "coven/f-9/2-write-the-docs",
    )


def test_a_forks_isolation_survives_the_store() -> None:
    trees = isolation.ForkTrees(
        mode="worktree",
        merge_mode="review",
        repository="/repo",
        base="abc",
        root="/state/worktrees/f-1",
        planned=[{"path": "/state/worktrees/f-1/1-a", "branch": "coven/f-1/1-a"}],
    )
    assert isolation.ForkTrees.from_record(trees.record()) == trees


def test_a_file_change_is_checked_file_by_file(tmp_path: Path) -> None:
    t = tree(tmp_path)
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    Path(t.path).mkdir(parents=True)
    mine = str(Path(t.path) / "ok.txt")
    change = {
        "file_path": mine,
        "changes": [{"path": mine}, {"path": str(repo / "src" / "b.py")}],
    }
    assert isolation.outside_write(t, "Edit", change) == str(Path(t.path) / "src" / "b.py")
    assert isolation.outside_write(t, "Edit", {"file_path": mine, "changes": [{"path": mine}]}) is (
        None
    )


def test_a_command_in_or_naming_the_parents_repository_is_redirected(tmp_path: Path) -> None:
    t = tree(tmp_path)
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    Path(t.path).mkdir(parents=True)
    mine = Path(t.path)
    assert isolation.outside_command(t, "Bash", {"command": "ls", "cwd": str(repo / "src")}) == (
        str(mine / "src")
    )
    named = {"command": f"echo x > {repo}/src/a.py && cat {repo}/README", "cwd": str(mine)}
    assert isolation.outside_command(t, "Bash", named) == str(mine / "src" / "a.py")
    assert isolation.outside_command(t, "Bash", {"command": f"cd {repo}; make"}) == str(mine)
    assert isolation.outside_command(t, "Bash", {"command": f"cd '{repo}' && make"}) == str(mine)
    # Its own worktree, other folders, a longer name that starts like the repository's, and
    # tools that run nothing pass.
    assert isolation.outside_command(
        t, "Bash", {"command": f"ls {mine}/src", "cwd": str(mine)}
    ) is (None)
    assert isolation.outside_command(t, "Bash", {"command": f"ls {repo}2 {tmp_path}/other"}) is None
    assert isolation.outside_command(t, "Bash", {"command": "ls", "cwd": str(tmp_path)}) is None
    assert isolation.outside_command(t, "Write", {"command": f"ls {repo}"}) is None


def test_relative_cd_chains_and_dot_dot_paths_are_followed_from_where_the_command_runs(
    tmp_path: Path,
) -> None:
    t = tree(tmp_path)  # <tmp>/state/worktrees/f-1/1-docs beside <tmp>/repo
    mine = Path(t.path)
    up = "../../../.."  # from the worktree to <tmp>

    def reach(command: str, cwd: str | None = t.path, given: str | None = None) -> str | None:
        tool_input = {"command": command} if given is None else {"command": command, "cwd": given}
        return isolation.outside_command(t, "Bash", tool_input, cwd)

    assert reach(f"cd {up}/repo && make") == str(mine)
    assert reach(f"cd {up} && cd repo/src; make") == str(mine / "src")
    assert reach(f"cd -P {up}/repo/src") == str(mine / "src")
    assert reach(f"pushd {up}/repo") == str(mine)
    assert reach(f"git status\ncd {up}/repo\nmake") == str(mine)
    assert reach(f"printf x >{up}/repo/a.txt") == str(mine / "a.txt")
    assert reach(f"cat {up}/repo/README | wc -l") == str(mine / "README")
    assert reach("cd .. && cat ../../../repo/README") == str(mine / "README")
    # codex's form: the line as one shell's script, in the cwd the request gives.
    assert reach(f"/bin/bash -lc 'cd {up}/repo && make'", None, given=t.path) == str(mine)
    assert reach("/bin/bash -lc 'cd repo'", None, given=str(tmp_path)) == str(mine)
    # Into its own worktree, elsewhere, or somewhere a shell would have to expand: passes.
    assert reach("cd .. && cd 1-docs/src && make") is None
    assert reach(f"cd {up}/other && cd ../repo2") is None
    assert reach(f"cd $HOME && cd {up}/repo") is None  # not followed past an expansion
    assert reach(f"cd ~ && cat {up}/repo/x") is None
    assert reach(f"cd - && cd {up}/repo") is None
    assert reach(f"cd {up}/re* && make") is None
    assert reach(f"echo '{up}/repo is the parent' | wc") is None  # a quoted word with spaces
    assert reach(f"cd 'unbalanced {up}/repo") is None
    assert reach(f"cd {up}/repo", None) is None  # nowhere to follow from
    assert reach("cd ../..; ls") is None


def test_a_worktree_inside_the_repositorys_folder_is_reached_by_going_up(tmp_path: Path) -> None:
    """A state folder inside the repository (a repository of the whole home folder): going up
    from the worktree lands in the repository, outside the worktree."""
    repo = tmp_path / "home"
    t = Worktree(
        path=str(repo / ".local" / "state" / "coven-ls" / "worktrees" / "f-1" / "1-docs"),
        branch="coven/f-1/1-docs",
        base="abc123",
        repository=str(repo),
    )
    mine = Path(t.path)
    reach = isolation.outside_command
    assert reach(t, "Bash", {"command": "cd ../../../../../.. && make"}, t.path) == str(mine)
    assert reach(t, "Bash", {"command": "ls ../../../../../../.bashrc"}, t.path) == str(
        mine / ".bashrc"
    )
    assert reach(t, "Bash", {"command": "cd .. && cd 1-docs && make"}, t.path) is None
