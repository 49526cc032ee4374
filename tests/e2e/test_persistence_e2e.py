"""Sessions survive the server: the store, restart, resume, SIGKILL, migration, corruption."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from pygls.exceptions import JsonRpcException

from coven_ls.core.store import SCHEMA_V1, SCHEMA_VERSION, database_path
from coven_ls.testing.scripted_model import ScriptedModel

from ..harness import Coven, start_coven, wait_until

PLAN = "Plan the release"
FORK = "Splitting.\n<fork>\n- Write the docs\n- Fix the bugs\n</fork>"
AUTO = {"forkMode": "auto"}


def assigned(label: str) -> str:
    return f"You were assigned '{label}'"


async def tree(coven: Coven) -> list[tuple[Any, ...]]:
    sessions = (await coven.request("coven/listSessions", {}))["sessions"]
    return [
        (s["sessionId"], s["parentId"], s["forkId"], s["label"], s["title"], s["agentSessionId"])
        for s in sessions
    ]


async def history(coven: Coven) -> dict[str, list[dict[str, Any]]]:
    sessions = (await coven.request("coven/listSessions", {}))["sessions"]
    return {
        s["sessionId"]: (await coven.request("coven/getEvents", {"sessionId": s["sessionId"]}))[
            "events"
        ]
        for s in sessions
    }


async def forked(coven: Coven, model: ScriptedModel) -> str:
    model.on(PLAN, FORK, times=1)
    model.on(assigned("Write the docs"), "Docs are written.")
    model.on(assigned("Fix the bugs"), "Bugs are fixed.")
    model.on("<fork-results>", "Both parts are done.")
    sid = await coven.start(PLAN)
    prompt = await coven.wait_kind(sid, "prompt", origin="forkResults")
    await coven.wait_for(
        lambda e: (
            e["sessionId"] == sid
            and e["kind"] == "status"
            and e["status"] == "idle"
            and e["seq"] > prompt["seq"]
        ),
        what="the parent idle after the fork",
    )
    return sid


async def test_restart_after_a_fork_rebuilds_the_same_tree(coven_factory, model) -> None:
    first = await coven_factory(home="ws", init_options=AUTO)
    sid = await forked(first, model)
    before_tree, before_events = await tree(first), await history(first)
    await first.stop()

    second = await coven_factory(home="ws", init_options=AUTO)
    assert await tree(second) == before_tree
    assert len(before_tree) == 3 and [t[1] for t in before_tree] == [None, sid, sid]
    assert await history(second) == before_events
    for session_id, events in before_events.items():  # the same log, in pages of 3
        pages: list[dict[str, Any]] = []
        while True:
            params = {"sessionId": session_id, "afterSeq": len(pages), "limit": 3}
            page = (await second.request("coven/getEvents", params))["events"]
            pages += page
            if len(page) < 3:
                break
        assert pages == events
    with pytest.raises(JsonRpcException) as refused:
        await second.request("coven/getEvents", {"sessionId": sid, "limit": 0})
    assert refused.value.code == -32602
    statuses = {
        s["sessionId"]: s["status"]
        for s in (await second.request("coven/listSessions", {}))["sessions"]
    }
    assert set(statuses.values()) == {"idle"}


async def test_a_follow_up_after_restart_continues_the_conversation(coven_factory, model) -> None:
    model.on("remember the word pineapple", "Noted: pineapple.")
    model.on("Which word", "It was pineapple.")
    first = await coven_factory(home="ws")
    sid = await first.start("Please remember the word pineapple")
    await first.wait_status(sid, "idle")
    agent = (await first.wait_kind(sid, "turnResult"))["agentSessionId"]
    await first.stop()

    second = await coven_factory(home="ws")
    last_seq = (await second.request("coven/getEvents", {"sessionId": sid}))["events"][-1]["seq"]
    await second.request("coven/sendMessage", {"sessionId": sid, "text": "Which word was it?"})
    result = await second.wait_kind(sid, "turnResult")
    assert result["text"] == "It was pineapple." and result["agentSessionId"] == agent
    assert result["seq"] > last_seq  # the log goes on where it stopped
    request = [r for r in model.requests if "Which word" in r.last_user_text][-1]
    assert (
        "remember the word pineapple" in request.all_text
        and "Noted: pineapple." in request.all_text
    )


async def sigkill_mid_fork(coven_factory, model: ScriptedModel) -> tuple[Coven, str, dict]:
    """A server killed while both children talk to the model; returns the restarted server,
    the parent's id and every event the first client had received."""
    model.on(PLAN, FORK, times=1)
    # The first attempt at each task hangs until the server is killed; later ones answer.
    model.on(assigned("Write the docs"), "(never)", latency=300, times=1)
    model.on(assigned("Fix the bugs"), "(never)", latency=300, times=1)
    model.on(assigned("Write the docs"), "Docs are written.")
    model.on(assigned("Fix the bugs"), "Bugs are fixed.")
    model.on("<fork-results>", "Both parts are done after the restart.")
    first = await coven_factory(home="ws", init_options=AUTO)
    sid = await first.start(PLAN)
    started = await first.wait_kind(sid, "forkStarted")
    model.wait_for_requests(
        2, timeout=90, predicate=lambda r: "You were assigned" in r.last_user_text
    )
    for child in started["children"]:
        await first.wait_status(child["sessionId"], "running")
    assert first.agent_pids()
    received = {e["sessionId"]: [] for e in first.events}
    for event in first.events:
        received[event["sessionId"]].append(event)
    server = first.client._server
    os.kill(server.pid, signal.SIGKILL)
    await asyncio.wait_for(server.wait(), 30)
    # No child process outlives the killed server: they die with it.
    await wait_until(lambda: not first.agent_pids(), 30, "the killed server's agents to die")
    second = await coven_factory(home="ws", init_options=AUTO)
    return second, sid, received


