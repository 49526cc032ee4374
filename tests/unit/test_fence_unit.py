"""Fenced fork children (issue #31): how a fork decides (core/fork/fence.py), what a Claude child
is started with (agents/claude/fence.py), the parent's git files it must not write, the devices
a sandbox leaves behind kept out of its commit, and doctor's finding."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
import pytest

from coven_ls.agents.claude import fence as claude_fence
from coven_ls.core.agent import AgentSpec, Fence
from coven_ls.core.fork.fence import FenceRequired, SandboxSupport, decide
from coven_ls.core.workspace import sandbox_stubs
from coven_ls.core.workspace.commits import commit_all
from coven_ls.core.workspace.protected import git_fence, protected_git_files
from coven_ls.protocol.types import Sandbox
from coven_ls.testing.scripted_model import ScriptedModel

from ..e2e.conftest import path_without
from ..gitrepo import git, make_repo
from .test_doctor import doctor

CLAUDE = SandboxSupport(by="claude")
CODEX = SandboxSupport(by="codex", always_on=True, unfenced_modes=("bypassPermissions",))
NO_BWRAP = SandboxSupport(by="claude", problem="bubblewrap (bwrap) not found on PATH")


def test_a_worktree_child_is_fenced_by_its_agents_sandbox() -> None:
    fenced = decide("auto", "loopback", "worktree", None, "claude", CLAUDE, "bypassPermissions")
    assert fenced == Sandbox(fenced=True, by="claude", reason=None, network="loopback")
    # codex's own sandbox holds its children whatever childSandbox says, but not in bypass.
    assert decide("off", "full", "worktree", None, "codex", CODEX, None).by == "codex"
    bypass = decide("auto", "full", "worktree", None, "codex", CODEX, "bypassPermissions")
    assert not bypass.fenced and "bypassPermissions" in (bypass.reason or "")


@pytest.mark.parametrize(
    ("isolation", "support", "says"),
    [
        ("shared", CLAUDE, "share the parent's folder (not a git repository)"),
        ("worktree", None, "the agent 'opencode' has no sandbox"),
        ("worktree", NO_BWRAP, "bubblewrap (bwrap) not found"),
    ],
)
def test_auto_runs_unfenced_and_says_why_required_fails(
    isolation: str, support: SandboxSupport | None, says: str
) -> None:
    reason = "not a git repository" if isolation == "shared" else None
    args = (isolation, reason, "opencode", support, None)
    unfenced = decide("auto", "full", *args)  # type: ignore[arg-type]
    assert not unfenced.fenced and unfenced.by is None and says in (unfenced.reason or "")
    with pytest.raises(FenceRequired, match="childSandbox is required"):
        decide("required", "full", *args)  # type: ignore[arg-type]
    assert decide("off", "full", "worktree", None, "claude", CLAUDE, None).reason == (
        "childSandbox is off"
    )


def test_the_parents_head_index_config_and_branch_are_protected(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    real = Path(os.path.realpath(repo / ".git"))
    own = [str(real / "HEAD"), str(real / "index"), str(real / "config")]
    assert protected_git_files(str(repo)) == [*own, str(real / "refs/heads/main")]
    git(repo, "pack-refs", "--all")  # the branch only in packed-refs now
    assert protected_git_files(str(repo)) == [*own, str(real / "packed-refs")]
    # A linked worktree (a child's, forking in turn): its own HEAD and index, the shared rest.
    git(repo, "worktree", "add", "-q", "-b", "side", str(tmp_path / "wt"))
    linked = protected_git_files(str(tmp_path / "wt"))
    assert linked[:2] == [str(real / "worktrees/wt/HEAD"), str(real / "worktrees/wt/index")]
    assert linked[-1] == str(real / "refs/heads/side")


def test_a_childs_commands_write_of_the_shared_git_folder_only_objects_and_its_own_branch(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    real = Path(os.path.realpath(repo / ".git"))
    git(repo, "worktree", "add", "-q", "-b", "coven/f1/1-a", str(tmp_path / "a"))
    fence = git_fence(str(tmp_path / "a"))
    assert fence.common == str(real)
    assert fence.writable == tuple(
        str(real / p) for p in ("objects", "refs/heads/coven/f1", "logs/refs/heads/coven/f1")
    )
    assert fence.readonly == (str(real / "objects/pack"), str(real / "objects/info"))
    assert fence.own == (
        str(real / "refs/heads/coven/f1/1-a"),
        str(real / "logs/refs/heads/coven/f1/1-a"),
    )
    # On a detached HEAD its commits move only its worktree's own HEAD.
    git(repo, "worktree", "add", "-q", "--detach", str(tmp_path / "b"))
    detached = git_fence(str(tmp_path / "b"))
    assert detached.writable == (str(real / "objects"),) and detached.own == ()


def test_a_fenced_claude_child_gets_its_settings_its_hook_and_not_a_widening_settings_file(
    tmp_path: Path,
) -> None:
    config = tmp_path / "config"
    config.mkdir()
    (config / "settings.json").write_text(
        json.dumps({"sandbox": {"filesystem": {"allowWrite": ["/"]}}})
    )
    spec = AgentSpec(
        cwd=str(tmp_path / "wt"),
        read_only_roots=(str(tmp_path / "repo"),),
        env={"CLAUDE_CONFIG_DIR": str(config)},
    )
    options = claude_fence.options(spec, Fence("none", ("/r/.git/HEAD",)), "/tmp/coven-x")
    sandbox = json.loads(options["settings"])["sandbox"]
    assert sandbox["failIfUnavailable"] is True and sandbox["allowUnsandboxedCommands"] is False
    assert sandbox["filesystem"] == {"allowWrite": ["/tmp/coven-x"], "denyWrite": ["/r/.git/HEAD"]}
    assert sandbox["network"] == {"deniedDomains": ["*"]}
    assert options["setting_sources"] == ["project", "local"]  # the user's file widens it
    [matcher] = options["hooks"]["PreToolUse"]
    [guard] = matcher.hooks

    async def ask(path: str) -> dict:
        return await guard({"tool_name": "Write", "tool_input": {"file_path": path}}, None, {})

    (tmp_path / "repo").mkdir()
    (tmp_path / "wt").mkdir()
    (tmp_path / "wt" / "out").symlink_to(tmp_path / "repo")
    refused = anyio.run(ask, str(tmp_path / "repo" / "x.txt"))
    assert refused["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "Denied by coven-ls's fence" in refused["hookSpecificOutput"]["permissionDecisionReason"]
    assert anyio.run(ask, "out/x.txt")["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert anyio.run(ask, "x.txt") == {}  # its own worktree
    assert anyio.run(ask, "/elsewhere/x.txt") == {}  # not the parent's checkout


def test_a_fenced_childs_temporary_folder_is_short_enough_for_the_sandboxs_sockets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = tmp_path / ("d" * 90)
    deep.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(deep))
    made = claude_fence.make_temp()
    try:
        assert len(made) + len("/claude-socks-0123456789abcdef.sock") <= 107
    finally:
        shutil.rmtree(made)


def test_a_device_the_sandbox_left_in_the_worktree_is_not_committed(tmp_path: Path) -> None:
    """git lists no device, pipe or socket as untracked, so `add -A` never takes one: a
    sandbox's stub left behind stays out of the child's commit (and so out of the merge)."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    os.mkfifo(repo / ".bashrc")  # as a sandbox's /dev/null stub: no file git can hold
    (repo / "b.txt").write_text("b\n")
    commit = commit_all(repo, "work")
    assert commit is not None
    assert git(repo, "show", "--name-only", "--format=", commit).split() == ["b.txt"]


