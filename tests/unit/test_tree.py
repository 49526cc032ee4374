"""The session tree reducer (protocol/tree.py): every golden fixture folded in gives the sessions
its recorded `coven/listSessions` lists, and a fork's state follows its events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from coven_ls.protocol import tree
from coven_ls.protocol.events import ChildRef, Deleted, ForkStarted, Spend, Text, event_dict
from coven_ls.protocol.tree import SessionTree, decode
from coven_ls.protocol.types import ForkLimits, Usage

from ..fixtures.record import EVENTS_DIR, read

FIXTURES = sorted(EVENTS_DIR.glob("*.jsonl"))


def folded(path: Path) -> SessionTree:
    sessions = SessionTree()
    for line in read(path):
        if "fixture" not in line:
            sessions.apply(line)
    return sessions


def as_listed(sessions: SessionTree, node: tree.SessionNode) -> dict[str, Any]:
    """The fields of `SessionInfo` that events say, in its words."""
    plain = msgspec.to_builtins
    return {
        "sessionId": node.session_id,
        "parentId": node.parent_id,
        "forkId": node.fork_id,
        "label": node.label,
        "status": node.status,
        "queuePosition": node.queue_position,
        "agentSessionId": node.agent_session_id,
        "costUsd": round(node.cost_usd, 6),
        "usage": plain(node.usage),
        "treeUsage": plain(sessions.tree_usage(node.session_id)),
        "backgroundTasks": list(node.background_tasks),
        "isolation": node.isolation,
        "isolationReason": node.isolation_reason,
        "worktree": plain(node.worktree),
        "changes": plain(node.changes),
        "lastFork": (
            {"forkId": node.forks[-1], "state": sessions.forks[node.forks[-1]].state}
            if node.forks
            else None
        ),
    }


@pytest.mark.parametrize("path", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_every_fixture_folds_into_its_recorded_session_list(path: Path) -> None:
    recorded = json.loads(path.with_suffix("").with_suffix(".sessions.json").read_text())
    sessions = folded(path)
    got = [as_listed(sessions, node) for node in sessions.sessions.values()]
    want = [{k: s[k] for k in got[0]} for s in recorded["sessions"]]
    assert sorted(got, key=lambda s: s["sessionId"]) == sorted(want, key=lambda s: s["sessionId"])
    # Children come right after the fork that made them, as listSessions orders by creation.
    assert [s["sessionId"] for s in got] == [s["sessionId"] for s in want]


@pytest.mark.parametrize("path", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_forks_end_in_the_state_their_last_event_says(path: Path) -> None:
    sessions = folded(path)
    last: dict[str, str] = {}
    for line in read(path):
        if "fixture" not in line and line["kind"].startswith("fork") and "forkId" in line:
            last[line["forkId"]] = line["state"]
    assert set(last) == set(sessions.forks)
    for fork_id, state in last.items():
        fork = sessions.forks[fork_id]
        assert fork.state == state, fork_id
        assert fork_id in sessions.session(fork.parent_id).forks


def test_children_and_depth_follow_the_fork() -> None:
    sessions = folded(EVENTS_DIR / "fork.jsonl")
    [root] = sessions.roots()
    children = sessions.children(root.session_id)
    assert [c.label for c in children] == ["Write the docs", "Fix the bugs"]
    assert [sessions.depth(c.session_id) for c in children] == [1, 1]
    [fork] = sessions.forks.values()
    assert set(fork.settled) == {c.session_id for c in children}
    assert all(sessions.fork_of(c.session_id) is fork for c in children)
    assert [r.ok for r in fork.results] == [True, True]


def test_deleted_sessions_leave_the_tree() -> None:
    sessions = folded(EVENTS_DIR / "fork.jsonl")
    [root] = sessions.roots()
    subtree = [n.session_id for n in sessions.subtree(root.session_id)]
    sessions.apply(event_dict(root.session_id, 0, "", Deleted(subtree)))
    assert not sessions.sessions and not sessions.forks


def test_decode_types_the_payload_and_skips_unknown_kinds() -> None:
    event = decode(event_dict("s-1", 3, "t", Text("hi", blockId="b")) | {"newField": 1})
    assert event is not None and event.payload == Text("hi", blockId="b") and event.seq == 3
    assert decode({"sessionId": "s-1", "seq": 1, "kind": "someday", "time": "t"}) is None
    with pytest.raises(ValueError, match="forkStarted"):
        decode({"sessionId": "s-1", "seq": 1, "kind": "forkStarted", "time": "t"})
    assert isinstance(
        decode(
            event_dict(
                "s",
                1,
                "t",
                ForkStarted(
                    forkId="f",
                    state="running",
                    source="model",
                    tasks=["a"],
                    children=[tree.ChildRef("c", "a")],
                ),
            )
        ),
        tree.Event,
    )


def test_a_forks_limits_and_each_childs_spend_are_folded_in() -> None:
    sessions = SessionTree()
    limits = ForkLimits(childTokens=1000, forkCostUsd=2.0)
    children = [ChildRef(sessionId="s-child", label="Fix it")]
    started = ForkStarted("f-1", "running", "user", ["Fix it"], children, limits=limits)
    sessions.apply(event_dict("s-root", 3, "", started))
    assert sessions.forks["f-1"].limits == limits
    assert sessions.session("s-child").spend is None
    spent = Spend(Usage(inputTokens=10, cacheReadTokens=600), costUsd=0.02, seconds=4.5)
    sessions.apply(event_dict("s-child", 2, "", spent))
    assert sessions.session("s-child").spend == spent
