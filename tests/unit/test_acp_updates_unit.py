"""The event -> ACP update translation, alone."""

from __future__ import annotations

from coven_ls.acp import updates
from coven_ls.protocol.events import Delta


def event(kind: str, sid: str = "s-1", **fields: object) -> dict[str, object]:
    return {"sessionId": sid, "seq": 1, "kind": kind, "time": "t", **fields}


def test_a_streamed_block_is_not_sent_again_whole() -> None:
    view = updates.SessionView()
    piece = Delta(sessionId="s-1", afterSeq=3, blockId="m1:0", kind="text", text="Hel")
    assert updates.delta_update(piece).content.text == "Hel"
    view.streamed.add("m1:0")
    assert updates.event_updates(event("text", text="Hello", blockId="m1:0"), view) == []
    [whole] = updates.event_updates(event("text", text="Unstreamed", blockId="m2:0"), view)
    assert whole.session_update == "agent_message_chunk" and whole.content.text == "Unstreamed"
    [thought] = updates.event_updates(event("thinking", text="Hmm"), view)
    assert thought.session_update == "agent_thought_chunk"


def test_tools_become_tool_calls_with_kind_and_locations() -> None:
    view = updates.SessionView()
    tool_input = {"file_path": "/w/a.py", "old_string": "x", "new_string": "y"}
    [call] = updates.event_updates(
        event("toolUse", toolUseId="t1", name="Edit", input=tool_input), view
    )
    assert (call.tool_call_id, call.kind, call.status) == ("t1", "edit", "in_progress")
    assert [loc.path for loc in call.locations] == ["/w/a.py"] and call.raw_input == tool_input
    [done] = updates.event_updates(
        event("toolResult", toolUseId="t1", content="boom", isError=True), view
    )
    assert done.status == "failed" and done.content[0].content.text == "boom"
    assert updates.tool_kind("mcp__thing") == "other"


def test_a_live_prompt_is_not_echoed_but_a_replayed_one_and_fork_results_are() -> None:
    view = updates.SessionView()
    assert updates.event_updates(event("prompt", text="Hi", origin="user"), view) == []
    [replayed] = updates.event_updates(event("prompt", text="Hi", origin="user"), view, True)
    assert replayed.session_update == "user_message_chunk"
    [results] = updates.event_updates(
        event("prompt", text="<fork-results>", origin="forkResults"), view
    )
    assert results.content.text == "<fork-results>"


def test_a_fork_is_a_plan_and_a_tool_call_that_follow_its_children() -> None:
    view = updates.SessionView()
    children = [{"sessionId": "s-a", "label": "A"}, {"sessionId": "s-b", "label": "B"}]
    plan, call = updates.event_updates(
        event(
            "forkStarted",
            forkId="f-1",
            state="running",
            source="model",
            tasks=["A", "B"],
            children=children,
        ),
        view,
    )
    assert [e.status for e in plan.entries] == ["pending", "pending"]
    assert call.title == "Fork: 2 tasks" and call.tool_call_id == "fork-f-1"

    running = updates.child_updates(event("status", sid="s-a", status="running"), view)
    assert [e.status for e in running[0].entries] == ["in_progress", "pending"]
    assert updates.child_updates(event("status", sid="s-a", status="running"), view) == []
    answer = event("turnResult", sid="s-a", text="A done", isError=False, subtype="success")
    [said] = updates.child_updates(answer, view)
    assert "A done" in said.content[0].content.text
    assert updates.child_updates(event("status", sid="s-other", status="idle"), view) == []

    results = [
        {"label": "A", "sessionId": "s-a", "ok": True},
        {"label": "B", "sessionId": "s-b", "ok": False, "error": "API Error: 500"},
    ]
    plan, done = updates.event_updates(
        event("forkFinished", forkId="f-1", state="finished", results=results), view
    )
    assert [e.status for e in plan.entries] == ["completed", "completed"]
    shown = done.content[0].content.text
    assert done.status == "completed" and "A done" in shown and "failed: API Error: 500" in shown


