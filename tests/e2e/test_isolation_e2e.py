"""Isolated children end to end, in real git repositories: real LSP client -> coven-ls -> real
`claude` CLIs (whose Bash tool edits the files) -> scripted model.

Each child edits files with the CLI's own Bash tool, in its worktree; the tests check the
parent's working tree afterwards, what the parent model was told, and that nothing of the
user's git state moved.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from pygls.exceptions import JsonRpcException

from coven_ls.testing.scripted_model import HttpError, Reply, ScriptedModel, Text, ToolUse

from ..gitrepo import git, init_repo, make_repo
from ..harness import Coven, wait_until

# The server's git (worktrees, commits, merges) without the user's configuration.
pytestmark = pytest.mark.usefixtures("no_user_git_config")

PLAN = "Split the work"
SHARED = "".join(f"line {n}\n" for n in range(1, 21))


def user_repo(path: Path) -> Path:
    """A repository with a commit on `main`, an uncommitted edit, a staged file, an untracked
    file and a stash: the user's state that must not move."""
    files = {
        "shared.txt": SHARED,
        "keep.txt": "committed\n",
        "gone.txt": "to be deleted by a child\n",
    }
    make_repo(path, files)
    (path / "keep.txt").write_text("stashed edit\n")
    git(path, "stash", "-q")
    (path / "keep.txt").write_text("committed\nuncommitted edit of the user\n")
    (path / "staged.txt").write_text("staged by the user\n")
    git(path, "add", "staged.txt")
    (path / "untracked.txt").write_text("untracked file of the user\n")
    return path


def git_state(repo: Path) -> dict[str, str]:
    """Everything of the user's git state that coven-ls must never move."""
    git_dir = repo / ".git"
    return {
        "HEAD": (git_dir / "HEAD").read_text(),
        "head commit": git(repo, "rev-parse", "HEAD"),
        "index": hashlib.sha256((git_dir / "index").read_bytes()).hexdigest(),
        "stash": git(repo, "stash", "list", "--format=%H"),
        "branches": ";".join(
            line
            for line in git(repo, "for-each-ref", "--format=%(refname) %(objectname)").splitlines()
            if not line.startswith("refs/heads/coven/")
        ),
    }


def user_branches(repo: Path) -> list[str]:
    return git(repo, "branch", "--format=%(refname:short)").split()


def bash(command: str) -> ToolUse:
    return ToolUse("Bash", {"command": command})


def assigned(label: str) -> str:
    return f"You were assigned '{label}'"


def script_child(model: ScriptedModel, label: str, command: str, answer: str) -> None:
    """A child that runs one shell command in its folder, then answers."""
    marker = f"done:{label}"
    model.on(assigned(label), bash(f"{command} && echo '{marker}'"))
    model.on(marker, answer)


async def fork_in(
    coven: Coven, repo: Path, tasks: list[str], **fork_params: Any
) -> tuple[str, str]:
    """A session in `repo` that has had one turn, forked by hand into `tasks`."""
    coven.model.on(PLAN, "Ready to split.")
    sid = await coven.start(PLAN, cwd=str(repo))
    await coven.wait_status(sid, "idle")
    result = await coven.request("coven/fork", {"sessionId": sid, "tasks": tasks, **fork_params})
    return sid, result["forkId"]


async def results_text(coven: Coven, sid: str) -> str:
    prompt = await coven.wait_kind(sid, "prompt", origin="forkResults")
    return str(prompt["text"])


