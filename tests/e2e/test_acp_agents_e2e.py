"""Agents that speak ACP, end to end: a real coven-ls with `initializationOptions.agents`, a real
ACP agent installed from npm by scripts/test.sh (tests/e2e/acp_agents: the native
`@zed-industries/codex-acp`, pinned) against the scripted Responses API, through pytest-lsp's
client."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest
from pygls.exceptions import JsonRpcException

from coven_ls import protocol
from coven_ls.testing.scripted_responses import ScriptedResponses, command

from ..gitrepo import make_repo
from ..harness import Coven, processes_with_env, wait_until
from .acp_real import command_turn, streamed

CODEX_ACP = (
    Path(__file__).parent
    / "acp_agents/node_modules/@zed-industries/codex-acp-linux-x64/bin/codex-acp"
)

pytestmark = pytest.mark.skipif(
    not CODEX_ACP.is_file(),
    reason="codex-acp not installed (scripts/test.sh runs npm ci in tests/e2e/acp_agents)",
)


@pytest.fixture
def responses() -> Iterator[ScriptedResponses]:
    with ScriptedResponses() as scripted:
        yield scripted


@pytest.fixture
def start_acp(
    coven_factory: Callable[..., Awaitable[Coven]], responses: ScriptedResponses, tmp_path: Path
) -> Callable[..., Awaitable[Coven]]:
    """A coven-ls with codex-acp configured as the agent `name` (`codex-acp` unless told; its
    CODEX_HOME and key in the agent's own `env`), the default agent of its sessions."""

    async def start(home: str = "ws", name: str = "codex-acp", **kw: Any) -> Coven:
        env = responses.codex_env(tmp_path / "codex-home")
        agents = {name: {"command": [str(CODEX_ACP)], "env": env}}
        options = {"agents": agents, "agent": name, **kw.pop("init_options", {})}
        return await coven_factory(home=home, init_options=options, **kw)

    return start


def peak_rss_kib(coven: Coven) -> int:
    """The peak RSS of this server's codex-acp processes (VmHWM), added up."""
    total = 0
    for pid in processes_of(coven):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1])
    return total


def processes_of(coven: Coven) -> list[int]:
    from ..harness import processes_with_env

    found = []
    for pid in processes_with_env(coven.marker):
        try:
            if Path(f"/proc/{pid}/exe").resolve().name == "codex-acp":
                found.append(pid)
        except OSError:
            continue
    return found