def test_a_turn_reports_its_context_against_the_models_window_and_its_cost() -> None:
    usage = {"inputTokens": 10, "outputTokens": 5, "cacheReadTokens": 100}
    context = {"tokens": 150_000, "window": 1_000_000, "model": "claude-opus-5-5"}
    [update] = updates.event_updates(
        event(
            "turnResult", text="", isError=False, subtype="success", usage=usage, costUsd=0.25,
            contextUsage=context,
        ),
        updates.SessionView(),
    )  # fmt: skip
    assert (update.used, update.size) == (150_000, 1_000_000)
    assert (update.cost.amount, update.cost.currency) == (0.25, "USD")


def test_a_model_of_unknown_window_reports_its_tokens_against_the_fallback() -> None:
    context = {"tokens": 4_000, "window": None, "model": "claude-next-9"}
    [update] = updates.event_updates(
        event("turnResult", text="", isError=False, subtype="success", contextUsage=context),
        updates.SessionView(),
    )
    assert (update.used, update.size) == (4_000, updates.FALLBACK_WINDOW)
    assert update.cost is None


def test_a_subagents_tool_calls_are_marked_with_their_agent_call_and_its_words_are_not_shown() -> (
    None
):
    view = updates.SessionView()
    [call] = updates.event_updates(
        event(
            "toolUse", toolUseId="t2", name="Grep", input={"pattern": "TODO"}, parentToolUseId="t1"
        ),
        view,
    )
    assert call.title.startswith("↳ Grep") and call.kind == "search"
    assert call.field_meta == {"coven": {"parentToolCallId": "t1"}}
    [done] = updates.event_updates(
        event("toolResult", toolUseId="t2", content="3 found", isError=False, parentToolUseId="t1"),
        view,
    )
    assert done.status == "completed" and done.field_meta == {"coven": {"parentToolCallId": "t1"}}
    assert updates.event_updates(event("text", text="Looking", parentToolUseId="t1"), view) == []


def test_an_agents_plan_and_tool_updates_pass_on_as_acp_sends_them() -> None:
    view = updates.SessionView()
    entries = [
        {"content": "Read the notes", "status": "completed", "priority": "high"},
        {"content": "Fix the parser", "status": "in_progress", "priority": "medium"},
    ]
    [plan] = updates.event_updates(event("plan", entries=entries), view)
    assert plan.session_update == "plan"
    assert [(e.content, e.status, e.priority) for e in plan.entries] == [
        ("Read the notes", "completed", "high"),
        ("Fix the parser", "in_progress", "medium"),
    ]
    [changed] = updates.event_updates(
        event(
            "toolUpdate",
            toolUseId="t7",
            status="in_progress",
            content="50% done",
            locations=[{"path": "/w/a.py", "line": 3}],
        ),
        view,
    )
    assert (changed.session_update, changed.tool_call_id, changed.status) == (
        "tool_call_update",
        "t7",
        "in_progress",
    )
    assert changed.content[0].content.text == "50% done"
    assert [(loc.path, loc.line) for loc in changed.locations] == [("/w/a.py", 3)]
    # Only what the update changes is set: its title stays the agent's earlier one.
    assert changed.title is None
    [titled] = updates.event_updates(event("toolUpdate", toolUseId="t7", title="Read a.py"), view)
    assert (titled.title, titled.status, titled.content) == ("Read a.py", None, None)


def test_an_agent_restarted_is_a_line_of_the_answer() -> None:
    view = updates.SessionView()
    [line] = updates.event_updates(
        event("agentRestarted", reason="exit code 1", restart=1, maxRestarts=3), view
    )
    assert line.session_update == "agent_message_chunk"
    assert "exit code 1" in line.content.text and "1 of 3" in line.content.text
