"""The JSON-RPC contract, end to end against a real coven-ls process.

- Every request gets a response: one without `params`, one pygls cannot decode, one for a method
  no one serves, one after `shutdown`. Checked over raw stdio, since an LSP client library would
  not send most of these.
- A question to the client that becomes moot (the turn is cancelled, the session closed, the fork
  proposal settled) is withdrawn with `$/cancelRequest`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from coven_ls.testing.scripted_model import ScriptedModel, ToolUse

from ..harness import Coven, processes_with_env, wait_until

# --- raw JSON-RPC --------------------------------------------------------------------------------


class RawServer:
    """`python -m coven_ls` spoken to in Content-Length framed JSON, byte by byte."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.unanswered_requests: list[dict[str, Any]] = []  # what the server asked us

    async def send(self, message: dict[str, Any] | bytes) -> None:
        body = message if isinstance(message, bytes) else json.dumps(message).encode()
        assert self.process.stdin is not None
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        await self.process.stdin.drain()

    async def _receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        length = None
        while True:
            line = await self.process.stdout.readline()
            if not line:
                raise EOFError("the server closed its output")
            if line == b"\r\n" and length is not None:
                return json.loads(await self.process.stdout.readexactly(length))
            name, _, value = line.decode().partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)

    async def response(self, msg_id: Any, timeout: float = 15.0) -> dict[str, Any]:
        """The response to request `msg_id` (None: one with a null id); notifications and the
        server's own requests on the way are set aside."""

        async def find() -> dict[str, Any]:
            while True:
                message = await self._receive()
                if "method" in message:
                    if "id" in message:
                        self.unanswered_requests.append(message)
                    continue
                if message.get("id", "absent") == msg_id:
                    return message
                raise AssertionError(f"unexpected response {message} (waiting for {msg_id!r})")

        return await asyncio.wait_for(find(), timeout)

    async def call(self, msg_id: Any, method: str, **member: Any) -> dict[str, Any]:
        await self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, **member})
        return await self.response(msg_id)


@pytest.fixture
async def raw(tmp_path: Path) -> AsyncIterator[RawServer]:
    home, config = tmp_path / "home", tmp_path / "claude-config"
    home.mkdir()
    config.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("CLAUDECODE", "CLAUDE_CODE_SESSION_ID")}
    # XDG_STATE_HOME is the test's own already (conftest.isolated_state).
    env.update(HOME=str(home), CLAUDE_CONFIG_DIR=str(config))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "coven_ls",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    server = RawServer(process)
    try:
        initialize = {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}}
        init = await server.call(0, "initialize", params=initialize)
        assert "capabilities" in init["result"]
        await server.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        yield server
        if not process.stdin.is_closing():  # type: ignore[union-attr]
            await server.send({"jsonrpc": "2.0", "method": "exit"})
            process.stdin.close()  # type: ignore[union-attr]
        await asyncio.wait_for(process.wait(), 30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert not processes_with_env(str(config)), "the server left a process behind"


async def test_a_request_without_params_is_answered(raw: RawServer) -> None:
    # JSON-RPC 2.0 lets a request leave `params` out; pygls used to drop such a request unanswered.
    assert await raw.call(1, "coven/listSessions") == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"sessions": []},
    }
    assert await raw.call(2, "coven/listSessions", params=None) == {
        "jsonrpc": "2.0",
        "id": 2,
        "result": {"sessions": []},
    }
    # Absent params are an empty object: a method with a required field says which is missing.
    for msg_id, member in ((3, {}), (4, {"params": None})):
        assert await raw.call(msg_id, "coven/cancel", **member) == {
            "jsonrpc": "2.0",
            "id": msg_id,
            "error": {
                "code": -32602,
                "message": "coven/cancel: missing required field 'sessionId'",
                "data": {"field": "sessionId"},
            },
        }
    # A notification without params does no harm either.
    await raw.send({"jsonrpc": "2.0", "method": "$/setTrace"})
    await raw.send({"jsonrpc": "2.0", "method": "coven/noSuchNotification"})
    assert (await raw.call(5, "coven/listSessions"))["result"] == {"sessions": []}


async def test_an_unknown_method_is_method_not_found(raw: RawServer) -> None:
    assert await raw.call("x-1", "coven/nope", params={}) == {
        "jsonrpc": "2.0",
        "id": "x-1",
        "error": {
            "code": -32601,
            "message": "Method Not Found: coven/nope",
            "data": {"method": "coven/nope"},
        },
    }
    answer = await raw.call(2, "coven/nope")
    assert answer["error"]["code"] == -32601 and answer["error"]["data"] == {"method": "coven/nope"}


async def test_every_undecodable_request_is_answered(raw: RawServer) -> None:
    # A standard request whose params do not fit its type: InvalidParams, naming what is wrong.
    hover = await raw.call(1, "textDocument/hover", params={"position": {"line": 0}})
    assert hover["id"] == 1 and hover["error"]["code"] == -32602
    message = hover["error"]["message"]
    assert message.startswith("textDocument/hover: ") and "text_document" in message
    assert "position.character" in message
    # An id JSON-RPC does not allow, a wrong version, a body that is not JSON.
    await raw.send({"jsonrpc": "2.0", "id": [1], "method": "coven/listSessions"})
    bad_id = await raw.response(None)
    assert bad_id == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32600,
            "message": "coven/listSessions: 'id' must be a string or an integer",
        },
    }
    await raw.send({"jsonrpc": "1.0", "id": 2, "method": "coven/listSessions"})
    old = await raw.response(2)
    assert old["error"] == {
        "code": -32600,
        "message": "coven/listSessions: 'jsonrpc' must be \"2.0\"",
    }
    await raw.send(b'{"jsonrpc": "2.0", "id": 3, "method": ')
    garbled = await raw.response(None)
    assert garbled["error"]["code"] == -32700
    # None of this broke the connection.
    assert (await raw.call(4, "coven/listSessions"))["result"] == {"sessions": []}
    # After shutdown, requests are refused rather than ignored.
    assert (await raw.call(5, "shutdown"))["result"] is None
    late = await raw.call(6, "coven/listSessions")
    assert late["error"] == {
        "code": -32600,
        "message": "coven/listSessions: the server is shutting down and takes no more requests",
    }
    assert raw.unanswered_requests == []


