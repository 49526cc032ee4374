"""A session end to end: real LSP client -> coven-ls -> real `claude` CLI -> scripted model."""

from __future__ import annotations

from coven_ls.testing.scripted_model import ScriptedModel, ToolUse

from ..harness import Coven


def assert_gapless(events: list[dict]) -> None:
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))


async def test_session_streams_a_tool_turn_in_order(coven: Coven, model: ScriptedModel) -> None:
    model.on(
        "count the files",
        "I'll count them.",
        ToolUse("Bash", {"command": "touch made.txt && echo coven-e2e"}),
    )
    model.on("coven-e2e", "The command said coven-e2e.")

    sid = await coven.start("Please count the files")
    result = await coven.wait_kind(sid, "turnResult")
    await coven.wait_status(sid, "idle")

    events = coven.of(sid)
    assert_gapless(events)
    kinds = [
        e["kind"] for e in events if e["kind"] in ("text", "toolUse", "toolResult", "turnResult")
    ]
    assert kinds == ["text", "toolUse", "toolResult", "text", "turnResult"]
    tool_use = coven.of(sid, "toolUse")[0]
    assert tool_use["name"] == "Bash" and tool_use["input"]["command"].endswith("echo coven-e2e")
    tool_result = coven.of(sid, "toolResult")[0]
    assert tool_result["toolUseId"] == tool_use["toolUseId"]
    assert "coven-e2e" in tool_result["content"] and tool_result["isError"] is False
    assert result["text"] == "The command said coven-e2e." and result["isError"] is False
    assert all(e["messageId"] for e in coven.of(sid, "text"))
    statuses = [e["status"] for e in coven.of(sid, "status")]
    assert statuses[0] == "starting" and "running" in statuses and statuses[-1] == "idle"
    # The permission request for Bash went to the editor, which allowed it.
    assert [r["toolName"] for r in coven.permission_requests] == ["Bash"]
    # A reconnecting client gets the same history.
    again = await coven.request("coven/getEvents", {"sessionId": sid})
    assert again["events"] == events


async def test_follow_up_continues_the_same_conversation(
    coven: Coven, model: ScriptedModel
) -> None:
    model.on("remember the word pineapple", "Noted: pineapple.")
    model.on("which word", "You asked me to remember pineapple.")

    sid = await coven.start("Please remember the word pineapple")
    first = await coven.wait_kind(sid, "turnResult")
    await coven.request("coven/sendMessage", {"sessionId": sid, "text": "Which word was it?"})
    second = await coven.wait_kind(sid, "turnResult", count=2)

    assert first["agentSessionId"] == second["agentSessionId"]
    last = [r for r in model.requests if r.is_main_turn][-1]
    assert "Which word was it?" in last.last_user_text
    assert "remember the word pineapple" in last.all_text and "Noted: pineapple." in last.all_text
    prompts = [e["text"] for e in coven.of(sid, "prompt")]
    assert prompts == ["Please remember the word pineapple", "Which word was it?"]
    assert_gapless(coven.of(sid))


async def test_message_sent_during_a_turn_is_queued(coven: Coven, model: ScriptedModel) -> None:
    model.on("A slow question", "A slow answer.", latency=2.0)
    model.on("Quick follow-up", "A quick answer.")

    sid = await coven.start("A slow question")
    await coven.wait_status(sid, "running")
    answer = await coven.request("coven/sendMessage", {"sessionId": sid, "text": "Quick follow-up"})
    assert answer == {"queued": True, "position": 1}
    await coven.wait_kind(sid, "turnResult", count=2)
    results = [e["text"] for e in coven.of(sid, "turnResult")]
    assert results == ["A slow answer.", "A quick answer."]


async def test_cancel_mid_turn_leaves_the_session_usable(
    coven: Coven, model: ScriptedModel
) -> None:
    # After an interrupt the CLI sends the cut-off prompt again with the next one, so this rule
    # must not answer twice.
    model.on("the endless task", "This takes forever.", latency=120.0, times=1)
    model.on("Are you there", "Still here.")

    sid = await coven.start("Start the endless task")
    await coven.wait_status(sid, "running")
    model.wait_for_requests(1, timeout=60, predicate=lambda r: "endless task" in r.last_user_text)
    await coven.request("coven/cancel", {"sessionId": sid})
    cancelled = await coven.wait_kind(sid, "turnResult")
    # A cancelled turn is no error, and the CLI's diagnostic for it is not shown as an answer.
    assert cancelled["cancelled"] is True and cancelled["isError"] is False
    assert cancelled["text"] == ""
    idle = await coven.wait_status(sid, "idle")

    await coven.request("coven/sendMessage", {"sessionId": sid, "text": "Are you there?"})
    after = await coven.wait_kind(sid, "turnResult", count=2)
    assert after["text"] == "Still here." and after["isError"] is False
    assert idle["seq"] < after["seq"]
    info = (await coven.request("coven/listSessions", {}))["sessions"]
    assert [(s["sessionId"], s["status"]) for s in info] == [(sid, "idle")]


