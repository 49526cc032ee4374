"""A child on a Ray node (issue #33), through `RayBackend.open` and through the language
server's forks: the real `claude` on the test cluster's worker node (tests/e2e/ray_cluster.py)
against the scripted Messages API. One cluster for the module; the worker is killed by the last
test."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from coven_ls.agents.claude import ClaudeBackend
from coven_ls.cluster.ray import RayCluster, RayTarget
from coven_ls.core.agent import AgentFailed, AgentSpec, Copy, Decision, New
from coven_ls.core.agent.events import AgentEvent, AgentMessage, Placed, ToolCall, TurnEnded
from coven_ls.protocol.types import InitializationOptions
from coven_ls.testing.scripted_model import ScriptedModel, ToolUse

from ..gitrepo import git
from ..harness import json_rpc_frames, wait_until
from .ray_cluster import WORKER_RESOURCE, RayTestCluster, started_cluster

pytestmark = pytest.mark.slow

# What travels from the test's environment to the node: the scripted model's address and key.
TRAVELS = ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC")
WORK = (
    "printf 'from the node\\n' > committed.txt && git add committed.txt && "
    "git -c user.name=Child -c user.email=child@example.com commit -qm 'child commit' && "
    "printf 'uncommitted\\n' >> README.md && printf 'new\\n' > fresh.txt && echo WORK-DONE"
)


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayTestCluster]:
    folder = tmp_path_factory.mktemp("ray-node")
    node_env = {
        "CLAUDE_CONFIG_DIR": str(folder / "node-claude"),
        "COVEN_RAY_NODE_CACHE": str(folder / "node-cache"),
    }
    with started_cluster(node_env) as cluster:
        yield cluster
        import ray

        ray.shutdown()
    assert not cluster.left_running(), "processes of the test cluster were left running"


@pytest.fixture
def local_env(tmp_path: Path, model: ScriptedModel, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The server's environment: the scripted model's variables (they travel) and a Claude
    config folder of its own (where a child's conversation comes back to)."""
    config = tmp_path / "local-claude"
    config.mkdir()
    for name, value in model.cli_env(config).items():
        monkeypatch.setenv(name, value)
    return config


def make_child_worktree(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A repository with one commit and a child's worktree of it on `coven/<name>`."""
    repo = tmp_path / "repo"
    if not repo.exists():
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        (repo / "README.md").write_text("hello\n")
        (repo / ".gitignore").write_text(".env\n")
        (repo / ".worktreeinclude").write_text(".env\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", "first")
    worktree = tmp_path / name
    git(repo, "worktree", "add", "-q", "-b", f"coven/{name}", str(worktree))
    (worktree / ".env").write_text("SECRET=1\n")  # a .worktreeinclude file, not committed
    return repo, worktree


def make_user_repo(tmp_path: Path) -> Path:
    """The user's checkout a fork through the server starts from: one commit."""
    repo = tmp_path / "user-repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("hello\n")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=U", "-c", "user.email=u@example.com", "commit", "-qm", "first")
    return repo


def cluster_options(ray_cluster: RayTestCluster) -> dict[str, Any]:
    """`initializationOptions.cluster` placing children on the worker node."""
    resources = {"CPU": 0, WORKER_RESOURCE: 1}
    return {"ray": {"address": ray_cluster.address, "env": list(TRAVELS), "resources": resources}}


def cluster_for(ray_cluster: RayTestCluster) -> RayCluster:
    return RayCluster(
        RayTarget(
            address=ray_cluster.address,
            env=TRAVELS,
            resources={"CPU": 0, WORKER_RESOURCE: 1},
        )
    )


