"""Codex app-server notifications (recorded from codex-cli 0.163.0 against the scripted Responses
API, tests/fixtures/codex/turns.jsonl) through the Codex translation (agent events) and the
core's mapping and streams: the coven events and deltas a client sees."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coven_ls.agents.codex.prices import cost_usd
from coven_ls.agents.codex.translate import Translator, error_text, file_change_input, http_status
from coven_ls.core.agent import events as agent_events
from coven_ls.core.session.mapping import to_payloads
from coven_ls.core.session.streaming import Streams
from coven_ls.protocol import events

FIXTURE = Path(__file__).parent.parent / "fixtures" / "codex" / "turns.jsonl"


def recorded_turns() -> tuple[str, dict[str, list[dict[str, Any]]]]:
    """The thread id and each turn's notifications and server requests, by the prompt."""
    lines = [json.loads(line) for line in FIXTURE.read_text().splitlines()[1:]]
    [started] = [x for x in lines if x.get("method") == "thread/started"]
    turns: dict[str, list[dict[str, Any]]] = {}
    current: list[dict[str, Any]] = []
    for line in lines:
        if "turn" in line and "method" not in line:
            current = turns.setdefault(line["turn"], [])
        elif current is not None:
            current.append(line)
    return started["params"]["thread"]["id"], turns


def map_message(event: Any) -> list[Any]:
    return to_payloads(event)


def run_turn(
    lines: list[dict[str, Any]], model: str | None = "gpt-5.5"
) -> tuple[list[Any], list[Any], list[str]]:
    """(messages, coven payloads, streamed pieces as "kind:text")."""
    thread, _ = recorded_turns()
    translator = Translator(thread, model=model)
    streams = Streams()
    messages: list[Any] = []
    payloads: list[Any] = []
    pieces: list[str] = []
    for line in lines:
        if "id" in line:
            continue  # a server request: the agent answers it, it is no message
        for message in translator.feed(line["method"], line["params"]):
            messages.append(message)
            if isinstance(message, agent_events.BlockStarted):
                streams.start(message)
            elif isinstance(message, agent_events.Delta):
                piece = streams.feed(message)
                if piece is not None:
                    pieces.append(f"{piece.kind}:{piece.text}")
            else:
                payloads += map_message(message)
    return messages, payloads, pieces


def test_text_and_reasoning_stream_then_arrive_whole() -> None:
    _, turns = recorded_turns()
    messages, payloads, pieces = run_turn(turns["hello"])
    assert pieces == ["thinking:pond", "thinking:erin", "thinking:g it", "text:Hi "]
    kinds = [type(p).__name__ for p in payloads]
    assert kinds == ["Thinking", "Text", "TurnResult"]
    thinking, text, result = payloads
    assert thinking.text == "pondering it" and text.text == "Hi "
    assert result.text == "Hi " and not result.isError and result.subtype == "success"
    assert result.usage.inputTokens == 7766 and result.usage.outputTokens == 3
    # gpt-5.5 is not in the dated price table: no cost rather than a guess.
    assert result.costUsd is None
    # The streamed blocks are the ones the whole messages end.
    whole = [m for m in messages if isinstance(m, agent_events.AgentMessage)]
    started = [m for m in messages if isinstance(m, agent_events.BlockStarted)]
    assert [m.call_id for m in started] == [
        "rs_scripted_2",
        "msg_scripted_3",
    ]
    assert [m.call_id for m in whole] == [m.id for m in whole] == [m.call_id for m in started]


def test_a_command_is_a_bash_tool_call_with_its_output() -> None:
    _, turns = recorded_turns()
    _, payloads, _ = run_turn(turns["write it"])
    [use] = [p for p in payloads if isinstance(p, events.ToolUse)]
    [result] = [p for p in payloads if isinstance(p, events.ToolResult)]
    assert use.name == "Bash" and use.input["codexItem"] == "commandExecution"
    assert use.input["command"] == "/bin/bash -lc 'echo tool-ran > tool.txt && cat tool.txt'"
    assert result.toolUseId == use.toolUseId == "call_scripted_5"
    assert result.content == "tool-ran\n" and not result.isError
    turn = payloads[-1]
    assert isinstance(turn, events.TurnResult) and turn.text == "tool said tool-ran"
    # Two model requests in the turn: their tokens add up.
    assert turn.usage.inputTokens == 7880 + 8018