async def test_a_session_streams_asks_permission_for_a_command_and_goes_on(
    start_acp, responses
) -> None:
    responses.on("hello", "Hello from codex-acp!", chunk_chars=4)
    responses.on("WRITE-ONE", command("echo one > one.txt", escalate=True), times=1)
    responses.on("Process exited", "the command ran")
    responses.on("again", "short answer")
    coven = await start_acp()
    questions: list[dict[str, Any]] = []

    def pick_allow_once(request: dict[str, Any]) -> dict[str, Any]:
        questions.append(request)
        once = next(o for o in request["options"] if o["kind"] == "allow_once")
        return {"allow": True, "optionId": once["optionId"]}

    coven.permission_answer = pick_allow_once
    sid = await coven.start("hello there")
    first = await coven.wait_kind(sid, "turnResult")
    assert first["text"] == "Hello from codex-acp!" and not first["isError"]
    # The gauge is what codex-acp's usage_update says is in the context, and its window.
    gauge = first["contextUsage"]
    assert gauge["tokens"] > 0 and gauge["window"] and gauge["window"] > gauge["tokens"]
    assert first.get("costUsd") is None  # codex-acp reports no cost
    offered = coven.init_result.capabilities.experimental["coven"]["agents"]
    # Not started yet when the client connected: whether it copies is not known; that it reports
    # no cost is in the known agents' table (agents/acp/known.py).
    assert {"name": "codex-acp", "kind": "acp", "fork": None, "cost": False} in offered
    assert streamed(coven, sid) == "Hello from codex-acp!"
    assert len([d for d in coven.deltas if d["sessionId"] == sid]) > 1
    [text] = coven.of(sid, "text")
    assert text["text"] == "Hello from codex-acp!"
    [info] = (await coven.request("coven/listSessions", {}))["sessions"]
    assert info["agent"] == "codex-acp" and info["agentSessionId"] == first["agentSessionId"]
    await coven.wait_status(sid, "idle")

    second = await command_turn(coven, sid, questions, "/bin/bash -lc 'echo one > one.txt'")
    [asked] = coven.of(sid, "permissionRequest")
    # codex-acp's own options, by kind, on the event and in the question; the one picked.
    kinds = {o["optionId"]: o["kind"] for o in asked["options"]}
    assert kinds["approved"] == "allow_once" and "reject_once" in kinds.values()
    [question] = questions
    assert question["options"] == asked["options"]
    [decided] = coven.of(sid, "permissionDecision")
    assert decided["allow"] and decided["optionId"] == "approved"
    # codex-acp 0.16.0 at times never says the command completed (its output arrives with the
    # turn's answer, or not at all): the call then ends with the turn, not as an error
    # (command_turn holds the toolResult to that).
    await coven.wait_status(sid, "idle", after_seq=second["seq"] - 1)

    await coven.request("coven/sendMessage", {"sessionId": sid, "text": "again"})
    third = await coven.wait_kind(sid, "turnResult", count=3)
    assert third["text"] == "short answer"
    # The same ACP session: the model saw the whole conversation.
    assert "hello there" in responses.requests[-1].all_text
    # codex-acp reports no cost, so a cost limit on its children could not be kept.
    await coven.wait_status(sid, "idle", after_seq=third["seq"] - 1)
    with pytest.raises(JsonRpcException) as refused:
        await coven.request(
            "coven/fork",
            {"sessionId": sid, "tasks": ["a", "b"], "limits": {"childCostUsd": 1.0}},
        )
    assert refused.value.code == protocol.ErrorCode.InvalidParams
    assert "'codex-acp' reports no cost" in str(refused.value)
    rss = peak_rss_kib(coven)
    print(f"codex-acp peak RSS: {rss / 1024:.0f} MiB")
    assert 0 < rss < 1024 * 1024


async def test_a_restart_resumes_the_acp_session(start_acp, responses) -> None:
    responses.on("remember the word pineapple", "Noted: pineapple.")
    responses.on("Which word", "It was pineapple.")
    first = await start_acp()
    sid = await first.start("Please remember the word pineapple")
    acp_session = (await first.wait_kind(sid, "turnResult"))["agentSessionId"]
    await first.wait_status(sid, "idle")
    await first.stop()

    second = await start_acp()
    [info] = (await second.request("coven/listSessions", {}))["sessions"]
    assert info["agent"] == "codex-acp" and info["agentSessionId"] == acp_session
    await second.request("coven/sendMessage", {"sessionId": sid, "text": "Which word was it?"})
    result = await second.wait_kind(sid, "turnResult")
    assert result["text"] == "It was pineapple." and result["agentSessionId"] == acp_session
    # session/resume (codex-acp has it): the model saw the conversation before the restart.
    assert "Noted: pineapple." in responses.requests[-1].all_text


async def test_cancel_mid_turn_interrupts_it_and_the_session_goes_on(start_acp, responses) -> None:
    responses.on("long", "word " * 200, chunk_chars=5, chunk_delay=0.05, times=1)
    responses.on("again", "short answer")
    coven = await start_acp()
    sid = await coven.start("a long answer please")
    await wait_until(lambda: len(coven.deltas) >= 3, 60, "the answer to stream")
    await coven.request("coven/cancel", {"sessionId": sid})
    result = await coven.wait_kind(sid, "turnResult")
    assert result["cancelled"] and not result["isError"]
    assert len(streamed(coven, sid)) < len("word " * 200)
    await coven.wait_status(sid, "idle", after_seq=result["seq"] - 1)
    await coven.request("coven/sendMessage", {"sessionId": sid, "text": "again"})
    second = await coven.wait_kind(sid, "turnResult", count=2)
    assert second["text"] == "short answer"


