"""Unit tests of the hub and its forks, driven through the hub's public methods against the
in-process fake backend (no CLI, no subprocess, no pygls).

The fake model answers by prompt: `PLAN` makes it fork into the test's tasks, a child answers
"answer for <label>" (after waiting at its gate, if the test gave it one), and anything else is
echoed.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from anyio.abc import TaskGroup

from coven_ls import protocol
from coven_ls.agents import REGISTRY
from coven_ls.core.agent import Entry
from coven_ls.core.fork.tag import child_prompt
from coven_ls.core.hub import ClientSettings, Hub
from coven_ls.core.session import Session
from coven_ls.core.session import event_log as session_log
from coven_ls.core.store import Store, database_path
from coven_ls.core.workspace import isolation, worktrees
from coven_ls.core.workspace.ports import PORTS
from coven_ls.core.workspace.repository import RepoInfo, inspect
from coven_ls.protocol import Kind, events
from coven_ls.protocol.types import ForkChoices, Usage

from ..fakes import (
    Ask,
    FakeBackend,
    Gate,
    Step,
    copied_up_to,
    copies,
    reply,
    started_from,
)
from ..gitrepo import git, make_repo

LIMIT = 5.0  # seconds any single wait in these tests may take
PLAN = "Split the work"
PARENT_AGENT = "agent-parent"
TASKS = ["alpha", "beta"]
INTERRUPTED = "interrupted: the server stopped before it finished"


def fork_tag(tasks: list[str]) -> str:
    return "Two parts.\n<fork>\n" + "".join(f"- {t}\n" for t in tasks) + "</fork>"


def answer(label: str) -> str:
    return f"answer for {label}"


def model(tasks: list[str], gates: dict[str, Gate]) -> Callable[[str], list[Step]]:
    """The fake model's reply to each prompt (children run in parallel, so replies go by prompt
    rather than in order)."""

    def respond(text: str) -> list[Step]:
        if text == PLAN:
            return reply(fork_tag(tasks), agent_session_id=PARENT_AGENT)
        # The assignment is a line of its own (the first, but for a written-out conversation
        # ahead of it); the rest lists the siblings' tasks.
        assigned = re.search(r"^You were assigned '(.*)'$", text, re.MULTILINE)
        if assigned is None:
            return reply(f"echo: {text[:20]}", agent_session_id=PARENT_AGENT)
        label = assigned.group(1)
        steps = reply(answer(label), agent_session_id=f"agent-{label}")
        if label in gates:
            steps.insert(1, gates[label])  # after init: the child is `running` when it waits
        return steps

    return respond


class RecordingClient:
    """A `hub.Client` that keeps every event it is sent. Unless a test sets `fork_answer`, it
    has its own fork UI (it answers `ask_fork_approval` with None) and the test decides forks
    with `hub.forks.decide`."""

    def __init__(self, settings: ClientSettings, store: Store | None) -> None:
        self.permission_gate: Gate | None = None
        self.messages: list[tuple[str, bool]] = []
        self.settings = settings
        self.store = store
        self.events: list[dict[str, Any]] = []
        self.frames: list[dict[str, Any]] = []
        # (session id, tasks, whether forkProposed had reached this client when it was asked)
        self.approvals: list[tuple[str, list[str], bool]] = []
        self.fork_answer: bool | None = None
        self._changed = anyio.Event()

    def send_frame(self, frame: bytes) -> None:
        self.frames.append(json.loads(frame.split(b"\r\n\r\n", 1)[1])["params"])

    def observe_delta(self, delta: Any) -> None:
        pass

    def observe(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def ask_permission(
        self,
        session: Session,
        tool_name: str,
        tool_input: dict[str, Any],
        tool_use_id: str | None,
        options: Any = (),
    ) -> tuple[bool, str]:
        if self.permission_gate is not None:
            await self.permission_gate.pass_through()  # a user who takes their time
        return True, ""

    async def ask_review(self, child: Session) -> bool | None:
        return None  # like a client with its own review UI

    def show_message(self, message: str, warning: bool) -> None:
        self.messages.append((message, warning))

    async def ask_fork_approval(self, session: Session, tasks: list[str]) -> bool | None:
        proposed = any(e["kind"] == Kind.FORK_PROPOSED for e in self.of(session))
        self.approvals.append((session.id, tasks, proposed))
        self._notify()
        return self.fork_answer

    def of(self, session: Session | str) -> list[dict[str, Any]]:
        sid = session if isinstance(session, str) else session.id
        return [e for e in self.events if e["sessionId"] == sid]

    async def until(self, found: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        with anyio.fail_after(LIMIT):
            while True:
                event = next((e for e in self.events if found(e)), None)
                if event is not None:
                    return event
                await self._changed.wait()

    async def wait_for(
        self, kind: str, session: Session | str, *, after: int = 0, **match: Any
    ) -> dict[str, Any]:
        """The first event of `kind` of `session` after seq `after` whose fields equal `match`."""
        sid = session if isinstance(session, str) else session.id
        return await self.until(
            lambda e: (
                e["sessionId"] == sid
                and e["kind"] == kind
                and e["seq"] > after
                and all(e.get(k) == v for k, v in match.items())
            )
        )


@dataclass
class Rig:
    hub: Hub
    client: RecordingClient
    backend: FakeBackend
    _tg: TaskGroup
    killed: bool = False

    async def kill(self) -> None:
        """Stop like a killed server: every task ends where it is, nothing more is stored, the
        stores are left as they are. Does not return: the test goes on after the `async with`."""
        self.killed = True
        self._tg.cancel_scope.cancel()
        await anyio.lowlevel.checkpoint()


@asynccontextmanager
async def running_hub(
    settings: ClientSettings, tasks: list[str] = TASKS, gates: dict[str, Gate] | None = None
) -> AsyncIterator[Rig]:
    """A hub in a task group of its own, with one client attached (after opening the store when
    the settings name a state dir, as the server's `initialize` does)."""
    backend = FakeBackend()
    backend.default_reply = model(tasks, gates or {})
    async with anyio.create_task_group() as tg:
        hub = Hub(tg, REGISTRY.with_backends(lambda *_: backend))
        store = (await hub.open_store(settings))[0] if settings.options.stateDir else None
        client = RecordingClient(settings, store)
        hub.attach(client)
        rig = Rig(hub, client, backend, tg)
        try:
            yield rig
        finally:
            if not rig.killed:
                with anyio.move_on_after(LIMIT):
                    await hub.close_all()
            tg.cancel_scope.cancel()


def settings(tmp_path: Path, **options: Any) -> ClientSettings:
    return ClientSettings(
        str(tmp_path), protocol.InitializationOptions(**options), frozenset(options)
    )


async def start(rig: Rig, prompt: str = PLAN) -> Session:
    return await rig.hub.start_session(rig.client, protocol.StartSessionParams(prompt=prompt))


async def start_fork(rig: Rig) -> tuple[Session, dict[str, Session]]:
    """A session whose model forks at once (forkMode auto): the parent, and its children by
    label."""
    parent = await start(rig)
    started = await rig.client.wait_for(Kind.FORK_STARTED, parent)
    return parent, {c["label"]: rig.hub.get(c["sessionId"]) for c in started["children"]}


async def results_turn(rig: Rig, parent: Session, after: int = 0) -> str:
    """Wait for the parent's `<fork-results>` turn to end; its text."""
    prompt = await rig.client.wait_for(Kind.PROMPT, parent, after=after, origin="forkResults")
    await rig.client.wait_for(Kind.STATUS, parent, after=prompt["seq"], status="idle")
    return prompt["text"]


def last_fork(rig: Rig, session: Session) -> tuple[str, str] | None:
    """What coven/listSessions says of the session's latest fork: its id and state."""
    [info] = [i for i in rig.hub.list_sessions() if i.sessionId == session.id]
    return None if info.lastFork is None else (info.lastFork.forkId, info.lastFork.state)


def trail(client: RecordingClient, session: Session | str) -> list[str]:
    """A session's events as the client saw them, without the model's words."""
    shown = []
    for e in client.of(session):
        if e["kind"] == Kind.STATUS:
            shown.append(f"status:{e['status']}")
        elif e["kind"] == Kind.PROMPT:
            shown.append(f"prompt:{e['origin']}")
        elif e["kind"] == Kind.TURN_RESULT or e["kind"].startswith("fork"):
            shown.append(e["kind"])
    return shown


def parent_heard(backend: FakeBackend) -> list[str]:
    """What the parent's model was sent, turn by turn (over every agent process it had)."""
    return [text for a in backend.agents if not copies(a.spec) for text in a.sent]


def child_agents(backend: FakeBackend) -> dict[str, Any]:
    """The children's agent processes, by the label they were assigned."""
    return {a.sent[0].split("'")[1]: a for a in backend.agents if copies(a.spec)}


def task(label: str, body: str) -> str:
    return f'<task label="{label}">\n{body}\n</task>'


# --- approval ------------------------------------------------------------------------------------


async def test_approved_fork_runs_children_and_reintegrates(tmp_path: Path) -> None:
    async with running_hub(settings(tmp_path, forkMode="approve")) as rig:
        client = rig.client
        parent = await start(rig)
        assert last_fork(rig, parent) is None
        proposed = await client.wait_for(Kind.FORK_PROPOSED, parent)
        fork_id = proposed["forkId"]
        assert proposed["tasks"] == TASKS
        assert parent.status == "awaitingApproval"
        # The fork's state is on the wire: in its events and in the parent's SessionInfo.
        assert proposed["state"] == "proposed"
        assert last_fork(rig, parent) == (fork_id, "proposed")
        await client.until(lambda _: bool(client.approvals))
        assert client.approvals == [(parent.id, TASKS, True)]

        rig.hub.forks.decide(fork_id, True, None, None)
        assert last_fork(rig, parent) == (fork_id, "running")  # before its children exist
        started = await client.wait_for(Kind.FORK_STARTED, parent)
        children = {c["label"]: c["sessionId"] for c in started["children"]}
        assert started["forkId"] == fork_id and started["source"] == "model"
        assert started["state"] == "running"
        assert list(children) == TASKS
        finished = await client.wait_for(Kind.FORK_FINISHED, parent)
        assert finished["results"] == [
            {"label": label, "sessionId": children[label], "ok": True} for label in TASKS
        ]
        assert finished["state"] == "finished"
        assert last_fork(rig, parent) == (fork_id, "finished")
        # A child is no fork's parent.
        assert [last_fork(rig, rig.hub.get(c)) for c in children.values()] == [None, None]
        text = await results_turn(rig, parent)

    assert task("alpha", answer("alpha")) in text and task("beta", answer("beta")) in text
    assert parent_heard(rig.backend) == [PLAN, text]
    assert trail(client, parent) == [
        *("status:starting", "prompt:user", "status:running", "turnResult"),
        *("status:awaitingApproval", "forkProposed", "status:forking", "forkStarted"),
        *("forkFinished", "prompt:forkResults", "status:starting", "status:running"),
        *("turnResult", "status:idle"),
    ]
    # Each child is a fresh fork of the parent's conversation, told only its own task.
    for label, agent in child_agents(rig.backend).items():
        assert started_from(agent.spec) == PARENT_AGENT
        assert agent.sent == [child_prompt(label, list(children))]
        assert trail(client, children[label]) == [
            *("status:queued", "prompt:fork", "status:starting", "status:running"),
            *("turnResult", "status:idle"),
        ]
    # The parent's process was stopped while it forked: the results went to a resumed one.
    parent_agents = [a for a in rig.backend.agents if not copies(a.spec)]
    assert [started_from(a.spec) for a in parent_agents] == [None, PARENT_AGENT]
    assert client.frames == client.events


async def test_approval_with_edited_tasks_runs_the_edited_list(tmp_path: Path) -> None:
    async with running_hub(settings(tmp_path, forkMode="approve")) as rig:
        parent = await start(rig)
        proposed = await rig.client.wait_for(Kind.FORK_PROPOSED, parent)
        rig.hub.forks.decide(proposed["forkId"], True, ["gamma", "  delta   tests "], None)
        started = await rig.client.wait_for(Kind.FORK_STARTED, parent)
        text = await results_turn(rig, parent)

    assert started["tasks"] == ["gamma", "delta tests"]
    assert [c["label"] for c in started["children"]] == ["gamma", "delta tests"]
    assert sorted(child_agents(rig.backend)) == ["delta tests", "gamma"]
    assert task("gamma", answer("gamma")) in text
    assert task("delta tests", answer("delta tests")) in text
    assert "alpha" not in text


async def test_rejection_tells_the_model_why(tmp_path: Path) -> None:
    async with running_hub(settings(tmp_path, forkMode="approve")) as rig:
        parent = await start(rig)
        proposed = await rig.client.wait_for(Kind.FORK_PROPOSED, parent)
        rig.hub.forks.decide(proposed["forkId"], False, None, "too broad")
        rejected = await rig.client.wait_for(Kind.FORK_REJECTED, parent)
        told = await rig.client.wait_for(Kind.PROMPT, parent, origin="forkRejected")
        await rig.client.wait_for(Kind.STATUS, parent, after=told["seq"], status="idle")
        with pytest.raises(protocol.CovenError) as twice:
            rig.hub.forks.decide(proposed["forkId"], True, None, None)

        assert rejected["forkId"] == proposed["forkId"] and rejected["reason"] == "too broad"
        assert rejected["state"] == "rejected"
        assert last_fork(rig, parent) == (proposed["forkId"], "rejected")
        assert "declined your proposed fork" in told["text"]
        assert "Their reason: too broad" in told["text"]
        assert parent_heard(rig.backend) == [PLAN, told["text"]]
        assert rig.hub.children_of(parent) == []
        assert twice.value.code == protocol.ErrorCode.InvalidState
        assert trail(rig.client, parent)[4:] == [
            *("status:awaitingApproval", "forkProposed", "forkRejected", "status:idle"),
            *("prompt:forkRejected", "status:starting", "status:running", "turnResult"),
            "status:idle",
        ]


async def test_the_editors_answer_decides_the_fork(tmp_path: Path) -> None:
    async with running_hub(settings(tmp_path, forkMode="approve")) as rig:
        rig.client.fork_answer = False
        parent = await start(rig)
        rejected = await rig.client.wait_for(Kind.FORK_REJECTED, parent)
        told = await rig.client.wait_for(Kind.PROMPT, parent, origin="forkRejected")

    assert rig.client.approvals == [(parent.id, TASKS, True)]
    assert rejected["reason"] == "rejected in the editor"
    assert "Their reason: rejected in the editor" in told["text"]


# --- cancelling ----------------------------------------------------------------------------------


async def test_cancelling_one_child_lets_the_others_finish(tmp_path: Path) -> None:
    gates = {"alpha": Gate(), "beta": Gate()}
    async with running_hub(settings(tmp_path, forkMode="auto"), gates=gates) as rig:
        parent, children = await start_fork(rig)
        await gates["alpha"].wait_reached()
        await gates["beta"].wait_reached()

        assert await rig.hub.cancel(children["alpha"]) == 0
        assert children["alpha"].status == "cancelled"
        assert children["beta"].status == "running" and parent.status == "forking"
        gates["beta"].open()
        finished = await rig.client.wait_for(Kind.FORK_FINISHED, parent)
        text = await results_turn(rig, parent)

    assert [(r["label"], r["ok"], r.get("error")) for r in finished["results"]] == [
        ("alpha", False, "cancelled by the user"),
        ("beta", True, None),
    ]
    assert '<task label="alpha" error="cancelled by the user">' in text
    assert task("beta", answer("beta")) in text
    assert child_agents(rig.backend)["alpha"].closed  # its process ended with it


async def test_cancelling_the_parent_cancels_the_running_children(tmp_path: Path) -> None:
    gates = {"beta": Gate()}
    async with running_hub(settings(tmp_path, forkMode="auto"), gates=gates) as rig:
        parent, children = await start_fork(rig)
        await rig.client.wait_for(Kind.STATUS, children["alpha"], status="idle")
        await gates["beta"].wait_reached()

        assert await rig.hub.cancel(parent) == 0
        finished = await rig.client.wait_for(Kind.FORK_FINISHED, parent)
        text = await results_turn(rig, parent)

        assert (children["alpha"].status, children["beta"].status) == ("idle", "cancelled")
        assert [(r["label"], r["ok"], r.get("error")) for r in finished["results"]] == [
            ("alpha", True, None),
            ("beta", False, "cancelled by the user"),
        ]
        assert task("alpha", answer("alpha")) in text
        assert '<task label="beta" error="cancelled by the user">' in text
        assert parent_heard(rig.backend) == [PLAN, text]


# --- the parallel limit --------------------------------------------------------------------------


async def test_max_parallel_queues_the_other_children(tmp_path: Path) -> None:
    tasks = ["alpha", "beta", "gamma"]
    gates = {label: Gate() for label in tasks}
    cfg = settings(tmp_path, forkMode="auto", maxParallel=1)
    async with running_hub(cfg, tasks=tasks, gates=gates) as rig:
        parent, children = await start_fork(rig)
        ids = {c.id: label for label, c in children.items()}
        ran: list[str] = []
        for done in range(len(tasks)):
            # Whichever child the limiter lets in next: it runs alone, the rest still queue.
            running = await rig.client.until(
                lambda e: (
                    e["sessionId"] in ids
                    and e.get("status") == "running"
                    and ids[e["sessionId"]] not in ran
                )
            )
            label = ids[running["sessionId"]]
            statuses = sorted(c.status for c in children.values())
            assert statuses == sorted(["running"] + ["idle"] * done + ["queued"] * (2 - done))
            ran.append(label)
            await gates[label].wait_reached()
            gates[label].open()
        await results_turn(rig, parent)

        assert sorted(ran) == tasks
        for child in children.values():
            assert trail(rig.client, child)[0] == "status:queued"
        # Replaying every status change: never two children busy at once.
        busy: set[str] = set()
        most = 0
        for e in rig.client.events:
            if e["sessionId"] in ids and e["kind"] == Kind.STATUS:
                busy.discard(e["sessionId"])
                if e["status"] in ("starting", "running"):
                    busy.add(e["sessionId"])
                most = max(most, len(busy))
        assert most == 1


async def test_a_client_that_names_no_options_changes_none_of_the_servers(
    tmp_path: Path,
) -> None:
    """A terminal attaching to an editor's server (`coven-ls chat --tcp`) names no options: the
    server-wide limit stays the editor's, and it shares the store the editor's folder holds."""
    editor = settings(tmp_path, maxParallel=7, stateDir=str(tmp_path / "editor-state"))
    async with running_hub(editor) as rig:
        assert rig.hub.slots.limit == 7
        attached = ClientSettings.parse({"token": "t"}, str(tmp_path))
        store, warning = await rig.hub.open_store(attached)
        rig.hub.attach(RecordingClient(attached, store))
        assert rig.hub.slots.limit == 7
        assert store is rig.client.store and warning is None
        assert list(rig.hub.stores) == [store.path]
        # One that names it still sets it, as the last to connect.
        rig.hub.attach(RecordingClient(ClientSettings.parse({"maxParallel": 2}, "/"), None))
        assert rig.hub.slots.limit == 2


async def test_sessions_of_a_client_that_names_no_options_fork_as_the_editors_do(
    tmp_path: Path,
) -> None:
    """A terminal attached to an editor's server starts sessions with the editor's fork
    settings, not the server's defaults; a client that names options of its own keeps them."""
    limits = {"childTokens": 5000, "forkCostUsd": 2.5}
    editor = settings(
        tmp_path,
        forkMode="auto",
        mergeMode="review",
        forkIsolation="shared",
        worktreeSetup="make setup",
        maxChildren=3,
        forkLimits=protocol.ForkLimits(**limits),
        token="editor-token",
    )
    async with running_hub(editor) as rig:
        attached = RecordingClient(ClientSettings.parse({"token": "t"}, str(tmp_path)), None)
        rig.hub.attach(attached)
        own = RecordingClient(ClientSettings.parse({"forkMode": "off"}, str(tmp_path)), None)
        rig.hub.attach(own)
        params = protocol.StartSessionParams(prompt="hello")
        config = (await rig.hub.start_session(attached, params)).config
        assert (config.fork_mode, config.merge_mode, config.fork_isolation) == (
            "auto",
            "review",
            "shared",
        )
        assert (config.worktree_setup, config.max_children) == ("make setup", 3)
        assert config.fork_limits == protocol.ForkLimits(**limits)
        assert attached.settings.options.token == "t"  # its own, never the editor's
        assert attached.settings.given == frozenset({"token"})
        config = (await rig.hub.start_session(own, params)).config
        assert (config.fork_mode, config.merge_mode, config.fork_limits) == ("off", "auto", None)


async def test_a_later_turn_of_a_fork_child_gets_a_block_of_ports_of_its_own(
    tmp_path: Path,
) -> None:
    """A follow-up to a child after its fork ended: the block it had was freed then (another
    child may hold it now), so its agent gets a block of its own, given back with the agent."""
    async with running_hub(settings(tmp_path, forkMode="auto")) as rig:
        parent, children = await start_fork(rig)
        await results_turn(rig, parent)
        child = children["alpha"]
        freed = int(child.config.env["COVEN_PORT"])
        assert freed not in PORTS.reserved
        opening = Gate()
        rig.backend.open_plan.append(opening)
        after = child.last_seq
        child.send("one more thing")
        await opening.wait_reached(LIMIT)
        port = int(rig.backend.specs[-1].env["COVEN_PORT"])
        assert port in PORTS.reserved  # held by this child while its agent runs
        opening.open()
        await rig.client.wait_for(Kind.STATUS, child, after=after, status="idle")
        with anyio.fail_after(LIMIT):
            # Given back once its agent has stopped (nothing signals it: polled).
            while port in PORTS.reserved:  # noqa: ASYNC110
                await anyio.sleep(0.01)


async def test_max_parallel_is_one_limit_for_every_fork_of_the_server(tmp_path: Path) -> None:
    """Two parents fork at once: their children share the server's maxParallel slots, and the
    ones that wait are told their place in the line as it moves."""
    tasks = ["alpha", "beta"]
    gates = {label: Gate() for label in tasks}
    cfg = settings(tmp_path, forkMode="auto", maxParallel=2)
    async with running_hub(cfg, tasks=tasks, gates=gates) as rig:
        first, first_children = await start_fork(rig)
        second, second_children = await start_fork(rig)
        children = [*first_children.values(), *second_children.values()]
        ids = {c.id for c in children}
        # Both slots are taken by the first fork's children (gated while running); the second
        # fork's children wait, first in line and second in line.
        for child in first_children.values():
            await rig.client.wait_for(Kind.STATUS, child, status="running")
        waiting = list(second_children.values())
        await rig.client.wait_for(Kind.QUEUE_POSITION, waiting[0], position=1)
        await rig.client.wait_for(Kind.QUEUE_POSITION, waiting[1], position=2)
        assert [c.status for c in waiting] == ["queued", "queued"]
        assert [c.info().queuePosition for c in waiting] == [1, 2]
        positions = [
            e["position"] for e in rig.client.of(waiting[1]) if e["kind"] == "queuePosition"
        ]
        assert positions == [2]
        # One slot frees: the next in line starts, the last moves up to first place.
        gates["alpha"].open()
        await rig.client.wait_for(Kind.STATUS, waiting[0], status="running")
        await rig.client.wait_for(Kind.QUEUE_POSITION, waiting[1], position=1)
        assert waiting[1].status == "queued" and waiting[1].info().queuePosition == 1
        gates["beta"].open()
        await results_turn(rig, first)
        await results_turn(rig, second)

        busy: set[str] = set()
        most = 0
        for e in rig.client.events:
            if e["sessionId"] in ids and e["kind"] == Kind.STATUS:
                busy.discard(e["sessionId"])
                if e["status"] in ("starting", "running"):
                    busy.add(e["sessionId"])
                most = max(most, len(busy))
        assert most == 2
        assert all(c.info().queuePosition is None for c in children)


# --- restart -------------------------------------------------------------------------------------


@dataclass
class Stopped:
    settings: ClientSettings
    parent_id: str
    fork_id: str
    children: dict[str, str]  # label -> session id


async def stopped_mid_fork(tmp_path: Path, graceful: bool = False) -> Stopped:
    """A server that forked into alpha (finished) and beta (still waiting on the model) and was
    then killed (or, `graceful`, shut down with close_all as on an editor's shutdown)."""
    cfg = settings(tmp_path, forkMode="auto", stateDir=str(tmp_path / "state"))
    gates = {"beta": Gate()}
    async with running_hub(cfg, gates=gates) as rig:
        parent, children = await start_fork(rig)
        await rig.client.wait_for(Kind.STATUS, children["alpha"], status="idle")
        await gates["beta"].wait_reached()
        await rig.hub.flushed()
        if graceful:
            await rig.hub.close_all()
        await rig.kill()
    for store in rig.hub.stores.values():
        store.close()
    fork_id = next(e["forkId"] for e in rig.client.of(parent) if e["kind"] == Kind.FORK_STARTED)
    return Stopped(cfg, parent.id, fork_id, {k: c.id for k, c in children.items()})


async def test_restart_mid_fork_then_resume(tmp_path: Path) -> None:
    stopped = await stopped_mid_fork(tmp_path)
    alpha, beta = stopped.children["alpha"], stopped.children["beta"]
    async with running_hub(stopped.settings) as rig:
        hub = rig.hub
        parent = hub.get(stopped.parent_id)
        await hub.flushed()
        # The restart says that the fork was cut off, and which children did not finish.
        interrupted = [
            e for e in await parent.events_after(0) if e["kind"] == Kind.FORK_INTERRUPTED
        ]
        assert [(e["forkId"], e["unfinished"]) for e in interrupted] == [(stopped.fork_id, [beta])]
        assert [e["state"] for e in interrupted] == ["interrupted"]
        assert hub.forks.get(stopped.fork_id).state == "interrupted"
        assert last_fork(rig, parent) == (stopped.fork_id, "interrupted")
        statuses = [hub.get(sid).status for sid in (stopped.parent_id, alpha, beta)]
        assert statuses == ["interrupted", "idle", "interrupted"]

        hub.forks.resume(stopped.fork_id)
        resumed = await rig.client.wait_for(Kind.FORK_RESUMED, parent)
        finished = await rig.client.wait_for(Kind.FORK_FINISHED, parent)
        text = await results_turn(rig, parent)
        with pytest.raises(protocol.CovenError) as again:
            hub.forks.resume(stopped.fork_id)

    assert [(c["sessionId"], c["label"]) for c in resumed["children"]] == [(beta, "beta")]
    assert resumed["children"][0]["sandbox"]["fenced"] is False  # shared: nothing to fence
    assert (resumed["state"], finished["state"]) == ("running", "finished")
    assert [(r["label"], r["ok"]) for r in finished["results"]] == [("alpha", True), ("beta", True)]
    # Only beta ran again, as a fresh fork of the parent; alpha's answer came from the store.
    assert {label: started_from(a.spec) for label, a in child_agents(rig.backend).items()} == {
        "beta": PARENT_AGENT
    }
    assert task("alpha", answer("alpha")) in text and task("beta", answer("beta")) in text
    assert parent_heard(rig.backend) == [text]
    assert again.value.code == protocol.ErrorCode.InvalidState


async def test_restart_mid_fork_then_abandon(tmp_path: Path) -> None:
    stopped = await stopped_mid_fork(tmp_path)
    async with running_hub(stopped.settings) as rig:
        parent = rig.hub.get(stopped.parent_id)
        rig.hub.forks.abandon(stopped.fork_id)
        finished = await rig.client.wait_for(Kind.FORK_FINISHED, parent)
        text = await results_turn(rig, parent)

    assert [(r["label"], r["ok"], r.get("error")) for r in finished["results"]] == [
        ("alpha", True, None),
        ("beta", False, INTERRUPTED),
    ]
    assert task("alpha", answer("alpha")) in text
    assert f'<task label="beta" error="{INTERRUPTED}">' in text
    assert child_agents(rig.backend) == {}  # nothing ran again
    assert parent_heard(rig.backend) == [text]


# --- forking by hand -----------------------------------------------------------------------------


async def test_fork_by_hand_waits_for_the_turn_to_end(tmp_path: Path) -> None:
    gate = Gate()
    async with running_hub(settings(tmp_path, forkMode="approve")) as rig:
        steps = reply("thinking it over", agent_session_id=PARENT_AGENT)
        steps.insert(1, gate)  # the first turn waits here: the session is busy
        rig.backend.add(steps)
        session = await start(rig, "Look around")
        await gate.wait_reached()
        with pytest.raises(protocol.CovenError) as busy:
            await rig.hub.forks.fork_by_hand(session, ["alpha"], None)
        assert busy.value.code == protocol.ErrorCode.InvalidState == -32003
        assert busy.value.data == {"sessionId": session.id, "status": "running"}
        assert rig.hub.children_of(session) == []

        gate.open()
        await rig.client.wait_for(Kind.STATUS, session, status="idle")
        fork = await rig.hub.forks.fork_by_hand(session, ["alpha"], None)
        started = await rig.client.wait_for(Kind.FORK_STARTED, session)
        text = await results_turn(rig, session)

    assert (started["forkId"], started["source"], started["tasks"]) == (fork.id, "user", ["alpha"])
    assert started_from(child_agents(rig.backend)["alpha"].spec) == PARENT_AGENT
    assert parent_heard(rig.backend) == ["Look around", text]


async def test_graceful_stop_mid_fork_also_leaves_it_interrupted(tmp_path: Path) -> None:
    # What the stdio server does when its editor exits (and on `shutdown`): close_all, then stop.
    stopped = await stopped_mid_fork(tmp_path, graceful=True)
    async with running_hub(stopped.settings) as rig:
        parent = rig.hub.get(stopped.parent_id)
        await rig.hub.flushed()
        forks = [e["kind"] for e in await parent.events_after(0) if e["kind"].startswith("fork")]
        assert forks == [Kind.FORK_STARTED, Kind.FORK_INTERRUPTED]
        assert rig.hub.forks.get(stopped.fork_id).state == "interrupted"


@pytest.mark.usefixtures("no_user_git_config")
async def test_a_restart_removes_worktrees_a_killed_server_made_for_no_session(
    tmp_path: Path,
) -> None:
    """The server stores where a fork's worktrees go before git makes them; one that has no
    session after a restart (killed in between) is removed, with its branch."""
    repo = make_repo(tmp_path / "repo", {}, message="one")
    info = inspect(repo)
    assert isinstance(info, RepoInfo)
    orphan = tmp_path / "state" / "worktrees" / "f-1" / "1-lost"
    worktrees.create(info, info.head, orphan, "coven/f-1/1-lost")
    cfg = settings(tmp_path, stateDir=str(tmp_path / "state"))
    store, _ = Store.open(database_path(cfg.root, cfg.options.stateDir))
    row = {
        "fork_id": "f-1",
        "parent_id": "s-gone",
        "source": "user",
        "state": "running",
        "tasks_proposed": ["lost"],
        "children": [],
        "reintegrated": False,
        "isolation": {
            "mode": "worktree",
            "repository": str(repo),
            "base": info.head,
            "root": str(orphan.parent),
            "planned": [{"path": str(orphan), "branch": "coven/f-1/1-lost"}],
        },
    }
    store.write([], [], [row])
    store.close()

    async with running_hub(cfg):  # opening the store is where a restart recovers
        assert not orphan.exists() and not orphan.parent.exists()
    assert git(repo, "branch", "--list", "coven/*") == ""


async def test_a_fork_that_cannot_start_is_refused_and_the_model_told_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever breaks while a fork's children are being set up, the parent does not wait for
    children that will never exist."""

    async def broken(*_args: Any) -> Any:
        raise RuntimeError("the state folder is on fire")

    monkeypatch.setattr(isolation, "plan", broken)
    async with running_hub(settings(tmp_path, forkMode="auto")) as rig:
        parent = await start(rig)
        rejected = await rig.client.wait_for(Kind.FORK_REJECTED, parent)
        told = await rig.client.wait_for(Kind.PROMPT, parent, origin="forkRejected")
        await rig.client.wait_for(Kind.STATUS, parent, after=told["seq"], status="idle")

    assert "the state folder is on fire" in rejected["reason"]
    assert told["text"].startswith("Your fork could not start, so nothing was forked")
    assert rig.hub.children_of(parent) == []
    [error] = [e for e in rig.client.of(parent) if e["kind"] == Kind.ERROR]
    assert "could not start" in error["message"]


async def test_a_silent_child_is_stopped_and_its_fork_ends(tmp_path: Path) -> None:
    """A child whose CLI stops talking (frozen) must not hold its fork forever: after
    childIdleTimeoutSeconds its task fails, saying why, and the others' results go through."""
    frozen = Gate()  # never opened: the child's CLI says nothing more after starting
    cfg = settings(tmp_path, forkMode="auto", childIdleTimeoutSeconds=0.3)
    async with running_hub(cfg, gates={TASKS[1]: frozen}) as rig:
        parent, _children = await start_fork(rig)
        finished = await rig.client.wait_for(Kind.FORK_FINISHED, parent)
        text = await results_turn(rig, parent)

    ok, stuck = finished["results"][0], finished["results"][1]
    assert ok["ok"] is True
    assert stuck["ok"] is False and "childIdleTimeoutSeconds" in stuck["error"]
    assert "said nothing for 0.3 seconds" in text
    assert frozen.reached.is_set()
    # Silent that long, it would not heed a graceful close either: killed, then closed.
    [killed] = [agent for agent in rig.backend.closes if agent.killed]
    assert killed.closed and killed.killed_while_open


async def test_waiting_for_the_users_permission_answer_is_not_silence(tmp_path: Path) -> None:
    cfg = settings(tmp_path, forkMode="auto", childIdleTimeoutSeconds=0.2)
    async with running_hub(cfg) as rig:
        rig.client.permission_gate = answered = Gate()
        rig.backend.default_reply = asking_model(rig.backend.default_reply)
        quiet = QuietWhileAsking(times=4)  # both children: two idle limits each go by
        process_log = logging.getLogger("coven_ls.core.session.process")
        level = process_log.level
        process_log.setLevel(logging.DEBUG)
        process_log.addHandler(quiet)
        try:
            parent, _children = await start_fork(rig)
            await answered.wait_reached()
            with anyio.fail_after(LIMIT):
                await quiet.enough.wait()
        finally:
            process_log.removeHandler(quiet)
            process_log.setLevel(level)
        answered.open()
        finished = await rig.client.wait_for(Kind.FORK_FINISHED, parent)

    assert [r["ok"] for r in finished["results"]] == [True, True], finished["results"]


def asking_model(respond: Callable[[str], list[Step]]) -> Callable[[str], list[Step]]:
    """The same replies, each child first asking for a tool's permission."""

    def ask_first(text: str) -> list[Step]:
        steps = respond(text)
        if text.startswith("You were assigned"):
            steps.insert(1, Ask("Bash", {"command": "true"}))
        return steps

    return ask_first


class QuietWhileAsking(logging.Handler):
    """Counts the session's notes that an idle limit went by while the user was being asked."""

    def __init__(self, times: int) -> None:
        super().__init__(logging.DEBUG)
        self.enough = anyio.Event()
        self._left = times

    def emit(self, record: logging.LogRecord) -> None:
        if "quiet while the user answers" in record.getMessage():
            self._left -= 1
            if self._left <= 0:
                self.enough.set()


async def test_a_store_that_cannot_be_written_is_said_and_caught_up_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk: sessions keep running, the user is told nothing is being saved, and once
    the store can be written again everything that happened meanwhile is in it, gapless."""
    full = True
    write = Store.write

    def write_unless_full(self: Store, *args: Any, **kw: Any) -> None:
        if full:
            raise sqlite3.OperationalError("database or disk is full")
        write(self, *args, **kw)

    monkeypatch.setattr(Store, "write", write_unless_full)
    cfg = settings(tmp_path, stateDir=str(tmp_path / "state"))
    async with running_hub(cfg) as rig:
        session = await start(rig, "hello")
        await rig.client.wait_for(Kind.STATUS, session, status="idle")
        [warning] = rig.client.messages
        assert warning[1] is True and "cannot save its sessions" in warning[0]
        assert "database or disk is full" in warning[0] and "Free some disk space" in warning[0]

        full = False
        session.send("again")
        turn = await rig.client.wait_for(Kind.PROMPT, session, text="again")
        await rig.client.wait_for(Kind.STATUS, session, after=turn["seq"], status="idle")
        await rig.hub.flushed()
        assert rig.client.messages[1] == (
            f"coven-ls can save its sessions to {rig.client.store.path} again; nothing was lost.",
            False,
        )
        store = rig.client.store
        stored = await anyio.to_thread.run_sync(store.events_between, session.id, 0)
    assert [e["seq"] for e in stored] == list(range(1, session.last_seq + 1))


async def test_listed_tree_usage_adds_up_every_descendant() -> None:
    """list_sessions totals each tree in one pass (10,000 sessions must not take n² steps); its
    totals are what tree_usage says of each session, whatever order the sessions were made in."""

    @dataclass
    class Node:
        id: str
        parent_id: str | None
        usage: Usage

        def info(self, tree_usage: Usage) -> Usage:
            return tree_usage

    # root ← a ← a1, a2 (a2 listed before its parent), root ← b; lone; an orphan whose parent
    # is gone.
    shape = [
        ("a2", "a"), ("root", None), ("a", "root"), ("a1", "a"), ("b", "root"),
        ("lone", None), ("orphan", "deleted"),
    ]  # fmt: skip
    async with anyio.create_task_group() as tg:
        hub = Hub(tg, REGISTRY)
        for n, (sid, parent) in enumerate(shape):
            hub.sessions[sid] = Node(sid, parent, Usage(inputTokens=10**n))  # type: ignore[assignment]
        listed = dict(zip(hub.sessions, hub.list_sessions(), strict=True))
        assert listed == {sid: hub.tree_usage(s) for sid, s in hub.sessions.items()}
        assert listed["root"].inputTokens == 1 + 10 + 100 + 1000 + 10_000
        assert listed["a"].inputTokens == 1 + 100 + 1000
        assert listed["orphan"].inputTokens == 10**6
        tg.cancel_scope.cancel()


# --- history on demand ---------------------------------------------------------------------------


async def turn(rig: Rig, session: Session, text: str) -> None:
    """Send a message and wait until the turn it starts has ended."""
    mark = session.last_seq
    session.send(text)
    await rig.client.wait_for(Kind.STATUS, session, after=mark, status="idle")


async def assert_log(session: Session, log: list[dict[str, Any]]) -> None:
    """getEvents, from every point and in pages of every size, gives exactly `log`."""
    for limit in (None, 1, 2, 3, 5, 8):
        for k in range(len(log) + 2):
            wanted = log[k:] if limit is None else log[k : k + limit]
            assert await session.events_after(k, limit) == wanted, (k, limit)
        pages: list[dict[str, Any]] = []
        while limit is not None:
            page = await session.events_after(pages[-1]["seq"] if pages else 0, limit)
            pages += page
            if len(page) < limit:
                assert pages == log
                break


async def test_the_log_is_read_from_memory_and_store_alike_and_survives_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session_log, "RECENT_EVENTS", 3)
    cfg = settings(tmp_path, stateDir=str(tmp_path / "state"))
    async with running_hub(cfg) as rig:
        session = await start(rig, "one")
        await rig.client.wait_for(Kind.STATUS, session, status="idle")
        for n in range(4):
            await turn(rig, session, f"turn {n}")
        await rig.hub.flushed()
        seen = rig.client.of(session)
        assert len(seen) > 20 and len(session.recent) < 6  # the rest is only in the store
        await assert_log(session, seen)
        # An event the store does not have yet is not given out.
        pending = session.emit(events.Error(message="not stored yet"))
        assert await session.events_after(pending["seq"] - 1) == []
        await rig.hub.flushed()
        assert await session.events_after(pending["seq"] - 1) == [pending]
        seen.append(pending)

    async with running_hub(cfg) as rig:
        restored = rig.hub.get(session.id)
        assert restored.recent == [] and restored.last_seq == seen[-1]["seq"]
        await assert_log(restored, seen)
        await turn(rig, restored, "after the restart")
        await rig.hub.flushed()
        new = rig.client.of(restored)
        assert [e["seq"] for e in new] == list(range(len(seen) + 1, len(seen) + len(new) + 1))
        await assert_log(restored, seen + new)  # from the store, then from memory

    async with running_hub(cfg) as rig:
        assert await rig.hub.get(session.id).events_after(len(seen) - 1) == seen[-1:] + new


@pytest.mark.parametrize("stored", [True, False])
async def test_fork_at_a_message_no_longer_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stored: bool
) -> None:
    monkeypatch.setattr(session_log, "RECENT_EVENTS", 2)
    cfg = settings(tmp_path, **({"stateDir": str(tmp_path / "state")} if stored else {}))
    async with running_hub(cfg) as rig:
        session = await start(rig, "Look around")
        await rig.client.wait_for(Kind.STATUS, session, status="idle")
        early = await rig.client.wait_for(Kind.TEXT, session)
        for n in range(3):
            await turn(rig, session, f"more {n}")
        await rig.hub.flushed()
        assert (early in session.recent) is not stored

        with pytest.raises(protocol.CovenError) as unknown:
            await rig.hub.forks.fork_by_hand(session, ["alpha"], "msg-nowhere")
        fork = await rig.hub.forks.fork_by_hand(session, ["alpha"], early["messageId"])
        started = await rig.client.wait_for(Kind.FORK_STARTED, session)
        await results_turn(rig, session)
    assert unknown.value.code == -32602 and "msg-nowhere" in unknown.value.message
    assert started["forkId"] == fork.id and started["atMessageId"] == early["messageId"]
    assert copied_up_to(child_agents(rig.backend)["alpha"].spec) == early["messageId"]
    if not stored:
        return

    async with running_hub(cfg) as rig:
        restored = rig.hub.get(session.id)
        assert restored.recent == []
        with pytest.raises(protocol.CovenError) as unknown:
            await rig.hub.forks.fork_by_hand(restored, ["beta"], "msg-nowhere")
        await rig.hub.forks.fork_by_hand(restored, ["beta"], early["messageId"])
        await results_turn(rig, restored)
    assert unknown.value.code == -32602
    assert copied_up_to(child_agents(rig.backend)["beta"].spec) == early["messageId"]


async def test_a_restart_gives_a_finished_forks_results_only_if_the_parent_never_got_them(
    tmp_path: Path,
) -> None:
    cfg = settings(tmp_path, forkMode="auto", stateDir=str(tmp_path / "state"))
    async with running_hub(cfg) as rig:
        parent, _children = await start_fork(rig)
        await results_turn(rig, parent)
        await rig.hub.flushed()
    given = await rig.client.wait_for(Kind.PROMPT, parent, origin="forkResults")
    last = rig.client.of(parent)[-1]["seq"]

    async with running_hub(cfg) as rig:
        await rig.hub.flushed()
        assert rig.client.of(parent.id) == [] and rig.hub.get(parent.id).last_seq == last
    assert parent_heard(rig.backend) == []

    # As if the server had been killed between the fork's end and the results' turn.
    db = sqlite3.connect(database_path(cfg.root, cfg.options.stateDir))
    with db:
        db.execute(
            "DELETE FROM events WHERE session_id = ? AND seq >= ?", (parent.id, given["seq"])
        )
        db.execute("UPDATE sessions SET status = 'forking' WHERE session_id = ?", (parent.id,))
    db.close()
    async with running_hub(cfg) as rig:
        again = await rig.client.wait_for(Kind.PROMPT, parent.id, origin="forkResults")
        await rig.client.wait_for(Kind.STATUS, parent.id, after=again["seq"], status="idle")
        after = rig.client.of(parent.id)
    assert after[0]["seq"] == given["seq"]  # the log goes on where the store's ends
    assert again["text"] == given["text"] and parent_heard(rig.backend) == [given["text"]]


async def test_purge_gives_the_agent_its_conversations_forks_first(tmp_path: Path) -> None:
    """`deleteSession` with `purge` hands the backend every conversation of the subtree, each
    before the one it was forked from (codex refuses to delete a thread a fork references)."""
    async with running_hub(settings(tmp_path, forkMode="auto")) as rig:
        parent = await start(rig)
        started = await rig.client.wait_for(Kind.FORK_STARTED, parent)
        await rig.client.wait_for(Kind.FORK_FINISHED, parent)
        await results_turn(rig, parent)
        await parent.wait_settled()
        ids, _kept = await rig.hub.delete(parent, purge=True)
    assert len(ids) == 1 + len(started["children"])
    purged = [c.agent_session_id for c in rig.backend.purged]
    assert sorted(purged[:2]) == ["agent-alpha", "agent-beta"] and purged[2:] == [PARENT_AGENT]
    assert {c.cwd for c in rig.backend.purged} == {str(tmp_path)}


async def test_delete_without_purge_leaves_the_agents_conversations(tmp_path: Path) -> None:
    async with running_hub(settings(tmp_path)) as rig:
        session = await start(rig, "hello")
        await rig.client.wait_for(Kind.TURN_RESULT, session)
        await session.wait_settled()
        await rig.hub.delete(session, purge=False)
    assert rig.backend.purged == []


async def test_a_message_the_agent_cannot_copy_up_to_is_invalid_params(tmp_path: Path) -> None:
    """An agent that forks only at some messages (Codex: a turn's last) says why at coven/fork
    and coven/branch; no fork or branch starts."""
    async with running_hub(settings(tmp_path)) as rig:
        session = await start(rig, "hello")
        await rig.client.wait_for(Kind.TURN_RESULT, session)
        await session.wait_settled()
        message = next(e["messageId"] for e in rig.client.of(session) if e["kind"] == Kind.TEXT)

        async def refuse(conversation: str, message_id: str) -> str | None:
            return f"{conversation} cannot be copied up to {message_id}"

        rig.backend.fork_point_problem = refuse  # type: ignore[method-assign]
        with pytest.raises(protocol.CovenError) as forked:
            await rig.hub.forks.fork_by_hand(session, ["alpha"], message)
        with pytest.raises(protocol.CovenError) as branched:
            await rig.hub.branch(rig.client, session, message, "go on")
        for refused in (forked.value, branched.value):
            assert refused.code == protocol.ErrorCode.InvalidParams
            assert refused.message.endswith(f"{PARENT_AGENT} cannot be copied up to {message}")
            assert refused.data == {"field": "atMessageId"}
        assert rig.hub.forks.forks == {} and len(rig.hub.sessions) == 1


# --- what a child inherits, and children of another agent ----------------------------------------


def first_messages(backend: FakeBackend) -> dict[str, Any]:
    """Each child's agent by its label (any context), from its first message's assignment."""
    found = {}
    for agent in backend.agents:
        assigned = agent.sent and re.search(r"^You were assigned '(.*)'$", agent.sent[0], re.M)
        if assigned:
            found[assigned.group(1)] = agent
    return found


async def idle_parent(rig: Rig) -> Session:
    session = await start(rig, "Look around")
    await rig.client.wait_for(Kind.STATUS, session, status="idle")
    rig.backend.conversations[PARENT_AGENT] = [
        Entry("user", "Look around"),
        Entry("thinking", "PRIVATE-THOUGHT"),
        Entry("assistant", "echo: Look around"),
    ]
    return session


async def test_a_fresh_child_starts_a_new_conversation_with_only_its_brief(
    tmp_path: Path,
) -> None:
    async with running_hub(settings(tmp_path)) as rig:
        session = await idle_parent(rig)
        await rig.hub.forks.fork_by_hand(session, ["alpha"], None, ForkChoices(context="fresh"))
        started = await rig.client.wait_for(Kind.FORK_STARTED, session)
        await results_turn(rig, session)
    child = first_messages(rig.backend)["alpha"]
    assert started_from(child.spec) is None and not copies(child.spec)
    assert child.sent[0].startswith("You were assigned 'alpha'\n\nYou start afresh")
    assert "Look around" not in child.sent[0]
    assert started["context"] == "fresh" and "agent" not in started


async def test_a_transcript_child_gets_the_conversation_written_out(tmp_path: Path) -> None:
    async with running_hub(settings(tmp_path)) as rig:
        session = await idle_parent(rig)
        await rig.hub.forks.fork_by_hand(
            session, ["alpha"], None, ForkChoices(context="transcript")
        )
        started = await rig.client.wait_for(Kind.FORK_STARTED, session)
        text = await results_turn(rig, session)
    child = first_messages(rig.backend)["alpha"]
    first = child.sent[0]
    assert started_from(child.spec) is None and not copies(child.spec)
    assert first.startswith("You were forked from another session")
    assert "<user>\nLook around\n</user>" in first and "PRIVATE-THOUGHT" not in first
    assert first.endswith("You were assigned 'alpha'")
    assert started["context"] == "transcript"
    assert answer("alpha") in text


async def test_children_of_another_agent_default_to_a_transcript(tmp_path: Path) -> None:
    async with running_hub(settings(tmp_path, stateDir=str(tmp_path / "state"))) as rig:
        session = await idle_parent(rig)
        with pytest.raises(protocol.CovenError) as refused:
            await rig.hub.forks.fork_by_hand(
                session, ["alpha"], None, ForkChoices(context="inherit", agent="codex")
            )
        fork = await rig.hub.forks.fork_by_hand(
            session, ["alpha"], None, ForkChoices(agent="codex")
        )
        started = await rig.client.wait_for(Kind.FORK_STARTED, session)
        await results_turn(rig, session)
        [child] = rig.hub.children_of(session)
        assert child.config.agent == "codex" and child.info().agent == "codex"
    assert refused.value.code == -32602 and "'transcript'" in refused.value.message
    assert (started["agent"], started["context"]) == ("codex", "transcript")
    assert "<conversation>" in first_messages(rig.backend)["alpha"].sent[0]
    async with running_hub(settings(tmp_path, stateDir=str(tmp_path / "state"))) as rig:
        restored = rig.hub.forks.forks[fork.id]
        assert restored.choices == ForkChoices(agent="codex")
        assert (restored.settings.agent, restored.settings.context) == ("codex", "transcript")


async def test_a_model_fork_approved_with_another_agent_and_context(tmp_path: Path) -> None:
    async with running_hub(settings(tmp_path, forkMode="approve")) as rig:
        parent = await start(rig)
        proposed = await rig.client.wait_for(Kind.FORK_PROPOSED, parent)
        rig.backend.conversations[PARENT_AGENT] = [Entry("user", PLAN)]
        with pytest.raises(protocol.CovenError) as refused:
            rig.hub.forks.decide(
                proposed["forkId"], True, None, None, ForkChoices(context="inherit", agent="codex")
            )
        assert refused.value.code == -32602
        rig.hub.forks.decide(
            proposed["forkId"], True, None, None, ForkChoices(context="fresh", agent="codex")
        )
        started = await rig.client.wait_for(Kind.FORK_STARTED, parent)
        await results_turn(rig, parent)
    assert (started["agent"], started["context"]) == ("codex", "fresh")
    assert all(PLAN not in a.sent[0] for a in first_messages(rig.backend).values())


async def test_a_transcript_fork_resumed_after_a_restart_writes_the_conversation_out_again(
    tmp_path: Path,
) -> None:
    cfg = settings(tmp_path, stateDir=str(tmp_path / "state"))
    gates = {"beta": Gate()}
    async with running_hub(cfg, gates=gates) as rig:
        session = await idle_parent(rig)
        fork = await rig.hub.forks.fork_by_hand(
            session, ["alpha", "beta"], None, ForkChoices(context="transcript")
        )
        await gates["beta"].wait_reached()
        await rig.hub.flushed()
        await rig.kill()
    for store in rig.hub.stores.values():
        store.close()

    async with running_hub(cfg) as rig:
        rig.backend.conversations[PARENT_AGENT] = [Entry("user", "Look around, again")]
        parent = rig.hub.get(session.id)
        assert rig.hub.forks.get(fork.id).settings.context == "transcript"
        rig.hub.forks.resume(fork.id)
        await results_turn(rig, parent)
    beta = first_messages(rig.backend)["beta"]
    assert started_from(beta.spec) is None and not copies(beta.spec)
    assert "<user>\nLook around, again\n</user>" in beta.sent[0]


async def test_a_forks_own_setup_and_modes_survive_a_restart(tmp_path: Path) -> None:
    """What coven/decideFork (or coven/fork) asked for one fork is stored with it: a resumed fork
    runs its children with it, not with the session's settings."""
    cfg = settings(tmp_path, forkMode="approve", stateDir=str(tmp_path / "state"))
    gates = {"beta": Gate()}
    async with running_hub(cfg, gates=gates) as rig:
        parent = await start(rig)
        proposed = await rig.client.wait_for(Kind.FORK_PROPOSED, parent)
        rig.hub.forks.decide(
            proposed["forkId"],
            True,
            None,
            None,
            ForkChoices(isolation="shared", mergeMode="review", worktreeSetup="echo from-the-fork"),
        )
        await gates["beta"].wait_reached()
        await rig.hub.flushed()
        await rig.kill()
    for store in rig.hub.stores.values():
        store.close()
    async with running_hub(cfg) as rig:
        await rig.hub.flushed()
        fork = rig.hub.forks.get(proposed["forkId"])
        assert fork.state == "interrupted"
        assert fork.choices == ForkChoices(
            isolation="shared", mergeMode="review", worktreeSetup="echo from-the-fork"
        )
        assert (
            fork.settings.isolation,
            fork.settings.merge_mode,
            fork.settings.worktree_setup,
        ) == (
            "shared",
            "review",
            "echo from-the-fork",
        )


async def test_a_transcript_fork_whose_conversation_is_gone_says_so_in_the_results(
    tmp_path: Path,
) -> None:
    """Resumed after a restart, a transcript fork reads its parent's conversation again; when it
    cannot, the children that had not finished fail with that reason (not as if the user had
    cancelled them), and the parent gets the finished ones' answers all the same."""
    cfg = settings(tmp_path, stateDir=str(tmp_path / "state"))
    gates = {"beta": Gate()}
    async with running_hub(cfg, gates=gates) as rig:
        session = await idle_parent(rig)
        fork = await rig.hub.forks.fork_by_hand(
            session, ["alpha", "beta"], None, ForkChoices(context="transcript")
        )
        started = await rig.client.wait_for(Kind.FORK_STARTED, session)
        alpha = started["children"][0]["sessionId"]
        await rig.client.wait_for(Kind.STATUS, alpha, status="idle")
        await gates["beta"].wait_reached()
        await rig.hub.flushed()
        await rig.kill()
    for store in rig.hub.stores.values():
        store.close()

    async with running_hub(cfg) as rig:  # its fake agent no longer has the conversation
        parent = rig.hub.get(session.id)
        rig.hub.forks.resume(fork.id)
        finished = await rig.client.wait_for(Kind.FORK_FINISHED, parent)
        text = await results_turn(rig, parent)
        [beta] = [c for c in rig.hub.children_of(parent) if c.label == "beta"]
        assert beta.status == "failed"
    reason = f"could not resume: no conversation {PARENT_AGENT}"
    assert [(r["label"], r["ok"], r.get("error")) for r in finished["results"]] == [
        ("alpha", True, None),
        ("beta", False, reason),
    ]
    assert f'<task label="beta" error="{reason}">' in text
    assert "cancelled" not in text
    assert "beta" not in first_messages(rig.backend)  # it never started again
    told = [e["message"] for e in rig.client.of(parent) if e["kind"] == Kind.ERROR]
    assert told == [f"The fork could not resume: no conversation {PARENT_AGENT}"]


@pytest.mark.usefixtures("no_user_git_config")
async def test_a_child_whose_worktree_cannot_be_made_again_says_so_in_the_results(
    tmp_path: Path,
) -> None:
    """After a restart, an unfinished child's worktree deleted by hand, with its branch, cannot be
    made again: that child fails with git's reason, the others run again as usual."""
    repo = make_repo(tmp_path / "repo", {}, message="one")
    cfg = ClientSettings(
        str(repo), protocol.InitializationOptions(forkMode="auto", stateDir=str(tmp_path / "st"))
    )
    gates = {"alpha": Gate(), "beta": Gate()}
    async with running_hub(cfg, gates=gates) as rig:
        parent, children = await start_fork(rig)
        fork_id = (await rig.client.wait_for(Kind.FORK_STARTED, parent))["forkId"]
        await gates["alpha"].wait_reached()
        await gates["beta"].wait_reached()
        await rig.hub.flushed()
        await rig.kill()
    for store in rig.hub.stores.values():
        store.close()
    beta_tree = children["beta"].worktree
    assert beta_tree is not None and Path(beta_tree.path).is_dir()
    git(repo, "worktree", "remove", "--force", beta_tree.path)
    git(repo, "branch", "-D", beta_tree.branch)

    async with running_hub(cfg) as rig:
        restored = rig.hub.get(parent.id)
        rig.hub.forks.resume(fork_id)
        finished = await rig.client.wait_for(Kind.FORK_FINISHED, restored)
        text = await results_turn(rig, restored)
        beta = rig.hub.get(children["beta"].id)
        said = [e["message"] for e in rig.client.of(beta) if e["kind"] == Kind.ERROR]
    [alpha_result, beta_result] = finished["results"]
    assert (alpha_result["label"], alpha_result["ok"]) == ("alpha", True)
    assert (beta_result["label"], beta_result["ok"]) == ("beta", False)
    assert beta_result["error"].startswith("could not resume: ")
    assert f"again on the branch {beta_tree.branch} failed" in beta_result["error"]
    assert "cancelled by the user" not in text and 'label="beta" error="could not resume' in text
    assert said and said[0].startswith("The child could not resume: ")
    assert set(first_messages(rig.backend)) == {"alpha"}  # beta never started again
