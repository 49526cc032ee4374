"""The durable store: one sqlite database (WAL) per workspace root, holding the session tree, the
forks and every event. Blocking; the journal commits a small burst on the event loop (one
statement, tens of microseconds: Store.write) and everything else, reads included, runs in
worker threads.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from ..protocol.tokens import default_state_dir as default_state_dir

log = logging.getLogger(__name__)

# flock is POSIX; on Windows the store works unlocked.
fcntl: Any = importlib.import_module("fcntl") if os.name == "posix" else None

SCHEMA_VERSION = 14

# About what sqlite's own autocheckpoint would let the WAL grow to (1000 pages) before the
# journal has it copied back into the database.
CHECKPOINT_BYTES = 4 * 1024 * 1024

# Version 1 (the first release's layout): sessions and events, no forks. Kept so that the
# migration has something real to start from, and tested.
SCHEMA_V1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE sessions (
    session_id TEXT PRIMARY KEY,
    parent_id TEXT,
    fork_id TEXT,
    label TEXT,
    title TEXT NOT NULL,
    status TEXT NOT NULL,
    agent_session_id TEXT,
    cwd TEXT NOT NULL,
    model TEXT,
    permission_mode TEXT,
    fork_mode TEXT NOT NULL,
    created_at TEXT NOT NULL,
    cost_usd REAL NOT NULL DEFAULT 0
);
CREATE TABLE events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
"""