async def test_a_bad_configuration_fails_clearly(start_acp) -> None:
    coven = await start_acp(
        init_options={"agents": {"broken": {"command": ["no-such-acp-agent-here"]}}}
    )
    with pytest.raises(JsonRpcException) as missing:
        await coven.request("coven/startSession", {"prompt": "hi", "agent": "broken"})
    assert "ACP agent 'broken'" in str(missing.value)
    assert "'no-such-acp-agent-here' was not found" in str(missing.value)
    with pytest.raises(JsonRpcException) as unknown:
        await coven.request("coven/startSession", {"prompt": "hi", "agent": "nope"})
    assert "Unknown agent 'nope'" in str(unknown.value)
    assert unknown.value.code == protocol.ErrorCode.InvalidParams


async def test_a_session_whose_agent_was_removed_is_kept_and_says_so(start_acp, responses) -> None:
    responses.on("hello", "Hi there.")
    # Under a name of the user's own: a known agent's name (`codex-acp` is one, acp/known.py)
    # stays known without its entry, and would say how to install it instead.
    first = await start_acp(name="my-agent")
    sid = await first.start("hello")
    await first.wait_kind(sid, "turnResult")
    await first.wait_status(sid, "idle")
    await first.stop()

    # Restarted without the agent's entry: the session is kept as it was, and says so when used.
    second = await start_acp(init_options={"agents": {}, "agent": "claude"})
    [info] = (await second.request("coven/listSessions", {}))["sessions"]
    assert info["sessionId"] == sid and info["agent"] == "my-agent"
    for method, params in (
        ("coven/sendMessage", {"sessionId": sid, "text": "again"}),
        ("coven/fork", {"sessionId": sid, "tasks": ["a", "b"]}),
        ("coven/branch", {"sessionId": sid}),
    ):
        with pytest.raises(JsonRpcException) as refused:
            await second.request(method, params)
        assert refused.value.code == protocol.ErrorCode.ClaudeUnavailable, method
        assert "'my-agent'" in str(refused.value)
        assert "initializationOptions.agents" in str(refused.value)
    deleted = await second.request("coven/deleteSession", {"sessionId": sid, "purge": True})
    assert deleted["deletedSessionIds"] == [sid]
    assert (await second.request("coven/listSessions", {}))["sessions"] == []


async def test_delete_with_purge_leaves_no_agent_process_behind(start_acp, responses) -> None:
    responses.on("hello", "Hi there.")
    coven = await start_acp()
    sid = await coven.start("hello")
    await coven.wait_kind(sid, "turnResult")
    await coven.wait_status(sid, "idle")
    # The agent is started once more to close and delete the session where it can (codex-acp
    # 0.16 advertises session/close, not session/delete: its session is kept, as the log says);
    # that process ends with the request.
    deleted = await coven.request("coven/deleteSession", {"sessionId": sid, "purge": True})
    assert deleted["deletedSessionIds"] == [sid]
    await wait_until(lambda: not processes_of(coven), 30, "no codex-acp process left")