# --- withdrawn questions -------------------------------------------------------------------------


class NeverAnswered:
    """An answer callback for the harness: the user never answers, and we note each request's
    id and whether the client's handler for it was cancelled (which pygls does on receiving
    `$/cancelRequest` for it)."""

    def __init__(self, coven: Coven) -> None:
        self.coven = coven
        self.ids: list[str] = []
        self.asked = asyncio.Event()
        self.cancelled: list[str] = []

    def __call__(self, _request: dict[str, Any]) -> Any:
        msg_id = self.coven.client.protocol.msg_id  # the id of the request being handled
        assert isinstance(msg_id, str)
        self.ids.append(msg_id)
        self.asked.set()
        return self._wait_forever(msg_id)

    async def _wait_forever(self, msg_id: str) -> Any:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.append(msg_id)
            raise

    async def wait_asked(self) -> str:
        await asyncio.wait_for(self.asked.wait(), 90)
        [msg_id] = self.ids
        return msg_id


def watch_cancel_requests(coven: Coven) -> asyncio.Future[Any]:
    """The params of the next `$/cancelRequest` the server sends."""
    return coven.client.protocol.wait_for_notification_async("$/cancelRequest")


async def test_cancelled_turn_withdraws_its_permission_request(
    coven: Coven, model: ScriptedModel
) -> None:
    model.on("tidy the workspace", ToolUse("Bash", {"command": "touch never-made.txt"}))
    model.on("Are you there", "Still here.")
    user = NeverAnswered(coven)
    coven.permission_answer = user

    sid = await coven.start("Please tidy the workspace")
    asked = await user.wait_asked()
    [request] = coven.permission_requests
    assert request["sessionId"] == sid and request["toolName"] == "Bash"
    withdrawn = watch_cancel_requests(coven)
    await coven.request("coven/cancel", {"sessionId": sid})

    cancel = await asyncio.wait_for(withdrawn, 60)
    assert cancel.id == asked
    decision = await coven.wait_kind(sid, "permissionDecision")
    assert decision["allow"] is False
    assert decision["message"] == "Denied: the turn ended before the user answered."
    result = await coven.wait_kind(sid, "turnResult")
    assert result["cancelled"] is True
    assert not (coven.workspace / "never-made.txt").exists()
    # pygls on the client side cancelled the handler still waiting for the user.
    await wait_until(lambda: user.cancelled == [asked], 10, "the client to drop the question")
    # The session goes on.
    await coven.wait_status(sid, "idle", after_seq=result["seq"] - 1)
    await coven.request("coven/sendMessage", {"sessionId": sid, "text": "Are you there?"})
    assert (await coven.wait_kind(sid, "turnResult", count=2))["text"] == "Still here."


async def test_closed_session_withdraws_its_show_message_request(
    coven_factory, model: ScriptedModel
) -> None:
    coven = await coven_factory(custom_permissions=False)
    model.on("tidy the workspace", ToolUse("Bash", {"command": "touch never-made.txt"}))
    user = NeverAnswered(coven)
    coven.message_answer = user

    sid = await coven.start("Please tidy the workspace")
    asked = await user.wait_asked()
    assert coven.message_requests[0]["actions"] == ["Allow", "Deny"]
    withdrawn = watch_cancel_requests(coven)
    await coven.request("coven/closeSession", {"sessionId": sid})

    cancel = await asyncio.wait_for(withdrawn, 60)
    assert cancel.id == asked
    decision = await coven.wait_kind(sid, "permissionDecision")
    assert decision["allow"] is False
    await coven.wait_status(sid, "closed")
    assert not (coven.workspace / "never-made.txt").exists()
    await wait_until(lambda: user.cancelled == [asked], 10, "the client to drop the question")


async def test_settled_fork_proposal_withdraws_its_approval_question(
    coven_factory, model: ScriptedModel
) -> None:
    coven = await coven_factory(custom_forks=False)
    model.on("Plan the release", "Let me split it.\n<fork>\n- Write docs\n- Fix bugs\n</fork>")
    user = NeverAnswered(coven)
    coven.message_answer = user

    sid = await coven.start("Plan the release")
    asked = await user.wait_asked()
    [question] = coven.message_requests
    assert question["actions"] == ["Approve fork", "Reject"]
    proposed = await coven.wait_kind(sid, "forkProposed")
    withdrawn = watch_cancel_requests(coven)
    await coven.request("coven/cancel", {"sessionId": sid})  # a proposal is withdrawn

    cancel = await asyncio.wait_for(withdrawn, 60)
    assert cancel.id == asked
    rejected = await coven.wait_kind(sid, "forkRejected")
    assert rejected["forkId"] == proposed["forkId"]
    assert rejected["reason"] == "cancelled by the user"
    assert coven.of(sid, "forkStarted") == []
    await wait_until(lambda: user.cancelled == [asked], 10, "the client to drop the question")