MIGRATIONS: dict[int, str] = {
    # 1 -> 2: forks get a table of their own; sessions keep their depth, fork limits and outcome.
    2: """
ALTER TABLE sessions ADD COLUMN depth INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN max_children INTEGER NOT NULL DEFAULT 8;
ALTER TABLE sessions ADD COLUMN max_parallel INTEGER NOT NULL DEFAULT 4;
ALTER TABLE sessions ADD COLUMN max_depth INTEGER NOT NULL DEFAULT 1;
ALTER TABLE sessions ADD COLUMN outcome TEXT;
CREATE TABLE forks (
    fork_id TEXT PRIMARY KEY,
    parent_id TEXT NOT NULL,
    source TEXT NOT NULL,
    state TEXT NOT NULL,
    tasks_proposed TEXT NOT NULL,
    tasks_approved TEXT,
    decision TEXT,
    at_message_id TEXT,
    children TEXT NOT NULL DEFAULT '[]',
    results TEXT,
    reintegrated INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX forks_by_parent ON forks (parent_id);
""",
    # 2 -> 3: events move to an ordinary rowid table. Event rows (~600 bytes of JSON) are far too
    # wide for WITHOUT ROWID, which made each one cost three times its size on disk and slowed
    # inserts down several times.
    3: """
CREATE TABLE events_v3 (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    body TEXT NOT NULL
);
INSERT INTO events_v3 (session_id, seq, kind, body)
    SELECT session_id, seq, kind, body FROM events ORDER BY session_id, seq;
DROP TABLE events;
ALTER TABLE events_v3 RENAME TO events;
CREATE UNIQUE INDEX events_by_session ON events (session_id, seq);
""",
    # 3 -> 4: a session's token totals (JSON, the protocol's Usage).
    4: """
ALTER TABLE sessions ADD COLUMN usage TEXT;
""",
    # 4 -> 5: where fork children work (JSON): a fork's mode, snapshot and worktree folder; a
    # child's worktree and changes.
    5: """
ALTER TABLE sessions ADD COLUMN isolation TEXT;
ALTER TABLE forks ADD COLUMN isolation TEXT;
""",
    # 5 -> 6: a restart loads sessions, not their events, and asks which finished forks gave
    # their parent the results: forkFinished events get an index of their own (a few rows, so
    # that no log is read for it). A session's last seq is not stored: the index on
    # (session_id, seq) gives it in one lookup, and a column would cost every commit a page.
    6: """
CREATE INDEX events_fork_finished ON events (session_id, seq) WHERE kind = 'forkFinished';
""",
    # 6 -> 7: which agent runs a session (coven_ls/agents); NULL (every earlier one): Claude.
    7: """
ALTER TABLE sessions ADD COLUMN agent TEXT;
""",
    # 7 -> 8: fork events carry the fork's state (protocol version 1): the stored ones get it,
    # which each of these kinds has always been sent in.
    8: """
UPDATE events SET body = json_set(body, '$.state', CASE kind
        WHEN 'forkProposed' THEN 'proposed'
        WHEN 'forkRejected' THEN 'rejected'
        WHEN 'forkStarted' THEN 'running'
        WHEN 'forkResumed' THEN 'running'
        WHEN 'forkReviewing' THEN 'reviewing'
        WHEN 'forkFinished' THEN 'finished'
        WHEN 'forkInterrupted' THEN 'interrupted'
    END)
    WHERE kind IN ('forkProposed', 'forkRejected', 'forkStarted', 'forkResumed',
        'forkReviewing', 'forkFinished', 'forkInterrupted');
""",
    # 8 -> 9: branches of deleted fork children kept for their unapplied work: a restart must
    # not remove them as orphans, and `coven-ls prune` must know them.
    9: """
CREATE TABLE kept_branches (
    repository TEXT NOT NULL,
    branch TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (repository, branch)
);
""",
    # 9 -> 10: a branch (coven/branch) keeps where it left its parent (JSON): the message it was
    # branched at and the parent's conversation it starts from.
    10: """
ALTER TABLE sessions ADD COLUMN branched_from TEXT;
""",
    # 10 -> 11: a fork keeps what its children start from (`context`) and which agent they run
    # (NULL: the defaults), so that a restart and coven/resumeFork start them the same way.
    11: """
ALTER TABLE forks ADD COLUMN context TEXT;
ALTER TABLE forks ADD COLUMN agent TEXT;
""",
    # 11 -> 12: what fork children may spend (JSON, the protocol's ForkLimits): a session keeps
    # its client's forkLimits (the model's forks after a restart take them), a fork its own.
    12: """
ALTER TABLE sessions ADD COLUMN fork_limits TEXT;
ALTER TABLE forks ADD COLUMN limits TEXT;
""",
    # 12 -> 13: a fork's choices (what coven/fork or coven/decideFork asked for it) are one JSON
    # column, as the wire has them (protocol.ForkChoices). They were the `requested` part of
    # `isolation`, then `context`, `agent` and `limits`; `limits` held the limits in force, the
    # session's included, so a limit of the session's it lacks is one the fork turned off (0).
    # The table is made again (the rowids kept: they are the order forks are restored in) rather
    # than its columns dropped, which sqlite before 3.35 cannot do.
    13: """
CREATE TABLE forks_v13 (
    fork_id TEXT PRIMARY KEY,
    parent_id TEXT NOT NULL,
    source TEXT NOT NULL,
    state TEXT NOT NULL,
    tasks_proposed TEXT NOT NULL,
    tasks_approved TEXT,
    decision TEXT,
    at_message_id TEXT,
    children TEXT NOT NULL DEFAULT '[]',
    results TEXT,
    reintegrated INTEGER NOT NULL DEFAULT 0,
    isolation TEXT,
    choices TEXT
);
INSERT INTO forks_v13 (rowid, fork_id, parent_id, source, state, tasks_proposed, tasks_approved,
        decision, at_message_id, children, results, reintegrated, isolation, choices)
    SELECT rowid, fork_id, parent_id, source, state, tasks_proposed, tasks_approved, decision,
        at_message_id, children, results, reintegrated,
        CASE WHEN json_extract(isolation, '$.mode') IS NULL THEN NULL
            ELSE json_remove(isolation, '$.requested') END,
        NULLIF(json_patch('{}', json_object(
            'isolation', json_extract(isolation, '$.requested.isolation'),
            'mergeMode', json_extract(isolation, '$.requested.mergeMode'),
            'worktreeSetup', json_extract(isolation, '$.requested.worktreeSetup'),
            'context', context,
            'agent', agent,
            'limits', json(NULLIF(json_patch(
                (SELECT json_group_object(given.key, 0)
                    FROM sessions AS parent, json_each(parent.fork_limits) AS given
                    WHERE parent.session_id = forks.parent_id
                        AND json_type(forks.limits, '$.' || given.key) IS NULL),
                coalesce(limits, '{}')), '{}'))
        )), '{}')
    FROM forks ORDER BY rowid;
DROP TABLE forks;
ALTER TABLE forks_v13 RENAME TO forks;
CREATE INDEX forks_by_parent ON forks (parent_id);
""",
    # 13 -> 14: where a fork child placed on a cluster runs (JSON, the protocol's
    # ClusterPlacement: the cluster and its node), so that a restarted server shows it (and, in
    # time, reattaches to it); NULL for every session that runs on this machine.
    14: """
ALTER TABLE sessions ADD COLUMN placement TEXT;
""",
}

