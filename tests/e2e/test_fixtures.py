"""The golden fixtures (tests/fixtures/events/, written by tests/fixtures/record.py) say what the
protocol promises, each scenario shows what it is about, and the server still sends the same
stream: a change that alters it fails here until the fixtures are re-recorded.

The clients' tests replay these files (client-vscode/test/fixtures.ts, tests/e2e/test_nvim_e2e.py),
so what is checked here is what they may rely on."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any, get_args

import msgspec
import pytest

from coven_ls import protocol
from coven_ls.core.fork.state import MOVES
from coven_ls.core.session.status import TRANSITIONS
from coven_ls.protocol.events import Delta, check_event
from coven_ls.protocol.types import Origin

from ..fixtures.record import EVENTS_DIR, SCENARIOS, read, record

KINDS = set(protocol.KINDS)
ORIGINS = set(get_args(Origin))
MARKERS = {"serverStarted", "serverKilled", "request", "serverRequest", "delta"}
TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
FILES = sorted(EVENTS_DIR.glob("*.jsonl"))


def is_event(line: dict[str, Any]) -> bool:
    return "fixture" not in line


class Fixture:
    """One scenario's files, split by server."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lines = read(EVENTS_DIR / f"{name}.jsonl")
        self.sessions = json.loads((EVENTS_DIR / f"{name}.sessions.json").read_text())["sessions"]
        # (number of the server it came from, line) for every line.
        self.by_server: list[tuple[int, dict[str, Any]]] = []
        server = 0
        for line in self.lines:
            if line.get("fixture") == "serverStarted":
                server = line["server"]
            self.by_server.append((server, line))

    @property
    def events(self) -> list[dict[str, Any]]:
        return [line for line in self.lines if is_event(line)]

    def of(self, session_id: str, kind: str | None = None, server: int | None = None) -> list:
        return [
            line
            for n, line in self.by_server
            if is_event(line)
            and line["sessionId"] == session_id
            and (kind is None or line["kind"] == kind)
            and (server is None or n == server)
        ]

    def requests(self, method: str) -> list[dict[str, Any]]:
        return [
            line
            for line in self.lines
            if line.get("fixture") == "request" and line["method"] == method
        ]

    def statuses(self, session_id: str, server: int | None = None) -> list[str]:
        return [e["status"] for e in self.of(session_id, "status", server)]

    @property
    def root(self) -> str:
        [root] = [s["sessionId"] for s in self.sessions if s["parentId"] is None]
        return root


def test_every_scenario_is_recorded() -> None:
    assert [f.stem for f in FILES] == sorted(SCENARIOS)
    for name in SCENARIOS:
        assert (EVENTS_DIR / f"{name}.sessions.json").is_file()


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_lines_are_documented_events_or_markers(path: Path) -> None:
    lines = read(path)
    assert lines[0]["fixture"] == "serverStarted" and lines[0]["server"] == 1
    for line in lines:
        if not is_event(line):
            assert line["fixture"] in MARKERS, line
            if line["fixture"] in ("request", "serverRequest"):
                assert line["method"].startswith("coven/") and ("result" in line), line
            if line["fixture"] == "serverStarted":
                # what the server's initialize result announced
                assert line["protocolVersion"] == protocol.PROTOCOL_VERSION == 2, line
            if line["fixture"] == "delta":
                msgspec.convert(line["params"], Delta)
            continue
        assert set(line) >= {"sessionId", "seq", "kind", "time"}, line
        assert line["sessionId"].startswith("s-") and TIME.match(line["time"]), line
        assert line["kind"] in KINDS, line
        assert None not in line.values(), f"optional fields are left out, not null: {line}"
        if line["kind"] == protocol.Kind.STATUS:
            assert line["status"] in protocol.STATUSES, line
        if line["kind"] == protocol.Kind.PROMPT:
            assert line["origin"] in ORIGINS, line
        if line["kind"] == protocol.Kind.TURN_RESULT:
            assert set(line) >= {"text", "isError", "subtype", "costUsd", "durationMs"}, line
    for request in (line for line in lines if line.get("method") == protocol.GET_EVENTS):
        for event in request["result"]["events"]:
            assert event["kind"] in KINDS and event["sessionId"] == request["params"]["sessionId"]


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_every_event_matches_the_schema(path: Path) -> None:
    """Every event the server sent, live or from coven/getEvents, is exactly what its kind's
    schema says: no missing field, no wrong type, no field the schema does not have."""
    lines = read(path)
    fetched = [
        event
        for line in lines
        if line.get("method") == protocol.GET_EVENTS
        for event in line["result"]["events"]
    ]
    for event in [line for line in lines if is_event(line)] + fetched:
        check_event(event)


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_every_status_change_is_in_the_table(path: Path) -> None:
    """The statuses each server sent for a session follow core/session/status.py's transitions (a
    restarted server starts from the status the store had)."""
    fixture = Fixture(path.stem)
    for session in {e["sessionId"] for e in fixture.events}:
        for server in {n for n, _ in fixture.by_server}:
            statuses = fixture.statuses(session, server)
            for old, new in itertools.pairwise(statuses):
                assert new in TRANSITIONS[old], f"{path.stem}: {session} {old} -> {new}"