async def test_sigkill_mid_fork_then_resume(coven_factory, model) -> None:
    second, sid, received = await sigkill_mid_fork(coven_factory, model)
    stored = await history(second)
    for session_id, events in received.items():
        assert stored[session_id][: len(events)] == events  # nothing the client saw is lost
    sessions = {
        s["sessionId"]: s for s in (await second.request("coven/listSessions", {}))["sessions"]
    }
    assert {s["status"] for s in sessions.values()} == {"interrupted"}
    [fork_id] = {s["forkId"] for s in sessions.values() if s["forkId"]}
    children = sorted(sid_ for sid_, s in sessions.items() if s["parentId"] == sid)
    interrupted = await second.wait_kind(sid, "forkInterrupted")
    assert interrupted["forkId"] == fork_id and sorted(interrupted["unfinished"]) == children

    await second.request("coven/resumeFork", {"forkId": fork_id})
    resumed = await second.wait_kind(sid, "forkResumed")
    assert sorted(c["sessionId"] for c in resumed["children"]) == children
    prompt = await second.wait_kind(sid, "prompt", origin="forkResults")
    result = await second.wait_for(
        lambda e: e["sessionId"] == sid and e["kind"] == "turnResult" and e["seq"] > prompt["seq"],
        what="the parent's answer after the resumed fork",
    )
    assert result["text"] == "Both parts are done after the restart."
    assert "Docs are written." in prompt["text"] and "Bugs are fixed." in prompt["text"]
    with pytest.raises(JsonRpcException) as again:
        await second.request("coven/resumeFork", {"forkId": fork_id})
    assert again.value.code == -32003


async def test_sigkill_mid_fork_then_abandon(coven_factory, model) -> None:
    second, sid, _ = await sigkill_mid_fork(coven_factory, model)
    sessions = (await second.request("coven/listSessions", {}))["sessions"]
    [fork_id] = {s["forkId"] for s in sessions if s["forkId"]}
    await second.request("coven/abandonFork", {"forkId": fork_id})
    prompt = await second.wait_kind(sid, "prompt", origin="forkResults")
    assert prompt["text"].startswith("All 2 forks failed")
    assert prompt["text"].count('error="interrupted: the server stopped') == 2
    assert not any("Docs are written." in r.last_user_text for r in model.requests), (
        "abandoned children are not run again"
    )


async def test_a_v1_database_is_migrated(
    coven_factory, tmp_path: Path, isolated_state: Path
) -> None:
    root = tmp_path / "ws" / "workspace"
    root.mkdir(parents=True)
    path = database_path(str(root), None)
    path.parent.mkdir(parents=True)
    db = sqlite3.connect(path)
    db.executescript(SCHEMA_V1 + "INSERT INTO meta VALUES ('schema_version', '1');")
    event = {
        "sessionId": "s-old",
        "seq": 1,
        "kind": "status",
        "time": "2026-01-01T00:00:00.000Z",
        "status": "idle",
    }
    db.execute(
        "INSERT INTO sessions VALUES ('s-old', NULL, NULL, NULL, 'An old one', 'idle', 'agent-1',"
        " ?, NULL, NULL, 'approve', '2026-01-01T00:00:00.000Z', 0.5)",
        (str(root),),
    )
    later = {**event, "seq": 2, "time": "2026-01-01T00:00:01.000Z"}
    for e in (event, later):
        db.execute("INSERT INTO events VALUES ('s-old', ?, 'status', ?)", (e["seq"], json.dumps(e)))
    db.commit()
    db.close()

    coven = await coven_factory(home="ws")
    [session] = (await coven.request("coven/listSessions", {}))["sessions"]
    assert (session["sessionId"], session["title"], session["costUsd"]) == (
        "s-old",
        "An old one",
        0.5,
    )
    got = await coven.request("coven/getEvents", {"sessionId": "s-old"})
    assert got["events"] == [event, later]
    version = sqlite3.connect(path).execute("SELECT value FROM meta").fetchone()[0]
    assert int(version) == SCHEMA_VERSION
    # The migration found where the log ends: it goes on from there.
    await coven.request("coven/closeSession", {"sessionId": "s-old"})
    closed = await coven.wait_status("s-old", "closed")
    assert closed["seq"] == 3
    got = await coven.request("coven/getEvents", {"sessionId": "s-old", "afterSeq": 1})
    assert got["events"] == [later, closed]