async def test_denied_permission_stops_the_tool(
    coven: Coven, model: ScriptedModel, tmp_path
) -> None:
    target = coven.workspace / "precious.txt"
    target.write_text("keep me")
    model.on("clean up the workspace", ToolUse("Bash", {"command": f"rm {target}"}))
    # The model only gets this far if the denial, with the user's reason, reached it.
    model.on("Not that file.", "Understood, I will not delete it.")
    coven.permission_answer = lambda req: {"allow": False, "message": "Not that file."}

    sid = await coven.start("Please clean up the workspace")
    result = await coven.wait_kind(sid, "turnResult")

    assert target.read_text() == "keep me"
    [request] = coven.permission_requests
    assert request["sessionId"] == sid and request["toolName"] == "Bash"
    assert request["input"]["command"] == f"rm {target}" and request["toolUseId"]
    decision = coven.of(sid, "permissionDecision")[0]
    assert decision["allow"] is False and decision["message"] == "Not that file."
    tool_result = coven.of(sid, "toolResult")[0]
    assert tool_result["isError"] is True and "Not that file." in tool_result["content"]
    assert result["text"] == "Understood, I will not delete it."


async def test_permission_falls_back_to_show_message_request(
    coven_factory, model: ScriptedModel
) -> None:
    coven = await coven_factory(custom_permissions=False)
    model.on(
        "Please make a file", ToolUse("Bash", {"command": "touch fallback.txt && echo made-it"})
    )
    model.on("made-it", "Created it.")
    coven.message_answer = lambda req: "Allow"

    sid = await coven.start("Please make a file")
    result = await coven.wait_kind(sid, "turnResult")

    assert coven.permission_requests == []
    [asked] = coven.message_requests
    assert asked["actions"] == ["Allow", "Deny"]
    assert "Bash" in asked["message"] and "touch fallback.txt" in asked["message"]
    assert (coven.workspace / "fallback.txt").exists()
    assert result["text"] == "Created it."


async def test_cancel_right_after_sending_still_interrupts(
    coven: Coven, model: ScriptedModel
) -> None:
    model.on("Warm up", "Ready.")
    # After an interrupt the CLI sends the cut-off prompt again with the next one: this rule
    # must come first.
    model.on("Still there", "Yes.")
    model.on("a long essay", "An essay that never ends.", latency=120.0)

    sid = await coven.start("Warm up")
    first = await coven.wait_kind(sid, "turnResult")
    await coven.request("coven/sendMessage", {"sessionId": sid, "text": "Write a long essay"})
    await coven.wait_for(
        lambda e: (
            e["sessionId"] == sid
            and e["kind"] == "status"
            and e["status"] == "running"
            and e["seq"] > first["seq"]
        ),
        what="the second turn to run",
    )
    await coven.request("coven/cancel", {"sessionId": sid})  # before the CLI asked the model
    cancelled = await coven.wait_kind(sid, "turnResult", count=2)
    # The CLI itself ended the turn (an interrupt result), rather than coven-ls killing it.
    assert cancelled["cancelled"] is True and cancelled["subtype"] == "error_during_execution"
    await coven.request("coven/sendMessage", {"sessionId": sid, "text": "Still there?"})
    assert (await coven.wait_kind(sid, "turnResult", count=3))["text"] == "Yes."


async def test_tokens_are_counted_per_turn_and_per_session(
    coven: Coven, model: ScriptedModel
) -> None:
    model.on("First", "One.")
    model.on("Second", "Two, a little longer than the first.")
    sid = await coven.start("First")
    first = await coven.wait_kind(sid, "turnResult")
    await coven.request("coven/sendMessage", {"sessionId": sid, "text": "Second"})
    second = await coven.wait_kind(sid, "turnResult", count=2)
    keys = {"inputTokens", "outputTokens", "cacheReadTokens", "cacheCreationTokens"}
    for turn in (first, second):
        assert set(turn["usage"]) == keys and turn["usage"]["outputTokens"] > 0
    # The session's total is its turns added up, as the CLI reported them.
    await coven.wait_status(sid, "idle", after_seq=second["seq"])
    (info,) = (await coven.request("coven/listSessions", {}))["sessions"]
    assert info["usage"] == {k: first["usage"][k] + second["usage"][k] for k in keys}
    assert info["treeUsage"] == info["usage"]