def reachable(state: str) -> set[str]:
    """The states a fork in `state` can get to by moves of the table."""
    found: set[str] = set()
    todo = [state]
    while todo:
        for nxt in MOVES[todo.pop()]:  # type: ignore[index]
            if nxt not in found:
                found.add(nxt)
                todo.append(nxt)
    return found


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_every_fork_moves_along_the_table(path: Path) -> None:
    """Each fork's events say its state, and one after another they make moves that
    core/fork/state.py allows (a restarted server goes on from the state the store had); the
    final listing's lastFork is the parent's latest fork in its last state."""
    fixture = Fixture(path.stem)
    states: dict[str, list[str]] = {}
    latest: dict[str, str] = {}
    for event in fixture.events:
        if "forkId" in event:
            assert event["state"] in protocol.FORK_STATES, event
            states.setdefault(event["forkId"], []).append(event["state"])
            latest[event["sessionId"]] = event["forkId"]
    for fork_id, seen in states.items():
        for old, new in itertools.pairwise(seen):
            # some moves have no event (a reviewed fork runs on to finish): reachable will do
            assert new in reachable(old), f"{fork_id}: {old} -> {new}"
    for info in fixture.sessions:
        fork_id = latest.get(info["sessionId"])
        expected = None if fork_id is None else {"forkId": fork_id, "state": states[fork_id][-1]}
        assert info["lastFork"] == expected, info["sessionId"]


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_seq_is_gapless_per_session(path: Path) -> None:
    """Each server's live events of a session go up by one. A session is first seen at seq 1,
    unless a restarted server took it up: then its live events go on after the last seq the
    client saw (the store may hold more, committed before the kill but never sent: coven/getEvents
    must give them, and it must give every event the client saw, the same, and nothing after)."""
    fixture = Fixture(path.stem)
    seen: dict[str, dict[int, dict[str, Any]]] = {}  # everything received, live or fetched
    last_live: dict[str, int] = {}
    for server, line in fixture.by_server:
        if line.get("method") == protocol.GET_EVENTS:
            sid = line["params"]["sessionId"]
            fetched = line["result"]["events"]
            after = line["params"].get("afterSeq", 0)
            assert [e["seq"] for e in fetched] == list(range(after + 1, after + 1 + len(fetched)))
            for event in fetched:
                if event["seq"] in seen.get(sid, {}):
                    assert event == seen[sid][event["seq"]], "getEvents differs from the live event"
                seen.setdefault(sid, {})[event["seq"]] = event
            # Stored before sent: every event received live so far is in the answer (which may
            # hold newer ones, still on their way: they must arrive the same).
            assert fetched[-1]["seq"] >= last_live[sid], f"{sid}: getEvents misses live events"
            continue
        if not is_event(line):
            continue
        sid, seq = line["sessionId"], line["seq"]
        if seq in seen.get(sid, {}):
            assert line == seen[sid][seq], f"{sid}: live seq {seq} differs from the fetched one"
        previous = last_live.get(sid)
        if previous is None:
            assert seq == 1, f"{sid} first seen at seq {seq}"
        elif fixture.of(sid, server=server)[0] is line and server > 1:
            # The first live event of a session a restarted server took up.
            assert seq > previous, f"{sid}: seq {seq} after {previous} across the restart"
            assert fixture.of(sid, server=server - 1), f"{sid} did not exist before the restart"
        else:
            assert seq == previous + 1, f"{sid}: seq {seq} after {previous} (server {server})"
        last_live[sid] = seq
        seen.setdefault(sid, {})[seq] = line
    for sid, events in seen.items():
        assert sorted(events) == list(range(1, len(events) + 1)), f"{sid} has a hole"


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_the_final_listing_agrees_with_the_events(path: Path) -> None:
    fixture = Fixture(path.stem)
    assert {s["sessionId"] for s in fixture.sessions} == {e["sessionId"] for e in fixture.events}
    for info in fixture.sessions:
        sid = info["sessionId"]
        assert info["status"] == fixture.statuses(sid)[-1] == "idle", sid
        # Every turn's cost, once (a restart does not count a turn twice).
        costs = [e["costUsd"] for e in fixture.of(sid, "turnResult")]
        assert info["costUsd"] == pytest.approx(sum(costs)), sid
        agents = fixture.of(sid, "agent")
        assert info["agentSessionId"] == agents[-1]["agentSessionId"], sid