async def test_children_work_in_worktrees_and_their_changes_are_merged_back(
    coven_factory, model: ScriptedModel, tmp_path: Path
) -> None:
    repo = user_repo(tmp_path / "repo")
    before = git_state(repo)
    coven = await coven_factory()
    script_child(model, "Add a file", "printf 'hello\\n' > hello.txt && rm gone.txt", "Added.")
    script_child(model, "Edit the top", "sed -i 's/^line 1$/line ONE/' shared.txt", "Top done.")
    script_child(model, "Edit the end", "sed -i 's/^line 20$/line TWENTY/' shared.txt", "End done.")
    script_child(model, "Read only", "cat untracked.txt staged.txt", "Saw the user's files.")
    model.on("<fork-results>", "All merged.")

    sid, fork_id = await fork_in(
        coven, repo, ["Add a file", "Edit the top", "Edit the end", "Read only"]
    )
    message = await results_text(coven, sid)

    # Every child worked in a worktree of its own, outside the repository, on its own branch.
    [started] = coven.of(sid, "forkStarted")
    assert started["isolation"] == "worktree" and started["mergeMode"] == "auto"
    children = [c["sessionId"] for c in started["children"]]
    infos = {s["sessionId"]: s for s in (await coven.request("coven/listSessions", {}))["sessions"]}
    paths = set()
    for child in children:
        info = infos[child]
        tree = info["worktree"]
        assert info["isolation"] == "worktree" and info["cwd"] == tree["path"]
        assert not Path(tree["path"]).resolve().is_relative_to(repo.resolve())
        assert tree["branch"].startswith(f"coven/{fork_id}/")
        assert tree["base"] == started["base"] and tree["repository"] == str(repo)
        [agent] = coven.of(child, "agent")[:1]
        assert agent["cwd"] == tree["path"]
        paths.add(tree["path"])
    assert len(paths) == 4

    # The children saw what the parent sees: its uncommitted, staged and untracked files.
    read_only = children[3]
    [result] = [
        e for e in coven.of(read_only, "toolResult") if "untracked file" in str(e["content"])
    ]
    assert "staged by the user" in str(result["content"])

    # Every change is in the user's working tree: a new file, a deletion, both ends of one file.
    assert (repo / "hello.txt").read_text() == "hello\n"
    assert not (repo / "gone.txt").exists()
    assert (repo / "shared.txt").read_text() == SHARED.replace("line 1\n", "line ONE\n", 1).replace(
        "line 20\n", "line TWENTY\n"
    )
    # The user's own uncommitted work is still there, and nothing of their git state moved.
    assert (repo / "keep.txt").read_text() == "committed\nuncommitted edit of the user\n"
    assert (repo / "untracked.txt").exists() and (repo / "staged.txt").exists()
    assert git_state(repo) == before

    # The parent was told what each child changed.
    assert (
        '<task label="Add a file" merge="applied" files="gone.txt (+0 -1), hello.txt (+1 -0)">'
        in message
    )
    assert '<task label="Edit the top" merge="applied" files="shared.txt (+1 -1)">' in message
    assert '<task label="Read only" merge="unchanged">\nSaw the user\'s files.' in message
    [finished] = coven.of(sid, "forkFinished")
    assert [r["merge"] for r in finished["results"]] == [
        "applied",
        "applied",
        "applied",
        "unchanged",
    ]
    assert finished["diskBytes"] > 0
    # Each child said what it changed when it ended, then that it was applied.
    merges = [e["changes"]["merge"] for e in coven.of(children[1], "changes")]
    assert merges == ["pending", "applied"]


async def test_a_conflicting_child_is_not_applied_and_the_model_is_told_where_its_work_is(
    coven_factory, model: ScriptedModel, tmp_path: Path
) -> None:
    repo = user_repo(tmp_path / "repo")
    coven = await coven_factory()
    script_child(model, "First", "sed -i 's/^line 5$/line five (first)/' shared.txt", "One.")
    script_child(
        model,
        "Second",
        "sed -i 's/^line 5$/line five (second)/' shared.txt && printf 'x\\n' > second.txt",
        "Two.",
    )
    model.on("<fork-results>", "I will resolve it.")

    sid, fork_id = await fork_in(coven, repo, ["First", "Second"])
    message = await results_text(coven, sid)

    # The first child's edit is in; none of the second's is (not even its new file).
    assert "line five (first)\n" in (repo / "shared.txt").read_text()
    assert not (repo / "second.txt").exists()
    [finished] = coven.of(sid, "forkFinished")
    first, second = finished["results"]
    assert first["merge"] == "applied"
    assert second["merge"] == "conflict"
    assert [c["path"] for c in second["conflicts"]] == ["shared.txt"]
    branch = second["branch"]
    assert branch.startswith(f"coven/{fork_id}/2-second")
    assert f'<task label="Second" merge="conflict" conflicts="shared.txt" branch="{branch}">' in (
        message
    )
    assert "None of this task's changes were applied" in message
    # The loser's work is on its branch, for the model (or the user) to take.
    assert "line five (second)" in git(repo, "show", f"{branch}:shared.txt")
    assert git(repo, "show", f"{branch}:second.txt") == "x\n"