async def test_a_corrupt_database_is_moved_aside(coven_factory, tmp_path: Path) -> None:
    root = tmp_path / "ws" / "workspace"
    root.mkdir(parents=True)
    path = database_path(str(root), None)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"this is not a database" * 100)

    coven = await coven_factory(home="ws")
    await wait_until(lambda: bool(coven.client.messages), 30, "the warning")
    [warning] = coven.client.messages
    [kept] = [p for p in path.parent.iterdir() if ".corrupt-" in p.name]
    assert str(kept) in warning.message and kept.read_bytes() == b"this is not a database" * 100
    assert (await coven.request("coven/listSessions", {}))["sessions"] == []
    sqlite3.connect(path).execute("SELECT count(*) FROM events").fetchone()


async def test_a_newer_database_is_refused(tmp_path: Path, model) -> None:

    root = tmp_path / "ws" / "workspace"
    root.mkdir(parents=True)
    path = database_path(str(root), None)
    path.parent.mkdir(parents=True)
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);"
        "INSERT INTO meta VALUES ('schema_version', '99');"
    )
    db.close()
    with pytest.raises(JsonRpcException) as refused:
        await start_coven(tmp_path / "ws", model)
    assert refused.value.code == -32005
    assert "newer coven-ls" in refused.value.message and "stateDir" in refused.value.message


async def test_delete_session_removes_the_subtree(coven_factory, model) -> None:
    coven = await coven_factory(home="ws", init_options=AUTO)
    sid = await forked(coven, model)
    agent = next(
        s["agentSessionId"]
        for s in (await coven.request("coven/listSessions", {}))["sessions"]
        if s["sessionId"] == sid
    )
    transcripts = list((Path(coven.marker) / "projects").rglob(f"{agent}.jsonl"))
    assert transcripts
    deleted = await coven.request("coven/deleteSession", {"sessionId": sid, "purge": True})
    assert len(deleted["deletedSessionIds"]) == 3 and deleted["deletedSessionIds"][0] == sid
    assert (await coven.request("coven/listSessions", {}))["sessions"] == []
    assert not transcripts[0].exists()
    await coven.wait_kind(sid, "deleted")
    await coven.stop()
    again = await coven_factory(home="ws")
    assert (await again.request("coven/listSessions", {}))["sessions"] == []


async def test_a_second_server_on_the_same_folder_is_refused_with_the_first_ones_pid(
    coven_factory, model, tmp_path
) -> None:
    """Two editor windows on one folder: the second server's `initialize` fails, saying which
    process has the sessions; once the first is gone (even killed), the next one gets in."""
    first = await coven_factory(home="ws")
    sid = await first.start("Hello")
    await first.wait_status(sid, "idle")
    first_pid = first.client._server.pid
    second: list[Any] = []
    with pytest.raises(JsonRpcException) as refused:
        await start_coven(tmp_path / "ws", model, on_client=second.append)
    refused_server = second[0]._server
    refused_server.kill()  # it would wait for its editor to go; this one never will
    await asyncio.wait_for(refused_server.wait(), 30)
    assert refused.value.code == -32005
    assert f"coven-ls process {first_pid}" in refused.value.message
    assert "stateDir" in refused.value.message
    # The first server was not disturbed by the attempt.
    assert (await first.request("coven/listSessions", {}))["sessions"][0]["sessionId"] == sid

    os.kill(first_pid, signal.SIGKILL)
    await asyncio.wait_for(first.client._server.wait(), 30)
    again = await coven_factory(home="ws")
    listed = (await again.request("coven/listSessions", {}))["sessions"]
    assert [s["sessionId"] for s in listed] == [sid]