def test_tool_asks_permission_and_runs() -> None:
    fixture = Fixture("tool")
    sid = fixture.root
    kinds = [e["kind"] for e in fixture.of(sid) if e["kind"] not in ("status", "agent")]
    assert kinds == [
        "prompt",
        "thinking",
        "text",
        "toolUse",
        "permissionRequest",
        "permissionDecision",
        "toolResult",
        "text",
        "turnResult",
    ]
    [use] = fixture.of(sid, "toolUse")
    [asked] = fixture.of(sid, "permissionRequest")
    [decided] = fixture.of(sid, "permissionDecision")
    [result] = fixture.of(sid, "toolResult")
    assert use["name"] == asked["toolName"] == decided["toolName"] == "Bash"
    assert use["toolUseId"] == asked["toolUseId"] == decided["toolUseId"] == result["toolUseId"]
    assert decided["allow"] is True and "message" not in decided
    assert result == {**result, "content": "made-it", "isError": False}
    [question] = [line for line in fixture.lines if line.get("fixture") == "serverRequest"]
    assert question["method"] == protocol.REQUEST_PERMISSION and question["result"] == {
        "allow": True
    }
    assert question["params"]["toolUseId"] == use["toolUseId"]
    # The question goes out after the event that announces it, the decision after the answer.
    order = fixture.lines.index
    assert order(asked) < order(question) < order(decided)
    assert fixture.statuses(sid) == ["starting", "running", "idle"]
    [turn] = fixture.of(sid, "turnResult")
    assert turn["isError"] is False and turn["text"] == "Made the file." and turn["numTurns"] == 2


def test_fork_is_proposed_approved_run_and_reintegrated() -> None:
    fixture = Fixture("fork")
    sid = fixture.root
    [proposed] = fixture.of(sid, "forkProposed")
    assert proposed["tasks"] == ["Write the docs", "Fix the bugs"]
    assert fixture.statuses(sid)[:4] == ["starting", "running", "awaitingApproval", "forking"]
    [decided] = fixture.requests(protocol.DECIDE_FORK)
    assert decided["params"] == {"forkId": proposed["forkId"], "approve": True}
    [started] = fixture.of(sid, "forkStarted")
    assert started["forkId"] == proposed["forkId"] and started["source"] == "model"
    assert [c["label"] for c in started["children"]] == proposed["tasks"] == started["tasks"]
    children = [c["sessionId"] for c in started["children"]]
    for child in started["children"]:
        cid = child["sessionId"]
        assert fixture.of(cid)[0]["status"] == "queued"
        [prompt] = fixture.of(cid, "prompt")
        assert (
            prompt["origin"] == "fork"
            and prompt["text"].split("\n")[0] == f"You were assigned '{child['label']}'"
        )
        assert fixture.statuses(cid)[-1] == "idle"
    [finished] = fixture.of(sid, "forkFinished")
    assert finished["results"] == [
        {"label": c["label"], "sessionId": c["sessionId"], "ok": True} for c in started["children"]
    ]
    # Every child had ended before the fork finished; the results turn comes right after.
    order = fixture.lines.index
    for cid in children:
        assert order(fixture.of(cid, "status")[-1]) < order(finished)
    [results] = [e for e in fixture.of(sid, "prompt") if e["origin"] == "forkResults"]
    assert results["seq"] == finished["seq"] + 1
    assert '<task label="Write the docs">\nDocs written.\n</task>' in results["text"]
    assert fixture.of(sid, "turnResult")[-1]["text"] == "Both done."
    listed = {s["sessionId"]: s for s in fixture.sessions}
    assert [(listed[c]["parentId"], listed[c]["forkId"], listed[c]["label"]) for c in children] == [
        (sid, started["forkId"], label) for label in proposed["tasks"]
    ]


