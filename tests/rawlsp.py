"""A raw LSP connection to a real coven-ls: Content-Length framed bytes on a pipe or a socket, with
nothing between the test and the server (an LSP client library would refuse to send, or would
mend, most of what the hostile-input tests send)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coven_ls.protocol import ErrorCode

from .lspframe import aread_frame, frame, frame_message

__all__ = ["frame"]  # what the hostile-input tests frame by hand

DOCUMENTED_CODES = frozenset(int(code) for code in ErrorCode)


class RawLsp:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.notifications: list[dict[str, Any]] = []
        self.server_requests: list[dict[str, Any]] = []

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def send(self, message: Any) -> None:
        await self.write(frame_message(message))

    async def receive(self) -> dict[str, Any]:
        body = await aread_frame(self.reader.readline, self.reader.readexactly)
        if body is None:
            raise EOFError("the server closed the connection")
        message = json.loads(body)
        assert isinstance(message, dict), message
        return message

    async def response(self, msg_id: Any, timeout: float = 30.0) -> dict[str, Any]:
        """The next response, which must be the one to `msg_id` (None: a null id); notifications
        and the server's own requests on the way are set aside."""

        async def find() -> dict[str, Any]:
            while True:
                message = await self.receive()
                if "method" in message:
                    target = self.server_requests if "id" in message else self.notifications
                    target.append(message)
                    continue
                assert message.get("id", "absent") == msg_id, (
                    f"unexpected response {str(message)[:500]} (waiting for {msg_id!r})"
                )
                return message

        return await asyncio.wait_for(find(), timeout)

    async def notification(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 30.0
    ) -> dict[str, Any]:
        """The first notification (already set aside or still to come) that matches."""

        async def find() -> dict[str, Any]:
            seen = 0
            while True:
                for message in self.notifications[seen:]:
                    if predicate(message):
                        return message
                seen = len(self.notifications)
                message = await self.receive()
                assert "method" in message, f"unexpected response {str(message)[:500]}"
                (self.server_requests if "id" in message else self.notifications).append(message)

        return await asyncio.wait_for(find(), timeout)

    async def call(self, msg_id: Any, method: str, params: Any = None) -> dict[str, Any]:
        await self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return await self.response(msg_id)

    async def result(self, msg_id: Any, method: str, params: Any = None) -> Any:
        answer = await self.call(msg_id, method, params)
        assert "result" in answer, answer
        return answer["result"]

    async def initialize(self, root: Path, options: dict[str, Any] | None = None) -> None:
        params = {
            "processId": None,
            "rootUri": root.as_uri(),
            "capabilities": {"experimental": {"coven": {}}},
            # A --tcp server lets in only its token (server_env sets it); stdio ignores it.
            "initializationOptions": {"token": TOKEN, **(options or {})},
        }
        assert "capabilities" in await self.result("init", "initialize", params)
        await self.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})


def assert_documented_error(answer: dict[str, Any], msg_id: Any) -> dict[str, Any]:
    """`answer` is an error response to `msg_id` with a documented code and a message a person
    can read; returns the error."""
    assert answer.get("jsonrpc") == "2.0" and answer.get("id", "absent") == msg_id, answer
    assert "result" not in answer, answer
    error = answer["error"]
    assert error["code"] in DOCUMENTED_CODES, error
    assert isinstance(error["message"], str) and error["message"].strip(), error
    assert error.get("data") is None or isinstance(error["data"], dict), error
    return error


TOKEN = "raw-lsp-test-token"


def server_env(tmp_path: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a test's server: its own HOME and CLI config (XDG_STATE_HOME is the
    test's own already, see conftest.isolated_state)."""
    home, config = tmp_path / "home", tmp_path / "claude-config"
    home.mkdir(exist_ok=True)
    config.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("CLAUDECODE", "CLAUDE_CODE_SESSION_ID")}
    env.update(HOME=str(home), CLAUDE_CONFIG_DIR=str(config), COVEN_TOKEN=TOKEN)
    env.update(extra or {})
    return env


def server_log(tmp_path: Path) -> str:
    """What the server wrote to its log and its stderr (a traceback would be there)."""
    return "".join(
        (tmp_path / name).read_text(errors="replace")
        for name in ("server.log", "stderr.log")
        if (tmp_path / name).exists()
    )


async def start_stdio(
    tmp_path: Path, env: dict[str, str]
) -> tuple[asyncio.subprocess.Process, RawLsp]:
    # stderr to a file, not a pipe: a pipe no one reads would fill up and stall the server.
    with (tmp_path / "stderr.log").open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "coven_ls", "--log-file", str(tmp_path / "server.log"),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=stderr, env=env, cwd=tmp_path, limit=2**27,
        )  # fmt: skip
    assert process.stdin is not None and process.stdout is not None
    return process, RawLsp(process.stdout, process.stdin)


async def start_tcp(tmp_path: Path, env: dict[str, str]) -> tuple[asyncio.subprocess.Process, int]:
    """`coven-ls --tcp` on a free port; the process and the port."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "coven_ls", "--tcp", "127.0.0.1:0",
        "--log-file", str(tmp_path / "server.log"),
        stderr=asyncio.subprocess.PIPE, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert process.stderr is not None
    while True:
        line = (await asyncio.wait_for(process.stderr.readline(), 30)).decode()
        assert line, "the server ended before it listened"
        if found := re.search(r"listening on 127\.0\.0\.1:(\d+)", line):
            return process, int(found.group(1))


async def connect_tcp(port: int) -> RawLsp:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**27)
    return RawLsp(reader, writer)
