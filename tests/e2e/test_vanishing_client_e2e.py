"""An editor that goes away mid-question: over TCP the server (and its sessions) stay, so a
question the editor never answered must not hold its session until it times out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types
from pygls.lsp.client import LanguageClient

from coven_ls.protocol import to_plain
from coven_ls.testing.scripted_model import ScriptedModel, ToolUse

from ..harness import FaultRecord, processes_with_env, tcp_server, tcp_server_env, wait_until
from ..rawlsp import connect_tcp

TOKEN = "vanishing-client-test-token"


@pytest.fixture
async def tcp_port(tmp_path: Path, model: ScriptedModel) -> AsyncIterator[int]:
    env = tcp_server_env(tmp_path, model, COVEN_TOKEN=TOKEN)
    async with tcp_server(env) as server:
        yield server.port
    config = tmp_path / "claude-config"
    await wait_until(lambda: not processes_with_env(str(config)), 30, "agent processes to end")


async def connect(
    port: int, root: Path, events: list[dict[str, Any]], asked: asyncio.Event | None = None
) -> LanguageClient:
    """A coven-aware client; with `asked`, one that is asked for permissions and never answers
    (the event is set when it is asked)."""
    client = LanguageClient("tcp-test", "1")

    @client.feature("coven/event")
    def on_event(params: Any) -> None:
        events.append(to_plain(params))

    @client.feature("coven/requestPermission")
    async def on_permission(params: Any) -> Any:
        assert asked is not None
        asked.set()
        await asyncio.Event().wait()  # the user walks away

    await client.start_tcp("127.0.0.1", port)
    coven = {"permissions": asked is not None, "forks": True}
    await client.initialize_async(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(experimental={"coven": coven}),
            root_uri=root.as_uri(),
            initialization_options={"token": TOKEN},
        )
    )
    client.initialized(types.InitializedParams())
    return client


async def disconnect(client: LanguageClient) -> None:
    client.protocol.writer.close()
    await asyncio.wait_for(client.stop(), 30)


async def test_a_permission_question_dies_with_the_editor_that_was_asked(
    tcp_port: int, tmp_path: Path, model: ScriptedModel, fault: FaultRecord
) -> None:
    model.on("Tidy up", ToolUse("Bash", {"command": "touch tidy.txt && echo tidied"}))
    model.on("denied", "The tool was denied, so I stopped.")
    model.on("tidied", "Tidied.")
    asked = asyncio.Event()
    events: list[dict[str, Any]] = []
    watcher_events: list[dict[str, Any]] = []
    editor = await connect(tcp_port, tmp_path, events, asked)
    watcher = await connect(tcp_port, tmp_path, watcher_events)
    started = await editor.protocol.send_request_async("coven/startSession", {"prompt": "Tidy up"})
    sid = to_plain(started)["sessionId"]
    await asyncio.wait_for(asked.wait(), 90)

    await disconnect(editor)  # gone, with the question unanswered
    fault.inject()

    def decided() -> bool:
        return any(e["kind"] == "permissionDecision" for e in watcher_events)

    await wait_until(decided, 30, "the question to be settled without the editor")
    decision = next(e for e in watcher_events if e["kind"] == "permissionDecision")
    assert decision["sessionId"] == sid and decision["allow"] is False
    assert "disconnected" in decision["message"]
    await wait_until(
        lambda: any(e["kind"] == "turnResult" for e in watcher_events), 60, "the turn to end"
    )
    fault.recovered()
    await disconnect(watcher)


async def test_a_fork_approval_outlives_the_editor_that_was_asked(
    tcp_port: int, tmp_path: Path, model: ScriptedModel, fault: FaultRecord
) -> None:
    """An editor without a fork UI of its own is asked to approve (window/showMessageRequest)
    and goes away unanswered: the proposal waits for another editor's coven/decideFork."""
    model.on("Plan it", "Splitting.\n<fork>\n- Docs\n- Tests\n</fork>", times=1)
    model.on("You were assigned 'Docs'", "Docs done.")
    model.on("You were assigned 'Tests'", "Tests done.")
    model.on("<fork-results>", "All done.")
    asked = asyncio.Event()
    editor = LanguageClient("tcp-test", "1")

    @editor.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)
    async def on_question(params: Any) -> Any:
        asked.set()
        await asyncio.Event().wait()  # the user walks away

    await editor.start_tcp("127.0.0.1", tcp_port)
    await editor.initialize_async(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(experimental={"coven": {"forks": False}}),
            root_uri=tmp_path.as_uri(),
            initialization_options={"token": TOKEN, "forkMode": "approve"},
        )
    )
    editor.initialized(types.InitializedParams())
    watcher_events: list[dict[str, Any]] = []
    watcher = await connect(tcp_port, tmp_path, watcher_events)
    started = await editor.protocol.send_request_async("coven/startSession", {"prompt": "Plan it"})
    sid = to_plain(started)["sessionId"]
    await asyncio.wait_for(asked.wait(), 90)

    await disconnect(editor)
    fault.inject()
    [proposed] = [e for e in watcher_events if e["kind"] == "forkProposed"]
    await watcher.protocol.send_request_async(
        "coven/decideFork", {"forkId": proposed["forkId"], "approve": True}
    )

    def answered() -> bool:
        return any(e["kind"] == "turnResult" and e["text"] == "All done." for e in watcher_events)

    await wait_until(answered, 90, "the parent's answer to the fork")
    fault.recovered()
    assert any(e["kind"] == "forkStarted" and e["sessionId"] == sid for e in watcher_events)
    await disconnect(watcher)


async def test_a_client_gone_before_its_get_events_answer_leaves_the_server_well(
    tcp_port: int, tmp_path: Path, model: ScriptedModel, fault: FaultRecord
) -> None:
    """A client asks for a long log and is gone before the answer is written: the server goes
    on, the session too, and other clients are answered."""
    model.on("Talk a lot", "x" * 200_000)
    model.on("Once more", "Still here.")
    watcher_events: list[dict[str, Any]] = []
    watcher = await connect(tcp_port, tmp_path, watcher_events)
    started = await watcher.protocol.send_request_async(
        "coven/startSession", {"prompt": "Talk a lot"}
    )
    sid = to_plain(started)["sessionId"]
    await wait_until(lambda: any(e["kind"] == "turnResult" for e in watcher_events), 60, "the turn")

    for n in range(5):  # each asks, and hangs up without reading a byte of the answer
        raw = await connect_tcp(tcp_port)
        await raw.initialize(tmp_path, {"token": TOKEN})
        await raw.send(
            {"jsonrpc": "2.0", "id": n, "method": "coven/getEvents", "params": {"sessionId": sid}}
        )
        raw.writer.transport.abort()  # a reset, not a polite close
    fault.inject()

    listed = to_plain(await watcher.protocol.send_request_async("coven/listSessions", {}))
    assert [s["sessionId"] for s in listed["sessions"]] == [sid]
    await watcher.protocol.send_request_async(
        "coven/sendMessage", {"sessionId": sid, "text": "Once more"}
    )
    await wait_until(
        lambda: any(
            e["kind"] == "turnResult" and e["text"] == "Still here." for e in watcher_events
        ),
        60,
        "the next turn",
    )
    fault.recovered()
    await disconnect(watcher)