def test_reject_tells_the_model_and_forks_nothing() -> None:
    fixture = Fixture("reject")
    sid = fixture.root
    [proposed] = fixture.of(sid, "forkProposed")
    [decided] = fixture.requests(protocol.DECIDE_FORK)
    assert decided["params"] == {
        "forkId": proposed["forkId"],
        "approve": False,
        "reason": "Not now.",
    }
    [rejected] = fixture.of(sid, "forkRejected")
    assert rejected == {**rejected, "forkId": proposed["forkId"], "reason": "Not now."}
    assert fixture.of(sid, "forkStarted") == [] and len(fixture.sessions) == 1
    [told] = [e for e in fixture.of(sid, "prompt") if e["origin"] == "forkRejected"]
    assert "Not now." in told["text"] and rejected["seq"] < told["seq"]
    assert fixture.of(sid, "turnResult")[-1]["text"] == "Fine, alone then."


def test_cancel_ends_the_turn_and_the_session_goes_on() -> None:
    fixture = Fixture("cancel")
    sid = fixture.root
    [cancel] = fixture.requests(protocol.CANCEL)
    assert cancel["params"] == {"sessionId": sid} and cancel["result"] == {"droppedMessages": 0}
    first, second = fixture.of(sid, "turnResult")
    # Cancelled, not failed: no error, and none of the CLI's diagnostic text.
    assert first["cancelled"] is True and first["isError"] is False and first["text"] == ""
    assert (
        second["isError"] is False and "cancelled" not in second and second["text"] == "Still here."
    )
    texts = [e["text"] for e in fixture.of(sid, "text")]
    assert texts == ["Working on it.", "Still here."]  # cut off before its second block
    assert fixture.statuses(sid) == ["starting", "running", "idle", "running", "idle"]
    order = fixture.lines.index
    assert order(fixture.of(sid, "text")[0]) < order(cancel) < order(first)


def test_failed_turn_is_an_error_result_and_the_session_stays_usable() -> None:
    fixture = Fixture("failed")
    sid = fixture.root
    [turn] = fixture.of(sid, "turnResult")
    assert turn["isError"] is True and "cancelled" not in turn
    assert turn["text"].startswith("API Error: 500 model overloaded")
    assert fixture.statuses(sid) == ["starting", "running", "idle"]  # not `failed`: the CLI lives


def test_crash_fails_the_session_and_a_message_resumes_it() -> None:
    fixture = Fixture("crash")
    sid = fixture.root
    [error] = fixture.of(sid, "error")
    assert error["message"] == "Claude Code was killed by SIGKILL."
    first, crashed, resumed = ["starting", "running", "idle"], ["running", "failed"], ["starting"]
    assert fixture.statuses(sid) == [*first, *crashed, *resumed, "running", "idle"]
    # The cut-off turn gets no turnResult: its error and the `failed` status end it.
    prompts = fixture.of(sid, "prompt")
    assert [p["text"] for p in prompts] == ["Say hello", "Start the long task", "Are you back?"]
    results = fixture.of(sid, "turnResult")
    assert [r["text"] for r in results] == ["Hello.", "Back again."]
    assert prompts[1]["seq"] < error["seq"] < prompts[2]["seq"]
    # The conversation goes on in a new CLI process, the same agent session.
    assert results[0]["agentSessionId"] == results[1]["agentSessionId"]


def test_subagent_runs_inside_its_tool_call() -> None:
    fixture = Fixture("subagent")
    sid = fixture.root
    [use] = fixture.of(sid, "toolUse")
    assert use["name"] == "Agent" and use["input"]["prompt"] == "Look for TODOs"
    [result] = fixture.of(sid, "toolResult")
    assert result["toolUseId"] == use["toolUseId"] and "Found 3 TODOs." in result["content"]
    # The subagent is a task of the CLI under the Agent call, and its own words (forwarded:
    # forward_subagent_text) carry the call's id.
    started, *ends = fixture.of(sid, "task")
    assert (started["status"], started["toolUseId"]) == ("started", use["toolUseId"])
    # The CLI reports the end twice (a notice, then the summary): the last is the fullest.
    ended = ends[-1]
    assert {(e["taskId"], e["status"], e["toolUseId"]) for e in ends} == {
        (started["taskId"], "completed", use["toolUseId"])
    }
    assert ended["summary"] == "Found 3 TODOs." and ended["description"] == "Find TODOs"
    [said] = [e for e in fixture.events if "parentToolUseId" in e]
    assert (said["kind"], said["text"]) == ("text", "Found 3 TODOs.")
    assert said["parentToolUseId"] == use["toolUseId"]
    assert started["seq"] < said["seq"] < ended["seq"] < result["seq"]
    assert fixture.of(sid, "turnResult")[-1]["text"] == "There are 3 TODOs."