@pytest.mark.usefixtures("no_user_git_config")
async def test_a_worktree_fork_without_session_fork_gives_children_a_transcript_and_merges_them(
    start_acp, responses, tmp_path: Path
) -> None:
    """codex-acp has no session/fork: the `<fork>` in its answer forks into children that start
    from the conversation coven-ls recorded, written out, in worktrees merged back; `inherit`
    is refused before anything is made."""
    repo = make_repo(tmp_path / "repo", {"README": "base\n"}, message="base")
    # The children's rules first: their first prompt holds the parent's conversation too.
    responses.on("'Make alpha'", command("printf 'alpha\\n' > alpha.txt", escalate=True), times=1)
    responses.on("'Make beta'", command("printf 'beta\\n' > beta.txt", escalate=True), times=1)
    responses.on("Process exited", "Made it.")
    # (the fork instructions ahead of the parent's first prompt show a <fork-results> too)
    responses.on(re.compile(r"^<fork-results>"), "Both merged.")
    responses.on("Split it", "Splitting.\n<fork>\n- Make alpha\n- Make beta\n</fork>")
    coven = await start_acp(init_options={"forkMode": "auto"})
    coven.permission_answer = lambda request: {"allow": True}
    sid = await coven.start("Split it", cwd=str(repo))
    started = await coven.wait_kind(sid, "forkStarted")
    assert started["isolation"] == "worktree" and started["context"] == "transcript"
    done = await coven.wait_kind(sid, "turnResult", count=2)
    assert done["text"] == "Both merged."
    assert (repo / "alpha.txt").read_text() == "alpha\n"
    assert (repo / "beta.txt").read_text() == "beta\n"
    # The fork instructions led the parent's first prompt (ACP has no system prompt of ours).
    first = next(r for r in responses.requests if "Split it" in r.last_user_text)
    assert "<coven-instructions" in first.last_user_text
    assert coven.of(sid, "prompt")[0]["text"] == "Split it"  # the user's words only
    for label in ("Make alpha", "Make beta"):
        brief = next(r for r in responses.requests if f"'{label}'" in r.last_user_text)
        written = brief.last_user_text.split("\n<conversation>\n")[1]
        assert "<user>\nSplit it\n</user>" in written and "Splitting." in written
    listed = {
        s["sessionId"]: s for s in (await coven.request("coven/listSessions", {}))["sessions"]
    }
    for child in (c["sessionId"] for c in started["children"]):
        assert listed[child]["agent"] == "codex-acp"
        assert listed[child]["changes"]["merge"] == "applied"
    # codex-acp is known now: it copies nothing, so its children cannot inherit.
    await coven.wait_status(sid, "idle", after_seq=done["seq"] - 1)
    with pytest.raises(JsonRpcException) as refused:
        await coven.request(
            "coven/fork", {"sessionId": sid, "tasks": ["a", "b"], "context": "inherit"}
        )
    assert refused.value.code == protocol.ErrorCode.InvalidParams
    assert "has no session/fork" in str(refused.value)
    assert len(coven.of(sid, "forkStarted")) == 1


def terminal_env(responses: ScriptedResponses, tmp_path: Path) -> dict[str, str]:
    """A terminal whose PATH has codex-acp (a known agent: offered without configuration) and
    whose codex settings send it to the scripted Responses API."""
    return {
        **os.environ,
        **responses.codex_env(tmp_path / "codex-home"),
        "PATH": f"{CODEX_ACP.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(tmp_path / "home"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }


def assert_no_agent_left(tmp_path: Path) -> None:
    deadline = time.monotonic() + 30
    while left := processes_with_env(str(tmp_path / "codex-home")):
        assert time.monotonic() < deadline, f"left behind: {left}"
        time.sleep(0.1)


def test_run_agent_names_an_acp_agent_and_an_unknown_name_lists_the_servers(
    responses, tmp_path: Path
) -> None:
    """`coven-ls run --agent codex-acp`: the session runs on the ACP agent found on PATH; an
    agent the server does not offer is refused before any session, with the ones it does."""
    responses.on("terminal", "Hello from codex-acp in the terminal.", chunk_chars=6)
    env = terminal_env(responses, tmp_path)
    work = tmp_path / "workspace"
    work.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "coven_ls", "run", "--json", "--cwd", str(work), *args],
            env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180,
            check=False,
        )  # fmt: skip

    done = run("--agent", "codex-acp", "hello from the terminal")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    [result] = [e for e in lines if e.get("kind") == "turnResult"]
    assert result["text"] == "Hello from codex-acp in the terminal." and not result["isError"]
    assert [r for r in responses.requests if "hello from the terminal" in r.all_text]
    assert_no_agent_left(tmp_path)

    asked = len(responses.requests)
    refused = run("--agent", "nosuch", "hello")
    assert refused.returncode == 2
    said = refused.stdout + refused.stderr
    assert "--agent nosuch: Unknown agent 'nosuch': this server offers claude" in said, said
    assert "codex-acp" in said and "initializationOptions.agents" in said
    assert len(responses.requests) == asked, "no session started for an unknown agent"
    assert_no_agent_left(tmp_path)