async def test_review_mode_waits_for_apply_and_discard(
    coven_factory, model: ScriptedModel, tmp_path: Path
) -> None:
    repo = user_repo(tmp_path / "repo")
    coven = await coven_factory(init_options={"mergeMode": "review"})
    script_child(model, "Wanted", "printf 'yes\\n' > wanted.txt", "Wanted done.")
    script_child(model, "Unwanted", "printf 'no\\n' > unwanted.txt", "Unwanted done.")
    model.on("<fork-results>", "Reviewed.")

    sid, _fork_id = await fork_in(coven, repo, ["Wanted", "Unwanted"])
    reviewing = await coven.wait_kind(sid, "forkReviewing")
    wanted, unwanted = reviewing["pending"]
    await coven.wait_status(sid, "reviewing")
    # Nothing is applied until the user says so.
    assert not (repo / "wanted.txt").exists() and not (repo / "unwanted.txt").exists()

    changes = await coven.request("coven/getChanges", {"sessionId": wanted, "path": "wanted.txt"})
    assert changes["changes"]["merge"] == "pending"
    assert [f["path"] for f in changes["changes"]["files"]] == ["wanted.txt"]
    assert changes["file"] == {
        "path": "wanted.txt",
        "oldPath": None,
        "binary": False,
        "base": None,
        "child": "yes\n",
    }
    with pytest.raises(JsonRpcException) as bad_path:
        await coven.request("coven/getChanges", {"sessionId": wanted, "path": "nope.txt"})
    assert "nope.txt" in str(bad_path.value)

    applied = await coven.request("coven/applyChanges", {"sessionId": wanted})
    assert applied["changes"]["merge"] == "applied"
    assert (repo / "wanted.txt").read_text() == "yes\n"
    with pytest.raises(JsonRpcException) as twice:
        await coven.request("coven/applyChanges", {"sessionId": wanted})
    assert "applied, not pending" in str(twice.value)
    # Still reviewing: one child waits.
    assert not coven.of(sid, "forkFinished")

    await coven.request("coven/discardChanges", {"sessionId": unwanted})
    message = await results_text(coven, sid)
    assert not (repo / "unwanted.txt").exists()
    assert 'merge="discarded"' in message and "the user discarded" in message
    assert '<task label="Wanted" merge="applied" files="wanted.txt (+1 -0)">' in message


async def test_deleting_the_parent_removes_worktrees_and_branches(
    coven_factory, model: ScriptedModel, tmp_path: Path
) -> None:
    repo = user_repo(tmp_path / "repo")
    coven = await coven_factory()
    script_child(model, "Edit", "printf 'e\\n' > e.txt", "Edited.")
    model.on("<fork-results>", "Done.")
    sid, _ = await fork_in(coven, repo, ["Edit"])
    await results_text(coven, sid)
    [started] = coven.of(sid, "forkStarted")
    child = started["children"][0]["sessionId"]
    [info] = [
        s
        for s in (await coven.request("coven/listSessions", {}))["sessions"]
        if s["sessionId"] == child
    ]
    tree = Path(info["worktree"]["path"])
    assert tree.is_dir() and any(b.startswith("coven/") for b in user_branches(repo))

    await coven.request("coven/deleteSession", {"sessionId": sid})

    assert not tree.exists()
    assert user_branches(repo) == ["main"]
    assert "coven/" not in git(repo, "worktree", "list")
    assert (repo / "e.txt").read_text() == "e\n"  # what was merged stays


