"""The child's environment: `.worktreeinclude` matching and copying (worktree_env), the worktree
setup's resolution, approvals and run (worktree_setup), and the ports (ports), against real git
repositories with the user's git configuration out of reach."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from coven_ls.core.workspace import worktree_env, worktree_setup, worktrees
from coven_ls.core.workspace.commits import commit_all, copied_paths
from coven_ls.core.workspace.ports import PortBlocks
from coven_ls.core.workspace.repository import RepoInfo, inspect
from coven_ls.core.workspace.snapshots import snapshot
from coven_ls.core.workspace.worktree_setup import Approvals, Setup, SetupFileError

from ..gitrepo import git, make_repo

pytestmark = pytest.mark.usefixtures("no_user_git_config")


def node_project(tmp_path: Path, include: str | None) -> Path:
    """A Node-like repository: node_modules/ (with a .bin link), .env (0600), a log, a config
    folder whose json files are ignored one by one; `include` is its .worktreeinclude."""
    top = tmp_path / "repo"
    (top / "node_modules" / "left-pad" / "bin").mkdir(parents=True)
    (top / "node_modules" / ".bin").mkdir()
    (top / "node_modules" / "left-pad" / "index.js").write_text("module.exports = 1;\n")
    tool = top / "node_modules" / "left-pad" / "bin" / "pad"
    tool.write_text("#!/bin/sh\necho pad\n")
    tool.chmod(0o755)
    os.symlink("../left-pad/bin/pad", top / "node_modules" / ".bin" / "pad")
    (top / ".env").write_text("SECRET=42\n")
    (top / ".env").chmod(0o600)
    (top / "debug.log").write_text("noise\n")
    (top / "config").mkdir()
    (top / "config" / "local.json").write_text("{}\n")
    (top / "config" / "shared.txt").write_text("tracked\n")
    (top / ".gitignore").write_text("node_modules/\n.env\n*.log\nconfig/*.json\n")
    if include is not None:
        (top / ".worktreeinclude").write_text(include)
    return make_repo(top, {})


def worktree(top: Path, tmp_path: Path, name: str = "child") -> Path:
    info = inspect(top)
    assert isinstance(info, RepoInfo)
    made = worktrees.create(info, snapshot(info), tmp_path / "wt" / name, f"coven/f/{name}")
    return Path(made.path)


# --- which files -------------------------------------------------------------------------------


def test_include_matches_ignored_files_only(tmp_path: Path) -> None:
    top = node_project(tmp_path, "node_modules/\n.env\nconfig/\nconfig/shared.txt\n")
    # config/shared.txt is tracked, debug.log ignored but not listed: neither is copied.
    assert worktree_env.included(top) == [".env", "config/local.json", "node_modules/"]


def test_no_include_file_copies_nothing_and_says_what_is_left_out(tmp_path: Path) -> None:
    top = node_project(tmp_path, None)
    assert worktree_env.included(top) == []
    notes = worktree_env.left_out(top)
    assert any(n.startswith("node_modules/ (") and ".worktreeinclude" in n for n in notes), notes
    assert any(n.startswith(".env (") for n in notes), notes
    assert not any("debug.log" in n for n in notes)  # not worth a word


def test_left_out_is_quiet_when_the_user_has_an_include_file(tmp_path: Path) -> None:
    top = node_project(tmp_path, ".env\n")
    assert worktree_env.left_out(top) == []


# --- copying -----------------------------------------------------------------------------------


def test_copies_are_independent_with_links_and_modes_kept(tmp_path: Path) -> None:
    top = node_project(tmp_path, "node_modules/\n.env\n")
    child = worktree(top, tmp_path)
    report = worktree_env.copy_into(top, child, worktree_env.included(top))
    assert report.entries == [".env", "node_modules/"]
    assert report.files == 3 and report.bytes > 0
    env = child / ".env"
    assert env.read_text() == "SECRET=42\n"
    assert stat.S_IMODE(env.stat().st_mode) == 0o600
    assert not env.is_symlink() and env.stat().st_ino != (top / ".env").stat().st_ino
    link = child / "node_modules" / ".bin" / "pad"
    assert link.is_symlink() and os.readlink(link) == "../left-pad/bin/pad"
    assert os.access(child / "node_modules" / "left-pad" / "bin" / "pad", os.X_OK)
    # A child's write to its copy leaves the parent's file as it was.
    env.write_text("SECRET=changed\n")
    (child / "node_modules" / "left-pad" / "index.js").write_text("changed\n")
    assert (top / ".env").read_text() == "SECRET=42\n"
    assert (top / "node_modules" / "left-pad" / "index.js").read_text() == "module.exports = 1;\n"
    assert not (child / "debug.log").exists()


def test_copies_stay_out_of_the_childs_commit_even_when_it_unignores_them(tmp_path: Path) -> None:
    top = node_project(tmp_path, "node_modules/\n.env\n")
    child = worktree(top, tmp_path)
    worktree_env.copy_into(top, child, worktree_env.included(top))
    (child / "first.txt").write_text("still ignored: a plain commit\n")
    first = commit_all(child, "coven: child")
    assert first is not None
    assert git(child, "show", "--name-only", "--format=", first).split() == ["first.txt"]
    (child / ".gitignore").write_text("")  # the child un-ignores everything
    git(child, "add", "-f", ".env")  # and even stages one of them
    (child / "work.txt").write_text("the child's work\n")
    commit = commit_all(child, "coven: child")
    assert commit is not None
    files = git(child, "show", "--name-only", "--format=", commit).split()
    assert sorted(files) == [".gitignore", "work.txt"]
    tree = git(child, "ls-tree", "-r", "--name-only", commit).split()
    assert not [f for f in tree if f.startswith(("node_modules", ".env"))]


def test_a_copy_made_again_replaces_the_earlier_one(tmp_path: Path) -> None:
    top = node_project(tmp_path, ".env\n")
    child = worktree(top, tmp_path)
    worktree_env.copy_into(top, child, [".env"])
    (child / ".env").write_text("half-made\n")
    worktree_env.copy_into(top, child, [".env"])
    assert (child / ".env").read_text() == "SECRET=42\n"
    assert copied_paths(child) == [".env"]


def test_clone_is_used_or_a_plain_copy(tmp_path: Path) -> None:
    src, dst = tmp_path / "a", tmp_path / "b"
    src.write_bytes(b"x" * 10000)
    cloned = worktree_env._clone(src, dst)
    if cloned:
        assert dst.read_bytes() == src.read_bytes()
    else:
        assert not dst.exists()  # nothing half-made: the caller copies


# --- setup resolution ---------------------------------------------------------------------------


def test_setup_resolution(tmp_path: Path) -> None:
    top = tmp_path
    assert worktree_setup.resolve("auto", top) is None
    assert worktree_setup.resolve("", top) is None
    own = worktree_setup.resolve("make deps", top)
    assert own is not None and own.source == "option" and not own.from_repository
    (top / "conductor.json").write_text(json.dumps({"scripts": {"setup": "npm ci"}}))
    conductor = worktree_setup.resolve(None, top)
    assert conductor is not None and (conductor.source, conductor.command) == (
        "conductor",
        "npm ci",
    )
    (top / ".cursor").mkdir()
    (top / ".cursor" / "worktrees.json").write_text(
        json.dumps({"setup-worktree": ["npm ci", "cp $ROOT_WORKTREE_PATH/.env .env"]})
    )
    cursor = worktree_setup.resolve("auto", top)
    assert cursor is not None and cursor.source == "cursor"  # Cursor's file comes first
    assert cursor.command == "set -e\nnpm ci\ncp $ROOT_WORKTREE_PATH/.env .env"
    assert worktree_setup.resolve("", top) is None  # off, whatever the repository has
    (top / ".cursor" / "setup.sh").write_text("echo from the script\n")
    (top / ".cursor" / "worktrees.json").write_text(
        json.dumps({"setup-worktree-unix": "setup.sh", "setup-worktree": ["no"]})
    )
    script = worktree_setup.resolve("auto", top)
    assert script is not None and script.command == "sh '.cursor/setup.sh'"
    assert "echo from the script" in script.content  # approved with the script's text
    assert script.tool_env("/r", "/w", 4000) == {"ROOT_WORKTREE_PATH": "/r"}
    assert conductor.tool_env("/r", "/w", 4000)["CONDUCTOR_PORT"] == "4000"


def test_the_codex_apps_local_environment_is_a_setup_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    top = tmp_path
    codex = top / ".codex" / "environments"
    codex.mkdir(parents=True)
    (codex / "environment.toml").write_text(
        "version = 1\nname = \"project\"\n\n[setup]\nscript = '''\nnpm ci\n"
        'cp "$CODEX_SOURCE_TREE_PATH/.env" .env\n\'\'\'\n\n[setup.darwin]\nscript = "brew bundle"\n'
        '\n[[actions]]\nname = "Run"\nicon = "run"\ncommand = "npm start"\n'
    )
    monkeypatch.setattr(worktree_setup.sys, "platform", "linux")
    setup = worktree_setup.resolve("auto", top)
    assert setup is not None
    assert (setup.source, setup.file) == ("codex", ".codex/environments/environment.toml")
    assert setup.command == setup.content == 'npm ci\ncp "$CODEX_SOURCE_TREE_PATH/.env" .env\n'
    assert setup.from_repository  # asked about, as Cursor's and Conductor's are
    assert setup.tool_env("/r", "/w", 4000) == {
        "CODEX_SOURCE_TREE_PATH": "/r",
        "CODEX_WORKTREE_PATH": "/w",
    }
    monkeypatch.setattr(worktree_setup.sys, "platform", "darwin")
    mac = worktree_setup.resolve("auto", top)
    assert mac is not None and mac.command == "brew bundle"  # its platform's script wins
    # Cursor's and Conductor's files come first.
    (top / "conductor.json").write_text(json.dumps({"scripts": {"setup": "make"}}))
    first = worktree_setup.resolve("auto", top)
    assert first is not None and first.source == "conductor"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[setup\nscript = 1", r"environment\.toml could not be read as TOML"),
        ("version = 2\n[setup]\nscript = 'x'", r"is version 2; coven-ls reads version 1"),
        ("setup = 'npm ci'", r"setup must be a table"),
        ("[setup]\nscript = ['npm ci']", r"setup\.script must be a script"),
    ],
)
def test_a_broken_codex_environment_is_a_clear_error(tmp_path: Path, text: str, said: str) -> None:
    (tmp_path / ".codex" / "environments").mkdir(parents=True)
    (tmp_path / ".codex" / "environments" / "environment.toml").write_text(text)
    with pytest.raises(SetupFileError, match=said):
        worktree_setup.resolve("auto", tmp_path)


def test_a_codex_environment_without_a_setup_is_none(tmp_path: Path) -> None:
    (tmp_path / ".codex" / "environments").mkdir(parents=True)
    toml = tmp_path / ".codex" / "environments" / "environment.toml"
    toml.write_text('version = 1\nname = "p"\n[[actions]]\nname = "Run"\ncommand = "x"\n')
    assert worktree_setup.resolve("auto", tmp_path) is None
    toml.write_text("[setup]\nscript = '  '\n")
    assert worktree_setup.resolve("auto", tmp_path) is None


def test_a_broken_setup_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "conductor.json").write_text("{not json")
    with pytest.raises(SetupFileError, match=r"conductor\.json"):
        worktree_setup.resolve("auto", tmp_path)
    (tmp_path / "conductor.json").unlink()
    (tmp_path / ".cursor").mkdir()
    (tmp_path / ".cursor" / "worktrees.json").write_text('{"setup-worktree": "missing.sh"}')
    with pytest.raises(SetupFileError, match=r"missing\.sh"):
        worktree_setup.resolve("auto", tmp_path)


# --- approvals ----------------------------------------------------------------------------------


def test_approvals_are_per_repository_and_content(tmp_path: Path) -> None:
    approvals = Approvals(tmp_path / "state")
    setup = Setup(command="npm ci", source="conductor", file="conductor.json", content="npm ci")
    assert approvals.answer("/repo", setup) is None
    approvals.remember("/repo", setup, True)
    assert approvals.answer("/repo", setup) is True
    assert approvals.answer("/other", setup) is None
    changed = Setup(command="npm i", source="conductor", file="conductor.json", content="npm i")
    assert approvals.answer("/repo", changed) is None
    approvals.remember("/repo", changed, False)
    assert approvals.answer("/repo", changed) is False
    assert Approvals(tmp_path / "state").answer("/repo", setup) is True  # kept on disk


# --- running a setup ----------------------------------------------------------------------------


def run_setup(command: str, cwd: Path, limit: float = 30) -> tuple[worktree_setup.SetupRun, str]:
    seen: list[str] = []

    async def main() -> worktree_setup.SetupRun:
        setup = Setup(command=command, source="option", content=command)
        return await worktree_setup.run(setup, str(cwd), {"COVEN_PORT": "4321"}, limit, seen.append)

    return anyio.run(main), "".join(seen)


def test_setup_output_streams_and_gets_the_variables(tmp_path: Path) -> None:
    result, seen = run_setup('echo "port $COVEN_PORT in $(pwd)"; echo oops >&2', tmp_path)
    assert result.ok and result.exit_code == 0
    assert seen == f"port 4321 in {tmp_path}\noops\n"


def test_a_failing_setup_says_why_with_its_output(tmp_path: Path) -> None:
    result, _ = run_setup("echo installing; echo broken >&2; exit 3", tmp_path)
    assert not result.ok and result.exit_code == 3
    assert result.error is not None and "exit code 3" in result.error
    assert "broken" in result.error


def test_a_setup_past_its_time_is_killed_with_its_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    # 3 s: time enough for sh to start its sleep on a loaded machine.
    command = f"sleep 60 & echo $! > {pidfile}; echo started; wait"
    result, seen = run_setup(command, tmp_path, 3)
    assert seen == "started\n"
    assert not result.ok and result.error is not None
    assert "did not finish in 3 seconds" in result.error
    pid = int(pidfile.read_text())

    # The background sleep was in its process group: killed too (SIGKILL lands at once, the
    # process takes a moment to be gone; a zombie at most).
    def state() -> str:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return "gone"

    deadline = time.monotonic() + 10
    while sys.platform == "linux" and state() not in ("Z", "gone"):
        assert time.monotonic() < deadline, f"the setup's sleep still runs: {state()}"
        time.sleep(0.05)


# --- ports --------------------------------------------------------------------------------------


def free_span(size: int) -> int:
    """The first of `size` ports in a row that nothing holds now: fixed numbers would collide
    with whatever else runs on the machine (other tests' servers and their children)."""
    for base in range(42000, 60000, 100):
        probes = []
        try:
            for port in range(base, base + size):
                probe = socket.socket()
                probes.append(probe)
                probe.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for probe in probes:
                probe.close()
    raise AssertionError(f"no {size} free ports in a row")


def test_port_blocks_are_distinct_free_and_given_back(tmp_path: Path) -> None:
    first = free_span(50)
    blocks = PortBlocks(first=first, last=first + 50)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    a, b = blocks.reserve(), blocks.reserve()
    assert a != b and abs(a - b) >= 10 and a % 10 == b % 10 == 0
    assert blocks.reserved == {a, b}
    blocks.release(a)
    assert blocks.reserved == {b}
    taken.close()


def test_a_block_with_a_busy_port_is_skipped() -> None:
    first = free_span(20)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", first + 5))
        blocks = PortBlocks(first=first, last=first + 20)
        assert blocks.reserve() == first + 10  # the first block holds the busy port
        with pytest.raises(OSError, match="no block of 10 free ports"):
            blocks.reserve()


def test_a_leftover_setup_is_stopped_only_where_it_ran(tmp_path: Path) -> None:
    here, elsewhere = tmp_path / "wt", tmp_path / "other"
    here.mkdir()
    elsewhere.mkdir()
    process = subprocess.Popen(["sh", "-c", "sleep 60"], cwd=here, start_new_session=True)
    try:
        assert not worktree_setup.stop_leftover(process.pid, str(elsewhere))  # not its folder
        assert process.poll() is None
        assert worktree_setup.stop_leftover(process.pid, str(here))
        assert process.wait(timeout=10) == -9
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_the_environment_events_read_as_one_line_each() -> None:
    from coven_ls.protocol.describe import describe

    env = {
        "kind": "worktreeEnv",
        "port": 34120,
        "childIndex": 1,
        "copied": [".env", "node_modules/"],
        "copiedFiles": 3,
        "copiedBytes": 2048,
        "clonedFiles": 3,
        "notices": ["x/ is left out"],
        "setup": "npm ci",
        "setupFile": "conductor.json",
    }
    assert describe(env) == (
        "⌂ environment  copied .env, node_modules/ (3 files, 2 KB, 3 cloned) · port 34120 · "
        "setup from conductor.json: npm ci ⚠ x/ is left out"
    )
    venv = {
        "kind": "worktreeEnv",
        "port": 34130,
        "childIndex": 2,
        "copied": [".venv/"],
        "copiedFiles": 2782,
        "copiedBytes": 24 * 1024 * 1024,
        "rewritten": [".venv/: pyvenv.cfg, 53 scripts rewritten to name the child's worktree"],
    }
    assert describe(venv) == (
        "⌂ environment  copied .venv/ (2782 files, 24.0 MB) · .venv/: pyvenv.cfg, 53 scripts "
        "rewritten to name the child's worktree · port 34130"
    )
    assert describe({"kind": "setupOutput", "text": "added 3 packages\n"}) == "  │ added 3 packages"
    failed = {"kind": "setupEnded", "ok": False, "durationMs": 10, "error": "it failed\nERR"}
    assert describe(failed) == "✗ worktree setup failed: it failed ERR"


# --- a resumed child ---------------------------------------------------------------------------


class _Child:
    """What ChildEnvironments.ready uses of a fork child session."""

    def __init__(self, tree: Path, top: Path, state: Path) -> None:
        from types import SimpleNamespace

        from coven_ls.protocol.types import Worktree

        self.id = f"s-{tree.name}"
        self.closed = False
        self.events: list[object] = []
        self.env: dict[str, str] = {}
        self.worktree = Worktree(path=str(tree), branch="b", base="HEAD", repository=str(top))
        self.config = SimpleNamespace(
            cwd=str(tree),
            worktree_setup="auto",
            worktree_setup_timeout=30.0,
            state_dir=str(state),
        )

    def emit(self, event: object) -> None:
        self.events.append(event)

    def add_env(self, extra: dict[str, str]) -> None:
        self.env.update(extra)

    def set_status(self, status: str) -> None:
        raise AssertionError(f"the child failed: {self.events}")


async def test_a_resumed_child_gets_its_setup_tools_variables_again(tmp_path: Path) -> None:
    from coven_ls.core.fork.child_env import ChildEnvironments

    top = node_project(tmp_path, None)
    (top / "conductor.json").write_text(json.dumps({"scripts": {"setup": "true"}}))
    git(top, "add", "-A")
    git(top, "commit", "-q", "-m", "conductor")
    tree = worktree(top, tmp_path)
    asked: list[str] = []

    async def allow(*args: object) -> tuple[bool, str]:
        asked.append("setup")
        return True, ""

    first = _Child(tree, top, tmp_path / "state")
    envs = ChildEnvironments(allow)
    assert await envs.ready("f-1", first, first, 1, None)  # type: ignore[arg-type]
    assert asked == ["setup"]
    assert first.env["CONDUCTOR_WORKSPACE_PATH"] == str(tree)
    assert first.env["CONDUCTOR_PORT"] == first.env["COVEN_PORT"]
    envs.release(first)  # type: ignore[arg-type]

    # A restarted server resumes the child: no setup again, but the same variables (and a port
    # of its own, which CONDUCTOR_PORT follows).
    again = _Child(tree, top, tmp_path / "state")
    later = ChildEnvironments(allow)
    assert await later.ready("f-1", again, again, 1, None)  # type: ignore[arg-type]
    assert asked == ["setup"]
    assert again.env["CONDUCTOR_ROOT_PATH"] == str(top)
    assert again.env["CONDUCTOR_WORKSPACE_NAME"] == tree.name
    assert again.env["CONDUCTOR_PORT"] == again.env["COVEN_PORT"]
    assert not any(type(e).__name__ == "SetupEnded" for e in again.events)
    later.release(again)  # type: ignore[arg-type]
