"""A worktree child's environment end to end, in real git repositories: real LSP client ->
coven-ls -> real `claude` CLIs (whose Bash tool runs the project's code) -> scripted model.

The project's gitignored environment (`.env`, dependencies) comes along through
`.worktreeinclude`; a worktree setup runs before each child with the COVEN_* variables; a setup
from the repository (Cursor's, Conductor's) runs only once the user allowed that exact setup.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import stat
from pathlib import Path
from typing import Any

import pytest

from coven_ls.testing.scripted_model import ScriptedModel, ToolUse

from ..gitrepo import commit_all, init_repo
from ..harness import Coven, wait_until

# The server's git (worktrees, setups) without the user's configuration.
pytestmark = pytest.mark.usefixtures("no_user_git_config")

PLAN = "Get ready"


def node_project(top: Path) -> tuple[str, str]:
    """A Node-like project: its dependency in the ignored node_modules/ (with a .bin link), its
    secret in .env. Returns the command that runs it and what it prints."""
    (top / "node_modules" / "greeter" / "bin").mkdir(parents=True)
    (top / "node_modules" / "greeter" / "index.js").write_text(
        "module.exports = (who) => `hello ${who} from node_modules`;\n"
    )
    (top / "node_modules" / ".bin").mkdir()
    os.symlink("../greeter/index.js", top / "node_modules" / ".bin" / "greeter")
    (top / "app.js").write_text(
        "const fs = require('fs');\n"
        "const secret = fs.readFileSync('.env', 'utf8').trim();\n"
        "console.log(require('greeter')(secret));\n"
    )
    (top / ".gitignore").write_text("node_modules/\n.env\n*.log\n")
    return "node app.js", "hello SECRET=node-42 from node_modules"


def python_project(top: Path) -> tuple[str, str]:
    """A Python-like project: its dependency in the ignored vendor/ folder, its secret in .env."""
    (top / "vendor" / "greeter").mkdir(parents=True)
    (top / "vendor" / "greeter" / "__init__.py").write_text(
        "def greet(who):\n    return f'hello {who} from vendor'\n"
    )
    (top / "app.py").write_text(
        "import sys\nsys.path.insert(0, 'vendor')\nfrom greeter import greet\n"
        "print(greet(open('.env').read().strip()))\n"
    )
    (top / ".gitignore").write_text("vendor/\n.env\n*.log\n__pycache__/\n")
    return "python3 app.py", "hello SECRET=python-42 from vendor"


def bash(command: str) -> ToolUse:
    return ToolUse("Bash", {"command": command})


def assigned(label: str) -> str:
    return f"You were assigned '{label}'"


def script_child(model: ScriptedModel, label: str, command: str) -> None:
    marker = f"done:{label}"
    model.on(assigned(label), bash(f"{command}; echo '{marker}'"))
    model.on(marker, f"Finished {label}.")


async def fork_in(
    coven: Coven, sid: str, tasks: list[str], **params: Any
) -> tuple[str, list[str], str]:
    """Fork an idle session by hand; its fork id, children and the results message."""
    before = len(coven.of(sid, "prompt"))
    result = await coven.request("coven/fork", {"sessionId": sid, "tasks": tasks, **params})
    fork_id = result["forkId"]
    started = await coven.wait_kind(sid, "forkStarted", forkId=fork_id)
    children = [c["sessionId"] for c in started["children"]]
    prompt = await coven.wait_for(
        lambda e: (
            e["sessionId"] == sid
            and e["kind"] == "prompt"
            and e["origin"] == "forkResults"
            and len(coven.of(sid, "prompt")) > before
        ),
        what="the fork's results",
    )
    await coven.wait_for(
        lambda e: (
            e["sessionId"] == sid
            and e["kind"] == "status"
            and e["status"] == "idle"
            and e["seq"] > prompt["seq"]
        ),
        what="the parent idle again",
    )
    return fork_id, children, str(prompt["text"])


async def session_in(coven: Coven, repo: Path) -> str:
    coven.model.on(PLAN, "Ready.")
    sid = await coven.start(PLAN, cwd=str(repo))
    await coven.wait_status(sid, "idle")
    coven.model.on("<fork-results>", "Noted.")
    return sid


def tool_output(coven: Coven, child: str) -> str:
    return "\n".join(e["content"] for e in coven.of(child, "toolResult"))


def setup_output(coven: Coven, child: str) -> str:
    return "".join(e["text"] for e in coven.of(child, "setupOutput"))


@pytest.mark.parametrize("project", [node_project, python_project], ids=["node", "python"])
async def test_worktreeinclude_brings_the_environment_along(
    coven_factory, model: ScriptedModel, tmp_path: Path, project: Any
) -> None:
    repo = init_repo(tmp_path / "repo")
    run, prints = project(repo)
    kind = "node" if run.startswith("node") else "python"
    (repo / ".env").write_text(f"SECRET={kind}-42\n")
    (repo / ".env").chmod(0o600)
    (repo / "debug.log").write_text("an ignored file nobody listed\n")
    deps = "node_modules/" if kind == "node" else "vendor/"
    (repo / ".worktreeinclude").write_text(f"{deps}\n.env\n")
    commit_all(repo, "project")
    dep_file = next(p for p in (repo / deps).rglob("*") if p.is_file())
    dep_before = dep_file.read_text()

    coven = await coven_factory()
    sid = await session_in(coven, repo)
    report = (
        'echo "port=$COVEN_PORT index=$COVEN_CHILD_INDEX root=$COVEN_ROOT_PATH '
        'tree=$COVEN_WORKTREE_PATH"; stat -c "mode=%a" .env; '
        "test -e debug.log && echo has-log || echo no-log"
    )
    script_child(
        model,
        "Run it",
        f"{run} && {report} && echo 'SECRET=child' > .env && "
        f"echo 'changed by the child' > {dep_file.relative_to(repo)} && echo out > out.txt",
    )
    script_child(model, "Run it too", f"{run} && {report}")
    _fork_id, children, results = await fork_in(coven, sid, ["Run it", "Run it too"])

    ports = []
    for n, child in enumerate(children, 1):
        out = tool_output(coven, child)
        assert prints in out, out  # read .env, imported from the ignored folder
        assert "mode=600" in out and "no-log" in out  # the mode kept; the unlisted file left
        found = re.search(r"port=(\d+) index=(\d+) root=(\S+) tree=(\S+)", out)
        assert found is not None, out
        assert int(found.group(2)) == n and found.group(3) == str(repo)
        info = await coven.request("coven/listSessions", {})
        tree = next(s for s in info["sessions"] if s["sessionId"] == child)["worktree"]["path"]
        assert found.group(4) == tree
        ports.append(int(found.group(1)))
        [env] = coven.of(child, "worktreeEnv")
        assert env["copied"] == [".env", deps] and env["port"] == ports[-1]
        assert env.get("setup") is None  # no setup anywhere: none runs, nobody is asked
    assert ports[0] != ports[1] and abs(ports[0] - ports[1]) >= 10  # blocks of 10 apart

    # The child's writes to its copies left the parent's files alone, and never came back.
    assert (repo / ".env").read_text() == f"SECRET={kind}-42\n"
    assert stat.S_IMODE((repo / ".env").stat().st_mode) == 0o600
    assert dep_file.read_text() == dep_before
    assert (repo / "out.txt").read_text() == "out\n"  # its real work was merged
    assert 'merge="applied" files="out.txt' in results
    assert not [r for r in coven.permission_requests if r["toolName"] == "WorktreeSetup"]


async def test_no_worktreeinclude_says_what_the_children_lack(
    coven_factory, model: ScriptedModel, tmp_path: Path
) -> None:
    repo = init_repo(tmp_path / "repo")
    node_project(repo)
    (repo / ".env").write_text("SECRET=1\n")
    commit_all(repo, "project")
    coven = await coven_factory()
    sid = await session_in(coven, repo)
    script_child(model, "Look", "ls -a")
    _fork_id, [child], _ = await fork_in(coven, sid, ["Look"])
    [env] = coven.of(child, "worktreeEnv")
    assert env.get("copied") is None
    notes = env["notices"]
    assert any(
        re.match(r"node_modules/ \(\d+(\.\d)? [KMG]?B\) is gitignored and not in the children's", n)
        and ".worktreeinclude" in n
        for n in notes
    ), notes
    assert "node_modules" not in tool_output(coven, child)


async def test_a_setup_runs_with_the_variables_and_a_failing_one_fails_its_child(
    coven_factory, model: ScriptedModel, tmp_path: Path
) -> None:
    repo = init_repo(tmp_path / "repo")
    (repo / "deps.lock").write_text("locked v1\n")
    commit_all(repo, "project")
    setup = (
        'if [ "$COVEN_CHILD_INDEX" = 2 ]; then echo "fetching"; echo "cannot install" >&2; '
        "exit 7; fi; "
        'echo "setup index=$COVEN_CHILD_INDEX port=$COVEN_PORT root=$COVEN_ROOT_PATH '
        'tree=$COVEN_WORKTREE_PATH"; echo "locked v2" > deps.lock'
    )
    coven = await coven_factory()
    sid = await session_in(coven, repo)
    script_child(model, "Build", "cat deps.lock && echo built > built.txt")
    script_child(model, "Never runs", "echo should-not-run")
    _fork_id, children, results = await fork_in(
        coven, sid, ["Build", "Never runs"], worktreeSetup=setup
    )
    first, second = children

    [env] = coven.of(first, "worktreeEnv")
    assert env["setup"] == setup and env["setupSource"] == "option"
    out = setup_output(coven, first)
    found = re.search(r"setup index=1 port=(\d+) root=(\S+) tree=(\S+)", out)
    assert found is not None, out
    assert int(found.group(1)) == env["port"] and found.group(2) == str(repo)
    [ended] = coven.of(first, "setupEnded")
    assert ended["ok"] is True and ended["exitCode"] == 0
    # The setup's lockfile is where the child starts, not its work: the child saw it, the user's
    # file is untouched, and only the child's own file came back.
    assert "locked v2" in tool_output(coven, first)
    assert (repo / "deps.lock").read_text() == "locked v1\n"
    assert (repo / "built.txt").read_text() == "built\n"
    [changes] = [e for e in coven.of(first, "changes") if e["changes"]["merge"] == "applied"]
    assert [f["path"] for f in changes["changes"]["files"]] == ["built.txt"]

    # The second child's setup failed: it never ran, and its task error has the setup's output.
    [failed] = coven.of(second, "setupEnded")
    assert failed["ok"] is False and failed["exitCode"] == 7
    assert "cannot install" in failed["error"]
    assert "fetching" in setup_output(coven, second)
    assert not coven.of(second, "toolUse")
    assert any(e["status"] == "failed" for e in coven.of(second, "status"))
    [finished] = coven.of(sid, "forkFinished")
    assert [r["ok"] for r in finished["results"]] == [True, False]
    assert "exit code 7" in finished["results"][1]["error"]
    assert re.search(r'<task label="Never runs" error="[^"]*cannot install', results), results


async def test_repository_setups_run_only_once_the_user_allowed_them(
    coven_factory, model: ScriptedModel, tmp_path: Path
) -> None:
    repo = init_repo(tmp_path / "repo")
    conductor = {"scripts": {"setup": 'echo "conductor setup port=$CONDUCTOR_PORT"'}}
    (repo / "conductor.json").write_text(json.dumps(conductor))
    (repo / "README").write_text("a project\n")
    commit_all(repo, "project")
    coven = await coven_factory()
    sid = await session_in(coven, repo)
    answers: list[bool] = []

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        assert request["toolName"] == "WorktreeSetup" and request["sessionId"] == sid
        allow = answers.pop(0)
        return {"allow": True} if allow else {"allow": False, "message": "Not that."}

    coven.permission_answer = answer

    async def fork(label: str, **params: Any) -> str:
        script_child(model, label, "true")
        _fork_id, [child], _ = await fork_in(coven, sid, [label], **params)
        return child

    # Asked first; allowed: it runs, with Conductor's own variables.
    answers.append(True)
    child = await fork("First")
    assert len(coven.permission_requests) == 1
    assert coven.permission_requests[0]["input"]["command"] == conductor["scripts"]["setup"]
    [env] = coven.of(child, "worktreeEnv")
    assert (env["setupSource"], env["setupFile"]) == ("conductor", "conductor.json")
    assert f"conductor setup port={env['port']}" in setup_output(coven, child)
    # Remembered: not asked again.
    child = await fork("Second")
    assert len(coven.permission_requests) == 1 and "conductor setup" in setup_output(coven, child)
    # Off with "": no question, no setup.
    child = await fork("Third", worktreeSetup="")
    assert len(coven.permission_requests) == 1 and not coven.of(child, "setupOutput")
    # Changed: asked again; refused: it does not run, and the events say so.
    conductor["scripts"]["setup"] = 'echo "changed setup"'
    (repo / "conductor.json").write_text(json.dumps(conductor))
    answers.append(False)
    child = await fork("Fourth")
    assert len(coven.permission_requests) == 2 and not coven.of(child, "setupOutput")
    [env] = coven.of(child, "worktreeEnv")
    assert env.get("setup") is None
    assert any("conductor.json did not run: refused" in n for n in env["notices"]), env
    [decision] = [
        e for e in coven.of(sid, "permissionDecision") if e["toolName"] == "WorktreeSetup"
    ][-1:]
    assert decision["allow"] is False
    # A Cursor setup comes first; a script it names is part of what is approved.
    (repo / ".cursor").mkdir()
    (repo / ".cursor" / "setup.sh").write_text('echo "cursor setup root=$ROOT_WORKTREE_PATH"\n')
    (repo / ".cursor" / "worktrees.json").write_text(json.dumps({"setup-worktree": "setup.sh"}))
    answers.append(True)
    child = await fork("Fifth")
    assert len(coven.permission_requests) == 3
    assert "cursor setup root=" in coven.permission_requests[2]["input"]["script"]
    assert f"cursor setup root={repo}" in setup_output(coven, child)
    # The script changed: asked again (refused this time), and it does not run.
    (repo / ".cursor" / "setup.sh").write_text('echo "cursor setup v2"\n')
    answers.append(False)
    child = await fork("Sixth")
    assert len(coven.permission_requests) == 4 and not coven.of(child, "setupOutput")


async def test_a_server_killed_during_a_setup_leaves_nothing_running_and_resumes_it(
    coven_factory, model: ScriptedModel, tmp_path: Path
) -> None:
    repo = init_repo(tmp_path / "repo")
    (repo / "README").write_text("a project\n")
    commit_all(repo, "project")
    flag = tmp_path / "setup-ran-once"
    setup = f"if [ -e {flag} ]; then echo quick; else touch {flag}; echo slow; sleep 120; fi"
    coven = await coven_factory(home="h", init_options={"worktreeSetup": setup})
    sid = await session_in(coven, repo)
    script_child(model, "Work", "echo working > work.txt")
    result = await coven.request("coven/fork", {"sessionId": sid, "tasks": ["Work"]})
    started = await coven.wait_kind(sid, "forkStarted")
    child = started["children"][0]["sessionId"]
    await coven.wait_for(
        lambda e: e["sessionId"] == child and e["kind"] == "setupOutput" and "slow" in e["text"],
        what="the slow setup running",
    )
    server = coven.client._server
    assert server is not None
    os.kill(server.pid, signal.SIGKILL)
    await asyncio.wait_for(server.wait(), 30)
    # The setup runs in a session of its own: it outlived the server (its `sleep` is left).
    assert coven.agent_pids(), "the setup should still run after a SIGKILL of the server"

    again = await coven_factory(home="h", init_options={"worktreeSetup": setup})
    # The restart stopped it (its process group, found by the worktree it runs in).
    await wait_until(lambda: not again.agent_pids(), 30, "the left-over setup to be stopped")
    await again.request("coven/resumeFork", {"forkId": result["forkId"]})
    await again.wait_kind(sid, "prompt", origin="forkResults")
    assert "quick" in "".join(
        e["text"] for e in again.of(child, "setupOutput")
    )  # set up again, from the start
    assert (repo / "work.txt").read_text() == "working\n"


async def test_children_sharing_the_folder_get_ports_of_their_own(
    coven_factory, model: ScriptedModel, tmp_path: Path
) -> None:
    folder = tmp_path / "plain"  # not a git repository: the children share it
    folder.mkdir()
    coven = await coven_factory()
    sid = await session_in(coven, folder)
    for label in ("One", "Two"):
        script_child(model, label, 'echo "port=$COVEN_PORT index=$COVEN_CHILD_INDEX"')
    _fork_id, children, _ = await fork_in(coven, sid, ["One", "Two"])
    ports = []
    for n, child in enumerate(children, 1):
        found = re.search(r"port=(\d+) index=(\d+)", tool_output(coven, child))
        assert found is not None and int(found.group(2)) == n
        ports.append(int(found.group(1)))
        assert not coven.of(child, "worktreeEnv")  # nothing copied, nothing set up
    assert abs(ports[0] - ports[1]) >= 10
