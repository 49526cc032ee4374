"""`coven-ls --tcp`: several editors on one server, sessions that outlive a connection, and a
door that opens only to the server's token."""

from __future__ import annotations

import asyncio
import json
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types
from pygls.lsp.client import LanguageClient

from coven_ls.protocol import ErrorCode, to_plain
from coven_ls.testing.scripted_model import ScriptedModel

from ..harness import processes_with_env, tcp_server, tcp_server_env, wait_until


async def connect(
    port: int, root: Path, events: list[dict[str, Any]], token: str | None
) -> LanguageClient:
    client = LanguageClient("tcp-test", "1")

    @client.feature("coven/event")
    def on_event(params: Any) -> None:
        events.append(to_plain(params))

    await client.start_tcp("127.0.0.1", port)
    await client.initialize_async(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(),
            root_uri=root.as_uri(),
            initialization_options={"token": token},
        )
    )
    client.initialized(types.InitializedParams())
    return client


async def disconnect(client: LanguageClient) -> None:
    # pygls' client only notices the end of a TCP connection once the other side closes it.
    client.protocol.writer.close()
    await asyncio.wait_for(client.stop(), 30)


async def test_sessions_outlive_a_tcp_connection(tmp_path: Path, model: ScriptedModel) -> None:
    model.on("slow tcp question", "Answered over TCP.", latency=1.5)
    config = tmp_path / "claude-config"
    async with tcp_server(tcp_server_env(tmp_path, model)) as server:
        port, token = server.port, server.token
        first_events: list[dict[str, Any]] = []
        second_events: list[dict[str, Any]] = []
        first = await connect(port, tmp_path, first_events, token)
        second = await connect(port, tmp_path, second_events, token)
        started = to_plain(
            await first.protocol.send_request_async(
                "coven/startSession", {"prompt": "A slow tcp question"}
            )
        )
        sid = started["sessionId"]
        await wait_until(lambda: any(e["kind"] == "prompt" for e in second_events), 30, "prompt")
        await disconnect(first)  # the editor that started the session goes away

        def finished() -> bool:
            return any(e["kind"] == "turnResult" for e in second_events)

        await wait_until(finished, 90, "the turn to finish for the other client")
        result = next(e for e in second_events if e["kind"] == "turnResult")
        assert result["sessionId"] == sid and result["text"] == "Answered over TCP."
        listed = to_plain(await second.protocol.send_request_async("coven/listSessions", {}))
        assert [s["sessionId"] for s in listed["sessions"]] == [sid]
        history = to_plain(
            await second.protocol.send_request_async("coven/getEvents", {"sessionId": sid})
        )
        assert [e["seq"] for e in history["events"]] == list(range(1, len(history["events"]) + 1))
        await disconnect(second)
    await wait_until(lambda: not processes_with_env(str(config)), 30, "agent processes to end")


def frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