def test_restart_interrupts_the_fork_and_resume_finishes_it() -> None:
    fixture = Fixture("restart")
    sid = fixture.root
    markers = [
        (line["fixture"], line.get("server")) for line in fixture.lines if not is_event(line)
    ]
    assert [m for m in markers if m[0] not in ("request", "delta")] == [
        ("serverStarted", 1),
        ("serverKilled", 1),
        ("serverStarted", 2),
    ]
    [started] = fixture.of(sid, "forkStarted", server=1)
    children = [c["sessionId"] for c in started["children"]]
    # Killed while both children ran (their CLI had started), before any finished.
    for cid in children:
        assert fixture.statuses(cid, server=1)[-1] == "running"
        assert fixture.of(cid, "turnResult", server=1) == []
    assert fixture.of(sid, "forkFinished", server=1) == []

    # The restarted server says, live, that everything busy is interrupted, and the fork too.
    for each in (sid, *children):
        assert fixture.statuses(each, server=2)[0] == "interrupted"
    [interrupted] = fixture.of(sid, "forkInterrupted", server=2)
    assert interrupted["forkId"] == started["forkId"] and interrupted["unfinished"] == children
    [listed] = fixture.requests(protocol.LIST_SESSIONS)
    assert {s["sessionId"]: s["status"] for s in listed["result"]["sessions"]} == dict.fromkeys(
        (sid, *children), "interrupted"
    )
    # What a reconnecting client fetches: the whole log, what it saw from the killed server
    # included, verbatim, then what the restart added.
    fetched = {
        r["params"]["sessionId"]: r["result"]["events"]
        for r in fixture.requests(protocol.GET_EVENTS)
    }
    assert set(fetched) == {sid, *children}
    before = fixture.of(sid, server=1)
    assert fetched[sid][: len(before)] == before
    assert [e["kind"] for e in fetched[sid][len(before) :]] == ["status", "forkInterrupted"]
    assert fetched[sid][-1] == interrupted

    [resume] = fixture.requests(protocol.RESUME_FORK)
    assert resume["params"] == {"forkId": started["forkId"]} and resume["result"] == {}
    [resumed] = fixture.of(sid, "forkResumed")
    assert resumed["children"] == started["children"]
    assert fixture.statuses(sid, server=2) == [
        "interrupted",
        "forking",
        "starting",
        "running",
        "idle",
    ]
    for cid in children:
        assert fixture.statuses(cid, server=2)[:2] == ["interrupted", "queued"]
        assert [p["origin"] for p in fixture.of(cid, "prompt")] == ["fork", "fork"]  # run again
        assert fixture.of(cid, "turnResult", server=2)[0]["isError"] is False
    [finished] = fixture.of(sid, "forkFinished")
    assert [r["ok"] for r in finished["results"]] == [True, True]
    [results] = [e for e in fixture.of(sid, "prompt") if e["origin"] == "forkResults"]
    assert "Docs written." in results["text"] and "Bugs fixed." in results["text"]
    assert fixture.of(sid, "turnResult")[-1]["text"] == "Both done after the restart."


def shape(lines: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(e["kind"], e.get("status")) for e in lines if is_event(e)]


@pytest.mark.slow
async def test_the_server_still_sends_the_recorded_tool_stream(tmp_path: Path) -> None:
    """Records `tool` again (real server, real CLI) and compares the stream's structure with the
    checked-in fixture: ids and times differ, the (kind, status) sequence must not. If this fails
    because the server's stream changed on purpose, run `python tests/fixtures/record.py` and
    commit the new fixtures (the clients' tests replay them)."""
    recording = await record("tool", tmp_path)
    fixture = Fixture("tool")
    assert shape(recording.lines) == shape(fixture.lines), (
        "the server's stream changed; re-record with python tests/fixtures/record.py"
    )
    asked = [
        (x["method"], x["result"]) for x in recording.lines if x.get("fixture") == "serverRequest"
    ]
    assert asked == [(protocol.REQUEST_PERMISSION, {"allow": True})]
    [again] = recording.sessions["sessions"]
    [recorded] = fixture.sessions
    assert set(again) == set(recorded) and again["status"] == recorded["status"]


