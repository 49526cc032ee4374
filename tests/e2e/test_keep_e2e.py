"""Nothing lost, end to end in real git repositories: real LSP client -> coven-ls -> real `claude`
CLIs -> scripted model. Work a fork child did that never reached the parent's working tree
outlives `coven/deleteSession` (unless `discardWork`) and restarts; a child's later work comes
back through `coven/applyChanges`; `coven-ls prune` removes only what no session needs; a
child sees the parent's submodules; a standard-LSP editor is asked again about changes still in
review after a restart.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from coven_ls.testing.scripted_model import ScriptedModel

from ..gitrepo import git, make_repo
from ..harness import wait_until
from .test_isolation_e2e import (
    bash,
    fork_in,
    results_text,
    script_child,
    user_branches,
    user_repo,
)

# The server's git (worktrees, commits, merges) without the user's configuration.
pytestmark = pytest.mark.usefixtures("no_user_git_config")


def coven_branches(repo: Path) -> list[str]:
    return [b for b in user_branches(repo) if b.startswith("coven/")]


def prune(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`coven-ls prune` run from the repository, on the test's state folder (XDG_STATE_HOME)."""
    return subprocess.run(
        [sys.executable, "-m", "coven_ls", "prune", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )


def conflicting_children(model: ScriptedModel) -> None:
    script_child(model, "First", "sed -i 's/^line 5$/line five (first)/' shared.txt", "One.")
    script_child(
        model,
        "Second",
        "sed -i 's/^line 5$/line five (second)/' shared.txt && printf 'x\\n' > second.txt",
        "Two.",
    )
    model.on("<fork-results>", "I will resolve it.")


def children_of(coven: Any, sid: str) -> list[str]:
    [started] = coven.of(sid, "forkStarted")
    return [c["sessionId"] for c in started["children"]]


async def test_deleting_keeps_a_conflicting_childs_branch_across_restarts_until_pruned(
    coven_factory, model: ScriptedModel, tmp_path: Path
) -> None:
    repo = user_repo(tmp_path / "repo")
    conflicting_children(model)
    coven = await coven_factory(home="h")
    sid, fork_id = await fork_in(coven, repo, ["First", "Second"])
    await results_text(coven, sid)
    _first, second = children_of(coven, sid)
    [info] = [
        s
        for s in (await coven.request("coven/listSessions", {}))["sessions"]
        if s["sessionId"] == second
    ]
    branch, tree = info["worktree"]["branch"], Path(info["worktree"]["path"])

    answer = await coven.request("coven/deleteSession", {"sessionId": second})

    assert answer["deletedSessionIds"] == [second]
    [kept] = answer["keptBranches"]
    assert kept["branch"] == branch and kept["sessionId"] == second and kept["label"] == "Second"
    assert kept["reason"] == "changes that conflicted with the working tree"
    assert kept["repository"] == str(repo)
    assert git(repo, "rev-parse", branch).strip() == kept["commit"]
    assert git(repo, "show", f"{kept['commit']}:second.txt") == "x\n"
    assert not tree.exists() and str(tree) not in git(repo, "worktree", "list")

    # A restart (whose fork row still plans that worktree) leaves the branch alone.
    await coven.stop()
    again = await coven_factory(home="h")
    await again.request("coven/listSessions", {})
    assert branch in coven_branches(repo)

    listed = prune(repo, "--dry-run")
    assert listed.returncode == 0, listed.stderr
    assert f"kept         branch {branch}: kept when its session was deleted" in listed.stdout
    assert "Removed" not in listed.stdout
    # The first child's session still needs its branch: not even listed.
    first_branch = f"coven/{fork_id}/1-first"
    assert first_branch in coven_branches(repo) and first_branch not in listed.stdout

    kept_run = prune(repo)
    assert kept_run.returncode == 0 and branch in coven_branches(repo)

    discarded = prune(repo, "--discard-work", "--json")
    assert discarded.returncode == 0, discarded.stderr
    report = json.loads(discarded.stdout)
    assert [(i["branch"], i["action"], i["unapplied"]) for i in report["items"]] == [
        (branch, "remove", True)
    ]
    assert coven_branches(repo) == [first_branch]
    assert prune(repo, "--dry-run").stdout.startswith("Nothing to prune")


async def test_discard_work_deletes_the_branches_deleting_would_keep(
    coven_factory, model: ScriptedModel, tmp_path: Path
) -> None:
    repo = user_repo(tmp_path / "repo")
    coven = await coven_factory(init_options={"mergeMode": "review"})
    script_child(model, "Keep", "printf 'k\\n' > k.txt", "Kept.")
    script_child(model, "Drop", "printf 'd\\n' > d.txt", "Dropped.")
    sid, fork_id = await fork_in(coven, repo, ["Keep", "Drop"])
    await coven.wait_kind(sid, "forkReviewing")
    keep, _drop = children_of(coven, sid)

    one = await coven.request("coven/deleteSession", {"sessionId": keep})
    assert [(k["branch"], k["reason"]) for k in one["keptBranches"]] == [
        (f"coven/{fork_id}/1-keep", "changes waiting for review")
    ]
    rest = await coven.request("coven/deleteSession", {"sessionId": sid, "discardWork": True})

    assert rest["keptBranches"] == []
    assert coven_branches(repo) == [f"coven/{fork_id}/1-keep"]
    assert "coven/" not in git(repo, "worktree", "list")
    assert not (repo / "k.txt").exists() and not (repo / "d.txt").exists()


async def test_a_childs_follow_up_comes_back_through_apply_changes(
    coven_factory, model: ScriptedModel, tmp_path: Path
) -> None:
    repo = user_repo(tmp_path / "repo")
    coven = await coven_factory()
    script_child(model, "Edit", "printf 'e\\n' > e.txt", "Edited.")
    model.on("<fork-results>", "Done.")
    model.on("Also add f", bash("printf 'f\\n' > f.txt && echo done:f"))
    model.on("done:f", "Added f.")
    sid, _ = await fork_in(coven, repo, ["Edit"])
    await results_text(coven, sid)
    [child] = children_of(coven, sid)
    applied = await coven.wait_for(
        lambda e: (
            e["sessionId"] == child
            and e["kind"] == "changes"
            and e["changes"]["merge"] == "applied"
        ),
        what="the child's changes, applied",
    )
    (repo / "e.txt").write_text("e, edited by the user since\n")

    await coven.request("coven/sendMessage", {"sessionId": child, "text": "Also add f"})
    later = await coven.wait_for(
        lambda e: (
            e["sessionId"] == child
            and e["kind"] == "changes"
            and e["seq"] > applied["seq"]
            and e["changes"]["merge"] == "pending"
        ),
        what="the child's later work, pending",
    )
    # Only the later work: e.txt was applied already.
    assert [f["path"] for f in later["changes"]["files"]] == ["f.txt"]
    assert not (repo / "f.txt").exists()
    shown = await coven.request("coven/getChanges", {"sessionId": child, "path": "f.txt"})
    assert shown["file"]["base"] is None and shown["file"]["child"] == "f\n"

    answer = await coven.request("coven/applyChanges", {"sessionId": child})

    assert answer["changes"]["merge"] == "applied"
    assert (repo / "f.txt").read_text() == "f\n"
    assert (repo / "e.txt").read_text() == "e, edited by the user since\n"
    # Applied: deleting keeps nothing.
    deleted = await coven.request("coven/deleteSession", {"sessionId": sid})
    assert deleted["keptBranches"] == [] and coven_branches(repo) == []


async def test_prune_removes_what_no_session_needs_and_keeps_unapplied_work(
    tmp_path: Path,
) -> None:
    repo = user_repo(tmp_path / "repo")
    state = Path(os.environ["XDG_STATE_HOME"]) / "coven-ls" / "worktrees"
    # A branch a killed server left (no work on it), and a worktree with work no one applied.
    git(repo, "branch", "coven/f-gone/1-empty", "HEAD")
    work_tree = state / "f-gone" / "2-work"
    git(repo, "worktree", "add", "-q", "-b", "coven/f-gone/2-work", str(work_tree), "HEAD")
    (work_tree / "w.txt").write_text("work\n")
    git(work_tree, "add", "w.txt")
    git(work_tree, "commit", "-q", "-m", "work")

    dry = prune(repo, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would remove branch coven/f-gone/1-empty: no session needs it" in dry.stdout
    assert "kept         branch coven/f-gone/2-work" in dry.stdout
    assert "Nothing was changed (--dry-run)." in dry.stdout
    assert coven_branches(repo) == ["coven/f-gone/1-empty", "coven/f-gone/2-work"]

    done = prune(repo)
    assert done.returncode == 0, done.stderr
    assert coven_branches(repo) == ["coven/f-gone/2-work"] and work_tree.is_dir()

    prune(repo, "--discard-work")
    assert coven_branches(repo) == [] and not work_tree.exists()
    assert "coven/" not in git(repo, "worktree", "list")


async def test_a_child_sees_the_parents_submodules(
    coven_factory, model: ScriptedModel, tmp_path: Path
) -> None:
    library = make_repo(tmp_path / "library", {"lib.txt": "from the submodule\n"}, message="lib")
    repo = user_repo(tmp_path / "repo")
    git(
        repo,
        "-c",
        "protocol.file.allow=always",
        "submodule",
        "add",
        "-q",
        str(library),
        "vendor/lib",
    )
    git(repo, "commit", "-q", "-m", "a submodule")
    library_head = git(library, "rev-parse", "HEAD").strip()
    # The library moves on: the child must get the parent's commit, offline, from the parent.
    (library / "lib.txt").write_text("newer\n")
    git(library, "commit", "-q", "-am", "newer")
    coven = await coven_factory()
    script_child(model, "Read", "cat vendor/lib/lib.txt > seen.txt", "Read it.")
    model.on("<fork-results>", "Done.")

    sid, _ = await fork_in(coven, repo, ["Read"])
    await results_text(coven, sid)

    assert (repo / "seen.txt").read_text() == "from the submodule\n"
    [child] = children_of(coven, sid)
    listed = (await coven.request("coven/listSessions", {}))["sessions"]
    [tree] = [s["worktree"]["path"] for s in listed if s["sessionId"] == child]
    assert git(Path(tree) / "vendor/lib", "rev-parse", "HEAD").strip() == library_head
    await coven.request("coven/deleteSession", {"sessionId": sid})
    assert not Path(tree).exists()
    assert str(tree) not in git(repo / "vendor/lib", "worktree", "list")


async def test_a_standard_lsp_editor_is_asked_again_after_a_restart(
    coven_factory, model: ScriptedModel, tmp_path: Path
) -> None:
    repo = user_repo(tmp_path / "repo")
    options = {"mergeMode": "review"}
    coven = await coven_factory(home="h", init_options=options, custom_review=False)
    script_child(model, "Edit", "printf 'e\\n' > e.txt", "Edited.")
    model.on("<fork-results>", "Applied after the restart.")
    sid, _ = await fork_in(coven, repo, ["Edit"])
    await coven.wait_kind(sid, "forkReviewing")
    # The user dismisses the question (no answer), then the server stops.
    await wait_until(lambda: bool(coven.message_requests), 60, "the review question")
    await coven.stop()

    again = await coven_factory(home="h", init_options=options, custom_review=False)
    again.message_answer = lambda request: "Apply" if "'Edit'" in request["message"] else None
    message = await results_text(again, sid)

    [question] = [r for r in again.message_requests if r["actions"] == ["Apply", "Discard"]]
    assert "Fork child 'Edit' changed 1 file (+1 −0): e.txt" in question["message"]
    assert '<task label="Edit" merge="applied" files="e.txt (+1 -0)">' in message
    assert (repo / "e.txt").read_text() == "e\n"