async def first_answer(port: int, data: bytes) -> tuple[dict[str, Any], bytes]:
    """Send `data` as a connection's first bytes: the server's answer, and whatever it sends
    after it before closing the connection (which must come, or this times out)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        headers = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        length = int(re.search(rb"Content-Length: (\d+)", headers).group(1))  # type: ignore[union-attr]
        answer = json.loads(await asyncio.wait_for(reader.readexactly(length), 30))
        rest = await asyncio.wait_for(reader.read(), 30)  # b"" once the server has closed
        return answer, rest
    finally:
        writer.close()


def initialize(msg_id: int, **options: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": msg_id,
        "method": "initialize",
        "params": {"capabilities": {}, "initializationOptions": options},
    }


async def test_a_connection_without_the_token_is_refused_and_closed(
    tmp_path: Path, model: ScriptedModel, isolated_state: Path
) -> None:
    model.on("hello", "Should never be asked.")
    config = tmp_path / "claude-config"
    log_file = tmp_path / "server.log"
    env = tcp_server_env(tmp_path, model)
    async with tcp_server(env, "--log-file", str(log_file), "--log-level", "DEBUG") as server:
        assert server.token and server.token_file
        wrong = server.token[:-1] + ("A" if server.token[-1] != "A" else "B")
        start = {"jsonrpc": "2.0", "id": 7, "method": "coven/startSession",
                 "params": {"prompt": "hello"}}  # fmt: skip
        attempts = [
            (frame(initialize(1)), 1),
            (frame(initialize(2, token=wrong)), 2),
            (frame(initialize(3, token="")), 3),
            (frame(start), 7),  # work before initialize, by one who knows nothing
            (frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}), None),
            (b"Content-Length: 5\r\n\r\nnope!", None),  # not JSON
        ]
        for data, msg_id in attempts:
            answer, rest = await first_answer(server.port, data)
            assert answer["id"] == msg_id and answer["error"]["code"] == ErrorCode.Unauthorized
            assert "result" not in answer and rest == b"", "the connection stays open"
            assert wrong not in json.dumps(answer) and server.token not in json.dumps(answer)
        # A refused connection got nowhere: no agent, no request to the model, no database.
        assert not processes_with_env(str(config), exclude=(server.process.pid,))
        assert model.requests == []
        assert not list(isolated_state.rglob("*.sqlite3"))

        # The door still opens to the right token, and the token stays out of the log.
        events: list[dict[str, Any]] = []
        client = await connect(server.port, tmp_path, events, server.token)
        listed = to_plain(await client.protocol.send_request_async("coven/listSessions", {}))
        assert listed["sessions"] == []
        await disconnect(client)
    log = log_file.read_text()
    assert "refused a connection" in log and "initialize" in log  # DEBUG saw the handshake
    assert server.token not in log and wrong not in log


async def test_the_generated_token_is_written_for_the_user_alone(
    tmp_path: Path, model: ScriptedModel
) -> None:
    async with tcp_server(tcp_server_env(tmp_path, model)) as server:
        assert server.token and server.token_file
        assert server.token_file.is_relative_to(tmp_path / "run")
        assert stat.S_IMODE(server.token_file.stat().st_mode) == 0o600
        assert server.token_file.read_text().strip() == server.token
        # A client that reads the file instead of the server's stderr gets in.
        client = await connect(server.port, tmp_path, [], server.token_file.read_text().strip())
        await disconnect(client)
    assert not server.token_file.exists(), "the token outlived its server"


async def test_a_token_from_the_environment_or_a_private_file(
    tmp_path: Path, model: ScriptedModel
) -> None:
    async with tcp_server(tcp_server_env(tmp_path, model, COVEN_TOKEN="from-the-env")) as server:
        assert server.token is None and "from-the-env" not in server.listening
        answer, _ = await first_answer(server.port, frame(initialize(1, token="guess")))
        assert answer["error"]["code"] == ErrorCode.Unauthorized
        await disconnect(await connect(server.port, tmp_path, [], "from-the-env"))

    token_file = tmp_path / "token"
    token_file.write_text("from-a-file\n")
    token_file.chmod(0o600)
    env = tcp_server_env(tmp_path, model, COVEN_TOKEN="from-the-env")  # the file comes first
    async with tcp_server(env, "--token-file", str(token_file)) as server:
        assert server.token is None
        answer, _ = await first_answer(server.port, frame(initialize(1, token="from-the-env")))
        assert answer["error"]["code"] == ErrorCode.Unauthorized
        await disconnect(await connect(server.port, tmp_path, [], "from-a-file"))


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_token_file_others_can_read_stops_the_server(tmp_path: Path, mode: int) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("secret\n")
    token_file.chmod(mode)
    done = subprocess.run(
        [sys.executable, "-m", "coven_ls", "--tcp", "127.0.0.1:0", "--token-file", str(token_file)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert f"chmod 600 {token_file}" in done.stderr and "listening" not in done.stderr
    assert "secret" not in done.stderr