def test_a_file_change_is_an_edit_with_path_and_diff() -> None:
    _, turns = recorded_turns()
    _, payloads, _ = run_turn(turns["patch it"])
    [use] = [p for p in payloads if isinstance(p, events.ToolUse)]
    [result] = [p for p in payloads if isinstance(p, events.ToolResult)]
    assert use.name == "Edit" and use.input["codexItem"] == "fileChange"
    assert use.input["file_path"].endswith("/repo/patched.txt")
    assert use.input["diff"].endswith("+x\n") and "/dev/null" in use.input["diff"]
    assert use.input["changes"][0]["kind"] == "add"
    assert result.content.startswith("add ") and not result.isError


@pytest.mark.parametrize(
    ("prompt", "status", "words"),
    [("boom", 500, "high demand"), ("unauth", 401, "bad key")],
)
def test_an_http_error_fails_the_turn_with_status_and_reason(
    prompt: str, status: int, words: str
) -> None:
    _, turns = recorded_turns()
    _, payloads, _ = run_turn(turns[prompt])
    [result] = payloads
    assert isinstance(result, events.TurnResult) and result.isError
    assert f"HTTP {status}" in result.text or f"status {status}" in result.text
    assert words in result.text


def test_error_texts() -> None:
    assert http_status({"responseTooManyFailedAttempts": {"httpStatusCode": 429}}) == 429
    assert http_status("internalServerError") == 500
    assert http_status("other") is None
    assert error_text({"message": "x", "codexErrorInfo": "internalServerError"}) == "HTTP 500: x"
    assert error_text({"message": "raw body", "codexErrorInfo": "other"}) == "raw body"


def test_retried_errors_are_api_retries_and_other_threads_are_ignored() -> None:
    translator = Translator("T")
    [retry] = translator.feed(
        "error",
        {"threadId": "T", "willRetry": True, "error": {"message": "Reconnecting... 1/5"}},
    )
    [payload] = map_message(retry)
    assert isinstance(payload, events.ApiRetry) and payload.error == "Reconnecting... 1/5"
    assert translator.feed("item/started", {"threadId": "other", "item": {"type": "x"}}) == []


def test_cost_from_the_dated_table_and_an_interrupted_turn() -> None:
    translator = Translator("T", model="gpt-5")
    translator.feed("turn/started", {"threadId": "T", "turn": {"id": "U"}})
    [call] = translator.feed(
        "thread/tokenUsage/updated",
        {
            "threadId": "T",
            "turnId": "U",
            "tokenUsage": {
                "last": {
                    "inputTokens": 1_000_000,
                    "cachedInputTokens": 400_000,
                    "outputTokens": 1000,
                }
            },
        },
    )
    # The call is counted at once, for a fork's limits (core/session/publishing.py), priced.
    assert isinstance(call, agent_events.ModelCall) and call.call_id == "U/1"
    assert call.usage.cacheReadTokens == 400_000
    assert call.usage.inputTokens == 600_000
    assert call.cost_usd == pytest.approx(cost_usd("gpt-5", 1_000_000, 400_000, 1000))
    assert map_message(call) == []  # no event of its own
    # The call's model and context too: the session's context gauge reads them.
    assert call.model == "gpt-5" and call.context_tokens == 1_000_000
    # Usage of another turn (a resumed thread's old totals) does not count.
    assert [] == translator.feed(
        "thread/tokenUsage/updated",
        {"threadId": "T", "turnId": "old", "tokenUsage": {"last": {"inputTokens": 5}}},
    )
    [done] = translator.feed(
        "turn/completed", {"threadId": "T", "turn": {"id": "U", "status": "interrupted"}}
    )
    [result] = map_message(done)
    assert result.subtype == "interrupted" and not result.isError
    expected = cost_usd("gpt-5", 1_000_000, 400_000, 1000)
    assert expected == pytest.approx(0.6 * 1.25 + 0.4 * 0.125 + 0.001 * 10)
    assert result.costUsd == pytest.approx(expected)
    assert result.usage.inputTokens == 600_000 and result.usage.cacheReadTokens == 400_000
    assert cost_usd("no-such-model", 1, 1, 1) is None