async def test_a_child_that_writes_the_parents_files_by_path_is_redirected(
    coven_factory, model: ScriptedModel, tmp_path: Path
) -> None:
    repo = user_repo(tmp_path / "repo")
    # Unfenced: a fenced child's write is refused before it is asked about (test_fence_e2e.py).
    coven = await coven_factory(init_options={"childSandbox": "off"})
    target = repo / "stray.txt"  # new: the CLI's Write needs no Read of it first
    model.on(assigned("Stray"), ToolUse("Write", {"file_path": str(target), "content": "oops\n"}))
    model.on("Write ", "Understood, I will use my worktree.", times=1)
    model.on("<fork-results>", "Done.")

    sid, _ = await fork_in(coven, repo, ["Stray"])
    await results_text(coven, sid)

    assert not target.exists()  # the parent's folder was never written
    [started] = coven.of(sid, "forkStarted")
    child = started["children"][0]["sessionId"]
    [decision] = coven.of(child, "permissionDecision")
    assert decision["allow"] is False
    assert (
        "Write " in decision["message"]
        and str(target) not in decision["message"].split("Write ")[-1]
    )
    assert not coven.permission_requests  # refused by coven-ls, never asked of the user


async def test_a_killed_server_restarts_into_a_resumable_fork_with_its_worktrees(
    coven_factory, model: ScriptedModel, tmp_path: Path
) -> None:
    repo = user_repo(tmp_path / "repo")
    coven = await coven_factory(home="h")
    script_child(model, "Fast", "printf 'fast\\n' > fast.txt", "Fast done.")
    model.on(assigned("Slow"), "Slow done.", latency=30, times=1)
    sid, fork_id = await fork_in(coven, repo, ["Fast", "Slow"])
    fast_child = (await coven.wait_kind(sid, "forkStarted"))["children"][0]["sessionId"]
    await coven.wait_kind(fast_child, "changes")
    server = coven.client._server
    assert server is not None
    os.kill(server.pid, signal.SIGKILL)
    await asyncio.wait_for(server.wait(), 30)
    await wait_until(lambda: not coven.agent_pids(), 30, "the killed server's agents to die")

    model.on(assigned("Slow"), bash("printf 'slow\\n' > slow.txt && echo 'done:Slow'"))
    model.on("done:Slow", "Slow done now.")
    model.on("<fork-results>", "Both in.")
    again = await coven_factory(home="h")
    listed = (await again.request("coven/listSessions", {}))["sessions"]
    trees = [s["worktree"]["path"] for s in listed if s["worktree"]]
    assert len(trees) == 2 and all(Path(t).is_dir() for t in trees)
    # The fast child's work waited on its branch, not yet merged: the fork was cut off.
    assert not (repo / "fast.txt").exists()
    await again.request("coven/resumeFork", {"forkId": fork_id})
    message = await results_text(again, sid)
    assert (repo / "fast.txt").read_text() == "fast\n"
    assert (repo / "slow.txt").read_text() == "slow\n"
    assert message.count('merge="applied"') == 2


async def test_a_client_without_a_review_ui_is_asked_per_child(
    coven_factory, model: ScriptedModel, tmp_path: Path
) -> None:
    repo = user_repo(tmp_path / "repo")
    coven = await coven_factory(init_options={"mergeMode": "review"}, custom_review=False)
    coven.message_answer = lambda request: (
        "Apply" if "'Keep me'" in request["message"] else "Discard"
    )
    script_child(model, "Keep me", "printf 'k\\n' > kept.txt", "Kept.")
    script_child(model, "Drop me", "printf 'd\\n' > dropped.txt", "Dropped.")
    model.on("<fork-results>", "Done.")

    sid, _ = await fork_in(coven, repo, ["Keep me", "Drop me"])
    message = await results_text(coven, sid)

    questions = [r for r in coven.message_requests if r["actions"] == ["Apply", "Discard"]]
    assert len(questions) == 2
    assert "changed 1 file (+1 −0): kept.txt" in questions[0]["message"]
    assert (repo / "kept.txt").exists() and not (repo / "dropped.txt").exists()
    assert '<task label="Keep me" merge="applied"' in message
    assert '<task label="Drop me" merge="discarded"' in message


