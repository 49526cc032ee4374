"""Errors a client can provoke, and the server's end: no agent process outlives it."""

from __future__ import annotations

import asyncio
import os
import signal
import stat

import pytest
from pygls.exceptions import JsonRpcException

from coven_ls.testing.scripted_model import ScriptedModel, ToolUse

from ..harness import Coven, wait_until


async def rpc_error(coven: Coven, method: str, params: object) -> JsonRpcException:
    with pytest.raises(JsonRpcException) as caught:
        await coven.request(method, params)
    return caught.value


@pytest.mark.parametrize(
    "name",
    ["no-such-claude", "\U0001f600" * 300],  # the second: a name too long for the file system
)
async def test_missing_cli_gives_a_clear_error(coven_factory, tmp_path, name: str) -> None:
    coven = await coven_factory(init_options={"claudePath": str(tmp_path / name)})
    error = await rpc_error(coven, "coven/startSession", {"prompt": "hello"})
    assert error.code == -32002
    assert name in error.message and "pip install claude-agent-sdk" in error.message
    assert (await coven.request("coven/listSessions", {}))["sessions"] == []


async def test_broken_cli_gives_a_clear_error(coven_factory, tmp_path) -> None:
    fake = tmp_path / "claude"
    fake.write_text("#!/bin/sh\necho 'claude: cannot load its runtime' >&2\nexit 3\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    coven = await coven_factory(extra_env={"COVEN_CLAUDE_PATH": str(fake)})
    error = await rpc_error(coven, "coven/startSession", {"prompt": "hello"})
    assert error.code == -32002
    assert "COVEN_CLAUDE_PATH" in error.message and "exit code 3" in error.message
    assert "cannot load its runtime" in error.message


@pytest.mark.parametrize(
    ("method", "params", "expected"),
    [
        ("coven/startSession", {}, "missing required field 'prompt'"),
        ("coven/startSession", {"prompt": 42}, "'prompt' must be a string (got a number)"),
        ("coven/startSession", {"prompt": "  "}, "'prompt' must not be empty"),
        (
            "coven/startSession",
            {"prompt": "x", "forkMode": "sometimes"},
            "'forkMode' must be one of",
        ),
        (
            "coven/startSession",
            {"prompt": "x", "cwd": "/no/such/dir"},
            "is not an existing directory: No such file or directory",
        ),
        (  # pathlib's is_dir() raised for it: an internal error
            "coven/startSession",
            {"prompt": "x", "cwd": "/tmp/" + "\U0001f600" * 300},
            "is not an existing directory: File name too long",
        ),
        (
            "coven/startSession",
            {"prompt": "x", "cwd": "/proc/version"},
            "is not an existing directory: it is not a directory",
        ),
        ("coven/sendMessage", {"sessionId": "s-1"}, "missing required field 'text'"),
        ("coven/getEvents", {"sessionId": "s-1", "afterSeq": "3"}, "'afterSeq' must be an integer"),
        ("coven/cancel", [1, 2], "params must be an object"),
    ],
)
async def test_bad_params_are_invalid_params(coven: Coven, method, params, expected) -> None:
    error = await rpc_error(coven, method, params)
    assert error.code == -32602
    assert expected in error.message and error.message.startswith(method)


@pytest.mark.parametrize(
    "method", ["coven/sendMessage", "coven/cancel", "coven/closeSession", "coven/getEvents"]
)
async def test_unknown_session_is_reported(coven: Coven, method: str) -> None:
    error = await rpc_error(coven, method, {"sessionId": "s-nope", "text": "hi"})
    assert error.code == -32001
    assert "s-nope" in error.message and "coven/listSessions" in error.message


async def test_close_session_ends_its_process(coven: Coven, model: ScriptedModel) -> None:
    model.on("hello there", "General Kenobi.")
    sid = await coven.start("hello there")
    await coven.wait_kind(sid, "turnResult")
    assert coven.agent_pids(), "the agent process stays up between turns"
    assert await coven.request("coven/closeSession", {"sessionId": sid}) == {}
    await coven.wait_status(sid, "closed")
    await wait_until(lambda: not coven.agent_pids(), 30, "the agent process to end")
    error = await rpc_error(coven, "coven/sendMessage", {"sessionId": sid, "text": "again"})
    assert error.code == -32003 and "closed" in error.message


async def test_unanswered_permission_is_denied_after_the_timeout(
    coven_factory, model: ScriptedModel
) -> None:
    coven = await coven_factory(init_options={"permissionTimeoutSeconds": 1})
    never = asyncio.get_running_loop().create_future()

    async def no_answer(request: dict) -> dict:
        return await never

    coven.permission_answer = no_answer
    model.on("write a file", ToolUse("Bash", {"command": "touch late.txt"}))
    model.on("did not answer", "Then I will wait.")
    sid = await coven.start("Please write a file")
    decision = await coven.wait_kind(sid, "permissionDecision")
    assert decision["allow"] is False and "within 1 seconds" in decision["message"]
    result = await coven.wait_kind(sid, "turnResult")
    assert result["text"] == "Then I will wait."
    assert not (coven.workspace / "late.txt").exists()
    never.cancel()


async def _running_session(coven: Coven, model: ScriptedModel) -> str:
    model.on("keep working", "Working for a long time.", latency=300)
    sid = await coven.start("Please keep working")
    await coven.wait_status(sid, "running")
    model.wait_for_requests(1, timeout=60, predicate=lambda r: "keep working" in r.last_user_text)
    assert coven.agent_pids()
    return sid


async def test_client_that_vanishes_leaves_no_process(coven: Coven, model: ScriptedModel) -> None:
    await _running_session(coven, model)
    server = coven.client._server
    server.stdin.close()  # the editor is gone without a word: EOF on the server's stdin
    await asyncio.wait_for(server.wait(), 60)
    await wait_until(lambda: not coven.agent_pids(), 30, "agent processes to end")


async def test_sigterm_leaves_no_process(coven: Coven, model: ScriptedModel) -> None:
    await _running_session(coven, model)
    server = coven.client._server
    os.kill(server.pid, signal.SIGTERM)
    await asyncio.wait_for(server.wait(), 60)
    await wait_until(lambda: not coven.agent_pids(), 30, "agent processes to end")


async def test_shutdown_and_exit_leave_no_process(coven: Coven, model: ScriptedModel) -> None:
    await _running_session(coven, model)
    server = coven.client._server
    await coven.client.shutdown_async(None)
    assert not coven.agent_pids(), "shutdown closes every session"
    coven.client.exit(None)
    assert await asyncio.wait_for(server.wait(), 30) == 0
