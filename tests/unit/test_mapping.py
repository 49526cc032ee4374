"""Unit tests for the way from claude-agent-sdk messages to coven event drafts: the Claude
adapter's reader (coven_ls/agents/claude/events.py: SDK messages -> agent events) and the core's
mapping (coven_ls/core/session/mapping.py: agent events -> coven events), together."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest
from claude_agent_sdk import (
    AssistantMessage,
    RateLimitEvent,
    ResultMessage,
    StreamEvent,
    SystemMessage,
    TaskUpdatedMessage,
    TextBlock,
    ToolResultBlock,
    UserMessage,
)
from claude_agent_sdk.types import RateLimitInfo

from coven_ls import protocol
from coven_ls.agents.claude.events import Reader, tool_result_text
from coven_ls.core.agent import events as agent_events
from coven_ls.core.session.mapping import to_payloads
from coven_ls.protocol import Kind, Payload, events
from coven_ls.protocol.types import Usage

from ..fakes import (
    assistant,
    init,
    result,
    task_notification,
    task_progress,
    task_started,
    task_updated,
    thinking,
    tool_result,
    tool_use,
)


@dataclass(frozen=True)
class Draft:
    """A payload as its kind and all its fields (None included), as the tests below expect."""

    kind: str
    fields: dict[str, Any]
    payload: Payload | None = field(default=None, compare=False)


def map_message(message: Any) -> list[Payload]:
    """The coven events one SDK message makes, read by a fresh Claude reader."""
    return [p for event in Reader().read(message) for p in to_payloads(event)]


def mapped(message: Any) -> list[Draft]:
    return [Draft(p.kind, msgspec.structs.asdict(p), p) for p in map_message(message)]


# --- assistant messages --------------------------------------------------------------------------


def test_assistant_text_uses_the_message_uuid_as_message_id() -> None:
    drafts = mapped(assistant("Hello there", uuid="u-1"))
    assert drafts == [
        Draft(
            Kind.TEXT,
            {"text": "Hello there", "messageId": "u-1", "parentToolUseId": None, "blockId": None},
        )
    ]


def test_thinking_block() -> None:
    drafts = mapped(assistant(thinking("let me see"), uuid="u-2"))
    assert len(drafts) == 1
    assert drafts[0].kind == Kind.THINKING
    assert drafts[0].fields["text"] == "let me see"
    assert drafts[0].fields["messageId"] == "u-2"


def test_tool_use_block() -> None:
    block = tool_use("toolu_1", "Bash", {"command": "ls -la", "timeout": 5})
    (draft,) = mapped(assistant(block, uuid="u-3"))
    assert draft.kind == Kind.TOOL_USE
    assert draft.fields["toolUseId"] == "toolu_1"
    assert draft.fields["name"] == "Bash"
    assert draft.fields["input"] == {"command": "ls -la", "timeout": 5}
    assert draft.fields["messageId"] == "u-3"


def test_several_blocks_keep_their_order() -> None:
    message = assistant(
        thinking("plan"),
        "first",
        tool_use("toolu_a", "Read", {"file_path": "/x"}),
        "second",
        tool_use("toolu_b", "Bash", {"command": "true"}),
        uuid="u-4",
    )
    drafts = mapped(message)
    assert [d.kind for d in drafts] == [
        Kind.THINKING,
        Kind.TEXT,
        Kind.TOOL_USE,
        Kind.TEXT,
        Kind.TOOL_USE,
    ]
    assert [d.fields.get("text") or d.fields.get("toolUseId") for d in drafts] == [
        "plan",
        "first",
        "toolu_a",
        "second",
        "toolu_b",
    ]
    assert {d.fields["messageId"] for d in drafts} == {"u-4"}


def test_empty_text_blocks_are_skipped() -> None:
    drafts = mapped(assistant("", "kept", ""))
    assert [d.fields["text"] for d in drafts] == ["kept"]
    assert mapped(assistant("")) == []


def test_subagent_messages_carry_parent_tool_use_id() -> None:
    drafts = mapped(
        assistant("from the subagent", tool_use("toolu_s", "Grep", {}), parent="toolu_task")
    )
    assert [d.fields["parentToolUseId"] for d in drafts] == ["toolu_task", "toolu_task"]
    (result_draft,) = mapped(tool_result("toolu_s", "found", parent="toolu_task"))
    assert result_draft.fields["parentToolUseId"] == "toolu_task"


def test_top_level_messages_have_no_parent_tool_use_id_on_the_wire() -> None:
    for message in (assistant("top level"), tool_result("toolu_1", "out")):
        (draft,) = mapped(message)
        assert draft.fields.get("parentToolUseId") is None
        event = protocol.event_dict("s-1", 1, protocol.now_iso(), draft.payload)
        assert "parentToolUseId" not in event


def test_assistant_message_without_uuid() -> None:
    message = AssistantMessage(content=[TextBlock("hi")], model="m")
    (draft,) = mapped(message)
    assert draft.fields["messageId"] is None
    assert "messageId" not in protocol.event_dict("s", 1, protocol.now_iso(), draft.payload)


# --- user messages -------------------------------------------------------------------------------


def test_tool_result_with_string_content() -> None:
    (draft,) = mapped(tool_result("toolu_1", "total 0\nfile.txt"))
    assert draft == Draft(
        Kind.TOOL_RESULT,
        {
            "toolUseId": "toolu_1",
            "content": "total 0\nfile.txt",
            "isError": False,
            "parentToolUseId": None,
        },
    )


def test_tool_result_with_a_list_of_blocks() -> None:
    content = [
        {"type": "text", "text": "line one"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAA"}},
        {"type": "text", "text": "line two"},
    ]
    (draft,) = mapped(tool_result("toolu_2", content))
    assert draft.fields["content"] == "line one\n[image]\nline two"


def test_tool_result_unknown_blocks_are_shown_as_json() -> None:
    block = {"type": "tool_reference", "tool_name": "Bash"}
    assert tool_result_text([block]) == json.dumps(block)
    assert tool_result_text(None) == ""
    assert tool_result_text([]) == ""


def test_tool_result_error_flag() -> None:
    (draft,) = mapped(tool_result("toolu_3", "command not found", is_error=True))
    assert draft.fields["isError"] is True
    (draft,) = mapped(tool_result("toolu_4", "fine", is_error=None))
    assert draft.fields["isError"] is False


def test_tool_result_with_no_content() -> None:
    (draft,) = mapped(tool_result("toolu_5", None))
    assert draft.fields["content"] == ""


def test_plain_string_user_message_gives_no_events() -> None:
    assert mapped(UserMessage(content="the prompt itself", uuid="u")) == []


def test_user_message_blocks_other_than_tool_results_are_skipped() -> None:
    message = UserMessage(
        content=[TextBlock("injected"), ToolResultBlock(tool_use_id="toolu_9", content="x")]
    )
    drafts = mapped(message)
    assert [d.kind for d in drafts] == [Kind.TOOL_RESULT]
    assert drafts[0].fields["toolUseId"] == "toolu_9"


# --- results -------------------------------------------------------------------------------------


def test_result_message_becomes_turn_result() -> None:
    message = result(
        "All done.",
        agent_session_id="agent-42",
        cost=0.0123,
        duration_ms=3456,
        num_turns=3,
    )
    (draft,) = mapped(message)
    assert draft == Draft(
        Kind.TURN_RESULT,
        {
            "text": "All done.",
            "isError": False,
            "subtype": "success",
            "costUsd": 0.0123,
            "durationMs": 3456,
            "numTurns": 3,
            "agentSessionId": "agent-42",
            "usage": None,  # this result reports none
            "cancelled": None,  # only the session sets it, on a cancelled turn
            "contextUsage": None,  # only the session sets it, from its model calls
        },
    )


def test_error_result_uses_errors_when_result_is_missing() -> None:
    message = result(
        None,
        subtype="error_max_turns",
        is_error=True,
        errors=["Reached the maximum number of turns", "second line"],
    )
    (draft,) = mapped(message)
    assert draft.fields["text"] == "Reached the maximum number of turns\nsecond line"
    assert draft.fields["isError"] is True
    assert draft.fields["subtype"] == "error_max_turns"


def test_result_text_prefers_result_over_errors() -> None:
    (draft,) = mapped(result("the result", errors=["ignored"]))
    assert draft.fields["text"] == "the result"


def test_result_without_text_or_errors_has_empty_text() -> None:
    (draft,) = mapped(result(None, subtype="error_during_execution", is_error=True))
    assert draft.fields["text"] == ""
    assert draft.fields["costUsd"] is None


# --- system and unknown messages -----------------------------------------------------------------


def test_system_init_becomes_agent_event() -> None:
    (draft,) = mapped(init("agent-7", permissionMode="plan"))
    assert draft == Draft(
        Kind.AGENT,
        {
            "agentSessionId": "agent-7",
            "model": "claude-test-1",
            "cwd": "/work",
            "permissionMode": "plan",
            "claudeCodeVersion": "9.9.9",
        },
    )


def test_system_init_with_missing_fields() -> None:
    (draft,) = mapped(SystemMessage(subtype="init", data={"session_id": "a"}))
    event = protocol.event_dict("s", 1, protocol.now_iso(), draft.payload)
    assert event["agentSessionId"] == "a"
    assert "model" not in event and "claudeCodeVersion" not in event


@pytest.mark.parametrize(
    "message",
    [
        SystemMessage(subtype="compact_boundary", data={"compact_metadata": {}}),
        SystemMessage(subtype="status", data={"status": "compacting"}),
        StreamEvent(uuid="e", session_id="a", event={"type": "message_start"}),
        RateLimitEvent(RateLimitInfo(status="allowed"), uuid="r", session_id="a"),
        TaskUpdatedMessage(
            subtype="task_updated", data={}, task_id="t", patch={}, status="running"
        ),
        {"type": "assistant", "message": {}},
        "a string",
        None,
        object(),
    ],
    ids=[
        "compact_boundary",
        "system-status",
        "stream-event",
        "rate-limit",
        "task-updated-not-terminal",
        "dict",
        "str",
        "none",
        "object",
    ],
)
def test_other_messages_give_no_events(message: object) -> None:
    assert mapped(message) == []


def test_background_task_lifecycle() -> None:
    started = task_started("t1", "Count the files", "toolu_agent")
    progress = task_progress(
        "t1",
        "Count the files",
        last_tool_name="Bash",
        usage={"total_tokens": 120, "tool_uses": 2, "duration_ms": 900},
        tool_use_id="toolu_agent",
    )
    done = task_notification("t1", "completed", "Counted 42 files", tool_use_id="toolu_agent")
    killed = task_updated("t2", "killed")
    tasks = [mapped(m)[0].payload for m in (started, progress, done, killed)]
    assert tasks == [
        events.Task(
            taskId="t1", status="started", toolUseId="toolu_agent", description="Count the files"
        ),
        events.Task(
            taskId="t1",
            status="running",
            toolUseId="toolu_agent",
            description="Count the files",
            lastToolName="Bash",
            totalTokens=120,
            toolUses=2,
            durationMs=900,
        ),
        events.Task(
            taskId="t1", status="completed", toolUseId="toolu_agent", summary="Counted 42 files"
        ),
        # task_updated says `killed` where task_notification says `stopped`: one vocabulary out.
        events.Task(taskId="t2", status="stopped"),
    ]


def test_api_retry() -> None:
    message = SystemMessage(
        subtype="api_retry",
        data={
            "attempt": 3,
            "max_retries": 10,
            "retry_delay_ms": 4000,
            "error_status": 529,
            "error": "overloaded",
        },
    )
    assert [d.payload for d in mapped(message)] == [
        events.ApiRetry(
            attempt=3, maxRetries=10, retryDelayMs=4000, errorStatus=529, error="overloaded"
        )
    ]


def test_result_subclass_is_still_mapped() -> None:
    class NewerResult(ResultMessage):
        pass

    message = NewerResult(
        subtype="success",
        duration_ms=1,
        duration_api_ms=1,
        is_error=False,
        num_turns=1,
        session_id="a",
        result="x",
    )
    (draft,) = mapped(message)
    assert draft.kind == Kind.TURN_RESULT


def test_result_usage_in_the_protocols_names() -> None:
    message = ResultMessage(
        subtype="success",
        duration_ms=10,
        duration_api_ms=9,
        is_error=False,
        num_turns=2,
        session_id="a",
        result="ok",
        usage={
            "input_tokens": 12,
            "output_tokens": 34,
            "cache_read_input_tokens": 5600,
            "cache_creation_input_tokens": 78,
            "server_tool_use": {"web_search_requests": 0},
        },
    )
    (draft,) = mapped(message)
    assert draft.payload.usage == Usage(
        inputTokens=12, outputTokens=34, cacheReadTokens=5600, cacheCreationTokens=78
    )


def test_the_clis_own_error_message_is_not_the_models_text() -> None:
    # When the CLI gives up on the API, it writes the error as an assistant message of its own;
    # the turn's result carries the same text (and says it is an error).
    message = AssistantMessage(
        content=[TextBlock("API Error: 529 overloaded")], model="<synthetic>", error="server_error"
    )
    assert mapped(message) == []


def test_the_reader_names_streamed_blocks_and_counts_the_calls_final_usage() -> None:
    """Anthropic's stream events become a block's start and pieces (`<message id>:<index>`) and
    the call's final usage, under the call's id and model, for the main agent and a subagent
    apart."""
    reader = Reader()

    def read(event: dict[str, Any], parent: str | None = None) -> Any:
        [said] = reader.read(
            StreamEvent(uuid="e", session_id="a", event=event, parent_tool_use_id=parent)
        )
        return said

    start = {"type": "message_start", "message": {"id": "msg_1", "model": "claude-sonnet-4-5"}}
    assert read(start) == agent_events.Activity(None)
    assert read({"type": "message_start", "message": {"id": "msg_9"}}, "toolu_1") == (
        agent_events.Activity("toolu_1")
    )
    block = {"type": "content_block_start", "index": 1, "content_block": {"type": "thinking"}}
    assert read(block) == agent_events.BlockStarted("msg_1:1", "thinking", "msg_1")
    piece = {
        "type": "content_block_delta",
        "index": 1,
        "delta": {"type": "thinking_delta", "thinking": "hm"},
    }
    assert read(piece) == agent_events.Delta("msg_1:1", "hm")
    tool_input = {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta"}}
    assert read(tool_input) == agent_events.Activity(None)
    call = read({"type": "message_delta", "usage": {"input_tokens": 10, "output_tokens": 5}})
    assert isinstance(call, agent_events.ModelCall)
    assert (call.call_id, call.model, call.context_tokens) == ("msg_1", "claude-sonnet-4-5", None)
    assert call.usage == Usage(inputTokens=10, outputTokens=5) and call.cost_usd is not None


def test_an_assistant_message_carries_its_calls_usage_and_context() -> None:
    message = AssistantMessage(
        content=[TextBlock("hi")],
        model="claude-sonnet-4-5",
        uuid="u-1",
        message_id="msg_1",
        usage={"input_tokens": 3, "cache_read_input_tokens": 100, "output_tokens": 2},
    )
    [said] = Reader().read(message)
    assert isinstance(said, agent_events.AgentMessage) and said.call is not None
    assert (said.id, said.call_id, said.parts) == ("u-1", "msg_1", (agent_events.TextPart("hi"),))
    assert (said.call.call_id, said.call.context_tokens) == ("msg_1", 103)
    # The CLI's own message (an API error it gave up on) is counted but says nothing.
    synthetic = AssistantMessage(
        content=[TextBlock("API Error")], model="<synthetic>", uuid="u-2", usage={}
    )
    [said] = Reader().read(synthetic)
    assert isinstance(said, agent_events.AgentMessage) and said.parts == ()
    assert said.call is not None and said.call.context_tokens is None


def test_an_acp_plan_is_a_plan_event_whole() -> None:
    plan = agent_events.PlanUpdated(
        (
            agent_events.PlanEntry("Read", "completed", "high"),
            agent_events.PlanEntry("Fix", "pending", "low"),
        )
    )
    [payload] = to_payloads(plan)
    assert payload == events.Plan(
        entries=[
            events.PlanEntry(content="Read", status="completed", priority="high"),
            events.PlanEntry(content="Fix", status="pending", priority="low"),
        ]
    )


def test_a_tool_call_update_is_a_tool_update_of_what_changed_only() -> None:
    update = agent_events.ToolCallUpdate(
        "call_9",
        status="in_progress",
        content="so far",
        locations=(agent_events.Location("/w/a.py", 3), agent_events.Location("/w/b.py")),
    )
    [payload] = to_payloads(update)
    assert msgspec.to_builtins(payload) == {
        "kind": "toolUpdate",
        "toolUseId": "call_9",
        "status": "in_progress",
        "content": "so far",
        "locations": [{"path": "/w/a.py", "line": 3}, {"path": "/w/b.py"}],
    }
    # A new input alone changes nothing a client shows.
    assert to_payloads(agent_events.ToolCallUpdate("call_9", input={"a": 1})) == []