def test_a_declined_command_is_an_error_result() -> None:
    translator = Translator("T")
    item = {"type": "commandExecution", "id": "c1", "command": "rm -rf x", "status": "declined"}
    translator.feed("item/started", {"threadId": "T", "item": {**item, "status": "inProgress"}})
    [message] = translator.feed("item/completed", {"threadId": "T", "item": item})
    [result] = map_message(message)
    assert result.isError and "Declined" in result.content


def _raw(item: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return "rawResponseItem/completed", {"threadId": "T", "turnId": "U", "item": item}


REFUSED_OUTPUT = (
    "Chunk ID: 636d63\nWall time: 0.0000 seconds\nProcess exited with code 1\n"
    "Original token count: 16\nOutput:\nbwrap: execvp codex-linux-sandbox: No such file or "
    "directory\n"
)  # what codex 0.163.0 gave its model when its bubblewrap could not find the helper


def test_a_command_codex_reported_no_item_for_is_a_failed_tool_call_with_its_reason() -> None:
    translator = Translator("T")
    translator.feed("turn/started", {"threadId": "T", "turn": {"id": "U"}})
    call = {"type": "function_call", "name": "exec_command", "call_id": "call_1"}
    assert translator.feed(*_raw({**call, "arguments": '{"cmd": "ls -la"}'})) == []
    output = {"type": "function_call_output", "call_id": "call_1", "output": REFUSED_OUTPUT}
    payloads = [p for m in translator.feed(*_raw(output)) for p in map_message(m)]
    [use, result] = payloads
    assert isinstance(use, events.ToolUse) and isinstance(result, events.ToolResult)
    assert use.name == "Bash" and use.input["command"] == "ls -la"
    assert result.toolUseId == use.toolUseId == "call_1" and result.isError
    assert result.content == (
        "bwrap: execvp codex-linux-sandbox: No such file or directory\n(exit code 1)"
    )


def test_raw_items_of_a_reported_command_or_of_other_tools_add_nothing() -> None:
    translator = Translator("T")
    translator.feed("turn/started", {"threadId": "T", "turn": {"id": "U"}})
    ran = "Chunk ID: 1\nWall time: 0.1 seconds\nProcess exited with code 0\nOutput:\nhi\n"
    translator.feed(*_raw({"type": "function_call", "name": "exec_command", "call_id": "c1",
                           "arguments": '{"cmd": "echo hi"}'}))  # fmt: skip
    item = {"type": "commandExecution", "id": "c1", "command": "echo hi", "status": "inProgress"}
    assert translator.feed("item/started", {"threadId": "T", "item": item})
    done = {**item, "status": "completed", "exitCode": 0, "aggregatedOutput": "hi\n"}
    assert translator.feed("item/completed", {"threadId": "T", "item": done})
    output = {"type": "function_call_output", "call_id": "c1", "output": ran}
    assert translator.feed(*_raw(output)) == []
    # A tool that is no command (write_stdin, goals...) never has an item: not a Bash call.
    translator.feed(*_raw({"type": "function_call", "name": "update_goal", "call_id": "g1"}))
    assert translator.feed(*_raw({**output, "call_id": "g1"})) == []
    # Without exit code (codex's own refusal text): failed.
    translator.feed(*_raw({"type": "function_call", "name": "exec_command", "call_id": "c2",
                           "arguments": '{"cmd": "x"}'}))  # fmt: skip
    refused = {"type": "function_call_output", "call_id": "c2", "output": "exec_command failed"}
    _, result = [p for m in translator.feed(*_raw(refused)) for p in map_message(m)]
    assert isinstance(result, events.ToolResult)
    assert result.isError and result.content == "exec_command failed"


def test_file_change_input_of_an_update_keeps_the_unified_diff() -> None:
    diff = "@@ -1 +1 @@\n-a\n+b\n"
    data = file_change_input(
        {"changes": [{"path": "/r/a.txt", "kind": {"type": "update"}, "diff": diff}]}
    )
    assert data["file_path"] == "/r/a.txt" and data["diff"] == diff


def test_an_interrupted_turn_ends_the_tool_calls_it_left_open() -> None:
    translator = Translator("T")
    translator.feed("turn/started", {"threadId": "T", "turn": {"id": "U"}})
    item = {"type": "commandExecution", "id": "c1", "command": "sleep 30", "status": "inProgress"}
    [use] = map_message(translator.feed("item/started", {"threadId": "T", "item": item})[0])
    ended, done = translator.feed(
        "turn/completed", {"threadId": "T", "turn": {"id": "U", "status": "interrupted"}}
    )
    [result] = map_message(ended)
    assert isinstance(result, events.ToolResult) and result.toolUseId == use.toolUseId
    assert result.isError and "Interrupted" in result.content
    assert isinstance(done, agent_events.TurnEnded) and translator.items == {}


def test_a_command_ended_by_an_interrupt_gets_one_result() -> None:
    """Codex reports a command killed after its turn was interrupted as completing: the tool call
    already got its end with the turn, so that report is not a second result."""
    translator = Translator("t-1")
    translator.feed("turn/started", {"threadId": "t-1", "turn": {"id": "turn-1"}})
    command = {"type": "commandExecution", "id": "call-1", "command": "sleep 97"}
    translator.feed("item/started", {"threadId": "t-1", "item": command})
    ended = translator.feed(
        "turn/completed", {"threadId": "t-1", "turn": {"id": "turn-1", "status": "interrupted"}}
    )
    results = [m for m in ended if not isinstance(m, agent_events.TurnEnded)]
    assert len(results) == 1 and "Interrupted" in str(results[0])
    late = {**command, "status": "failed", "exitCode": -1, "aggregatedOutput": ""}
    assert translator.feed("item/completed", {"threadId": "t-1", "item": late}) == []


@pytest.mark.parametrize(
    ("stop", "late", "status", "summary"),
    [
        (False, {"status": "completed", "exitCode": 0, "aggregatedOutput": "ok\nserved\n"},
         "completed", "served"),
        (False, {"status": "failed", "exitCode": 2, "aggregatedOutput": "boom\n"}, "failed",
         "exit code 2: boom"),
        (True, {"status": "failed", "exitCode": -1, "aggregatedOutput": ""}, "stopped",
         "stopped"),
    ],
)  # fmt: skip
def test_a_command_a_completed_turn_left_running_is_a_background_task(
    stop: bool, late: dict[str, Any], status: str, summary: str
) -> None:
    translator = Translator("T")
    translator.feed("turn/started", {"threadId": "T", "turn": {"id": "U"}})
    item = {"type": "commandExecution", "id": "c1", "command": "serve", "processId": "7"}
    translator.feed("item/started", {"threadId": "T", "item": item})
    *said, done = translator.feed(
        "turn/completed", {"threadId": "T", "turn": {"id": "U", "status": "completed"}}
    )
    result, started = (p for m in said for p in map_message(m))
    assert isinstance(result, events.ToolResult) and not result.isError
    assert started == events.Task(
        taskId="c1", status="started", toolUseId="c1", description="serve"
    )
    assert isinstance(done, agent_events.TurnEnded) and set(translator.background) == {"c1"}
    if stop:
        translator.stopping.add("c1")
    translator.feed("turn/started", {"threadId": "T", "turn": {"id": "U2"}})  # a later turn
    [ended] = translator.feed("item/completed", {"threadId": "T", "item": {**item, **late}})
    [task] = map_message(ended)
    assert task == events.Task(taskId="c1", status=status, toolUseId="c1", summary=summary)
    assert translator.background == {} and translator.stopping == set()
