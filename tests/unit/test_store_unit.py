"""The store's write path: a burst is one statement and one transaction, and checkpoints are
the journal's to run beside the commits, never inside one."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from coven_ls import protocol
from coven_ls.core import journal as journal_module
from coven_ls.core import store as store_module
from coven_ls.core.journal import Journal
from coven_ls.core.store import Store
from coven_ls.protocol import Kind

from ..unit.test_hub_unit import running_hub, settings, start


def event(session_id: str, seq: int, text: str = "hello") -> tuple[dict[str, Any], bytes]:
    e = protocol.event_dict(session_id, seq, "2026-11-23T00:00:00Z", protocol.events.Text(text))
    return e, protocol.event_body(e)


def session_row(session_id: str, title: str) -> dict[str, Any]:
    return dict.fromkeys(store_module.SESSION_COLUMNS) | {
        "session_id": session_id,
        "title": title,
        "status": "idle",
        "cwd": "/w",
        "fork_mode": "approve",
        "created_at": "2026-11-23T00:00:00Z",
        "cost_usd": 0.25,
        "depth": 0,
        "max_children": 8,
        "max_parallel": 4,
        "max_depth": 1,
        "usage": {"inputTokens": 3},
    }


def fork_row(fork_id: str, state: str) -> dict[str, Any]:
    return {
        "fork_id": fork_id,
        "parent_id": "s-1",
        "source": "user",
        "state": state,
        "tasks_proposed": ["a"],
        "children": [],
        "reintegrated": False,
    }


@pytest.fixture
def store(tmp_path: Path) -> Any:
    opened, _ = Store.open(tmp_path / "state" / "w.sqlite3")
    yield opened
    opened.close()


class Calls:
    """The writer's connection, counting the calls into sqlite made through it."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection
        self.made: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("execute"):
            self.made.append(name)
        return getattr(self.connection, name)


def statements(store: Store) -> list[str]:
    """The connection methods the writer calls from now on."""
    calls = Calls(store._db)
    store._db = calls  # type: ignore[assignment]
    return calls.made


def test_a_burst_is_one_statement_whatever_its_size(store: Store) -> None:
    """Python lets the GIL go and takes it back for each statement it runs; beside a busy
    thread, taking it back costs up to 5 ms. So a burst must be one statement, not one a row."""
    seen = statements(store)
    store.write([event("s-1", 1)])
    store.write(
        [event("s-1", seq) for seq in range(2, 502)],
        [session_row("s-1", "one")],
        [fork_row("f-1", "running"), fork_row("f-2", "proposed")],
    )
    assert seen == ["execute", "execute"]
    assert [e["seq"] for e in store.events_between("s-1", 0)] == list(range(1, 502))


def test_events_are_stored_as_they_were_sent(store: Store) -> None:
    # Each body is cut out of the burst's blob by its byte offset: multi-byte characters before
    # an event must not shift it.
    sent = [
        event("s-1", 1, 'quotes " and \\ and\nnewlines, ünïcödé ✓'),
        event("s-2", 1),
        event("s-1", 2, "four bytes: 🙂🙂, and a NUL: \x00"),
        event("s-2", 2, "after them"),
    ]
    store.write(sent[:1])  # one event, no rows: a plain insert
    store.write(sent[1:])
    rows = store._reader.execute("SELECT session_id, seq, kind, body FROM events").fetchall()
    assert rows == [(e["sessionId"], e["seq"], e["kind"], body.decode()) for e, body in sent]


def test_a_burst_is_all_or_nothing(store: Store) -> None:
    """A burst that cannot be written leaves nothing of itself: not its session rows, not its
    fork rows, not the events before the one that failed."""
    store.write([event("s-1", 1)], [session_row("s-1", "before")], [fork_row("f-1", "running")])
    with pytest.raises(sqlite3.IntegrityError):
        store.write(
            [event("s-1", 2), event("s-1", 1)],  # seq 1 again
            [session_row("s-1", "after")],
            [fork_row("f-1", "finished")],
        )
    snapshot = store.load()
    assert [s["title"] for s in snapshot.sessions] == ["before"]
    assert snapshot.sessions[0]["last_seq"] == 1
    assert [f["state"] for f in snapshot.forks] == ["running"]


def test_a_row_written_twice_in_one_burst_keeps_the_later(store: Store) -> None:
    store.write(
        [],
        [session_row("s-1", "first"), session_row("s-2", "other"), session_row("s-1", "last")],
        [fork_row("f-1", "running"), fork_row("f-1", "finished")],
    )
    snapshot = store.load()
    # The upsert keeps s-1's rowid: sessions are listed in the order they were made.
    assert [s["title"] for s in snapshot.sessions] == ["last", "other"]
    assert [f["state"] for f in snapshot.forks] == ["finished"]


