"""The fork's state machine: one vocabulary (protocol.ForkState), one table of moves, checked on
every move (strictly here: conftest sets COVEN_STRICT_STATUS)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from coven_ls.core.fork import state as fork_state
from coven_ls.core.fork.fork import Fork
from coven_ls.core.session.status import TransitionError
from coven_ls.protocol import FORK_STATES, events


def fork(state: Any = "proposed") -> Fork:
    return Fork("f-1", parent=None, tasks=["a"], source="user", state=state)  # type: ignore[arg-type]


def test_the_table_has_every_state_and_only_states() -> None:
    assert set(fork_state.MOVES) == set(FORK_STATES)
    for moves in fork_state.MOVES.values():
        assert moves <= set(FORK_STATES)


def test_every_state_is_reachable_from_proposed() -> None:
    seen, todo = {"proposed"}, ["proposed"]
    while todo:
        for nxt in fork_state.MOVES[todo.pop()]:  # type: ignore[index]
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    assert seen == set(FORK_STATES)


def test_only_rejected_and_finished_are_final() -> None:
    assert {s for s, moves in fork_state.MOVES.items() if not moves} == {"rejected", "finished"}


def test_an_allowed_move_changes_the_state() -> None:
    f = fork()
    for state in ("running", "reviewing", "running", "finished"):
        f.move_to(state)  # type: ignore[arg-type]
        assert f.state == state


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("finished", "running"),
        ("rejected", "running"),
        ("proposed", "finished"),
        ("proposed", "interrupted"),
    ],
)
def test_a_move_the_table_does_not_allow_fails_in_tests(old: Any, new: Any) -> None:
    f = fork(old)
    with pytest.raises(TransitionError, match=f"fork state {old} -> {new}"):
        f.move_to(new)


def test_a_user_server_logs_a_move_the_table_does_not_allow(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(fork_state, "STRICT", False)
    f = fork("finished")
    with caplog.at_level(logging.ERROR):
        f.move_to("running")
    assert f.state == "running"  # the fork goes on
    assert "fork f-1: fork state finished -> running is not an allowed move" in caplog.text


def test_every_fork_event_with_a_fork_id_carries_its_state() -> None:
    with_fork = [p for p in events.PAYLOADS if "forkId" in p.__struct_fields__]
    assert len(with_fork) == 7
    for payload in with_fork:
        assert "state" in payload.__struct_fields__, payload.__name__
