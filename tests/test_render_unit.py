"""The terminal tree (term/render.py) on events and deltas fed by hand: streamed text printed in
place, background tasks under their tool call, retries, and --json's lines."""

from __future__ import annotations

import io
import json
from typing import Any

from coven_ls.term.render import TreePrinter

SID, CHILD = "s-root", "s-child"


class Feed:
    def __init__(self, **options: Any) -> None:
        self.out = io.StringIO()
        self.printer = TreePrinter(self.out, full_text=True, **options)
        self.printer.add_session(SID, "Tell me")
        self.seq: dict[str, int] = {}

    def event(self, kind: str, sid: str = SID, **fields: Any) -> None:
        self.seq[sid] = self.seq.get(sid, 0) + 1
        self.printer({"sessionId": sid, "seq": self.seq[sid], "kind": kind, "time": "", **fields})

    def delta(self, block: str, text: str, kind: str = "text", sid: str = SID) -> None:
        piece = {"sessionId": sid, "afterSeq": self.seq.get(sid, 0), "blockId": block}
        self.printer.delta({**piece, "kind": kind, "text": text})

    @property
    def lines(self) -> list[str]:
        return self.out.getvalue().split("\n")


def test_pieces_print_in_place_and_the_text_event_only_ends_the_line() -> None:
    feed = Feed()
    feed.event("prompt", text="Tell me", origin="user")
    feed.delta("b1", "\nThere are ")
    feed.delta("b1", "42 fi")
    assert feed.lines[-1] == "  ⏺ There are 42 fi"  # on the screen, the line still open
    feed.delta("b1", "les.\n\nIn src")
    feed.delta("b1", "/.\n")
    feed.event("text", text="\nThere are 42 files.\n\nIn src/.\n", blockId="b1")
    feed.event("turnResult", text="", isError=False, subtype="success", durationMs=1200)
    assert feed.lines == [
        "● Tell me",
        "  › you: Tell me",
        "  ⏺ There are 42 files.",
        "",
        "    In src/.",
        "  ✓ turn done (1.2 s, $0.0000)",
        "",
    ]


def test_thinking_streams_on_one_line_cut_like_its_event() -> None:
    feed = Feed()
    long = "word " * 40
    feed.delta("t1", long[:50], kind="thinking")
    feed.delta("t1", long[50:], kind="thinking")
    feed.event("thinking", text=long, blockId="t1")
    assert feed.lines[1:] == ["  ✻ " + ("word " * 20)[:99] + "…", ""]


def test_interleaved_blocks_go_on_below_with_a_mark_and_cut_off_ones_end() -> None:
    feed = Feed()
    feed.event(
        "forkStarted",
        forkId="f",
        source="user",
        tasks=["Docs"],
        children=[{"sessionId": CHILD, "label": "Docs"}],
    )
    feed.delta("b1", "Writing the ")
    feed.delta("c1", "Docs are", sid=CHILD)
    feed.delta("b1", "docs.")
    feed.event("text", text="Writing the docs.", blockId="b1")
    feed.delta("c1", " written, but", sid=CHILD)
    feed.event("turnResult", sid=CHILD, text="", isError=False, subtype="x", cancelled=True)
    assert feed.lines == [
        "● Tell me",
        "  ⑂ Fork  1 task",
        "  ⏺ Writing the",
        "    [1/1] ● ⑂ Docs",
        "      [1/1] ⏺ Docs are",
        "  ⏺ … docs.",
        "      [1/1] ⏺ … written, but",
        "      [1/1] ■ turn cancelled",
        "",
    ]


def test_a_text_event_that_differs_from_its_pieces_is_printed_whole() -> None:
    feed = Feed()
    feed.delta("b1", "Hello wor")
    feed.event("text", text="Goodbye.", blockId="b1")
    assert feed.lines[1:] == ["  ⏺ Hello wor", "  ⏺ Goodbye.", ""]


def test_tasks_retries_and_queue_positions() -> None:
    feed = Feed()
    feed.event("queuePosition", position=2)
    feed.event("apiRetry", attempt=3, maxRetries=10, retryDelayMs=4000, errorStatus=529, error="x")
    agent = {"description": "Find TODOs", "prompt": "Look for TODOs"}
    feed.event("toolUse", toolUseId="tu", name="Agent", input=agent)
    feed.event("task", taskId="t1", status="started", toolUseId="tu", description="Find TODOs")
    feed.event("toolResult", toolUseId="tu", content="Async agent launched", isError=False)
    feed.event("text", text="Found 3 TODOs.", parentToolUseId="tu")
    feed.event("task", taskId="t1", status="running", lastToolName="Grep", toolUses=2)
    feed.event("task", taskId="t1", status="completed", summary="Found 3")
    assert feed.lines[1:] == [
        "  · queued: 2nd in line",
        "  ⟳ API overloaded — retrying in 4 s (3/10)",
        "  ⚙ Agent  Look for TODOs",
        "    ◇ task started: Find TODOs",
        "    ↳ Async agent launched",
        "      ⏺ Found 3 TODOs.",
        "    ◇ task running: Find TODOs (Grep, 2 tool uses)",
        "    ◆ task completed: Find TODOs — Found 3",
        "",
    ]


def test_a_note_ends_the_streaming_line_first() -> None:
    feed = Feed()
    feed.delta("b1", "Half a")
    feed.printer.note("Σ usage")
    feed.delta("b1", " sentence.")
    assert feed.lines[1:] == ["  ⏺ Half a", "Σ usage", "  ⏺ … sentence."]


def test_json_prints_events_and_deltas_only_when_asked() -> None:
    for with_deltas in (False, True):
        feed = Feed(as_json=True, json_deltas=with_deltas)
        feed.delta("b1", "Hi")
        feed.event("text", text="Hi", blockId="b1")
        printed = [json.loads(line) for line in feed.out.getvalue().splitlines()]
        piece = {"sessionId": SID, "afterSeq": 0, "blockId": "b1", "kind": "text", "text": "Hi"}
        event = {"sessionId": SID, "seq": 1, "kind": "text", "time": "", "text": "Hi"}
        assert printed == [{"delta": piece}, {**event, "blockId": "b1"}][not with_deltas :]