def test_review_waits_for_the_client_then_reintegrates() -> None:
    fixture = Fixture("review")
    sid = fixture.root
    [started] = fixture.of(sid, "forkStarted")
    assert started["isolation"] == "worktree" and started["mergeMode"] == "review"
    [reviewing] = fixture.of(sid, "forkReviewing")
    children = [c["sessionId"] for c in started["children"]]
    assert reviewing["pending"] == children
    statuses = fixture.statuses(sid)
    assert statuses[statuses.index("forking") :][:3] == ["forking", "reviewing", "forking"]
    # Each child said what it changed (pending), then what the client decided.
    for cid, verdict, name in zip(
        children, ("applied", "discarded"), ("docs.md", "CHANGES.md"), strict=True
    ):
        pending, decided = fixture.of(cid, "changes")
        assert [f["path"] for f in pending["changes"]["files"]] == [name]
        assert (pending["changes"]["merge"], decided["changes"]["merge"]) == ("pending", verdict)
        [info] = [s for s in fixture.sessions if s["sessionId"] == cid]
        assert info["changes"]["merge"] == verdict and info["cwd"] == info["worktree"]["path"]
    [got] = fixture.requests(protocol.GET_CHANGES)
    assert got["result"]["file"]["child"] == "# Write the docs\n"
    # The decisions came before the fork finished; the results turn says what became of each.
    [finished] = fixture.of(sid, "forkFinished")
    assert [r["merge"] for r in finished["results"]] == ["applied", "discarded"]
    [discard] = fixture.requests(protocol.DISCARD_CHANGES)
    assert fixture.lines.index(discard) < fixture.lines.index(finished)
    [results] = [e for e in fixture.of(sid, "prompt") if e["origin"] == "forkResults"]
    assert 'merge="applied" files="docs.md (+1 -0)"' in results["text"]
    assert 'merge="discarded"' in results["text"]


def deltas_of(fixture: Fixture, session_id: str) -> list[dict[str, Any]]:
    return [
        line["params"]
        for line in fixture.lines
        if line.get("fixture") == "delta" and line["params"]["sessionId"] == session_id
    ]


def test_stream_pieces_add_up_to_the_whole_block() -> None:
    fixture = Fixture("stream")
    sid = fixture.root
    assert [r["errorStatus"] for r in fixture.of(sid, "apiRetry")] == [529, 529]
    [text] = fixture.of(sid, "text")
    pieces = [d for d in deltas_of(fixture, sid) if d["blockId"] == text["blockId"]]
    assert len(pieces) > 4 and "".join(d["text"] for d in pieces) == text["text"]
    # Mid-answer, getEvents gave the block so far.
    [got] = fixture.requests(protocol.GET_EVENTS)
    [partial] = [p for p in got["result"]["partial"] if p["kind"] == "text"]
    assert text["text"].startswith(partial["text"]) and partial["text"] != text["text"]


def test_queue_runs_children_one_at_a_time_and_adds_up_their_tokens() -> None:
    fixture = Fixture("queue")
    sid = fixture.root
    [started] = fixture.of(sid, "forkStarted")
    assert started["state"] == "running" and len(started["children"]) == 3
    waited = [fixture.of(c["sessionId"], "queuePosition") for c in started["children"]]
    assert waited[0] == [] and all(waited[1:]), "the first runs at once, the others wait"
    [finished] = fixture.of(sid, "forkFinished")
    assert finished["state"] == "finished" and finished["usage"]["outputTokens"] > 0
    [parent] = [s for s in fixture.sessions if s["sessionId"] == sid]
    assert parent["lastFork"] == {"forkId": started["forkId"], "state": "finished"}


def test_cancel_stream_keeps_what_was_said_and_goes_on() -> None:
    """A turn cancelled mid-stream: the text so far becomes its text event (the pieces add up to
    it, no more), the turn ends cancelled, and the next message is answered."""
    fixture = Fixture("cancel_stream")
    sid = fixture.root
    first, second = fixture.of(sid, "turnResult")
    assert first["cancelled"] is True and first["text"] == "" and second["text"] == "Still here."
    cut = [t for t in fixture.of(sid, "text") if t["seq"] < first["seq"]]
    assert len(cut) == 1
    pieces = [d["text"] for d in deltas_of(fixture, sid) if d["blockId"] == cut[0]["blockId"]]
    assert "".join(pieces) == cut[0]["text"] and cut[0]["text"].startswith("Sentence 1 of")
    assert "Sentence 59" not in cut[0]["text"]
    [cancel] = fixture.requests(protocol.CANCEL)
    assert fixture.lines.index(cancel) < fixture.lines.index(first)
