"""Codex sessions end to end: a real coven-ls, the real `codex` binary (the openai-codex-cli-bin
wheel) against the scripted Responses API, through pytest-lsp's client."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pygls.exceptions import JsonRpcException

from coven_ls import protocol
from coven_ls.agents.codex import resolve_codex
from coven_ls.testing.scripted_model import Usage
from coven_ls.testing.scripted_responses import (
    HttpError,
    Reply,
    ResponsesRequest,
    ScriptedResponses,
    Thinking,
    command,
    patch,
)

from ..gitrepo import make_repo
from ..harness import Coven, processes_with_env, wait_until

try:
    resolve_codex(None)
    HAVE_CODEX = True
except protocol.CovenError:
    HAVE_CODEX = False

pytestmark = pytest.mark.skipif(
    not HAVE_CODEX, reason="no codex binary (pip install coven-ls[codex])"
)

CODEX = {"agent": "codex"}


@pytest.fixture
def responses() -> Iterator[ScriptedResponses]:
    with ScriptedResponses() as scripted:
        yield scripted


@pytest.fixture
def start_codex(
    coven_factory: Callable[..., Awaitable[Coven]], responses: ScriptedResponses, tmp_path: Path
) -> Callable[..., Awaitable[Coven]]:
    """A coven-ls whose codex talks to `responses`; the same `home` is the same workspace and
    CODEX_HOME (a restart)."""

    async def start(home: str = "ws", env: dict[str, str] | None = None, **kw: Any) -> Coven:
        codex_env = responses.codex_env(tmp_path / home / "codex-home")
        return await coven_factory(home=home, extra_env={**codex_env, **(env or {})}, **kw)

    return start


def streamed(coven: Coven, sid: str, kind: str = "text") -> str:
    return "".join(d["text"] for d in coven.deltas if d["sessionId"] == sid and d["kind"] == kind)


async def test_text_streams_then_arrives_whole_with_usage(start_codex, responses) -> None:
    responses.on(
        "hello", Thinking("thinking it over"), "Hello from codex!", chunk_chars=4,
        usage=Usage(300, 20, cache_read_input_tokens=700),
    )  # fmt: skip
    coven = await start_codex(init_options=CODEX)
    sid = await coven.start("hello there")
    result = await coven.wait_kind(sid, "turnResult")
    assert result["text"] == "Hello from codex!" and not result["isError"]
    assert streamed(coven, sid) == "Hello from codex!"
    assert len([d for d in coven.deltas if d["sessionId"] == sid and d["kind"] == "text"]) > 1
    assert streamed(coven, sid, "thinking") == "thinking it over"
    [text] = coven.of(sid, "text")
    [thinking] = coven.of(sid, "thinking")
    assert text["text"] == "Hello from codex!" and thinking["text"] == "thinking it over"
    assert text["blockId"] and text["blockId"] in {d["blockId"] for d in coven.deltas}
    [agent] = coven.of(sid, "agent")
    assert agent["agentSessionId"] == result["agentSessionId"]
    [request] = responses.requests
    assert request.thread_id == agent["agentSessionId"]
    assert result["usage"]["inputTokens"] > 0 and result.get("costUsd") is None  # gpt-5.5: unpriced
    # The gauge is the request codex reported last (its cached input included); gpt-5.5 is not in
    # the price table: tokens only.
    assert result["contextUsage"] == {"tokens": 1000, "window": None, "model": "gpt-5.5"}
    [info] = (await coven.request("coven/listSessions", {}))["sessions"]
    assert info["agent"] == "codex" and info["agentSessionId"] == agent["agentSessionId"]
    await coven.wait_status(sid, "idle")


async def test_a_command_asks_and_runs_when_allowed_and_not_when_denied(
    start_codex, responses
) -> None:
    # (Plain words could match a command's output: "Wall time: 0.6 seconds".)
    responses.on("WRITE-ONE", command("echo one > one.txt", escalate=True), times=1)
    responses.on("WRITE-TWO", command("echo two > two.txt", escalate=True), times=1)
    responses.on("Process exited", "the command ran")
    responses.on("rejected", "the command was refused")
    coven = await start_codex(init_options=CODEX)
    coven.permission_answer = lambda request: {"allow": "one.txt" in str(request["input"])}
    sid = await coven.start("WRITE-ONE please")
    result = await coven.wait_kind(sid, "turnResult")
    assert result["text"] == "the command ran"
    assert (coven.workspace / "one.txt").read_text() == "one\n"
    [use] = coven.of(sid, "toolUse")
    assert use["name"] == "Bash" and "echo one > one.txt" in use["input"]["command"]
    [asked] = coven.of(sid, "permissionRequest")
    assert asked["toolName"] == "Bash" and asked["toolUseId"] == use["toolUseId"]
    assert use["seq"] < asked["seq"]  # the tool call, then the question about it
    [tool_result] = coven.of(sid, "toolResult")
    assert tool_result["toolUseId"] == use["toolUseId"] and not tool_result["isError"]

    await coven.request("coven/sendMessage", {"sessionId": sid, "text": "WRITE-TWO please"})
    second = await coven.wait_kind(sid, "turnResult", count=2)
    assert second["text"] == "the command was refused"
    assert not (coven.workspace / "two.txt").exists()
    decisions = coven.of(sid, "permissionDecision")
    assert [d["allow"] for d in decisions] == [True, False]
    denied = coven.of(sid, "toolResult")[-1]
    assert denied["isError"]
    assert len(coven.permission_requests) == 2


@pytest.mark.parametrize("codex_home", ["in-tmp", "own"])
async def test_a_command_runs_in_the_sandbox_with_bubblewrap_and_without(
    start_codex, responses, tmp_path: Path, bubblewrap: dict[str, str], codex_home: str
) -> None:
    """No escalation: codex runs it in its workspace-write sandbox (through the bwrap on PATH,
    or its own copy), which lets it write the workspace. A CODEX_HOME in the temporary folder
    (the tests', the demo's) gets no helper from codex (coven-ls gives it one); one outside it
    (a user's ~/.codex; here: TMPDIR elsewhere, which is what codex compares with) gets codex's
    own helper folder under it, found first on PATH."""
    env = dict(bubblewrap)
    if codex_home == "own":
        (tmp_path / "elsewhere").mkdir()
        env["TMPDIR"] = str(tmp_path / "elsewhere")
    responses.on("SANDBOXED", command("echo inside > inside.txt && cat inside.txt"), times=1)
    responses.on("Process exited", "it ran")
    coven = await start_codex(init_options={**CODEX, "permissionMode": "acceptEdits"}, env=env)
    sid = await coven.start("SANDBOXED please")
    result = await coven.wait_kind(sid, "turnResult")
    assert result["text"] == "it ran"
    assert (coven.workspace / "inside.txt").read_text() == "inside\n"
    [use] = coven.of(sid, "toolUse")
    [tool_result] = coven.of(sid, "toolResult")
    assert "echo inside" in use["input"]["command"] and tool_result["toolUseId"] == use["toolUseId"]
    assert not tool_result["isError"] and "inside" in tool_result["content"]
    assert coven.permission_requests == []
    own_helpers = list((tmp_path / "ws" / "codex-home" / "tmp").rglob("codex-linux-sandbox"))
    assert bool(own_helpers) == (codex_home == "own")


async def test_a_command_codex_could_not_start_is_a_failed_tool_call_with_its_reason(
    start_codex, responses, tmp_path: Path, bubblewrap: dict[str, str]
) -> None:
    """A codex started through a wrapper script (coven-ls cannot give it its helper then) whose
    CODEX_HOME is in the temporary folder (where codex makes none itself): with bubblewrap on
    PATH its commands cannot start, and codex reports no item for them; coven-ls shows the tool
    call and codex's reason all the same. Without bubblewrap the command runs."""
    wrapper = tmp_path / "codex-wrapper"
    wrapper.write_text(f'#!/bin/sh\nexec "{resolve_codex(None)[0]}" "$@"\n')
    wrapper.chmod(0o755)
    responses.on("RUN-IT", command("echo started"), times=1)
    responses.on("Process exited with code 0", "it ran")
    responses.on("Process exited", "it failed")
    coven = await start_codex(
        init_options={**CODEX, "permissionMode": "acceptEdits"},
        env={**bubblewrap, "COVEN_CODEX_PATH": str(wrapper)},
    )
    sid = await coven.start("RUN-IT please")
    result = await coven.wait_kind(sid, "turnResult")
    [use] = coven.of(sid, "toolUse")
    [tool_result] = coven.of(sid, "toolResult")
    assert use["name"] == "Bash" and "echo started" in use["input"]["command"]
    assert tool_result["toolUseId"] == use["toolUseId"] and use["seq"] < tool_result["seq"]
    if "PATH" in bubblewrap and shutil.which("bwrap", path=bubblewrap["PATH"]):
        assert result["text"] == "it failed" and tool_result["isError"]
        assert "execvp codex-linux-sandbox" in tool_result["content"], tool_result
    else:
        assert result["text"] == "it ran" and not tool_result["isError"]


async def test_a_fork_childs_command_codex_could_not_start_is_a_failed_tool_call(
    start_codex, responses, tmp_path: Path, bubblewrap: dict[str, str]
) -> None:
    """As above, in a fork child: a `thread/fork` gets no raw items, so coven-ls reads what codex
    told its model from the child's rollout file when its turn ends. (In a worktree child codex
    does report the command: its turns carry a sandbox policy of their own.)"""
    wrapper = tmp_path / "codex-wrapper"
    wrapper.write_text(f'#!/bin/sh\nexec "{resolve_codex(None)[0]}" "$@"\n')
    wrapper.chmod(0o755)
    responses.on("Split it", "Splitting.\n<fork>\n- Make alpha\n</fork>")
    responses.on("'Make alpha'", command("printf 'alpha\\n' > alpha.txt"), times=1)
    responses.on("Process exited with code 0", "Made it.")
    responses.on("Process exited", "Could not.")
    responses.on("<fork-results>", "Done.")
    coven = await start_codex(
        init_options={**CODEX, "forkMode": "auto", "permissionMode": "acceptEdits"},
        env={**bubblewrap, "COVEN_CODEX_PATH": str(wrapper)},
    )
    sid = await coven.start("Split it")
    started = await coven.wait_kind(sid, "forkStarted")
    assert started["isolation"] == "shared"  # no git here: the child works in the same folder
    [child] = [c["sessionId"] for c in started["children"]]
    assert (await coven.wait_kind(sid, "turnResult", count=2))["text"] == "Done."
    [use] = coven.of(child, "toolUse")
    [tool_result] = coven.of(child, "toolResult")
    assert "alpha.txt" in use["input"]["command"] and tool_result["toolUseId"] == use["toolUseId"]
    if shutil.which("bwrap", path=bubblewrap["PATH"]):
        assert tool_result["isError"] and "execvp codex-linux-sandbox" in tool_result["content"]
        assert not (coven.workspace / "alpha.txt").exists()
    else:
        assert not tool_result["isError"]
        assert (coven.workspace / "alpha.txt").read_text() == "alpha\n"


def test_doctor_runs_a_command_in_codex_sandbox(
    responses, tmp_path: Path, bubblewrap: dict[str, str]
) -> None:
    """`coven-ls doctor`'s codexSandbox check, with the real codex: ok with bubblewrap and
    without (then it says codex uses its own copy); through a wrapper script whose CODEX_HOME is
    in the temporary folder, with bubblewrap, it fails and says what to do."""

    def doctor(*args: str) -> dict[str, Any]:
        env = {**os.environ, **responses.codex_env(tmp_path / "codex-home"), **bubblewrap}
        done = subprocess.run(
            [sys.executable, "-m", "coven_ls", "doctor", "--json", "--root", str(tmp_path), *args],
            env={**env, "XDG_STATE_HOME": str(tmp_path / "state")}, capture_output=True,
            text=True, timeout=120, check=False,
        )  # fmt: skip
        report = json.loads(done.stdout)
        return {f["id"]: f for f in report["findings"]}["codexSandbox"]

    found = doctor()
    bwrap = shutil.which("bwrap", path=bubblewrap["PATH"])
    assert found["status"] == "ok" and "fix" not in found, found
    if bwrap:
        assert f"bubblewrap on PATH: {bwrap}" in found["found"]
    else:
        assert "codex uses its bundled bubblewrap" in found["found"]
    wrapper = tmp_path / "codex-wrapper"
    wrapper.write_text(f'#!/bin/sh\nexec "{resolve_codex(None)[0]}" "$@"\n')
    wrapper.chmod(0o755)
    found = doctor("--codex", str(wrapper))
    if bwrap:
        assert found["status"] == "warning" and "execvp codex-linux-sandbox" in found["found"]
        assert "CODEX_HOME outside" in found["fix"]
    else:
        assert found["status"] == "ok", found


async def test_a_file_change_is_an_edit_with_its_diff(start_codex, responses) -> None:
    responses.on(
        "add a file",
        patch("*** Begin Patch\n*** Add File: notes.txt\n+patched by codex\n*** End Patch\n"),
        times=1,
    )
    responses.on("Success", "the file is there")
    coven = await start_codex(init_options=CODEX)
    sid = await coven.start("add a file please")
    result = await coven.wait_kind(sid, "turnResult")
    assert result["text"] == "the file is there"
    assert (coven.workspace / "notes.txt").read_text() == "patched by codex\n"
    [use] = coven.of(sid, "toolUse")
    assert use["name"] == "Edit" and use["input"]["codexItem"] == "fileChange"
    assert use["input"]["file_path"] == str(coven.workspace / "notes.txt")
    assert "+patched by codex" in use["input"]["diff"]
    [asked] = coven.of(sid, "permissionRequest")
    assert asked["toolName"] == "Edit" and asked["input"]["file_path"] == use["input"]["file_path"]
    [done] = coven.of(sid, "toolResult")
    assert not done["isError"] and "notes.txt" in done["content"]


async def test_cancel_mid_stream_interrupts_the_turn_and_the_session_goes_on(
    start_codex, responses
) -> None:
    responses.on("long", "word " * 200, chunk_chars=5, chunk_delay=0.05, times=1)
    responses.on("again", "short answer")
    coven = await start_codex(init_options=CODEX)
    sid = await coven.start("a long answer please")
    await wait_until(lambda: len(coven.deltas) >= 3, 60, "the answer to stream")
    await coven.request("coven/cancel", {"sessionId": sid})
    result = await coven.wait_kind(sid, "turnResult")
    assert result["cancelled"] and not result["isError"]
    assert len(streamed(coven, sid)) < len("word " * 200)
    assert coven.of(sid, "text") == []  # the cut-off answer never arrived whole
    await coven.wait_status(sid, "idle", after_seq=result["seq"] - 1)
    await coven.request("coven/sendMessage", {"sessionId": sid, "text": "again"})
    second = await coven.wait_kind(sid, "turnResult", count=2)
    assert second["text"] == "short answer"
    # Same thread, and codex told the model that the user stopped the last turn.
    last = responses.requests[-1]
    assert last.thread_id == result["agentSessionId"] and "turn_aborted" in last.all_text


@pytest.mark.parametrize(("status", "words"), [(500, "HTTP 500"), (401, "401"), (429, "429")])
async def test_an_http_error_fails_the_turn_with_the_real_reason(
    start_codex, responses, status: int, words: str
) -> None:
    responses.on("fail", error=HttpError(status, "scripted refusal"), times=1)
    responses.on("retry", "fine now")
    coven = await start_codex(init_options=CODEX)
    sid = await coven.start("fail please")
    result = await coven.wait_kind(sid, "turnResult")
    assert result["isError"] and words in result["text"]
    await coven.request("coven/sendMessage", {"sessionId": sid, "text": "retry"})
    again = await coven.wait_kind(sid, "turnResult", count=2)
    assert again["text"] == "fine now" and not again["isError"]


async def test_claude_and_codex_sessions_in_one_server(start_codex, responses, model) -> None:
    model.on("to claude", "Claude here.")
    responses.on("to codex", "Codex here.")
    coven = await start_codex()  # the default agent stays claude
    claude = await coven.start("to claude")
    codex = await coven.start("to codex", agent="codex")
    assert (await coven.wait_kind(claude, "turnResult"))["text"] == "Claude here."
    assert (await coven.wait_kind(codex, "turnResult"))["text"] == "Codex here."
    listed = {
        s["sessionId"]: s["agent"]
        for s in (await coven.request("coven/listSessions", {}))["sessions"]
    }
    assert listed == {claude: "claude", codex: "codex"}
    assert len(model.requests) >= 1 and len(responses.requests) == 1


async def test_unknown_agent_is_invalid_params(start_codex) -> None:
    coven = await start_codex()
    with pytest.raises(Exception, match="agent"):
        await coven.start("hello", agent="gemini")


async def test_a_restart_resumes_the_thread(start_codex, responses) -> None:
    responses.on("remember the word pineapple", "Noted: pineapple.")
    responses.on("Which word", "It was pineapple.")
    first = await start_codex(init_options=CODEX)
    sid = await first.start("Please remember the word pineapple")
    thread = (await first.wait_kind(sid, "turnResult"))["agentSessionId"]
    await first.wait_status(sid, "idle")
    await first.stop()

    second = await start_codex(init_options=CODEX)
    [info] = (await second.request("coven/listSessions", {}))["sessions"]
    assert info["agent"] == "codex" and info["agentSessionId"] == thread
    await second.request("coven/sendMessage", {"sessionId": sid, "text": "Which word was it?"})
    result = await second.wait_kind(sid, "turnResult")
    assert result["text"] == "It was pineapple." and result["agentSessionId"] == thread
    request = responses.requests[-1]
    assert request.thread_id == thread
    assert (
        "remember the word pineapple" in request.all_text
        and "Noted: pineapple." in request.all_text
    )


async def test_sigkill_of_the_server_leaves_no_codex_process(start_codex, responses) -> None:
    """The server dies mid-command (a sandboxed `sleep`): codex, its sandbox and the command go
    with it; a restarted server resumes the thread."""
    responses.on("sleep", command("sleep 120"), times=1)
    responses.on("after", "back again")
    first = await start_codex(init_options={**CODEX, "permissionMode": "acceptEdits"})
    sid = await first.start("sleep a while")
    await first.wait_kind(sid, "toolUse")
    await wait_until(lambda: bool(first.pids_running("sleep")), 30, "the command to run")
    assert first.pids_running("app-server")
    server = first.client._server
    assert server is not None
    os.kill(server.pid, signal.SIGKILL)
    await wait_until(lambda: not processes_with_env(first.marker), 30, "every codex process to end")
    await first.client.stop()

    second = await start_codex(init_options=CODEX)
    await second.request("coven/sendMessage", {"sessionId": sid, "text": "after the crash"})
    result = await second.wait_kind(sid, "turnResult")
    assert result["text"] == "back again"


def test_coven_ls_run_with_agent_codex(responses, tmp_path: Path) -> None:
    """`coven-ls run --agent codex` from the terminal: the answer, and no process left."""
    responses.on("terminal", "Hello from codex in the terminal.", chunk_chars=6)
    home = tmp_path / "codex-home"
    env = {**os.environ, **responses.codex_env(home), "XDG_STATE_HOME": str(tmp_path / "state")}
    work = tmp_path / "workspace"
    work.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "coven_ls", "run", "--json", "--agent", "codex", "--cwd", str(work),
         "hello from the terminal"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    [result] = [e for e in lines if e.get("kind") == "turnResult"]
    assert result["text"] == "Hello from codex in the terminal."
    assert [e["agentSessionId"] for e in lines if e.get("kind") == "agent"] == [
        responses.requests[0].thread_id
    ]
    assert processes_with_env(str(home)) == []


async def test_a_killed_app_server_fails_the_turn_and_the_next_message_resumes(
    start_codex, responses
) -> None:
    responses.on("remember", "Noted: mango.")
    responses.on("slow", "word " * 100, chunk_chars=5, chunk_delay=0.1, times=1)
    responses.on("Which fruit", "It was mango.")
    coven = await start_codex(init_options=CODEX)
    sid = await coven.start("remember the word mango")
    thread = (await coven.wait_kind(sid, "turnResult"))["agentSessionId"]
    await coven.wait_status(sid, "idle")
    await coven.request("coven/sendMessage", {"sessionId": sid, "text": "a slow answer"})
    await wait_until(lambda: len(coven.deltas) >= 3, 60, "the slow answer to stream")
    [app_server] = coven.pids_running("app-server")
    os.kill(app_server, signal.SIGKILL)
    error = await coven.wait_kind(sid, "error")
    assert "codex app-server was killed by SIGKILL" in error["message"]
    await coven.request("coven/sendMessage", {"sessionId": sid, "text": "Which fruit was it?"})
    result = await coven.wait_kind(sid, "turnResult", count=2)
    assert result["text"] == "It was mango." and result["agentSessionId"] == thread
    assert coven.pids_running("app-server") not in ([], [app_server])
    assert "remember the word mango" in responses.requests[-1].all_text


async def test_cancel_mid_command_stops_the_command(start_codex, responses) -> None:
    """codex leaves an interrupted command running; coven-ls ends it, and its tool call."""
    responses.on("nap", command("sleep 97"), times=1)
    responses.on("again", "awake")
    coven = await start_codex(init_options={**CODEX, "permissionMode": "acceptEdits"})
    sid = await coven.start("take a nap")
    use = await coven.wait_kind(sid, "toolUse")
    await wait_until(lambda: bool(coven.pids_running("sleep 97")), 30, "the command to run")
    await coven.request("coven/cancel", {"sessionId": sid})
    result = await coven.wait_kind(sid, "turnResult")
    assert result["cancelled"]
    [ended] = coven.of(sid, "toolResult")
    assert ended["toolUseId"] == use["toolUseId"] and ended["isError"]
    await wait_until(lambda: not coven.pids_running("sleep 97"), 10, "the command to end")
    assert coven.pids_running("app-server")  # the shared app-server goes on
    await coven.request("coven/sendMessage", {"sessionId": sid, "text": "again"})
    assert (await coven.wait_kind(sid, "turnResult", count=2))["text"] == "awake"


async def test_a_fork_tag_runs_children_as_thread_forks_and_reports_back(
    start_codex, responses
) -> None:
    """The model forks into two children: each a `thread/fork` of the parent (its first request
    holds the parent's conversation), both answers back to the parent in one message."""
    responses.on(
        "Plan the release", "Splitting.\n<fork>\n- Write the docs\n- Fix the bugs\n</fork>"
    )
    responses.on("'Write the docs'", "Docs written.")
    responses.on("'Fix the bugs'", "Bugs fixed.")
    responses.on("<fork-results>", "Both done.")
    coven = await start_codex(init_options={**CODEX, "forkMode": "auto"})
    sid = await coven.start("Plan the release")
    started = await coven.wait_kind(sid, "forkStarted")
    children = [c["sessionId"] for c in started["children"]]
    finished = await coven.wait_kind(sid, "turnResult", count=2)
    assert finished["text"] == "Both done."
    parent_thread = coven.of(sid, "agent")[0]["agentSessionId"]
    listed = {
        s["sessionId"]: s for s in (await coven.request("coven/listSessions", {}))["sessions"]
    }
    threads = {listed[c]["agentSessionId"] for c in children}
    assert len(threads) == 2 and parent_thread not in threads
    assert all(listed[c]["agent"] == "codex" for c in children)
    for child in children:
        first = next(
            r for r in responses.requests if r.thread_id == listed[child]["agentSessionId"]
        )
        assert "Plan the release" in first.all_text and "Splitting." in first.all_text
    back = responses.requests[-1]
    assert back.thread_id == parent_thread
    assert "Docs written." in back.all_text and "Bugs fixed." in back.all_text


def small_repo(repo: Path) -> Path:
    """A git repository with one commit."""
    return make_repo(repo, {"README": "base\n"}, message="base")


@pytest.mark.usefixtures("no_user_git_config")
async def test_codex_children_work_in_worktrees_and_are_merged_back(
    start_codex, responses, tmp_path: Path, bubblewrap: dict[str, str]
) -> None:
    repo = small_repo(tmp_path / "repo")
    responses.on("Split it", "Splitting.\n<fork>\n- Make alpha\n- Make beta\n</fork>")
    responses.on("'Make alpha'", command("printf 'alpha\\n' > alpha.txt && pwd"), times=1)
    responses.on("'Make beta'", command("printf 'beta\\n' > beta.txt && pwd"), times=1)
    responses.on("Process exited", "Made it.")
    responses.on("<fork-results>", "Both merged.")
    coven = await start_codex(
        init_options={**CODEX, "forkMode": "auto", "permissionMode": "acceptEdits"}, env=bubblewrap
    )
    sid = await coven.start("Split it", cwd=str(repo))
    started = await coven.wait_kind(sid, "forkStarted")
    assert started["isolation"] == "worktree"
    done = await coven.wait_kind(sid, "turnResult", count=2)
    assert done["text"] == "Both merged."
    assert (repo / "alpha.txt").read_text() == "alpha\n"
    assert (repo / "beta.txt").read_text() == "beta\n"
    listed = {
        s["sessionId"]: s for s in (await coven.request("coven/listSessions", {}))["sessions"]
    }
    for child in (c["sessionId"] for c in started["children"]):
        info = listed[child]
        # Each child's command ran in its own worktree (pwd), not in the repository.
        [out] = coven.of(child, "toolResult")
        assert info["worktree"]["path"] in out["content"] and str(repo) + "\n" not in out["content"]
        assert info["changes"]["merge"] == "applied"


async def test_a_fork_at_an_earlier_answer_carries_the_conversation_up_to_it(
    start_codex, responses
) -> None:
    responses.on("first question", "first answer")
    responses.on("second question", command("echo tool"), times=1)
    responses.on("Process exited", "second answer")
    responses.on("'Branch off'", "branched")
    coven = await start_codex(init_options={**CODEX, "permissionMode": "acceptEdits"})
    sid = await coven.start("first question")
    await coven.wait_kind(sid, "turnResult")
    await coven.request("coven/sendMessage", {"sessionId": sid, "text": "second question"})
    await coven.wait_kind(sid, "turnResult", count=2)
    await coven.wait_status(sid, "idle", after_seq=coven.of(sid, "turnResult")[-1]["seq"])
    first_answer = coven.of(sid, "text")[0]["messageId"]
    await coven.request(
        "coven/fork", {"sessionId": sid, "tasks": ["Branch off"], "atMessageId": first_answer}
    )
    started = await coven.wait_kind(sid, "forkStarted")
    [child] = [c["sessionId"] for c in started["children"]]
    assert (await coven.wait_kind(child, "turnResult"))["text"] == "branched"
    request = next(r for r in responses.requests if "'Branch off'" in r.last_user_text)
    assert "first answer" in request.all_text and "second question" not in request.all_text

    # Any other message (here the tool call's) is no fork point for codex: InvalidParams, for
    # coven/fork and coven/branch alike, and no fork starts.
    tool_message = coven.of(sid, "toolUse")[0]["messageId"]
    await coven.wait_kind(sid, "forkFinished")
    await coven.wait_status(sid, "idle", after_seq=coven.of(sid, "forkFinished")[-1]["seq"])
    for method, params in (
        ("coven/fork", {"tasks": ["Branch off"]}),
        ("coven/branch", {"prompt": "Branch off"}),
    ):
        with pytest.raises(JsonRpcException) as refused:
            await coven.request(method, {"sessionId": sid, "atMessageId": tool_message, **params})
        assert refused.value.code == -32602
        assert "last message of a turn" in refused.value.message
        assert tool_message in refused.value.message
    assert len(coven.of(sid, "forkStarted")) == 1


def test_demo_with_agent_codex(bubblewrap: dict[str, str]) -> None:
    """`coven-ls demo --agent codex`: the tour and its fork of three, through the real codex
    (its CODEX_HOME in the temporary folder), with bubblewrap and without."""
    done = subprocess.run(
        [sys.executable, "-m", "coven_ls", "demo", "--json", "--agent", "codex"],
        capture_output=True, text=True, timeout=240, check=False, env={**os.environ, **bubblewrap},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    events = [json.loads(line) for line in done.stdout.splitlines()]
    [started] = [e for e in events if e["kind"] == "forkStarted"]
    assert started["isolation"] == "worktree" and len(started["children"]) == 3
    [finished] = [e for e in events if e["kind"] == "forkFinished"]
    assert [r["merge"] for r in finished["results"]] == ["applied"] * 3
    for child in (c["sessionId"] for c in started["children"]):
        kinds = [e["kind"] for e in events if e["sessionId"] == child]
        # The tool call comes before the question about it.
        assert kinds.index("toolUse") < kinds.index("permissionRequest")
    parent = events[0]["sessionId"]
    last = [e for e in events if e["sessionId"] == parent and e["kind"] == "turnResult"][-1]
    assert last["text"].startswith("Here is the tour")


def rollouts(codex_home: Path, thread: str) -> list[Path]:
    """What codex stored of a thread: its rollout file(s) under CODEX_HOME/sessions."""
    return list((codex_home / "sessions").rglob(f"rollout-*-{thread}.jsonl"))


async def test_delete_with_purge_removes_every_thread_forks_first(
    start_codex, responses, tmp_path: Path
) -> None:
    """The parent's thread is referenced by its children's (thread/fork): purge deletes the
    children's first, then the parent's, and nothing of them is left in CODEX_HOME."""
    responses.on("Plan it", "Splitting.\n<fork>\n- Part one\n- Part two\n</fork>")
    responses.on("'Part one'", "One done.")
    responses.on("'Part two'", "Two done.")
    responses.on("<fork-results>", "All done.")
    responses.on("keep me", "kept")
    coven = await start_codex(init_options={**CODEX, "forkMode": "auto"})
    sid = await coven.start("Plan it")
    other = await coven.start("keep me")
    await coven.wait_kind(sid, "turnResult", count=2)
    await coven.wait_kind(other, "turnResult")
    await coven.wait_status(sid, "idle", after_seq=coven.of(sid, "turnResult")[-1]["seq"])
    listed = (await coven.request("coven/listSessions", {}))["sessions"]
    threads = {s["sessionId"]: s["agentSessionId"] for s in listed}
    home = tmp_path / "ws" / "codex-home"
    assert len(threads) == 4 and all(rollouts(home, t) for t in threads.values())

    deleted = await coven.request("coven/deleteSession", {"sessionId": sid, "purge": True})
    assert set(deleted["deletedSessionIds"]) == set(threads) - {other}
    for session, thread in threads.items():
        assert bool(rollouts(home, thread)) == (session == other), session
    # The server goes on with the session it kept.
    await coven.request("coven/sendMessage", {"sessionId": other, "text": "keep me again"})
    assert (await coven.wait_kind(other, "turnResult", count=2))["text"] == "kept"


async def test_an_app_server_killed_while_idle_is_said_started_again_and_resumed(
    start_codex, responses
) -> None:
    """Nobody is in a turn when codex dies: the idle session is told at once, a new app-server
    is started with its thread resumed, and the next message goes on with the conversation."""
    responses.on("remember", "Noted: kiwi.")
    responses.on("Which fruit", "It was kiwi.")
    coven = await start_codex(init_options=CODEX)
    sid = await coven.start("remember the word kiwi")
    first = await coven.wait_kind(sid, "turnResult")
    await coven.wait_status(sid, "idle", after_seq=first["seq"])
    [app_server] = coven.pids_running("app-server")
    os.kill(app_server, signal.SIGKILL)
    error = await coven.wait_kind(sid, "error")
    assert "codex app-server was killed by SIGKILL" in error["message"]
    assert "starts it again" in error["message"]
    await wait_until(
        lambda: coven.pids_running("app-server") not in ([], [app_server]), 30, "a new app-server"
    )
    [info] = (await coven.request("coven/listSessions", {}))["sessions"]
    assert info["status"] == "idle"
    await coven.request("coven/sendMessage", {"sessionId": sid, "text": "Which fruit was it?"})
    result = await coven.wait_kind(sid, "turnResult", count=2)
    assert result["text"] == "It was kiwi." and result["agentSessionId"] == first["agentSessionId"]
    assert "remember the word kiwi" in responses.requests[-1].all_text


@pytest.mark.usefixtures("no_user_git_config")
async def test_a_codex_child_cannot_write_the_parents_repository(
    start_codex, responses, tmp_path: Path, bubblewrap: dict[str, str]
) -> None:
    """The repository lies under /tmp, which codex's workspace-write sandbox leaves writable: a
    worktree child's sandbox writes only its worktree, and an escalation (which would run outside
    the sandbox) that names the parent's repository is refused before anyone is asked."""
    repo = small_repo(tmp_path / "repo")
    responses.on("Probe it", "Forking.\n<fork>\n- Probe\n</fork>")
    responses.on("'Probe'", command(f"printf stray > {repo}/via-tmp.txt"), times=1)
    responses.on(
        "Process exited", command(f"printf esc > {repo}/escalated.txt", escalate=True), times=1
    )
    responses.on("rejected", "Probed.")
    responses.on("<fork-results>", "Done.")
    coven = await start_codex(
        init_options={**CODEX, "forkMode": "auto", "permissionMode": "acceptEdits"}, env=bubblewrap
    )
    sid = await coven.start("Probe it", cwd=str(repo))
    started = await coven.wait_kind(sid, "forkStarted")
    assert started["isolation"] == "worktree"
    [child] = [c["sessionId"] for c in started["children"]]
    assert (await coven.wait_kind(sid, "turnResult", count=2))["text"] == "Done."
    assert not (repo / "via-tmp.txt").exists() and not (repo / "escalated.txt").exists()
    calls = [
        (e["kind"], e.get("input", {}).get("command"), e.get("content"), e.get("allow"))
        for e in coven.events
        if e["sessionId"] == child and e["kind"] in ("toolUse", "toolResult", "permissionDecision")
    ]
    results = {r["toolUseId"]: r for r in coven.of(child, "toolResult")}
    uses = {u["toolUseId"]: str(u["input"].get("command")) for u in coven.of(child, "toolUse")}
    # Under load codex sometimes reports no item for a command its sandbox refused (the model
    # is told all the same: it went on to the escalation); coven-ls then shows it from the
    # thread's rollout when the turn ends, failed all the same.
    [sandboxed] = [i for i, c in uses.items() if "via-tmp.txt" in c]
    assert sandboxed in results and results[sandboxed]["isError"], calls
    [escalated] = [i for i, c in uses.items() if "escalated.txt" in c]
    assert escalated in results and results[escalated]["isError"], calls
    [decision] = coven.of(child, "permissionDecision")
    assert not decision["allow"] and "your own worktree" in decision["message"]
    assert coven.permission_requests == []  # refused without asking the user


async def test_stop_task_stops_a_command_codex_left_running(start_codex, responses) -> None:
    """A command still running when its turn completes (codex keeps it in the background) is a
    background task; coven/stopTask ends it; a second stopTask is a clear InvalidState."""
    responses.on("serve", command("sleep 88", yield_time_ms=300), times=1)
    responses.on("Wall time", "It runs in the background.")
    responses.on("still there", "yes")
    coven = await start_codex(init_options={**CODEX, "permissionMode": "acceptEdits"})
    sid = await coven.start("serve it")
    result = await coven.wait_kind(sid, "turnResult")
    assert result["text"] == "It runs in the background."
    [use] = coven.of(sid, "toolUse")
    started = await coven.wait_kind(sid, "task")
    assert started["status"] == "started" and started["taskId"] == use["toolUseId"]
    assert "sleep 88" in started["description"]
    [ended_call] = coven.of(sid, "toolResult")
    assert ended_call["toolUseId"] == use["toolUseId"] and not ended_call["isError"]
    assert coven.pids_running("sleep 88")
    [info] = (await coven.request("coven/listSessions", {}))["sessions"]
    assert info["backgroundTasks"] == [started["taskId"]] and info["status"] == "idle"

    await coven.request("coven/stopTask", {"sessionId": sid, "taskId": started["taskId"]})
    stopped = await coven.wait_kind(sid, "task", count=2)
    assert stopped["status"] == "stopped" and stopped["taskId"] == started["taskId"]
    await wait_until(lambda: not coven.pids_running("sleep 88"), 10, "the command to end")
    with pytest.raises(JsonRpcException) as again:
        await coven.request("coven/stopTask", {"sessionId": sid, "taskId": started["taskId"]})
    assert again.value.code == -32003 and "no running background task" in again.value.message
    await coven.request("coven/sendMessage", {"sessionId": sid, "text": "still there?"})
    assert (await coven.wait_kind(sid, "turnResult", count=2))["text"] == "yes"


@pytest.mark.usefixtures("no_user_git_config")
async def test_a_codex_fork_in_review_mode_waits_for_apply_and_discard(
    start_codex, responses, tmp_path: Path
) -> None:
    repo = small_repo(tmp_path / "repo")
    responses.on("Review it", "Splitting.\n<fork>\n- Make wanted\n- Make unwanted\n</fork>")
    responses.on("'Make wanted'", command("printf 'yes\\n' > wanted.txt"), times=1)
    responses.on("'Make unwanted'", command("printf 'no\\n' > unwanted.txt"), times=1)
    responses.on("Process exited", "Made it.")
    responses.on("<fork-results>", "Reviewed.")
    coven = await start_codex(
        init_options={
            **CODEX, "forkMode": "auto", "permissionMode": "acceptEdits", "mergeMode": "review"
        }
    )  # fmt: skip
    sid = await coven.start("Review it", cwd=str(repo))
    started = await coven.wait_kind(sid, "forkStarted")
    labels = {c["label"]: c["sessionId"] for c in started["children"]}
    reviewing = await coven.wait_kind(sid, "forkReviewing")
    assert sorted(reviewing["pending"]) == sorted(labels.values())
    assert not (repo / "wanted.txt").exists() and not (repo / "unwanted.txt").exists()
    wanted, unwanted = labels["Make wanted"], labels["Make unwanted"]
    changes = await coven.request("coven/getChanges", {"sessionId": wanted})
    assert [f["path"] for f in changes["changes"]["files"]] == ["wanted.txt"]
    applied = await coven.request("coven/applyChanges", {"sessionId": wanted})
    assert applied["changes"]["merge"] == "applied"
    assert (repo / "wanted.txt").read_text() == "yes\n"
    await coven.request("coven/discardChanges", {"sessionId": unwanted})
    done = await coven.wait_kind(sid, "turnResult", count=2)
    assert done["text"] == "Reviewed." and not (repo / "unwanted.txt").exists()
    finished = await coven.wait_kind(sid, "forkFinished")
    assert {r["sessionId"]: r["merge"] for r in finished["results"]} == {
        wanted: "applied",
        unwanted: "discarded",
    }


async def test_a_restart_mid_fork_resumes_the_codex_children(
    start_codex, responses, tmp_path: Path
) -> None:
    """The server is killed while both codex children wait on the model: the restarted server
    has the fork interrupted, and coven/resumeFork runs the children again as thread forks of
    the parent, whose answers reach the parent."""
    responses.on("Plan the work", "Splitting.\n<fork>\n- Write docs\n- Fix bugs\n</fork>", times=1)
    responses.on("'Write docs'", "(never)", latency=300, times=1)
    responses.on("'Fix bugs'", "(never)", latency=300, times=1)
    responses.on("'Write docs'", "Docs written.")
    responses.on("'Fix bugs'", "Bugs fixed.")
    responses.on("<fork-results>", "Done after the restart.")
    first = await start_codex(init_options={**CODEX, "forkMode": "auto"})
    sid = await first.start("Plan the work")
    started = await first.wait_kind(sid, "forkStarted")
    children = sorted(c["sessionId"] for c in started["children"])
    await wait_until(
        lambda: sum("You were assigned" in r.last_user_text for r in responses.requests) >= 2,
        90,
        "both children to ask the model",
    )
    parent_thread = first.of(sid, "agent")[0]["agentSessionId"]
    server = first.client._server
    assert server is not None
    os.kill(server.pid, signal.SIGKILL)
    await wait_until(lambda: not processes_with_env(first.marker), 30, "every codex process to end")
    await first.client.stop()

    second = await start_codex(init_options={**CODEX, "forkMode": "auto"})
    interrupted = await second.wait_kind(sid, "forkInterrupted")
    assert sorted(interrupted["unfinished"]) == children
    await second.request("coven/resumeFork", {"forkId": interrupted["forkId"]})
    prompt = await second.wait_kind(sid, "prompt", origin="forkResults")
    assert "Docs written." in prompt["text"] and "Bugs fixed." in prompt["text"]
    result = await second.wait_for(
        lambda e: e["sessionId"] == sid and e["kind"] == "turnResult" and e["seq"] > prompt["seq"],
        what="the parent's answer after the resumed fork",
    )
    assert result["text"] == "Done after the restart."
    # Each resumed child's request held the parent's conversation (a thread fork of it).
    for label in ("'Write docs'", "'Fix bugs'"):
        answered = [r for r in responses.requests if label in r.last_user_text][-1]
        assert "Plan the work" in answered.all_text and answered.thread_id != parent_thread
    assert responses.requests[-1].thread_id == parent_thread


@pytest.mark.usefixtures("no_user_git_config")
async def test_a_codex_child_has_a_temporary_folder_of_its_own(
    start_codex, responses, tmp_path: Path, bubblewrap: dict[str, str]
) -> None:
    """A worktree child's sandbox leaves /tmp read-only (it could hold the parent's repository):
    its commands get TMPDIR in a folder of its own beside its worktree, where `mktemp` works,
    while the parent's repository stays out of reach; the folder goes with the worktree."""
    repo = small_repo(tmp_path / "repo")
    responses.on("<fork-results>", "Done.")
    responses.on("Probe it", "Forking.\n<fork>\n- Probe\n</fork>")
    responses.on(
        "'Probe'",
        command('f=$(mktemp) && printf SCRATCH > "$f" && echo "$(cat "$f")-OK $f $TMP $TEMP"'),
        times=1,
    )
    responses.on("SCRATCH-OK", command(f"printf stray > {repo}/stray.txt"), times=1)

    def climb(request: ResponsesRequest) -> Reply:
        """An escalation (it would run unsandboxed) that reaches the repository by `cd ..`."""
        cwd = re.findall(r"<cwd>([^<]+)</cwd>", request.all_text)[-1]
        up = os.path.relpath(repo, cwd)
        return Reply((command(f"cd {up} && printf esc > escalated.txt", escalate=True),))

    responses.on("Process exited", climb, times=1)
    responses.on("rejected", "Probed.")
    coven = await start_codex(
        init_options={**CODEX, "forkMode": "auto", "permissionMode": "acceptEdits"}, env=bubblewrap
    )
    sid = await coven.start("Probe it", cwd=str(repo))
    [child] = [c["sessionId"] for c in (await coven.wait_kind(sid, "forkStarted"))["children"]]
    assert (await coven.wait_kind(sid, "turnResult", count=2))["text"] == "Done."
    [info] = [
        s
        for s in (await coven.request("coven/listSessions", {}))["sessions"]
        if s["sessionId"] == child
    ]
    temp = Path(info["worktree"]["path"] + ".tmp")
    calls = [
        (e["kind"], e.get("input", {}).get("command"), e.get("content"), e.get("allow"))
        for e in coven.events
        if e["sessionId"] == child and e["kind"] in ("toolUse", "toolResult", "permissionDecision")
    ]
    results = {r["toolUseId"]: r for r in coven.of(child, "toolResult")}

    def result_of(words: str) -> dict[str, Any]:
        [use] = [u for u in coven.of(child, "toolUse") if words in u["input"]["command"]]
        assert use["toolUseId"] in results, calls
        return results[use["toolUseId"]]

    scratch = result_of("mktemp")
    assert not scratch["isError"] and "SCRATCH-OK" in scratch["content"], calls
    made, tmp, temp_var = scratch["content"].split("SCRATCH-OK ", 1)[1].split()
    assert Path(made).parent == temp and tmp == temp_var == str(temp)
    assert Path(made).read_text() == "SCRATCH"
    # (Under load codex sometimes reports no item for a command its sandbox refused; the model
    # was told all the same, since it went on to the next command.)
    assert not (repo / "stray.txt").exists()
    strays = [u["toolUseId"] for u in coven.of(child, "toolUse") if "stray" in str(u["input"])]
    assert all(results[u]["isError"] for u in strays if u in results), calls
    refused = result_of("escalated.txt")
    assert refused["isError"] and not (repo / "escalated.txt").exists()
    [decision] = coven.of(child, "permissionDecision")
    assert not decision["allow"] and "your own worktree" in decision["message"]
    assert coven.permission_requests == []  # refused without asking the user

    await coven.request("coven/deleteSession", {"sessionId": sid})
    assert not Path(info["worktree"]["path"]).exists() and not temp.exists()


def codex_thread_names(env: dict[str, str]) -> dict[str, str | None]:
    """Each stored thread's name, as the user's own codex lists them (`thread/list` of an
    app-server of its own on the same CODEX_HOME)."""
    proc = subprocess.Popen(
        [resolve_codex(None)[0], "app-server"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **env},
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    deadline = time.monotonic() + 60

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        while select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
            message = json.loads(proc.stdout.readline() or "null")
            assert message is not None, "codex app-server ended"
            if message.get("id") == request["id"]:
                return message
        raise AssertionError(f"no answer to {request['method']}")

    try:
        answer(
            {
                "id": 1,
                "method": "initialize",
                "params": {"clientInfo": {"name": "t", "version": "0"}},
            }
        )
        proc.stdin.write(json.dumps({"method": "initialized"}) + "\n")
        listed = answer({"id": 2, "method": "thread/list", "params": {}})
        assert "result" in listed, listed
        return {t["id"]: t.get("name") for t in listed["result"]["data"]}
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def test_threads_are_named_as_coven_shows_them(
    start_codex, responses, tmp_path: Path
) -> None:
    """The user's own `codex resume` list names coven's threads: a session by its first
    prompt, a fork child by its task."""
    responses.on("Plan the release", "Splitting.\n<fork>\n- Write the docs\n</fork>")
    responses.on("'Write the docs'", "Docs written.")
    responses.on("<fork-results>", "Done.")
    coven = await start_codex(init_options={**CODEX, "forkMode": "auto"})
    sid = await coven.start("Plan the release")
    child = (await coven.wait_kind(sid, "forkStarted"))["children"][0]["sessionId"]
    await coven.wait_kind(sid, "turnResult", count=2)
    listed = {
        s["sessionId"]: s["agentSessionId"]
        for s in (await coven.request("coven/listSessions", {}))["sessions"]
    }
    names = codex_thread_names(responses.codex_env(tmp_path / "ws" / "codex-home"))
    assert names[listed[sid]] == "Plan the release"
    assert names[listed[child]] == "Write the docs"