async def test_the_merge_takes_the_working_tree_as_it_is_when_the_fork_ends(
    coven_factory, model: ScriptedModel, tmp_path: Path
) -> None:
    """The user edits a file while the children run: a child's edit elsewhere in it merges with
    theirs; a child's edit of the same line is a conflict, and the user's edit is kept."""
    repo = user_repo(tmp_path / "repo")
    coven = await coven_factory()
    script_child(model, "Far", "sed -i 's/^line 18$/line 18 (child)/' shared.txt", "Far done.")
    script_child(model, "Near", "sed -i 's/^line 3$/line 3 (child)/' shared.txt", "Near done.")
    model.on("<fork-results>", "Done.")
    gate = threading.Event()  # the model's answer to the first child waits for the user's edit
    model.on("done:Far", lambda _request: _wait_reply(gate, "Far done."))

    sid, _ = await fork_in(coven, repo, ["Far", "Near"])
    started = await coven.wait_kind(sid, "forkStarted")
    near = started["children"][1]["sessionId"]
    await coven.wait_kind(near, "changes")
    # The user saves an edit of their own while the first child is still at work.
    text = (repo / "shared.txt").read_text()
    (repo / "shared.txt").write_text(text.replace("line 3\n", "line 3 (user)\n"))
    gate.set()
    message = await results_text(coven, sid)

    merged = (repo / "shared.txt").read_text()
    assert "line 18 (child)\n" in merged and "line 3 (user)\n" in merged
    assert "line 3 (child)" not in merged
    assert '<task label="Far" merge="applied"' in message
    assert '<task label="Near" merge="conflict" conflicts="shared.txt"' in message


def _wait_reply(gate: threading.Event, text: str) -> Reply:
    """Runs in the scripted model's request thread: the reply goes once the gate opens."""
    gate.wait(60)
    return Reply([Text(text)])


@pytest.mark.parametrize(
    ("setup", "shared_because"),
    [
        ("not a repository", "not a git repository"),
        ("no commits", "the repository has no commits yet"),
        ("detached HEAD", None),
    ],
)
async def test_unusual_folders(
    coven_factory, model: ScriptedModel, tmp_path: Path, setup: str, shared_because: str | None
) -> None:
    """Outside a usable repository the children share the parent's folder, and say why; a
    detached HEAD is fine (and stays detached)."""
    folder = tmp_path / "folder"
    if setup == "detached HEAD":
        user_repo(folder)
        git(folder, "checkout", "-q", "--detach")
    else:
        folder.mkdir()
        if setup == "no commits":
            init_repo(folder)
    coven = await coven_factory()
    script_child(model, "Write", "printf 'w\\n' > w.txt", "Written.")
    model.on("<fork-results>", "Done.")
    sid, _ = await fork_in(coven, folder, ["Write"])
    message = await results_text(coven, sid)

    [started] = coven.of(sid, "forkStarted")
    child = started["children"][0]["sessionId"]
    [info] = [
        s
        for s in (await coven.request("coven/listSessions", {}))["sessions"]
        if s["sessionId"] == child
    ]
    if shared_because is not None:
        assert (started["isolation"], started["isolationReason"]) == ("shared", shared_because)
        assert (info["isolation"], info["isolationReason"]) == ("shared", shared_because)
        assert info["worktree"] is None and info["cwd"] == str(folder)
        assert 'merge="' not in message
    else:
        assert started["isolation"] == "worktree" and info["cwd"] != str(folder)
        assert '<task label="Write" merge="applied" files="w.txt (+1 -0)">' in message
        assert git(folder, "rev-parse", "--abbrev-ref", "HEAD").strip() == "HEAD"
    assert (folder / "w.txt").read_text() == "w\n"