def agent_pids(text: str) -> list[int]:
    """Processes whose command line holds `text` (a Claude child's has its session id)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


async def until_gone(text: str) -> None:
    await wait_until(lambda: not agent_pids(text), 60, f"the agent of {text} to end")


def actor_alive(name: str) -> bool:
    import ray

    try:
        ray.get_actor(f"coven-child-{name}", namespace="coven-ls")
    except ValueError:
        return False
    return True


def sitting_asked(request: Any) -> bool:
    return "Sit on the node" in request.last_user_text


def worker_node_id() -> str:
    import ray

    return next(n["NodeID"] for n in ray.nodes() if WORKER_RESOURCE in n["Resources"])


async def one_turn(agent: Any, stream: Any, text: str, seen: list[AgentEvent]) -> TurnEnded:
    await agent.send(text)
    with anyio.fail_after(180):
        async for event in stream:
            seen.append(event)
            if isinstance(event, TurnEnded):
                return event
    raise AssertionError(f"the stream ended before the turn did: {seen}")


async def test_a_child_runs_on_the_worker_and_its_work_comes_back(
    ray_cluster: RayTestCluster, model: ScriptedModel, local_env: Path, tmp_path: Path
) -> None:
    _, worktree = make_child_worktree(tmp_path, "first")
    model.on("Do the work", ToolUse("Bash", {"command": WORK}, id="toolu_work"), times=1)
    model.on("WORK-DONE", "All done.")
    cluster = cluster_for(ray_cluster)
    assert await cluster.unreachable() is None
    backend = cluster.backend(ClaudeBackend(), "claude", InitializationOptions())
    seen: list[AgentEvent] = []
    asked: list[tuple[str, dict[str, Any], int]] = []

    async def ask(name: str, tool_input: dict[str, Any], tool_use_id: str | None, options=()):
        asked.append((name, tool_input, len(seen)))
        return Decision(True, "")

    first_id = str(uuid.uuid4())
    spec = AgentSpec(cwd=str(worktree), permission_mode="default", start=New(first_id))
    agent = await backend.open(spec, ask)
    try:
        assert actor_alive(first_id) and agent_pids(first_id)
        async with contextlib.aclosing(agent.messages()) as stream:
            ended = await one_turn(agent, stream, "Do the work", seen)
    finally:
        await agent.close()
    await until_gone(first_id)
    assert not actor_alive(first_id)
    assert ended.outcome == "success", ended
    placed = seen[0]
    assert isinstance(placed, Placed) and placed.node_id == worker_node_id()
    # The question was asked here, while the turn ran: the tool call had already arrived.
    [(tool, tool_input, seen_then)] = asked
    assert tool == "Bash" and tool_input["command"] == WORK
    calls = [
        p
        for e in seen[:seen_then]
        if isinstance(e, AgentMessage)
        for p in e.parts
        if isinstance(p, ToolCall)
    ]
    assert [c.id for c in calls] == ["toolu_work"]
    # The node's work is in the worktree here: its commit on the child's branch, its edits
    # uncommitted, the included file untouched.
    assert git(worktree, "log", "-1", "--format=%s", "coven/first").strip() == "child commit"
    assert (worktree / "committed.txt").read_text() == "from the node\n"
    assert (worktree / "README.md").read_text() == "hello\nuncommitted\n"
    assert (worktree / "fresh.txt").read_text() == "new\n"
    assert (worktree / ".env").read_text() == "SECRET=1\n"
    status = git(worktree, "status", "--porcelain").splitlines()
    assert sorted(status) == [" M README.md", "?? fresh.txt"]
    # Its conversation came back, under this worktree's folder.
    project = "".join(c if c.isalnum() else "-" for c in str(worktree))
    assert (local_env / "projects" / project / f"{first_id}.jsonl").is_file()

    # A copy of that conversation, on the node again: the model sees the first turn.
    _, second = make_child_worktree(tmp_path, "second")
    model.on("Go on", "Went on.")
    copy = AgentSpec(
        cwd=str(second), permission_mode="default", start=Copy(first_id, None, str(uuid.uuid4()))
    )
    agent = await backend.open(copy, ask)
    try:
        async with contextlib.aclosing(agent.messages()) as stream:
            ended = await one_turn(agent, stream, "Go on", [])
    finally:
        await agent.close()
    assert ended.outcome == "success", ended
    last = model.requests[-1]
    assert "Do the work" in str(last.body["messages"]), "the copy did not continue the parent"
    assert cluster.running() == []


async def test_an_interrupt_reaches_the_agent_on_the_node(
    ray_cluster: RayTestCluster, model: ScriptedModel, local_env: Path, tmp_path: Path
) -> None:
    _, worktree = make_child_worktree(tmp_path, "interrupted")
    model.on("Slow", "too late", latency=600)
    cluster = cluster_for(ray_cluster)
    backend = cluster.backend(ClaudeBackend(), "claude", InitializationOptions())

    async def ask(*_: Any, **__: Any) -> Decision:
        return Decision(True, "")

    agent = await backend.open(AgentSpec(cwd=str(worktree), start=New(str(uuid.uuid4()))), ask)
    try:
        async with contextlib.aclosing(agent.messages()) as stream:
            await agent.send("Slow")
            await anyio.to_thread.run_sync(lambda: model.wait_for_requests(1, timeout=120))
            await agent.interrupt()
            with anyio.fail_after(120):
                async for event in stream:
                    if isinstance(event, TurnEnded):
                        break
        # Ended long before the model's answer (600 s away): the CLI stopped the turn, as it
        # says a stopped turn (Claude's adapter leaves "interrupted" to the session).
        assert event.outcome == "error" and event.subtype == "error_during_execution", event
    finally:
        await agent.close()


async def test_a_stopping_server_ends_its_children_on_the_cluster(
    ray_cluster: RayTestCluster, model: ScriptedModel, local_env: Path, tmp_path: Path
) -> None:
    _, worktree = make_child_worktree(tmp_path, "ended")
    cluster = cluster_for(ray_cluster)
    backend = cluster.backend(ClaudeBackend(), "claude", InitializationOptions())

    async def ask(*_: Any, **__: Any) -> Decision:
        return Decision(True, "")

    name = str(uuid.uuid4())
    agent = await backend.open(AgentSpec(cwd=str(worktree), start=New(name)), ask)
    assert cluster.running() == [name] and agent_pids(name)
    await cluster.aclose()
    assert cluster.running() == []
    await until_gone(name)
    await wait_until(lambda: not actor_alive(name), 60, "its actor to end")
    await agent.close()


def test_nothing_of_ray_reaches_stdout(ray_cluster: RayTestCluster, tmp_path: Path) -> None:
    """Connecting and asking the nodes writes nothing on fd 1 (a server's JSON-RPC)."""
    code = (
        "import anyio\n"
        "from coven_ls.cluster.ray import RayCluster, RayTarget\n"
        f"c = RayCluster(RayTarget({ray_cluster.address!r}, resources={{'CPU': 0}}))\n"
        "assert anyio.run(c.unreachable) is None\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        env={**os.environ, "HOME": str(tmp_path)},
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    assert done.stdout == b""


@pytest.mark.usefixtures("no_user_git_config")
async def test_a_fork_runs_its_overflow_on_the_cluster_and_merges_it_back(
    ray_cluster: RayTestCluster, coven_factory, model: ScriptedModel, tmp_path: Path
) -> None:
    """Through the language server: `placement: "auto"` with maxParallel 1 keeps the first child
    here and places the second on the worker node; both children's files are merged into the
    user's checkout, the clients are told where each ran, and the server's stdout holds nothing
    but JSON-RPC while the cluster child runs."""
    repo = make_user_repo(tmp_path)
    for name in ("alpha", "beta"):
        model.on(f"You were assigned 'Write {name}'", ToolUse("Bash", {"command": (
            f"printf '{name}\\n' > {name}.txt && echo wrote-{name}")}))  # fmt: skip
        model.on(f"wrote-{name}", f"Wrote {name}.")
    model.on("Get ready", "Ready.")
    model.on("<fork-results>", "Both are in.")
    stdout = tmp_path / "server-stdout"
    cluster = {"ray": {"address": ray_cluster.address, "env": list(TRAVELS),
                       "resources": {"CPU": 0, WORKER_RESOURCE: 1}}}  # fmt: skip
    coven = await coven_factory(
        init_options={"cluster": cluster, "maxParallel": 1}, stdout_copy=stdout
    )
    assert coven.init_result.capabilities.experimental["coven"]["cluster"] == "ray"
    sid = await coven.start("Get ready", cwd=str(repo))
    await coven.wait_status(sid, "idle")
    tasks = ["Write alpha", "Write beta"]
    await coven.request("coven/fork", {"sessionId": sid, "tasks": tasks, "placement": "auto"})
    await coven.wait_for(
        lambda e: e["sessionId"] == sid and e["kind"] == "turnResult" and e["seq"] > 0
        and e.get("text") == "Both are in.",
        timeout=300, what="the parent's answer to the fork's results",
    )  # fmt: skip
    [started] = coven.of(sid, "forkStarted")
    assert started["placement"] == "auto" and started["isolation"] == "worktree", started
    here, there = (c["sessionId"] for c in started["children"])
    assert await cluster_for(ray_cluster).unreachable() is None  # connects this process too
    [placed] = coven.of(there, "placed")
    assert placed["cluster"] == "ray" and placed["nodeId"] == worker_node_id(), placed
    assert not coven.of(here, "placed")
    sessions = (await coven.request("coven/listSessions", {}))["sessions"]
    listed = {s["sessionId"]: s for s in sessions}
    assert listed[here]["placement"] is None
    assert listed[there]["placement"]["nodeId"] == worker_node_id(), listed[there]
    assert (repo / "alpha.txt").read_text() == "alpha\n"
    assert (repo / "beta.txt").read_text() == "beta\n"
    for child in (here, there):
        assert listed[child]["changes"]["merge"] == "applied", listed[child]
    await coven.stop()
    frames = json_rpc_frames(stdout.read_bytes())
    assert any(f.get("params", {}).get("kind") == "placed" for f in frames)


# One turn of a child through `sys.argv[1]` (a `ray://` address), in a process of its own: this
# one is connected as a driver already (a process holds one Ray connection).
CLIENT_TURN = """
import anyio, contextlib, json, sys, uuid, ray
from coven_ls.agents.claude import ClaudeBackend
from coven_ls.cluster.ray import RayCluster, RayTarget
from coven_ls.core.agent import AgentSpec, Decision, New
from coven_ls.core.agent.events import Placed, TurnEnded
from coven_ls.protocol.types import InitializationOptions
address, env, resources, cwd = json.loads(sys.argv[1])
async def main():
    cluster = RayCluster(RayTarget(address, env=tuple(env), resources=resources))
    backend = cluster.backend(ClaudeBackend(), "claude", InitializationOptions())
    asked = []
    async def ask(name, tool_input, tool_use_id, options=()):
        asked.append(name)
        return Decision(True, "")
    spec = AgentSpec(cwd=cwd, permission_mode="default", start=New(str(uuid.uuid4())))
    agent = await backend.open(spec, ask)
    seen = []
    try:
        await agent.send("Do the work")
        with anyio.fail_after(180):
            async with contextlib.aclosing(agent.messages()) as stream:
                async for event in stream:
                    seen.append(event)
                    if isinstance(event, TurnEnded):
                        break
    finally:
        await agent.close()
    client = ray.util.client.ray.is_connected()
    print(json.dumps({"client": client, "node_id": seen[0].node_id, "asked": asked,
                      "outcome": seen[-1].outcome, "running": cluster.running()}))
anyio.run(main)
"""


async def test_a_child_runs_one_turn_through_a_ray_client_address(
    ray_cluster: RayTestCluster, model: ScriptedModel, local_env: Path, tmp_path: Path
) -> None:
    """`ray://` (Ray's client, which has no streaming actor methods): the child's events,
    its question and its work come back as through the cluster's own address."""
    _, worktree = make_child_worktree(tmp_path, "client")
    model.on("Do the work", ToolUse("Bash", {"command": WORK}, id="toolu_work"), times=1)
    model.on("WORK-DONE", "All done.")
    resources = {"CPU": 0, WORKER_RESOURCE: 1}
    args = [ray_cluster.client_address, TRAVELS, resources, str(worktree)]
    done = await anyio.to_thread.run_sync(lambda: subprocess.run(
        [sys.executable, "-c", CLIENT_TURN, json.dumps(args)], capture_output=True,
        env={**os.environ, "HOME": str(tmp_path)}, timeout=300, check=False,
    ))  # fmt: skip
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    said = json.loads(done.stdout.decode().splitlines()[-1])
    await cluster_for(ray_cluster).connect()
    assert said == {"client": True, "node_id": worker_node_id(), "asked": ["Bash"],
                    "outcome": "success", "running": []}  # fmt: skip
    assert git(worktree, "log", "-1", "--format=%s", "coven/client").strip() == "child commit"
    assert (worktree / "fresh.txt").read_text() == "new\n"


@pytest.mark.usefixtures("no_user_git_config")
async def test_a_cluster_childs_questions_and_cancel_go_through_the_server(
    ray_cluster: RayTestCluster, coven_factory, model: ScriptedModel, tmp_path: Path
) -> None:
    """Three children placed on the worker node through the language server: one's question is
    allowed from the editor, one's denied (its model sees the denial), one is cancelled while
    its turn runs there (its agent on the node ends); the allowed one's work is merged."""
    repo = make_user_repo(tmp_path)
    for name in ("alpha", "gamma"):
        model.on(f"You were assigned 'Write {name}'", ToolUse("Bash", {"command": (
            f"printf '{name}\\n' > {name}.txt && echo wrote-{name}")}))  # fmt: skip
    model.on("wrote-alpha", "Wrote alpha.")
    model.on("Not gamma.", "Left gamma alone.")  # only if the denial reached its model
    model.on("You were assigned 'Wait slowly'", "too late", latency=300)
    model.on("Get ready", "Ready.")
    model.on("<fork-results>", "Alpha is in.")
    coven = await coven_factory(init_options={"cluster": cluster_options(ray_cluster)})
    coven.permission_answer = lambda req: (
        {"allow": False, "message": "Not gamma."}
        if "gamma" in req["input"].get("command", "")
        else {"allow": True}
    )
    sid = await coven.start("Get ready", cwd=str(repo))
    await coven.wait_status(sid, "idle")
    tasks = ["Write alpha", "Write gamma", "Wait slowly"]
    await coven.request("coven/fork", {"sessionId": sid, "tasks": tasks, "placement": "cluster"})
    started = await coven.wait_kind(sid, "forkStarted")
    alpha, gamma, slow = (c["sessionId"] for c in started["children"])
    await anyio.to_thread.run_sync(lambda: model.wait_for_requests(
        1, timeout=180, predicate=lambda r: "Wait slowly" in r.last_user_text))  # fmt: skip
    slow_agent = (await coven.wait_kind(slow, "agent"))["agentSessionId"]
    assert agent_pids(slow_agent), "the slow child's agent runs (on the node)"
    await coven.request("coven/cancel", {"sessionId": slow})
    await coven.wait_status(slow, "cancelled")
    await until_gone(slow_agent)
    await coven.wait_for(
        lambda e: e["sessionId"] == sid and e["kind"] == "turnResult" and e["seq"] > 0
        and e.get("text") == "Alpha is in.",
        timeout=300, what="the parent's answer to the fork's results",
    )  # fmt: skip
    assert await cluster_for(ray_cluster).unreachable() is None  # connects this process too
    for child in (alpha, gamma, slow):
        [placed] = coven.of(child, "placed")
        assert placed["nodeId"] == worker_node_id(), placed
    asked = {r["sessionId"]: r for r in coven.permission_requests}
    assert sorted(asked) == sorted([alpha, gamma]), coven.permission_requests
    assert all(r["toolName"] == "Bash" and r["toolUseId"] for r in asked.values())
    [decision] = coven.of(gamma, "permissionDecision")
    assert decision["allow"] is False and decision["message"] == "Not gamma.", decision
    [denied] = coven.of(gamma, "toolResult")
    assert denied["isError"] is True and "Not gamma." in denied["content"], denied
    [finished] = coven.of(sid, "forkFinished")
    assert [(r["ok"], r.get("error")) for r in finished["results"]] == [
        (True, None), (True, None), (False, "cancelled by the user")]  # fmt: skip
    assert (repo / "alpha.txt").read_text() == "alpha\n"
    assert not (repo / "gamma.txt").exists()
    sessions = (await coven.request("coven/listSessions", {}))["sessions"]
    listed = {s["sessionId"]: s for s in sessions}
    assert listed[alpha]["changes"]["merge"] == "applied", listed[alpha]
    assert listed[slow]["status"] == "cancelled", listed[slow]
    await coven.stop()


@pytest.mark.usefixtures("no_user_git_config")
async def test_a_lost_worker_ends_the_child_saying_so(
    ray_cluster: RayTestCluster,
    coven_factory,
    model: ScriptedModel,
    local_env: Path,
    tmp_path: Path,
) -> None:
    """Last in the module: the worker node is killed mid-turn, under a child opened here and
    under a fork child of the language server's (which fails saying so; its parent is told)."""
    repo = make_user_repo(tmp_path)
    model.on("You were assigned 'Sit on the node'", "too late", latency=600)
    model.on("Get ready", "Ready.")
    model.on("<fork-results>", "The node is gone.")
    coven = await coven_factory(init_options={"cluster": cluster_options(ray_cluster)})
    sid = await coven.start("Get ready", cwd=str(repo))
    await coven.wait_status(sid, "idle")
    await coven.request(
        "coven/fork", {"sessionId": sid, "tasks": ["Sit on the node"], "placement": "cluster"}
    )
    [sitting] = (c["sessionId"] for c in (await coven.wait_kind(sid, "forkStarted"))["children"])
    _, worktree = make_child_worktree(tmp_path, "lost")
    model.on("Do the work", ToolUse("Bash", {"command": WORK}, id="toolu_work"), times=1)
    model.on("WORK-DONE", "All done.")
    model.on("Hang", "too late", latency=600)
    cluster = cluster_for(ray_cluster)
    backend = cluster.backend(ClaudeBackend(), "claude", InitializationOptions())

    async def ask(*_: Any, **__: Any) -> Decision:
        return Decision(True, "")

    spec = AgentSpec(cwd=str(worktree), permission_mode="default", start=New(str(uuid.uuid4())))
    agent = await backend.open(spec, ask)
    try:
        async with contextlib.aclosing(agent.messages()) as stream:
            ended = await one_turn(agent, stream, "Do the work", [])
            assert ended.outcome == "success", ended
            await agent.send("Hang")
            await anyio.to_thread.run_sync(
                lambda: model.wait_for_requests(
                    1, timeout=120, predicate=lambda r: "Hang" in r.last_user_text
                )
            )
            await anyio.to_thread.run_sync(
                lambda: model.wait_for_requests(1, timeout=120, predicate=sitting_asked)
            )
            ray_cluster.kill_worker()
            with pytest.raises(AgentFailed, match=r"^The node \S+ was lost: "):
                with anyio.fail_after(180):
                    async for _event in stream:
                        pass
    finally:
        await agent.close()
    assert cluster.running() == []
    # The work of the turn before stays.
    assert git(worktree, "log", "-1", "--format=%s", "coven/lost").strip() == "child commit"
    assert (worktree / "fresh.txt").read_text() == "new\n"
    # The fork child fails saying so, and its parent is given that failure.
    await coven.wait_status(sitting, "failed")
    await until_gone((await coven.wait_kind(sitting, "agent"))["agentSessionId"])
    await coven.wait_for(
        lambda e: e["sessionId"] == sid and e["kind"] == "turnResult" and e["seq"] > 0
        and e.get("text") == "The node is gone.",
        timeout=180, what="the parent's answer to the fork's results",
    )  # fmt: skip
    [finished] = coven.of(sid, "forkFinished")
    [result] = finished["results"]
    assert not result["ok"] and re.match(r"The node \S+ was lost: ", result["error"]), result
    told = next(r for r in model.requests if "<fork-results>" in r.last_user_text)
    assert 'error="The node ' in told.last_user_text, told.last_user_text
    await coven.stop()
