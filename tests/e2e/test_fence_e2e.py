"""Worktree children fenced by Claude Code's own sandbox (`childSandbox`, issue #31), end to end:
real LSP client -> coven-ls -> real `claude` CLI in bubblewrap -> scripted model.

One child tries every way out of its worktree in one scripted turn (paths made at run time, so
that coven-ls's reading of the command does not catch them first: the fence must): the user's
checkout and git state stay as they were, each attempt is refused where the child sees it, and
the child's own commit is merged back.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from coven_ls.testing.scripted_model import ScriptedModel, ToolUse

from ..gitrepo import git
from ..harness import Coven
from .test_isolation_e2e import assigned, fork_in, git_state, results_text, user_repo

pytestmark = pytest.mark.usefixtures("no_user_git_config")

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("socat") is None,
    reason="Claude Code's sandbox needs bubblewrap and socat (apt-get install bubblewrap socat)",
)

# Each attempt says REFUSED<n> when it fails; none may succeed. `p` is the user's checkout, found
# at run time (`git rev-parse`), which no reading of the command line can follow.
ESCAPES = r"""p=$(cd "$(git rev-parse --git-common-dir)/.." && pwd)
echo OUT > "$p/escaped1.txt" || echo REFUSED1
git -C "$p" -c user.name=x -c user.email=x@y commit --allow-empty -q -m escaped || echo REFUSED2
python3 -c 'import subprocess, sys; d = subprocess.check_output(["git", "rev-parse", "--git-common-dir"]).decode().strip(); open(d + "/../escaped3.txt", "w").write("x")' || echo REFUSED3
printf 'cd "$1" && touch escaped4.txt\n' > "$TMPDIR/go.sh" && sh "$TMPDIR/go.sh" "$p" || echo REFUSED4
ln -s "$p" "$TMPDIR/out" && echo x > "$TMPDIR/out/escaped5.txt" || echo REFUSED5
git config --file "$p/.git/config" evil.x 1 || echo REFUSED6
echo 'ref: refs/heads/evil' > "$p/.git/HEAD" || echo REFUSED7
echo evil > "$p/.git/refs/heads/main" || echo REFUSED8
echo mine > mine.txt && git add mine.txt && git -c user.name=c -c user.email=c@d commit -q -m mine && echo OWNCOMMIT
echo t > "$TMPDIR/t" && echo TMPOK:$TMPDIR
"""  # noqa: E501
UNSANDBOXED = 'p=$(cd "$(git rev-parse --git-common-dir)/.." && pwd); echo OUT > "$p/escaped9.txt"'


def repo_files(repo: Path) -> dict[str, str]:
    """The user's checkout by content: every file of its working tree, and its git folder's
    HEAD, index, config, branch and stash refs (coven-ls's own refs and worktrees are there too,
    and the objects the child's commits add)."""
    out = {}
    for path in sorted(repo.rglob("*")):
        if path.is_file() and ".git" not in path.relative_to(repo).parts:
            out[str(path.relative_to(repo))] = hashlib.sha256(path.read_bytes()).hexdigest()
    for name in ("HEAD", "index", "config", "refs/heads/main", "refs/stash", "packed-refs"):
        path = repo / ".git" / name
        if path.exists():
            out[f".git/{name}"] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def results(coven: Coven, child: str) -> dict[str, Any]:
    """The child's tool results by tool name order: Bash (the escapes), Bash (unsandboxed),
    Write, Edit."""
    return {str(e.get("toolUseId")): e for e in coven.of(child, "toolResult")}


@needs_bwrap
@pytest.mark.parametrize("mode", ["default", "acceptEdits", "bypassPermissions"])
async def test_a_fenced_child_cannot_write_the_users_checkout_but_commits_its_own_work(
    coven_factory, model: ScriptedModel, tmp_path: Path, mode: str
) -> None:
    repo = user_repo(tmp_path / "repo")
    before, files_before = git_state(repo), repo_files(repo)
    # As root (CI) the CLI refuses bypassPermissions unless told it runs in a sandbox.
    env = {"IS_SANDBOX": "1"} if os.geteuid() == 0 else {}
    coven = await coven_factory(init_options={"permissionMode": mode}, extra_env=env)
    model.on(assigned("Escape"), ToolUse("Bash", {"command": ESCAPES}, id="toolu_escapes"))
    model.on(
        "TMPOK",
        ToolUse(
            "Bash",
            {"command": UNSANDBOXED, "dangerouslyDisableSandbox": True},
            id="toolu_unsandboxed",
        ),
        ToolUse("Write", {"file_path": str(repo / "stray.txt"), "content": "x\n"}, id="toolu_w"),
        ToolUse(
            "Edit",
            {"file_path": str(repo / "keep.txt"), "old_string": "committed", "new_string": "X"},
            id="toolu_e",
        ),
        times=1,
    )
    model.on("<fork-results>", "Merged.")

    sid, _ = await fork_in(coven, repo, ["Escape"])
    message = await results_text(coven, sid)

    [started] = coven.of(sid, "forkStarted")
    [ref] = started["children"]
    fenced = {"fenced": True, "by": "claude", "reason": None, "network": "full"}
    assert ref["sandbox"] == fenced
    child = ref["sessionId"]
    infos = {s["sessionId"]: s for s in (await coven.request("coven/listSessions", {}))["sessions"]}
    assert infos[child]["sandbox"] == fenced

    # Nothing of the user's checkout moved: files, HEAD, index, branches, config, stash.
    assert git_state(repo) == before
    after = repo_files(repo)
    assert {k: v for k, v in after.items() if k != "mine.txt"} == files_before
    assert not list(repo.glob("escaped*")) and not (repo / "stray.txt").exists()

    # Each attempt was refused where the child saw it.
    seen = results(coven, child)
    escapes = str(seen["toolu_escapes"]["content"])
    for n in range(1, 9):
        assert f"REFUSED{n}" in escapes, (n, escapes)
    assert "Read-only file system" in escapes
    assert "OWNCOMMIT" in escapes
    assert "/coven-" in escapes.split("TMPOK:")[1]  # its own temporary folder
    assert seen["toolu_unsandboxed"]["isError"] is True
    assert seen["toolu_w"]["isError"] is True
    assert "Denied by coven-ls's fence" in str(seen["toolu_w"]["content"])
    assert seen["toolu_e"]["isError"] is True

    # Its own commit came back.
    assert (repo / "mine.txt").read_text() == "mine\n"
    assert '<task label="Escape" merge="applied" files="mine.txt (+1 -0)">' in message
    assert "evil" not in git(repo, "config", "--list", "--local")


@pytest.mark.parametrize("choice", ["required", "auto"])
async def test_without_bubblewrap_required_fails_the_fork_and_auto_says_unfenced(
    coven_factory, model: ScriptedModel, tmp_path: Path, path_without_bwrap: str, choice: str
) -> None:
    repo = user_repo(tmp_path / "repo")
    coven = await coven_factory(
        init_options={"childSandbox": choice}, extra_env={"PATH": path_without_bwrap}
    )
    model.on(assigned("Work"), "Worked.")
    model.on("<fork-results>", "Done.")
    sid, fork_id = await fork_in(coven, repo, ["Work"])
    if choice == "required":
        rejected = await coven.wait_kind(sid, "forkRejected")
        assert rejected["forkId"] == fork_id
        assert "childSandbox is required" in rejected["reason"]
        assert "bubblewrap (bwrap) not found" in rejected["reason"]
        assert not coven.of(sid, "forkStarted")
        assert len(git(repo, "worktree", "list").splitlines()) == 1  # no worktree was made
        return
    await results_text(coven, sid)
    [started] = coven.of(sid, "forkStarted")
    sandbox = started["children"][0]["sandbox"]
    assert sandbox["fenced"] is False and sandbox["by"] is None
    assert "bubblewrap (bwrap) not found on PATH" in sandbox["reason"]
    assert "apt install bubblewrap socat" in sandbox["reason"]
