"""`coven-ls --tcp`: several editors on one server, sessions that outlive a connection."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.client import LanguageClient

from coven_ls.protocol import to_plain
from coven_ls.testing.scripted_model import ScriptedModel

from .harness import processes_with_env, wait_until


async def connect(port: int, root: Path, events: list[dict[str, Any]]) -> LanguageClient:
    client = LanguageClient("tcp-test", "1")

    @client.feature("coven/event")
    def on_event(params: Any) -> None:
        events.append(to_plain(params))

    await client.start_tcp("127.0.0.1", port)
    await client.initialize_async(
        types.InitializeParams(capabilities=types.ClientCapabilities(), root_uri=root.as_uri())
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
    env = {**os.environ, **model.cli_env(config)}
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "coven_ls", "--tcp", "127.0.0.1:0",
        env=env, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        port = None
        while port is None:
            line = (await asyncio.wait_for(server.stderr.readline(), 30)).decode()
            assert line, "the server ended before it listened"
            if found := re.search(r"listening on 127\.0\.0\.1:(\d+)", line):
                port = int(found.group(1))

        first_events: list[dict[str, Any]] = []
        second_events: list[dict[str, Any]] = []
        first = await connect(port, tmp_path, first_events)
        second = await connect(port, tmp_path, second_events)
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
    finally:
        if server.returncode is None:
            server.send_signal(signal.SIGTERM)
        await asyncio.wait_for(server.wait(), 60)
    await wait_until(lambda: not processes_with_env(str(config)), 30, "agent processes to end")