SESSION_COLUMNS = (
    "session_id",
    "parent_id",
    "fork_id",
    "label",
    "title",
    "status",
    "agent_session_id",
    "cwd",
    "model",
    "permission_mode",
    "fork_mode",
    "created_at",
    "cost_usd",
    "depth",
    "max_children",
    "max_parallel",
    "max_depth",
    "outcome",
    "usage",
    "isolation",
    "agent",
    "branched_from",
    "fork_limits",
    "placement",
)
FORK_COLUMNS = (
    "fork_id",
    "parent_id",
    "source",
    "state",
    "tasks_proposed",
    "tasks_approved",
    "decision",
    "at_message_id",
    "children",
    "results",
    "reintegrated",
    "isolation",
    "choices",
)


class StoreError(Exception):
    """The database cannot be used as it is; the message says what to do."""


class StoreInUse(StoreError):
    """Another coven-ls process has the database open (two editor windows on one folder)."""

    def __init__(self, message: str, pid: int | None) -> None:
        super().__init__(message)
        self.pid = pid


def _hold(path: Path) -> int | None:
    """Take the database's lock file (`<db>.lock`, holding our pid) for as long as the store is
    open. Two servers writing one database would each restore the other's running sessions as
    interrupted and resume them twice; the second is refused instead, told whose it is. The lock
    is the kernel's (flock): a killed server's goes with it, nothing stale is left."""
    if fcntl is None:  # Windows: no flock; one server per folder is then up to the user
        return None
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip()
        os.close(fd)
        pid = int(holder) if holder.isdigit() else None
        who = f"coven-ls process {pid}" if pid else "another coven-ls process"
        raise StoreInUse(
            f"The session database {path} is in use by {who} (another editor window on this "
            "folder, say). Close that one first, or set initializationOptions.stateDir to use "
            "another folder.",
            pid,
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def database_path(root: str, state_dir: str | None) -> Path:
    """One database per workspace root, named so that a person can tell which is which."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(root).name or "root").strip("-") or "root"
    digest = hashlib.sha256(os.path.abspath(root).encode()).hexdigest()[:12]
    folder = Path(state_dir).expanduser() if state_dir else default_state_dir()
    return folder / f"{name}-{digest}.sqlite3"


@dataclass
class Snapshot:
    """The sessions (each with its last_seq) and forks a store holds, as plain rows; not their
    events (read on demand)."""

    sessions: list[dict[str, Any]] = field(default_factory=list)
    forks: list[dict[str, Any]] = field(default_factory=list)
    kept: list[dict[str, Any]] = field(default_factory=list)
    """branches kept for their unapplied work (`KeptBranch` dicts)"""


class Store:
    def __init__(self, path: Path, connection: sqlite3.Connection, held: int | None = None) -> None:
        self.path = path
        self._db = connection
        self._held = held  # the lock file's descriptor: closing it lets another server in
        self._lock = threading.Lock()  # one writer at a time, whichever worker thread it is on
        # Reads (a client's getEvents) go through a connection of their own: in WAL mode they
        # never wait for a commit, nor does a commit (and so every event's delivery) wait for
        # a long read.
        self._reader = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._reader.execute("PRAGMA query_only=ON")
        self._read_lock = threading.Lock()
        self._unchecked = 0  # bytes written since the last checkpoint, about
        self._checkpointer: sqlite3.Connection | None = None
        self._checkpoint_lock = threading.Lock()
        self._closed = False

    # --- opening ---------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: Path) -> tuple[Store, str | None]:
        """Open (creating or migrating) the database at `path`. A database that cannot be read
        is moved aside, never deleted, and a fresh one started: the second value then says
        where the old one went. A database from a newer coven-ls, or one another coven-ls has
        open (StoreInUse), raises StoreError."""
        path.parent.mkdir(parents=True, exist_ok=True)
        held = _hold(path)
        try:
            connection, warning = _connect_or_set_aside(path)
        except BaseException:
            if held is not None:
                os.close(held)
            raise
        return cls(path, connection, held), warning

    def close(self) -> None:
        with self._checkpoint_lock:
            self._closed = True
            if self._checkpointer is not None:
                self._checkpointer.close()
                self._checkpointer = None
        with self._read_lock:
            self._reader.close()
        with self._lock:
            self._db.close()
            if self._held is not None:
                os.close(self._held)
                self._held = None

    # --- writing ---------------------------------------------------------------------------------

    def write(
        self,
        events: Iterable[tuple[dict[str, Any], bytes]],
        sessions: Iterable[dict[str, Any]] = (),
        forks: Iterable[dict[str, Any]] = (),
    ) -> None:
        """One transaction: a burst of (event, its encoded JSON) with the session and fork rows
        they changed.

        The whole burst is one statement (an insert into the `burst` view, whose trigger writes
        the three tables), run in autocommit: one sqlite3_step, so the GIL is let go and taken
        back once per burst. executemany lets it go once a row, and each time it is taken back
        while any other thread is busy costs up to the interpreter's switch interval: a burst
        of 900 rows took seconds beside one CPU-bound thread."""
        # The events go as their bodies side by side in one blob, and a small JSON array of
        # (session id, seq, kind, where its body starts, its length): sqlite cuts each body out
        # of the blob instead of parsing it (parsing ~1 KB of JSON an event was a third of a
        # commit's time, and the GIL-bound writer's time is what a busy relay waits for).
        keys: list[tuple[str, int, str, int, int]] = []
        start = 1  # substr counts from 1
        bodies: list[bytes] = []
        for event, body in events:
            keys.append((event["sessionId"], event["seq"], event["kind"], start, len(body)))
            start += len(body)
            bodies.append(body)
        session_rows = [_session_row(s) for s in sessions]
        fork_rows = [_fork_row(f) for f in forks]
        if not (keys or session_rows or fork_rows):
            return
        if len(keys) == 1 and not (session_rows or fork_rows):
            # An agent at its pace: one message, one event, its session row unchanged. A plain
            # insert runs a fraction of the trigger's code; on a process that idled between two
            # messages that code runs cold, and an event's whole trip through the relay took
            # ~0.05 ms longer with the trigger (bench/relay.py p50, 3 alternating runs).
            session_id, seq, kind, _start, _length = keys[0]
            with self._lock:
                self._db.execute(
                    "INSERT INTO events (session_id, seq, kind, body) VALUES (?, ?, ?, ?)",
                    (session_id, seq, kind, bodies[0].decode()),
                )
                self._unchecked += len(bodies[0])
            return
        # The JSON goes as text: sqlite 3.45 and later first try a blob given to a JSON function
        # as JSONB. The bodies go as a blob: substr counts a blob's bytes, a text's characters.
        burst = (
            _encode(keys).decode(),
            b"".join(bodies),
            _encode(session_rows).decode(),
            _encode(fork_rows).decode(),
        )
        with self._lock:
            self._db.execute("INSERT INTO burst VALUES (?, ?, ?, ?)", burst)
            self._unchecked += sum(len(part) for part in burst)

    def delete_sessions(self, session_ids: list[str]) -> None:
        ids = _encode(session_ids).decode()  # text: sqlite >= 3.45 tries a blob as JSONB
        with self._lock:
            self._db.execute("BEGIN")
            try:
                for table, column in (
                    ("events", "session_id"),
                    ("sessions", "session_id"),
                    ("forks", "parent_id"),
                ):
                    self._db.execute(
                        f"DELETE FROM {table} WHERE {column} IN (SELECT value FROM json_each(?))",
                        (ids,),
                    )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    # --- kept branches ---------------------------------------------------------------------------

    def keep_branches(self, kept: Iterable[Mapping[str, Any]]) -> None:
        """Record branches kept for their unapplied work (each a `KeptBranch` as a dict)."""
        rows = [(k["repository"], k["branch"], json.dumps(dict(k))) for k in kept]
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._db.executemany("INSERT OR REPLACE INTO kept_branches VALUES (?, ?, ?)", rows)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def kept_branches(self) -> list[dict[str, Any]]:
        with self._read_lock:
            return read_kept_branches(self._reader)

    # --- checkpoints -----------------------------------------------------------------------------

    def checkpoint_due(self) -> bool:
        """Whether enough has been appended to the WAL since the last checkpoint to copy it back
        into the database. Writes never checkpoint themselves (that would put a checkpoint's
        page copies and fsync into some event's delivery); the journal calls checkpoint()."""
        return self._unchecked >= CHECKPOINT_BYTES

    def checkpoint(self) -> None:
        """Copy the WAL back into the database, beside the writer (PASSIVE: it never makes a
        commit wait, and stops at pages a reader still needs). Blocking: from a worker thread."""
        self._unchecked = 0
        with self._checkpoint_lock:
            if self._closed:
                return
            if self._checkpointer is None:
                self._checkpointer = sqlite3.connect(
                    self.path, check_same_thread=False, isolation_level=None
                )
            self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()

    # --- reading ---------------------------------------------------------------------------------

    def load(self) -> Snapshot:
        with self._read_lock:
            snapshot = Snapshot()
            # Each session's last seq: one index lookup per session, however long its log.
            cursor = self._reader.execute(
                f"SELECT {', '.join(SESSION_COLUMNS)}, (SELECT max(seq) FROM events "
                "WHERE events.session_id = sessions.session_id) FROM sessions ORDER BY rowid"
            )
            snapshot.sessions = [
                _session_dict(row[:-1]) | {"last_seq": row[-1] or 0} for row in cursor
            ]
            cursor = self._reader.execute(f"SELECT {', '.join(FORK_COLUMNS)} FROM forks")
            snapshot.forks = [_fork_dict(row) for row in cursor]
            snapshot.kept = read_kept_branches(self._reader)
            return snapshot

    def events_between(
        self, session_id: str, after_seq: int, upto_seq: int | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """A session's events with after_seq < seq <= upto_seq (None: no upper bound), the first
        `limit` of them (None: all)."""
        with self._read_lock:
            cursor = self._reader.execute(
                "SELECT body FROM events WHERE session_id = ? AND seq > ? AND seq <= ? "
                "ORDER BY seq LIMIT ?",
                (
                    session_id,
                    after_seq,
                    _MAX_SEQ if upto_seq is None else upto_seq,
                    -1 if limit is None else limit,
                ),
            )
            return [_decode(body) for (body,) in cursor]

    def first_seq(
        self,
        session_id: str,
        kinds: Sequence[str],
        fields: Mapping[str, str] | None = None,
        after_seq: int = 0,
        upto_seq: int | None = None,
    ) -> int | None:
        """The seq of a session's first event after `after_seq` (and up to `upto_seq`) of one of
        `kinds` whose top-level `fields` have these values; None if there is none. Reads only
        that session's rows (or, for forkFinished, its index)."""
        for kind in kinds:
            if not _KIND.fullmatch(kind):
                raise ValueError(f"not an event kind: {kind!r}")
        # The kinds are written into the SQL, not bound, and one kind as `kind = '...'`: only
        # so does sqlite see that a query for forkFinished may use its partial index.
        if len(kinds) == 1:
            kind_is = f"kind = '{kinds[0]}'"
        else:
            kind_is = "kind IN (" + ", ".join(f"'{kind}'" for kind in kinds) + ")"
        sql = f"SELECT seq FROM events WHERE session_id = ? AND {kind_is} "
        sql += "AND seq > ? AND seq <= ?"
        args: list[Any] = [session_id, after_seq, _MAX_SEQ if upto_seq is None else upto_seq]
        for name, value in (fields or {}).items():
            sql += " AND json_extract(body, ?) = ?"
            args += [f"$.{json.dumps(name)}", value]
        with self._read_lock:
            row = self._reader.execute(sql + " ORDER BY seq LIMIT 1", args).fetchone()
        return None if row is None else int(row[0])


def read_kept_branches(db: sqlite3.Connection) -> list[dict[str, Any]]:
    return [json.loads(body) for (body,) in db.execute("SELECT body FROM kept_branches")]


@dataclass
class StoredTrees:
    """What a store says about git worktrees and branches, for `coven-ls prune`."""

    needed: list[dict[str, str]] = field(default_factory=list)
    """{path, branch, repository} of every stored session's worktree, and of those planned for
    forks (made, or about to be made, by a server that may be running)"""
    kept: list[dict[str, Any]] = field(default_factory=list)
    """the branches kept for their unapplied work (`KeptBranch` dicts)"""


def read_trees(path: Path) -> StoredTrees:
    """Read a store's worktrees and kept branches without taking its lock (a server may have it
    open): a read-only connection, which sqlite keeps consistent with the server's writes."""
    db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    try:
        version = _schema_version(db)
        found = StoredTrees()
        if version >= 5:
            for (isolation,) in db.execute("SELECT isolation FROM sessions"):
                tree = (json.loads(isolation) if isolation else {}).get("worktree")
                if tree:
                    found.needed.append({k: tree[k] for k in ("path", "branch", "repository")})
            # A fork's planned worktrees are needed while it may still make or use them (it
            # runs, waits to be resumed, or is proposed: they are made while its approval is
            # asked); after that, its sessions say what is needed.
            forks = db.execute(
                "SELECT isolation FROM forks WHERE state IN ('proposed', 'running', 'interrupted')"
            )
            for (isolation,) in forks:
                trees = json.loads(isolation) if isolation else {}
                for planned in trees.get("planned") or []:
                    if trees.get("repository"):
                        found.needed.append(
                            {
                                "path": planned["path"],
                                "branch": planned["branch"],
                                "repository": trees["repository"],
                            }
                        )
        if version >= 9:
            found.kept = read_kept_branches(db)
            # A kept branch's session was deleted: its fork's plan does not make it needed.
            kept = {(k["repository"], k["branch"]) for k in found.kept}
            found.needed = [n for n in found.needed if (n["repository"], n["branch"]) not in kept]
        return found
    finally:
        db.close()


def forget_kept_branches(path: Path, keys: Iterable[tuple[str, str]]) -> None:
    """Drop the records of kept branches ((repository, branch)) that were deleted. A short write
    of its own: sqlite's locking lets it run beside a server that has the store open."""
    db = sqlite3.connect(path, timeout=30, isolation_level=None)
    try:
        if _schema_version(db) < 9:
            return
        db.execute("BEGIN IMMEDIATE")
        db.executemany("DELETE FROM kept_branches WHERE repository = ? AND branch = ?", list(keys))
        db.execute("COMMIT")
    finally:
        db.close()


_MAX_SEQ = 2**63 - 1
_decode = msgspec.json.Decoder().decode  # the same dicts as json.loads, in half the time
_encode = msgspec.json.Encoder().encode
_KIND = re.compile(r"[A-Za-z]+")


def _from_json(table: str, columns: Mapping[str, str], rows: str, upsert: bool = False) -> str:
    """An INSERT of the rows of the JSON array `rows`, each column's value taken from a row by
    its JSON path (`columns`: column -> path, "$" for the whole row), or an upsert on the first
    column. An upsert, not INSERT OR REPLACE: a replaced row gets a new rowid, and rowid is the
    order in which sessions were created. A row that comes twice is written twice, in order:
    the later one wins."""
    values = ", ".join(
        "value" if p == "$" else f"json_extract(value, '{p}')" for p in columns.values()
    )
    names = list(columns)
    sql = (
        f"INSERT INTO {table} ({', '.join(names)}) SELECT {values} FROM json_each({rows}) "
        # WHERE true: without it sqlite would read ON CONFLICT as part of the join.
        "WHERE true ORDER BY key"
    )
    if upsert:
        updates = ", ".join(f"{c} = excluded.{c}" for c in names[1:])
        sql += f" ON CONFLICT ({names[0]}) DO UPDATE SET {updates}"
    return sql + ";"


def _by_position(columns: tuple[str, ...]) -> dict[str, str]:
    return {c: f"$[{i}]" for i, c in enumerate(columns)}


# What Store.write inserts into: one row of the events' keys (a JSON array of [session id, seq,
# kind, start, length]) and their bodies (one blob), and two JSON arrays of session and fork
# rows, whose trigger writes them all. Temporary (this connection's own), not part of the schema.
BURST = f"""
CREATE TEMP VIEW burst (event_keys, event_bodies, sessions, forks) AS
    SELECT NULL, NULL, NULL, NULL;
CREATE TEMP TRIGGER burst_write INSTEAD OF INSERT ON burst BEGIN
    {_from_json("sessions", _by_position(SESSION_COLUMNS), "NEW.sessions", upsert=True)}
    {_from_json("forks", _by_position(FORK_COLUMNS), "NEW.forks", upsert=True)}
    INSERT INTO events (session_id, seq, kind, body)
        SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'),
            json_extract(value, '$[2]'), CAST(substr(NEW.event_bodies, json_extract(value, '$[3]'),
            json_extract(value, '$[4]')) AS TEXT)
        FROM json_each(NEW.event_keys) WHERE true ORDER BY key;
END;
"""


def _connect_or_set_aside(path: Path) -> tuple[sqlite3.Connection, str | None]:
    try:
        return _connect(path), None
    except sqlite3.DatabaseError as exc:
        kept = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
        for suffix in ("", "-wal", "-shm"):
            source = Path(f"{path}{suffix}")
            if source.exists():
                source.rename(Path(f"{kept}{suffix}"))
        log.warning("unreadable database %s (%s) moved to %s", path, exc, kept)
        warning = (
            f"coven-ls could not read its session database ({exc}); it was kept as {kept} "
            "and a new, empty one was started. Earlier sessions are not listed."
        )
        return _connect(path), warning


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    try:
        # Reading the header and the schema is what fails on a file that is not a database.
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable at every checkpoint
        # A burst must not leave a huge WAL behind, and a bigger cache keeps pages from spilling.
        db.execute("PRAGMA journal_size_limit=67108864")
        db.execute("PRAGMA cache_size=-16384")
        version = _schema_version(db)
        if version > SCHEMA_VERSION:
            db.close()
            raise StoreError(
                f"The session database {path} was written by a newer coven-ls (schema "
                f"{version}; this one knows up to {SCHEMA_VERSION}). Upgrade coven-ls, or set "
                "initializationOptions.stateDir to use another folder."
            )
        if version == 0:
            db.executescript(
                f"BEGIN; {SCHEMA_V1} INSERT INTO meta VALUES ('schema_version', '1'); COMMIT;"
            )
            version = 1
        for target in range(version + 1, SCHEMA_VERSION + 1):
            db.executescript(
                f"BEGIN; {MIGRATIONS[target]} "
                f"UPDATE meta SET value = '{target}' WHERE key = 'schema_version'; COMMIT;"
            )
            log.info("migrated %s to schema %d", path, target)
        # One row, not a count: a count would read the whole log at every start.
        db.execute("SELECT seq FROM events LIMIT 1").fetchone()
        # Checkpoints are the journal's to run, off the event path (Store.checkpoint).
        db.execute("PRAGMA wal_autocheckpoint=0")
        db.executescript(BURST)
        return db
    except sqlite3.DatabaseError:
        with contextlib.suppress(Exception):
            db.close()
        raise


def _schema_version(db: sqlite3.Connection) -> int:
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "meta" not in tables:
        if tables:
            raise sqlite3.DatabaseError("not a coven-ls database (no meta table)")
        return 0
    row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None or not str(row[0]).isdigit():
        raise sqlite3.DatabaseError("no schema version")
    return int(row[0])


_SESSION_JSON = ("outcome", "usage", "isolation", "branched_from", "fork_limits", "placement")


def _session_row(s: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(
        json.dumps(s[name]) if name in _SESSION_JSON and s.get(name) is not None else s.get(name)
        for name in SESSION_COLUMNS
    )


def _session_dict(row: tuple[Any, ...]) -> dict[str, Any]:
    d = dict(zip(SESSION_COLUMNS, row, strict=True))
    for name in _SESSION_JSON:
        d[name] = json.loads(d[name]) if d[name] else None
    return d


_FORK_JSON = ("tasks_proposed", "tasks_approved", "children", "results", "isolation", "choices")


def _fork_row(f: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(
        json.dumps(f.get(name)) if name in _FORK_JSON and f.get(name) is not None else f.get(name)
        for name in FORK_COLUMNS
    )


def _fork_dict(row: tuple[Any, ...]) -> dict[str, Any]:
    d = dict(zip(FORK_COLUMNS, row, strict=True))
    for name in _FORK_JSON:
        d[name] = json.loads(d[name]) if d[name] else None
    d["reintegrated"] = bool(d["reintegrated"])
    return d
