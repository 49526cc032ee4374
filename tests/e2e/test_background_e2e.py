"""The CLI's own subagents run in the background (Claude Code 2.1.330): their news, their words
and the turn the CLI starts by itself to report them all arrive live, with no user message."""

from __future__ import annotations

import json

import pytest
from pygls.exceptions import JsonRpcException

from coven_ls.testing.scripted_model import ModelRequest, ScriptedModel, ToolUse

from ..harness import Coven

AGENT_CALL = ToolUse(
    "Agent",
    {
        "description": "Find TODOs",
        "prompt": "Look for TODOs",
        "subagent_type": "general-purpose",
        "run_in_background": True,
    },
)


def reports_a_task(request: ModelRequest) -> bool:
    """The request of a turn the CLI starts by itself: its last user message is the
    notification of a background task."""
    return "task-notification" in json.dumps(request.messages[-1])


async def test_a_background_agent_reports_back_by_itself(
    coven: Coven, model: ScriptedModel
) -> None:
    model.on(reports_a_task, "The background agent found 3 TODOs.")
    model.on("Research in the background", AGENT_CALL)
    # The subagent answers after the parent's turn has ended.
    model.on("Look for TODOs", "Found 3 TODOs.", latency=2.0)
    model.on("Async agent launched", "I started a background agent.")
    sid = await coven.start("Research in the background")

    first = await coven.wait_kind(sid, "turnResult")
    assert first["text"] == "I started a background agent."
    started = await coven.wait_kind(sid, "task", status="started")
    [call] = [e for e in coven.of(sid, "toolUse") if e["name"] == "Agent"]
    assert started["toolUseId"] == call["toolUseId"] and started["description"] == "Find TODOs"

    # No message from us: the subagent's words, its end, and the CLI's own turn arrive anyway.
    said = await coven.wait_for(
        lambda e: (
            e["sessionId"] == sid
            and e.get("parentToolUseId") == call["toolUseId"]
            and e["kind"] == "text"
        ),
        what="the subagent's text",
    )
    assert said["text"] == "Found 3 TODOs."
    ended = await coven.wait_kind(sid, "task", status="completed")
    assert ended["taskId"] == started["taskId"]
    report = await coven.wait_kind(sid, "prompt", origin="task")
    assert "Find TODOs" in report["text"]
    second = await coven.wait_kind(sid, "turnResult", count=2)
    assert second["text"] == "The background agent found 3 TODOs."
    assert first["seq"] < said["seq"] < report["seq"] < second["seq"]
    # A turn like any other: running, then idle again; nothing left running.
    await coven.wait_status(sid, "idle", after_seq=second["seq"])
    statuses = [e["status"] for e in coven.of(sid, "status") if e["seq"] > first["seq"]]
    assert statuses[-2:] == ["running", "idle"]
    listed = (await coven.request("coven/listSessions", {}))["sessions"]
    assert listed[0]["backgroundTasks"] == []


async def test_a_background_agent_can_be_stopped(coven: Coven, model: ScriptedModel) -> None:
    model.on(reports_a_task, "The agent was stopped.")
    model.on("Research in the background", AGENT_CALL)
    model.on("Look for TODOs", "Too late.", latency=120.0)
    model.on("Async agent launched", "I started a background agent.")
    sid = await coven.start("Research in the background")
    started = await coven.wait_kind(sid, "task", status="started")
    listed = (await coven.request("coven/listSessions", {}))["sessions"]
    assert listed[0]["backgroundTasks"] == [started["taskId"]]

    await coven.request("coven/stopTask", {"sessionId": sid, "taskId": started["taskId"]})
    stopped = await coven.wait_kind(sid, "task", status="stopped")
    assert stopped["taskId"] == started["taskId"]
    listed = (await coven.request("coven/listSessions", {}))["sessions"]
    assert listed[0]["backgroundTasks"] == []
    # A task that does not run cannot be stopped.
    with pytest.raises(JsonRpcException, match="no running background task 'no-such-task'"):
        await coven.request("coven/stopTask", {"sessionId": sid, "taskId": "no-such-task"})