def test_writes_leave_checkpoints_to_the_journal(store: Store, monkeypatch: Any) -> None:
    """A commit never copies the WAL back itself (that is a checkpoint's page copies and fsync
    inside some event's delivery); the store says when one is due, and checkpoint() does it."""
    monkeypatch.setattr(store_module, "CHECKPOINT_BYTES", 64 * 1024)
    database = store.path.stat().st_size
    seq = 0
    while not store.checkpoint_due():
        store.write([event("s-1", seq := seq + 1, "x" * 1000)])
    assert seq > 50
    assert store.path.stat().st_size == database  # all of it is still in the WAL
    store.checkpoint()
    assert not store.checkpoint_due()
    assert store.path.stat().st_size > database + 50 * 1000


async def test_the_journal_checkpoints_beside_the_event_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint runs in a worker thread while events go on being committed and sent; only
    one at a time per store."""
    monkeypatch.setattr(store_module, "CHECKPOINT_BYTES", 1)
    monkeypatch.setattr(journal_module, "ON_LOOP_EVENTS", 0)  # every burst through a thread too
    began, release = anyio.Event(), anyio.Event()
    token = anyio.lowlevel.current_token()
    calls = 0

    def held_checkpoint(self: Store) -> None:
        nonlocal calls
        calls += 1
        anyio.from_thread.run_sync(began.set, token=token)
        anyio.from_thread.run(release.wait, token=token)

    monkeypatch.setattr(Store, "checkpoint", held_checkpoint)
    async with running_hub(settings(tmp_path, stateDir=str(tmp_path / "state"))) as rig:
        session = await start(rig, "hello")
        with anyio.fail_after(10):
            await began.wait()
        # The checkpoint is stuck; the session's turn is committed and delivered all the same.
        await rig.client.wait_for(Kind.STATUS, session, status="idle")
        await rig.hub.flushed()
        assert calls == 1
        stored = await anyio.to_thread.run_sync(rig.client.store.events_between, session.id, 0)
        assert [e["seq"] for e in stored] == list(range(1, session.last_seq + 1))
        release.set()


async def test_a_session_row_is_written_again_only_when_it_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writing a session's row with every burst would double what a commit costs; a burst that
    changed nothing of the session writes its events alone."""

    class Sess:  # a session as the journal sees it
        id = "s-1"
        store: Store | None = None
        committed_seq: int | None = None
        title = "one"

        def record(self) -> dict[str, Any]:
            return session_row(self.id, self.title)

    written: list[tuple[int, list[str]]] = []
    write = Store.write

    def recorded(self: Store, events: Any, sessions: Any = (), forks: Any = ()) -> None:
        written.append((len(events), [row["title"] for row in sessions]))
        write(self, events, sessions, forks)

    monkeypatch.setattr(Store, "write", recorded)
    opened, _ = Store.open(tmp_path / "w.sqlite3")
    sent: list[int] = []
    async with anyio.create_task_group() as tg:
        journal = Journal(tg, lambda e, _body: sent.append(e["seq"]), lambda _frame, _delta: None)
        session = Sess()
        journal.keep(session, opened)  # type: ignore[arg-type]
        for seq, title in ((1, "one"), (2, "one"), (3, "two"), (4, "two")):
            session.title = title
            journal.publish(event("s-1", seq)[0])
            await journal.flushed()
        tg.cancel_scope.cancel()
    assert written == [(1, ["one"]), (1, []), (1, ["two"]), (1, [])]
    assert sent == [1, 2, 3, 4]
    assert [s["title"] for s in opened.load().sessions] == ["two"]
    opened.close()


def test_stored_fork_events_get_the_state_they_were_sent_in(tmp_path: Path) -> None:
    """Schema 7: fork events stored before they carried `state` get it, so that every fork event
    a client is given has one; the rest of each event is left as it was."""
    path = tmp_path / "state" / "w.sqlite3"
    path.parent.mkdir()
    db = sqlite3.connect(path)
    db.executescript(store_module.SCHEMA_V1 + "INSERT INTO meta VALUES ('schema_version', '1');")
    for target in range(2, 7):
        db.executescript(store_module.MIGRATIONS[target])
    db.execute("UPDATE meta SET value = '6' WHERE key = 'schema_version'")
    kinds = {
        "forkProposed": "proposed",
        "forkRejected": "rejected",
        "forkStarted": "running",
        "forkResumed": "running",
        "forkReviewing": "reviewing",
        "forkFinished": "finished",
        "forkInterrupted": "interrupted",
        "text": None,
    }
    old = []
    for seq, kind in enumerate(kinds, 1):
        e = {"sessionId": "s-1", "seq": seq, "kind": kind, "time": "t", "forkId": "f-1"}
        old.append(e)
        db.execute("INSERT INTO events VALUES ('s-1', ?, ?, ?)", (seq, kind, json.dumps(e)))
    db.commit()
    db.close()

    opened, _ = Store.open(path)
    try:
        got = opened.events_between("s-1", 0)
    finally:
        opened.close()
    assert [e.get("state") for e in got] == list(kinds.values())
    assert [{k: v for k, v in e.items() if k != "state"} for e in got] == old
