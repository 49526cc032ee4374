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
from ..harness import Coven, wait_until
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
git update-ref -d refs/heads/other || echo REFUSED9
git branch -f other "$(git -c user.name=x -c user.email=x@y commit-tree -m x 'HEAD^{tree}')" || echo REFUSED10
git tag evil || echo REFUSED11
echo evil > "$p/.git/refs/tags/v1" || echo REFUSED12
echo evil > "$p/.git/packed-refs" || echo REFUSED13
echo evil >> "$p/.git/logs/refs/heads/main" || echo REFUSED14
rm "$p"/.git/objects/pack/*.pack || echo REFUSED15
s=$(git for-each-ref --format='%(refname)' refs/heads/coven/ | grep -v "^$(git symbolic-ref HEAD)$")
test -n "$s" && git update-ref -d "$s" || echo REFUSED16
test -n "$s" && rm "$p/.git/$s" || echo REFUSED17
echo mine > mine.txt && git add mine.txt && git -c user.name=c -c user.email=c@d commit -q -m mine && echo OWNCOMMIT
echo t > "$TMPDIR/t" && echo TMPOK:$TMPDIR
"""  # noqa: E501
UNSANDBOXED = 'p=$(cd "$(git rev-parse --git-common-dir)/.." && pwd); echo OUT > "$p/escaped9.txt"'


def repo_files(repo: Path) -> dict[str, str]:
    """The user's checkout by content: every file of its working tree, and its git folder's
    HEAD, index, config, packed-refs, refs, reflogs and packs (not coven-ls's own branches, nor
    the loose objects the child's commits add)."""
    out = {}
    for path in sorted(repo.rglob("*")):
        if path.is_file() and ".git" not in path.relative_to(repo).parts:
            out[str(path.relative_to(repo))] = hashlib.sha256(path.read_bytes()).hexdigest()
    git_dir = repo / ".git"
    for name in ("HEAD", "index", "config", "packed-refs"):
        path = git_dir / name
        if path.exists():
            out[f".git/{name}"] = hashlib.sha256(path.read_bytes()).hexdigest()
    for folder in ("refs", "logs", "objects/pack"):
        for path in sorted((git_dir / folder).rglob("*")):
            name = f".git/{path.relative_to(git_dir)}"
            if path.is_file() and "/coven/" not in name:
                out[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def entries(repo: Path) -> dict[str, list[str]]:
    """What the checkout's top folder and its git folder's (and their info folders) list: the
    sandbox's empty mount points would show here (coven-ls's own worktrees aside)."""
    out = {}
    for folder in (".", ".git", ".git/info", ".git/objects/info"):
        names = set(os.listdir(repo / folder)) - {"worktrees", "mine.txt"}
        out[folder] = sorted(names)
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
    # Another branch, a tag and a pack (most of a real repository's history is in packs).
    git(repo, "branch", "other")
    git(repo, "tag", "v1")
    git(repo, "repack", "-q", "-d")
    before, files_before, listed = git_state(repo), repo_files(repo), entries(repo)
    assert ".git/refs/heads/other" in files_before and ".git/refs/tags/v1" in files_before
    assert any(name.endswith(".pack") for name in files_before)
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
    model.on(assigned("Sibling"), "Nothing to do.")
    model.on("<fork-results>", "Merged.")

    sid, _ = await fork_in(coven, repo, ["Escape", "Sibling"])
    message = await results_text(coven, sid)

    [started] = coven.of(sid, "forkStarted")
    ref, sibling = started["children"]
    fenced = {"fenced": True, "by": "claude", "reason": None, "network": "full"}
    assert ref["sandbox"] == fenced
    child = ref["sessionId"]
    infos = {s["sessionId"]: s for s in (await coven.request("coven/listSessions", {}))["sessions"]}
    assert infos[child]["sandbox"] == fenced

    # Nothing of the user's checkout moved: files, HEAD, index, branches, tags, reflogs, packs,
    # config, stash.
    assert git_state(repo) == before
    after = repo_files(repo)
    assert {k: v for k, v in after.items() if k != "mine.txt"} == files_before
    assert not list(repo.glob("escaped*")) and not (repo / "stray.txt").exists()
    # The empty stubs the sandbox made there (`remotes/`, `glab-cli/`, `.claude/.cc-writes/`,
    # ...) went when the child ended.
    assert entries(repo) == listed

    # Each attempt was refused where the child saw it.
    seen = results(coven, child)
    escapes = str(seen["toolu_escapes"]["content"])
    said = escapes.splitlines()
    for n in range(1, 18):
        assert f"REFUSED{n}" in said, (n, escapes)
    assert "Read-only file system" in escapes
    assert "Device or resource busy" in escapes  # the sibling's ref, mounted over itself
    assert "OWNCOMMIT" in escapes
    assert "/coven-" in escapes.split("TMPOK:")[1]  # its own temporary folder
    assert seen["toolu_unsandboxed"]["isError"] is True
    assert seen["toolu_w"]["isError"] is True
    assert "Denied by coven-ls's fence" in str(seen["toolu_w"]["content"])
    assert seen["toolu_e"]["isError"] is True

    # Its own commit came back.
    assert (repo / "mine.txt").read_text() == "mine\n"
    assert '<task label="Escape" merge="applied" files="mine.txt (+1 -0)">' in message
    # Its sibling's branch, which it could not move nor remove, brought the sibling's answer.
    assert '<task label="Sibling"' in message and "Nothing to do." in message
    infos = {s["sessionId"]: s for s in (await coven.request("coven/listSessions", {}))["sessions"]}
    assert infos[sibling["sessionId"]]["status"] != "failed"
    assert "evil" not in git(repo, "config", "--list", "--local")


# A command that holds until the test says go (or a minute has passed).
HOLD = (
    "touch started.flag; i=0; while [ ! -e go.flag ] && [ $i -lt 600 ]; do sleep 0.1; "
    "i=$((i+1)); done; rm -f started.flag go.flag; git config --get user.seen; echo HELD"
)


@needs_bwrap
async def test_the_users_own_git_config_works_while_a_fenced_childs_command_runs(
    coven_factory, model: ScriptedModel, tmp_path: Path
) -> None:
    """Claude Code's sandbox masks a missing `.git/config.lock` with `/dev/null`, which made an
    empty one in the user's git folder for as long as a child's command ran: the user's own
    `git config` failed meanwhile ("could not lock config file"). With the git folder read-only
    to the child, no such mask is needed, and none is made."""
    repo = user_repo(tmp_path / "repo")
    coven = await coven_factory()
    model.on(assigned("Hold"), ToolUse("Bash", {"command": HOLD}, id="toolu_hold"))
    model.on("HELD", "Held.")
    model.on("<fork-results>", "Done.")
    sid, _ = await fork_in(coven, repo, ["Hold"])
    [child] = (await coven.wait_kind(sid, "forkStarted"))["children"]
    infos = (await coven.request("coven/listSessions", {}))["sessions"]
    [tree] = [Path(s["worktree"]["path"]) for s in infos if s["sessionId"] == child["sessionId"]]
    await wait_until(lambda: (tree / "started.flag").exists(), 120, "the child's command")

    for n in range(20):  # the child's command runs all along
        git(repo, "config", "user.seen", str(n))
        assert not (repo / ".git" / "config.lock").exists()
    (tree / "go.flag").touch()

    await results_text(coven, sid)
    [held] = [e for e in coven.of(child["sessionId"], "toolResult")]
    assert "HELD" in str(held["content"]) and not (tree / "started.flag").exists()
    assert "19" in str(held["content"])  # the child reads the configuration it cannot write
    assert git(repo, "config", "--get", "user.seen").strip() == "19"


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
