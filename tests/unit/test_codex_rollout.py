"""A rollout file's tool items, read as codex adds them."""

from __future__ import annotations

import json
from pathlib import Path

from coven_ls.agents.codex.rollout import RolloutTail


def line(kind: str, payload: dict[str, object]) -> str:
    return json.dumps({"timestamp": "t", "type": kind, "payload": payload}) + "\n"


def test_only_tool_items_written_after_it_began_whole_lines_once(tmp_path: Path) -> None:
    path = tmp_path / "rollout.jsonl"
    call = {"type": "function_call", "name": "exec_command", "call_id": "c1", "arguments": "{}"}
    path.write_text(line("response_item", call))  # before: the parent's, or an earlier turn's
    tail = RolloutTail(str(path))
    assert tail.new_tool_items() == []
    output = {"type": "function_call_output", "call_id": "c1", "output": "x"}
    message = {"type": "message", "role": "assistant", "content": []}
    whole = line("response_item", message) + line("event_msg", output) + line("response_item", call)
    half = line("response_item", output)
    with path.open("a") as file:
        file.write(whole + half[:20])
    assert tail.new_tool_items() == [call]  # no message, no event, not the half-written line
    with path.open("a") as file:
        file.write(half[20:] + "not json\n")
    assert tail.new_tool_items() == [output]
    assert tail.new_tool_items() == []


def test_a_file_not_written_yet_is_read_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "later.jsonl"
    tail = RolloutTail(str(path))
    assert tail.new_tool_items() == []
    call = {"type": "function_call", "name": "exec_command", "call_id": "c1", "arguments": "{}"}
    path.write_text(line("response_item", call))
    assert tail.new_tool_items() == [call]