def test_chat_agent_lists_the_servers_agents_and_switches_new_sessions_to_one(
    responses, tmp_path: Path
) -> None:
    """`/agent` in `coven-ls chat`: alone it lists the server's agents (codex-acp found on
    PATH among them); an unknown name is refused with them; a known one runs the next session."""
    responses.on("hello acp", "Hi from codex-acp.")
    work = tmp_path / "workspace"
    work.mkdir()
    env = {**terminal_env(responses, tmp_path), "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"}
    child = pexpect.spawn(
        sys.executable, ["-m", "coven_ls", "chat", "--cwd", str(work)], env=env,
        encoding="utf-8", timeout=120, dimensions=(50, 220),
    )  # fmt: skip
    child.logfile_read = (tmp_path / "terminal.log").open("a", encoding="utf-8")
    try:
        child.expect_exact("Type a message to start a session")
        child.send("/agent\r")
        child.expect_exact("This server's agents (/agent NAME picks one):")
        child.expect_exact("codex-acp")
        child.send("/agent nosuch\r")
        child.expect_exact("Unknown agent 'nosuch': this server offers claude")
        child.send("/agent codex-acp\r")
        child.expect_exact("New sessions run on codex-acp.")
        child.send("hello acp\r")
        child.expect_exact("Hi from codex-acp.")
        child.send("/sessions\r")
        child.expect_exact("codex-acp hello acp")
        child.send("/quit\r")
        child.expect(pexpect.EOF, timeout=120)
        child.close()
        assert child.exitstatus == 0, child.before
    finally:
        if child.isalive():
            child.terminate(force=True)
    assert [r for r in responses.requests if "hello acp" in r.all_text]
    assert_no_agent_left(tmp_path)


async def test_an_agent_killed_while_idle_and_mid_turn_is_started_again(
    start_acp, responses
) -> None:
    responses.on("remember the word pineapple", "Noted: pineapple.")
    responses.on("long", "word " * 200, chunk_chars=5, chunk_delay=0.05, times=1)
    responses.on("Which word", "It was pineapple.")
    coven = await start_acp()
    sid = await coven.start("Please remember the word pineapple")
    first = await coven.wait_kind(sid, "turnResult")
    await coven.wait_status(sid, "idle")

    # Killed while idle: started again at once, its session taken up (session/resume).
    [idle_pid] = processes_of(coven)
    os.kill(idle_pid, signal.SIGKILL)
    restarted = await coven.wait_kind(sid, "agentRestarted")
    assert (restarted["restart"], restarted["maxRestarts"]) == (1, 3)
    assert "'codex-acp' was killed by SIGKILL" in restarted["reason"]
    await wait_until(lambda: processes_of(coven) not in ([], [idle_pid]), 30, "a new codex-acp")

    # Killed mid-turn: the turn fails with the reason, and the agent is started again.
    await coven.request("coven/sendMessage", {"sessionId": sid, "text": "a long answer please"})
    await wait_until(
        lambda: len(streamed(coven, sid)) > len("Noted: pineapple.") + 10, 60, "a stream"
    )
    [busy_pid] = processes_of(coven)
    os.kill(busy_pid, signal.SIGKILL)
    failed = await coven.wait_kind(sid, "turnResult", count=2)
    assert failed["isError"] and "'codex-acp' was killed by SIGKILL" in failed["text"]
    again = await coven.wait_kind(sid, "agentRestarted", count=2)
    assert again["restart"] == 2 and again["seq"] > failed["seq"]
    assert coven.of(sid, "error") == []  # restarted, not failed

    # The same conversation goes on in the new process.
    await coven.request("coven/sendMessage", {"sessionId": sid, "text": "Which word was it?"})
    third = await coven.wait_kind(sid, "turnResult", count=3)
    assert third["text"] == "It was pineapple." and not third["isError"]
    assert third["agentSessionId"] == first["agentSessionId"]
    assert "Noted: pineapple." in responses.requests[-1].all_text
    assert busy_pid not in processes_of(coven)
