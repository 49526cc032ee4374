"""Big inputs, end to end (issue #12): a 5 MB prompt and a 5 MB follow-up through the real CLI, a
tool that prints 10 MB, and a server whose store holds 10,000 sessions. Each works, in bounded
time."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from coven_ls import protocol
from coven_ls.core.store import Store, database_path
from coven_ls.testing.scripted_model import ScriptedModel, ToolUse

from ..harness import Coven
from ..rawlsp import server_env, server_log, start_stdio

pytestmark = pytest.mark.slow

MB = 2**20


async def test_a_five_megabyte_prompt_and_follow_up(
    coven_factory: Callable[..., Awaitable[Coven]], model: ScriptedModel
) -> None:
    """coven-ls, the CLI and the pipes between them carry 5 MB messages whole. The CLI itself
    refuses a prompt that long (far past any model's context) before calling the model: the turn
    ends with an error saying so, and the session takes the next message. A long prompt that fits
    the context (400 KB) reaches the model."""
    head, follow_head, fits_head = "Summarize this log:", "And this one:", "This one fits:"
    prompt = head + "\n" + "log line ✓ " * (5 * MB // 13)
    follow = follow_head + "\n" + "y" * (5 * MB)
    fits = fits_head + "\n" + "z " * (200 * 2**10)
    model.on(fits_head, "A long but readable log.")
    coven = await coven_factory()

    model.on(follow_head, "Another long log.")

    def reached_model(text: str) -> bool:
        return any(text.strip() in r.last_user_text for r in model.requests)

    sid = await coven.start(prompt)
    first = await coven.wait_kind(sid, "turnResult")
    assert first["isError"] is True and first["text"] == "Prompt is too long"
    assert not reached_model(head)
    sent = await coven.request(protocol.SEND_MESSAGE, {"sessionId": sid, "text": follow})
    assert sent["position"] in (0, 1)
    # Whether the CLI counts this one too long depends on its estimate of its tokens: either
    # way the turn ends, and a model that is called sees all of it.
    second = await coven.wait_kind(sid, "turnResult", count=2)
    if second.get("isError"):
        assert second["text"] == "Prompt is too long" and not reached_model(follow_head)
    else:
        assert second["text"] == "Another long log." and reached_model(follow)

    await coven.request(protocol.SEND_MESSAGE, {"sessionId": sid, "text": fits})
    third = await coven.wait_kind(sid, "turnResult", count=3)
    assert third["text"] == "A long but readable log." and not third.get("isError")
    assert reached_model(fits)
    await coven.wait_status(sid, "idle", after_seq=third["seq"] - 1)
    # What a late client reads back holds the whole texts.
    stored = await coven.request(protocol.GET_EVENTS, {"sessionId": sid})
    prompts = [e["text"] for e in stored["events"] if e["kind"] == "prompt"]
    assert prompts == [prompt, follow, fits]


async def test_a_tool_that_prints_ten_megabytes(coven: Coven, model: ScriptedModel) -> None:
    model.on(
        "Print a lot",
        ToolUse("Bash", {"command": "python3 -c \"print('z' * 10_000_000)\""}),
    )
    model.on(lambda r: "zzzz" in json.dumps(r.messages[-1]), "That was a lot of z.")
    sid = await coven.start("Print a lot, please")
    result = await coven.wait_kind(sid, "turnResult")
    assert result["text"] == "That was a lot of z." and not result.get("isError")
    [tool_result] = coven.of(sid, "toolResult")
    assert not tool_result.get("isError") and "zzzz" in str(tool_result)
    await coven.wait_status(sid, "idle", after_seq=result["seq"] - 1)


async def test_ten_thousand_sessions(tmp_path: Path) -> None:
    """A store of 10,000 sessions: the server restores them at initialize, lists them all, and
    answers a session's history, each in bounded time."""
    workspace, state = tmp_path / "workspace", tmp_path / "state"
    workspace.mkdir()
    count = 10_000
    store, _ = Store.open(database_path(str(workspace), str(state)))
    rows = [
        {
            "session_id": f"s-{i:012x}",
            "parent_id": None,
            "title": f"Session {i}",
            "status": "idle",
            "cwd": str(workspace),
            "permission_mode": "default",
            "fork_mode": "approve",
            "created_at": "2026-11-22T01:36:13.290Z",
            "cost_usd": 0.01,
            "usage": {"inputTokens": i},
            "depth": 0,
            "max_children": 8,
            "max_parallel": 4,
            "max_depth": 1,
        }
        for i in range(count)
    ]
    events = [
        (
            event := {
                "sessionId": row["session_id"],
                "seq": 1,
                "kind": "status",
                "time": "2026-11-22T01:36:13.290Z",
                "status": "idle",
            },
            protocol.event_body(event),  # type: ignore[arg-type]
        )
        for row in rows
    ]
    store.write(events, rows)
    store.close()

    env = server_env(tmp_path)
    process, conn = await start_stdio(tmp_path, env)
    try:
        began = time.monotonic()
        await asyncio.wait_for(conn.initialize(workspace, {"stateDir": str(state)}), 60)
        restored = time.monotonic() - began

        began = time.monotonic()
        listed = (await conn.result(1, protocol.LIST_SESSIONS))["sessions"]
        listing = time.monotonic() - began
        assert [s["sessionId"] for s in listed] == [r["session_id"] for r in rows]
        assert (
            listed[-1]["usage"]["inputTokens"]
            == count - 1
            == listed[-1]["treeUsage"]["inputTokens"]
        )
        history = await conn.result(2, protocol.GET_EVENTS, {"sessionId": rows[-1]["session_id"]})
        assert [e["status"] for e in history["events"]] == ["idle"]
        # Generous bounds for a shared CI machine; a list that looked at every pair of sessions
        # (10^8 comparisons) took tens of seconds.
        assert restored < 45, f"initialize took {restored:.1f}s"
        assert listing < 5, f"listSessions took {listing:.1f}s"
        await conn.send({"jsonrpc": "2.0", "method": "exit"})
        conn.writer.close()
        await asyncio.wait_for(process.wait(), 60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert "Traceback" not in server_log(tmp_path)