async def test_a_child_that_fails_half_way_keeps_its_work_on_its_branch(
    coven_factory, model: ScriptedModel, tmp_path: Path
) -> None:
    repo = user_repo(tmp_path / "repo")
    coven = await coven_factory()
    model.on(assigned("Flaky"), bash("printf 'half\\n' > half.txt && echo 'done:Flaky'"))
    model.on("done:Flaky", error=HttpError(status=500, message="mid-task", should_retry=False))
    model.on("<fork-results>", "I will retry it.")

    sid, _ = await fork_in(coven, repo, ["Flaky"])
    message = await results_text(coven, sid)

    assert not (repo / "half.txt").exists()
    [finished] = coven.of(sid, "forkFinished")
    [result] = finished["results"]
    assert result["ok"] is False and result["merge"] == "kept"
    assert git(repo, "show", f"{result['branch']}:half.txt") == "half\n"
    assert 'merge="kept" files="half.txt (+1 -0)"' in message


async def test_a_nested_forks_changes_come_back_through_its_parent_child(
    coven_factory, model: ScriptedModel, tmp_path: Path
) -> None:
    """A child forks in its turn (maxDepth 2): its children get worktrees of its worktree, are
    merged into it, and its own changes (theirs included) into the user's tree."""
    repo = user_repo(tmp_path / "repo")
    coven = await coven_factory(init_options={"forkMode": "auto", "maxDepth": 2})
    model.on(assigned("Outer"), "Splitting again.\n<fork>\n- Inner\n</fork>")
    script_child(model, "Inner", "printf 'inner\\n' > inner.txt", "Inner done.")
    model.on(
        lambda r: r.last_user_text.count("<fork-results>") and "Inner" in r.last_user_text,
        "Outer done.",
        times=1,
    )
    model.on("<fork-results>", "All done.")

    sid, _ = await fork_in(coven, repo, ["Outer"])
    message = await results_text(coven, sid)

    assert (repo / "inner.txt").read_text() == "inner\n"
    assert '<task label="Outer" merge="applied" files="inner.txt (+1 -0)">' in message
    listed = (await coven.request("coven/listSessions", {}))["sessions"]
    [inner] = [s for s in listed if s["label"] == "Inner"]
    [outer] = [s for s in listed if s["label"] == "Outer"]
    assert inner["worktree"]["repository"] == outer["worktree"]["path"]


async def test_a_fork_under_review_is_still_under_review_after_a_restart(
    coven_factory, model: ScriptedModel, tmp_path: Path
) -> None:
    repo = user_repo(tmp_path / "repo")
    options = {"mergeMode": "review"}
    coven = await coven_factory(home="h", init_options=options)
    script_child(model, "Edit", "printf 'e\\n' > e.txt", "Edited.")
    model.on("<fork-results>", "Applied after the restart.")
    sid, _ = await fork_in(coven, repo, ["Edit"])
    [child] = (await coven.wait_kind(sid, "forkReviewing"))["pending"]
    await coven.wait_status(sid, "reviewing")
    await coven.stop()

    again = await coven_factory(home="h", init_options=options)
    listed = {
        s["sessionId"]: s for s in (await again.request("coven/listSessions", {}))["sessions"]
    }
    assert listed[sid]["status"] == "reviewing"
    assert listed[child]["changes"]["merge"] == "pending"
    await again.request("coven/applyChanges", {"sessionId": child})
    message = await results_text(again, sid)
    assert '<task label="Edit" merge="applied" files="e.txt (+1 -0)">' in message
    assert (repo / "e.txt").read_text() == "e\n"