def test_doctor_says_how_to_get_the_claude_sandbox(tmp_path: Path, model: ScriptedModel) -> None:
    path = path_without("bwrap", os.environ.get("PATH", ""), tmp_path / "shadows")
    _, found, _ = doctor(tmp_path, model, env={"PATH": path})
    finding = found["claudeSandbox"]
    assert finding.status == "warning" and "bubblewrap (bwrap) not found" in finding.found
    assert finding.fix is not None and "apt install bubblewrap socat" in finding.fix


@pytest.mark.skipif(shutil.which("socat") is None, reason="socat is not installed")
def test_the_socat_a_fenced_cli_finds_first_is_the_real_one_tied_to_its_parent() -> None:
    """Claude Code's sandbox starts its network bridges with the `socat` on PATH; a killed CLI
    left them running (and a killed server's agents never all ended)."""
    folder = claude_fence.command_wrappers()
    assert folder is not None
    wrapper = Path(folder) / "socat"
    assert os.access(wrapper, os.X_OK) and "PDEATHSIG" in wrapper.read_text()
    done = subprocess.run([str(wrapper), "-V"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "socat version" in done.stdout


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_the_bwrap_a_fenced_cli_finds_first_runs_the_real_one() -> None:
    folder = claude_fence.command_wrappers()
    assert folder is not None
    done = subprocess.run(
        [str(Path(folder) / "bwrap"), "--version"], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0 and "bubblewrap" in done.stdout


# Stands in for bubblewrap: says the arguments it was given, with those of an `--args` file.
_FAKE_BWRAP = """#!{python}
import json, os, sys
args = sys.argv[1:]
given = {{"argv": args}}
if "--args" in args:
    fd = int(args[args.index("--args") + 1])
    given["file"] = os.read(fd, 1 << 20).decode().split("\\0")
print(json.dumps(given))
"""


def test_a_sibling_s_vanished_lock_file_is_bound_only_if_there(tmp_path: Path) -> None:
    """Claude Code's sandbox binds each git folder's `config.lock` over itself when it exists,
    and a sibling child's command makes (then removes) one for as long as it runs: gone before
    bubblewrap mounts it, it failed the command ("Can't find source path"). The wrapper binds a
    lock only if it is there when bubblewrap mounts it; every other argument goes as it was."""
    fake = tmp_path / "real-bwrap"
    fake.write_text(_FAKE_BWRAP.format(python=sys.executable))
    fake.chmod(0o700)
    wrapper = tmp_path / "bwrap"
    wrapper.write_text(claude_fence._BWRAP_WRAPPER.format(python=sys.executable, bwrap=str(fake)))
    wrapper.chmod(0o700)
    git_dir = tmp_path / "repo" / ".git"
    git_dir.mkdir(parents=True)
    (git_dir / "config").write_text("")
    (git_dir / "index.lock").write_text("")  # bound as before while it is there
    gone, held, config = (str(git_dir / n) for n in ("config.lock", "index.lock", "config"))
    mounts = ["--ro-bind", gone, gone, "--ro-bind", held, held, "--ro-bind", config, config]
    mounts += ["--ro-bind", "/dev/null", gone]  # a stub's source is /dev/null: not this case
    command = ["--", "/bin/sh", "-c", "true", "--ro-bind", gone, gone]
    expected = ["--ro-bind-try", gone, gone, "--ro-bind-try", held, held, *mounts[6:]]

    done = subprocess.run(
        [str(wrapper), "--unshare-all", *mounts, *command],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert json.loads(done.stdout)["argv"] == ["--unshare-all", *expected, *command]

    # Too many mounts for a command line: the CLI passes them in a file (`--args FD`).
    listed = tmp_path / "args"
    listed.write_bytes(b"".join(arg.encode() + b"\0" for arg in mounts))
    with listed.open("rb") as file:
        fd = file.fileno()
        done = subprocess.run(
            [str(wrapper), "--args", str(fd), *command],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
            pass_fds=(fd,),
        )
    given = json.loads(done.stdout)
    assert given["argv"][0] == "--args" and given["argv"][2:] == command
    assert given["file"] == [*expected, ""]


def test_the_shared_git_folder_is_mounted_read_only_but_for_the_childs_own_objects_and_branch(
    tmp_path: Path,
) -> None:
    """The CLI binds the git folder a worktree child shares with its parent writable; with the
    child's GitFence in COVEN_FENCE_GIT the wrapper makes it read-only, binds the object store and
    the child's ref and reflog folders writable again (a sibling's ref in them read-only, the
    packs too), and drops the CLI's read-only mounts there that would make a stub in the real
    folder (a missing target, `/dev/null` over a lock); the others go as they were."""
    fake = tmp_path / "real-bwrap"
    fake.write_text(_FAKE_BWRAP.format(python=sys.executable))
    fake.chmod(0o700)
    wrapper = tmp_path / "bwrap"
    wrapper.write_text(claude_fence._BWRAP_WRAPPER.format(python=sys.executable, bwrap=str(fake)))
    wrapper.chmod(0o700)
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    git(repo, "worktree", "add", "-q", "-b", "coven/f1/1-a", str(tmp_path / "a"))
    git(repo, "worktree", "add", "-q", "-b", "coven/f1/2-b", str(tmp_path / "b"))
    fence = git_fence(str(tmp_path / "a"))
    g = fence.common
    refs, logs = f"{g}/refs/heads/coven/f1", f"{g}/logs/refs/heads/coven/f1"
    Path(f"{refs}/1-a.lock").write_text("")  # its own lock: writable like its ref
    env = {**os.environ, **claude_fence.environment(Fence(git=fence))}
    mounts = [
        *("--ro-bind", "/dev/null", f"{g}/config.lock"),  # before the git folder's: as it was
        *("--bind", g, g),
        *("--ro-bind", f"{g}/hooks", f"{g}/hooks"),  # there: kept
        *("--ro-bind", "/dev/null", f"{g}/config.lock"),  # a stub over a lock: dropped
        *("--ro-bind", f"{g}/remotes", f"{g}/remotes"),  # missing: dropped
        *("--ro-bind", "/dev/null", f"{g}/objects/info/alternates"),  # missing, read-only: dropped
        *("--ro-bind", "/dev/null", f"{g}/objects/ab"),  # in the writable objects: kept
        *("--bind", f"{g}/worktrees/a", f"{g}/worktrees/a"),  # the CLI's own: kept
        *("--setenv", "X", "--ro-bind"),
    ]
    expected = [
        *mounts[:3],
        *("--ro-bind", g, g),
        *("--bind-try", f"{g}/objects", f"{g}/objects"),
        *("--bind-try", refs, refs),
        *("--bind-try", logs, logs),
        *("--ro-bind-try", f"{g}/objects/pack", f"{g}/objects/pack"),
        *("--ro-bind-try", f"{g}/objects/info", f"{g}/objects/info"),
        *("--ro-bind-try", f"{refs}/2-b", f"{refs}/2-b"),
        *("--ro-bind-try", f"{logs}/2-b", f"{logs}/2-b"),
        *mounts[6:9],
        *mounts[18:],
    ]
    command = ["--", "/bin/sh", "-c", "true"]
    done = subprocess.run(
        [str(wrapper), *mounts, *command],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        env=env,
    )
    assert json.loads(done.stdout)["argv"] == [*expected, *command]
    # Without the variable (an unfenced child, another CLI) the mount stays as the CLI made it.
    env.pop(claude_fence.FENCE_GIT_VARIABLE)
    done = subprocess.run(
        [str(wrapper), *mounts, *command], capture_output=True, text=True, timeout=30, env=env
    )
    assert json.loads(done.stdout)["argv"] == [*mounts, *command]


def test_the_temporary_folders_a_killed_server_left_are_removed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    short = Path(tempfile.mkdtemp(prefix="t", dir="/tmp"))  # short enough to be used as it is
    try:
        monkeypatch.setattr("tempfile.tempdir", str(short))
        dead = short / "coven-999999999-abcdefgh"  # no such process
        dead.mkdir()
        mine = Path(claude_fence.make_temp())
        assert mine.parent == short and mine.name.startswith(f"coven-{os.getpid()}-")
        assert not dead.exists()
    finally:
        shutil.rmtree(short)


def test_the_empty_stubs_a_sandbox_left_go_when_the_last_fenced_fork_ends(tmp_path: Path) -> None:
    """Claude Code's sandbox leaves empty mount points in the shared git folder and the checkout;
    those that were not there before the fork and are still empty go when the repository's last
    fenced fork ends: the git folder lists the same entries after as before."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    git_dir = repo / ".git"
    (git_dir / "config.worktree").write_text("")  # the user's own, though empty: stays
    listing = {p: sorted(os.listdir(p)) for p in (git_dir, git_dir / "info", repo)}
    top = str(repo)
    sandbox_stubs.watch(top)
    sandbox_stubs.watch(top)  # a second fork of the same repository, at once
    for folder in ("NOTES_MERGE_WORKTREE", "glab-cli", "info/.claude-sandbox-noreplace"):
        (git_dir / folder).mkdir()
    (git_dir / "objects/info/commit-graphs/.claude-sandbox-noreplace").mkdir(parents=True)
    (git_dir / "objects/info/alternates").write_text("")
    (repo / ".claude/.cc-writes").mkdir(parents=True)
    (git_dir / "remotes").mkdir()
    (git_dir / "remotes/origin").write_text("URL: x\n")  # not empty: not a stub
    assert sandbox_stubs.release(top) == []  # the other fork runs on
    removed = sandbox_stubs.release(top)
    assert len(removed) == 8
    assert (git_dir / "remotes/origin").exists() and (git_dir / "config.worktree").exists()
    shutil.rmtree(git_dir / "remotes")
    assert {p: sorted(os.listdir(p)) for p in listing} == listing
    assert not (git_dir / "objects/info/alternates").exists()
    assert sandbox_stubs.release(top) == []  # no fork of it runs
