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
