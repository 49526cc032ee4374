"""Unit tests for core.session.Session against the in-process fakes (no CLI, no subprocess)."""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from claude_agent_sdk import (
    StreamEvent,
)

from coven_ls import protocol
from coven_ls.core.agent import AgentSpec, AgentStartError, Copy, TaskNotRunning
from coven_ls.core.agent import events as ag
from coven_ls.core.session import Session, SessionConfig
from coven_ls.core.session import runner as session_runner
from coven_ls.protocol import Kind, events
from coven_ls.protocol.types import ContextUsage, Usage

from ..fakes import (
    Ask,
    Die,
    Fail,
    FakeBackend,
    Gate,
    RecordingSink,
    assistant,
    copies,
    init,
    reply,
    result,
    started_from,
    task_notification,
    task_progress,
    task_started,
    task_updated,
    thinking,
    tool_result,
    tool_use,
)

LIMIT = 3.0  # seconds any single wait in these tests may take
USAGE = {"total_tokens": 900, "tool_uses": 3, "duration_ms": 1200}  # a task's figures

_sinks: weakref.WeakKeyDictionary[Session, RecordingSink] = weakref.WeakKeyDictionary()


def new_session(backend: FakeBackend, sink: RecordingSink | None = None, **kw: Any) -> Session:
    sink = sink if sink is not None else RecordingSink()
    config = kw.pop("config", None) or SessionConfig(cwd="/work/project", model="sonnet")
    session = Session(
        "s-test", config, backend, sink, title="test", created_at=protocol.now_iso(), **kw
    )
    _sinks[session] = sink
    return session


@asynccontextmanager
async def running(
    backend: FakeBackend, sink: RecordingSink | None = None, **kw: Any
) -> AsyncIterator[Session]:
    """A session whose runner runs in a task group, set up the way `Hub._new_session` does it;
    closed (and checked to be closed) on the way out."""
    async with anyio.create_task_group() as tg:
        session = new_session(backend, sink, **kw)
        session.emit(events.StatusChanged(status=session.status))
        tg.start_soon(session.run, name="session runner")
        try:
            yield session
        except BaseException:
            tg.cancel_scope.cancel()  # do not let a failed test hang on close()
            raise
        with anyio.fail_after(LIMIT):
            await session.close()
        assert session.status == "closed"


def sink_of(session: Session) -> RecordingSink:
    return _sinks[session]


async def turn_done(session: Session, after: int = 0) -> dict[str, Any]:
    """Wait for the next turnResult after `after`, then for the status that follows it."""
    sink = sink_of(session)
    event = await sink.wait_for(Kind.TURN_RESULT, after=after, limit=LIMIT)
    await sink.wait_for(Kind.STATUS, after=event["seq"], limit=LIMIT)
    return event


def assert_gapless(session: Session, sink: RecordingSink | None = None) -> None:
    sink = sink or sink_of(session)
    assert sink.events == session.recent
    assert [e["seq"] for e in session.recent] == list(range(1, len(session.recent) + 1))
    assert {e["sessionId"] for e in session.recent} == {"s-test"}


def assert_closed_where_opened(backend: FakeBackend) -> None:
    assert backend.agents, "no agent was opened"
    for agent in backend.agents:
        assert agent.closed, "an agent was left open"
        assert agent.closed_in_task == agent.opened_in_task


# --- events and statuses -------------------------------------------------------------------------


async def test_one_turn_events_have_gapless_seq_and_statuses() -> None:
    backend = FakeBackend(
        [
            init("agent-1"),
            assistant(thinking("hmm"), "Hello", tool_use("toolu_1", "Bash", {"command": "ls"})),
            tool_result("toolu_1", "a.txt"),
            assistant("Done."),
            result("Done.", agent_session_id="agent-1"),
        ]
    )
    async with running(backend) as session:
        assert session.send("hi") == 0
        turn = await turn_done(session)
        sink = sink_of(session)
        assert sink.kinds() == [
            Kind.STATUS,
            Kind.PROMPT,
            Kind.STATUS,
            Kind.AGENT,
            Kind.THINKING,
            Kind.TEXT,
            Kind.TOOL_USE,
            Kind.TOOL_RESULT,
            Kind.TEXT,
            Kind.TURN_RESULT,
            Kind.STATUS,
        ]
        assert sink.statuses() == ["starting", "running", "idle"]
        assert turn["text"] == "Done." and turn["isError"] is False
        assert "cancelled" not in turn
        assert session.status == "idle"
        assert session.agent_session_id == "agent-1"
        assert_gapless(session)
        assert backend.agent.sent == ["hi"]
        assert backend.specs[0].cwd == "/work/project"
        assert backend.specs[0].model == "sonnet"
        assert started_from(backend.specs[0]) is None
        assert session.info().status == "idle"
        assert session.info().agentSessionId == "agent-1"
    assert_gapless(session, sink)
    assert sink.statuses()[-1] == "closed"


async def test_prompt_event_has_text_and_origin() -> None:
    async with running(FakeBackend()) as session:
        session.send("do it")
        await turn_done(session)
        session.send("fork results here", origin="forkResults")
        await turn_done(session, after=session.recent[-1]["seq"])
        prompts = sink_of(session).of(Kind.PROMPT)
        assert [(p["text"], p["origin"]) for p in prompts] == [
            ("do it", "user"),
            ("fork results here", "forkResults"),
        ]


async def test_second_turn_reuses_the_agent() -> None:
    backend = FakeBackend()
    async with running(backend) as session:
        session.send("one")
        await turn_done(session)
        mark = session.recent[-1]["seq"]
        session.send("two")
        await turn_done(session, after=mark)
        assert len(backend.agents) == 1
        assert backend.agent.sent == ["one", "two"]
        statuses = [
            e["status"] for e in await session.events_after(mark) if e["kind"] == Kind.STATUS
        ]
        assert statuses == ["running", "idle"]
    assert_closed_where_opened(backend)


async def test_agent_event_is_published_when_the_agent_changes() -> None:
    backend = FakeBackend(
        reply("a", agent_session_id="agent-1"),
        reply("b", agent_session_id="agent-1"),
        reply("c", agent_session_id="agent-2"),
    )
    async with running(backend) as session:
        mark = 0
        for text in ("a", "b", "c"):
            session.send(text)
            mark = (await turn_done(session, after=mark))["seq"]
        agents = sink_of(session).of(Kind.AGENT)
        assert [a["agentSessionId"] for a in agents] == ["agent-1", "agent-2"]
        assert agents[0]["model"] == "claude-test-1"
        assert agents[0]["claudeCodeVersion"] == "9.9.9"
        assert session.agent_session_id == "agent-2"
        assert_gapless(session)


async def test_events_after() -> None:
    async with running(FakeBackend()) as session:
        session.send("hi")
        await turn_done(session)
        events = session.recent
        assert await session.events_after(0) == events
        assert await session.events_after(-3) == events
        assert await session.events_after(3) == events[3:]
        assert (await session.events_after(3))[0]["seq"] == 4
        assert await session.events_after(len(events)) == []
        assert await session.events_after(len(events) + 10) == []


# --- queueing ------------------------------------------------------------------------------------


async def test_queued_message_runs_after_the_current_turn() -> None:
    gate = Gate()
    backend = FakeBackend([init(), gate, assistant("first answer"), result("first")])
    async with running(backend) as session:
        assert session.send("first") == 0
        await gate.wait_reached()
        assert session.busy
        assert session.send("second") == 1
        assert session.send("third") == 2
        assert session.info().queued == 2
        assert backend.sent == ["first"]
        gate.open()
        first = await turn_done(session)
        second = await turn_done(session, after=first["seq"])
        third = await turn_done(session, after=second["seq"])
        assert backend.sent == ["first", "second", "third"]
        assert [first["text"], second["text"], third["text"]] == [
            "first",
            "echo: second",
            "echo: third",
        ]
        # each prompt comes after the previous turn's result
        prompts = sink_of(session).of(Kind.PROMPT)
        assert prompts[1]["seq"] > first["seq"] and prompts[2]["seq"] > second["seq"]
        assert session.info().queued == 0
        assert_gapless(session)


async def test_hold_keeps_queued_turns_until_release() -> None:
    async with running(FakeBackend()) as session:
        session.send("one")
        await turn_done(session)
        session.hold()
        assert session.send("held") == 1
        await anyio.wait_all_tasks_blocked()  # the runner waits: nothing may start while held
        assert not sink_of(session).of(Kind.PROMPT, text="held")
        assert session.info().queued == 1
        session.release()
        prompt = await sink_of(session).wait_for(Kind.PROMPT, text="held", limit=LIMIT)
        await turn_done(session, after=prompt["seq"])


# --- cancel --------------------------------------------------------------------------------------


async def test_cancel_interrupts_the_turn_and_drops_the_queue() -> None:
    gate = Gate()
    backend = FakeBackend([init(), assistant("working on it"), gate, result("never")])
    async with running(backend) as session:
        session.send("long task")
        await gate.wait_reached()
        session.send("queued 1")
        session.send("queued 2")
        assert await session.cancel() == 2
        turn = await turn_done(session)
        assert turn["cancelled"] is True
        # The interrupt's own error result reads as a cancelled turn: no error, no CLI text.
        assert turn["isError"] is False and turn["text"] == ""
        assert turn["subtype"] == "error_during_execution"
        assert session.status == "idle"
        assert backend.agent.interrupts == 1
        assert backend.sent == ["long task"]
        assert [p["text"] for p in sink_of(session).of(Kind.PROMPT)] == ["long task"]
        assert session.info().queued == 0
        # the agent answered the interrupt, so it is kept and the next message goes to it
        mark = session.recent[-1]["seq"]
        assert session.send("next") == 0
        nxt = await turn_done(session, after=mark)
        assert "cancelled" not in nxt
        assert len(backend.agents) == 1
        assert_gapless(session)
    assert_closed_where_opened(backend)


async def test_cancel_when_idle_does_nothing() -> None:
    backend = FakeBackend()
    async with running(backend) as session:
        session.send("hi")
        await turn_done(session)
        count = len(session.recent)
        assert await session.cancel() == 0
        assert len(session.recent) == count
        assert backend.agent.interrupts == 0


async def test_cancel_while_the_agent_is_starting() -> None:
    opening = Gate()
    backend = FakeBackend()
    backend.open_plan.append(opening)
    async with running(backend) as session:
        session.send("first")
        await opening.wait_reached()
        assert session.status == "starting"
        assert session.send("queued") == 1
        assert await session.cancel() == 1
        turn = await turn_done(session)
        assert turn["cancelled"] is True
        assert turn["subtype"] == "cancelled"
        assert turn["costUsd"] == 0.0
        assert session.status == "idle"
        assert backend.agents == []  # the open was abandoned
        assert backend.sent == []
        # the next message starts an agent afresh
        mark = session.recent[-1]["seq"]
        session.send("again")
        await turn_done(session, after=mark)
        assert backend.opens_started == 2
        assert backend.sent == ["again"]
        assert sink_of(session).statuses() == ["starting", "idle", "starting", "running", "idle"]
        assert_gapless(session)
    assert_closed_where_opened(backend)


async def test_cancel_stops_the_agent_when_the_interrupt_is_not_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(session_runner, "INTERRUPT_GRACE_SECONDS", 0.1)
    gate = Gate()
    backend = FakeBackend([init("agent-9"), gate, result("never")])
    backend.ignore_interrupt = True
    async with running(backend) as session:
        session.send("stuck")
        await gate.wait_reached()
        await session.cancel()
        turn = await turn_done(session)
        assert turn["cancelled"] is True and turn["subtype"] == "cancelled"
        assert session.status == "idle"
        assert backend.agents[0].closed  # the process was stopped
        mark = session.recent[-1]["seq"]
        session.send("after")
        await turn_done(session, after=mark)
        assert started_from(backend.specs[1]) == "agent-9"
    assert_closed_where_opened(backend)


async def test_cancel_when_the_interrupt_fails_stops_the_agent() -> None:
    gate = Gate()
    backend = FakeBackend([init("agent-3"), gate, result("never")])
    backend.interrupt_error = RuntimeError("process gone")
    async with running(backend) as session:
        session.send("x")
        await gate.wait_reached()
        assert await session.cancel() == 0
        turn = await turn_done(session)
        assert turn["cancelled"] is True
        assert session.status == "idle"
        assert backend.agents[0].closed
    assert_closed_where_opened(backend)


# --- failures ------------------------------------------------------------------------------------


async def test_stream_ending_without_result_fails_and_next_turn_resumes() -> None:
    backend = FakeBackend([init("agent-abc"), assistant("partial"), Die()])
    backend.stderr = "Error: out of memory"
    async with running(backend) as session:
        session.send("first")
        error = await sink_of(session).wait_for(Kind.ERROR, limit=LIMIT)
        await sink_of(session).wait_for(Kind.STATUS, status="failed", limit=LIMIT)
        assert error["message"].startswith("The agent process ended in the middle of a turn.")
        assert "Error: out of memory" in error["message"]
        assert session.status == "failed"
        assert not sink_of(session).of(Kind.TURN_RESULT)
        assert backend.agents[0].closed
        assert session.agent_session_id == "agent-abc"

        mark = session.recent[-1]["seq"]
        assert session.send("second") == 0
        await turn_done(session, after=mark)
        assert len(backend.agents) == 2
        assert started_from(backend.specs[1]) == "agent-abc"
        assert backend.specs[1].cwd == "/work/project"
        assert sink_of(session).statuses() == [
            "starting",
            "running",
            "failed",
            "starting",
            "running",
            "idle",
        ]
        assert_gapless(session)
    assert_closed_where_opened(backend)


async def test_messages_raising_fails_the_turn() -> None:
    backend = FakeBackend([init("agent-r"), Fail(ConnectionError("pipe broken"))])
    async with running(backend) as session:
        session.send("x")
        error = await sink_of(session).wait_for(Kind.ERROR, limit=LIMIT)
        assert error["message"] == "The agent process failed: pipe broken"
        await sink_of(session).wait_for(Kind.STATUS, status="failed", limit=LIMIT)
        assert backend.agents[0].closed


async def test_open_raising_coven_error() -> None:
    backend = FakeBackend()
    backend.open_plan.append(
        protocol.CovenError(
            protocol.ErrorCode.ClaudeUnavailable, "No Claude Code CLI found. Install it."
        )
    )
    async with running(backend) as session:
        session.send("hi")
        error = await sink_of(session).wait_for(Kind.ERROR, limit=LIMIT)
        assert error["message"] == "No Claude Code CLI found. Install it."
        await sink_of(session).wait_for(Kind.STATUS, status="failed", limit=LIMIT)
        assert session.status == "failed"
        # a later message tries again
        mark = session.recent[-1]["seq"]
        session.send("again")
        await turn_done(session, after=mark)
        assert backend.opens_started == 2


async def test_open_raising_another_error() -> None:
    backend = FakeBackend()
    backend.open_plan.append(OSError("exec format error"))
    async with running(backend) as session:
        session.send("hi")
        error = await sink_of(session).wait_for(Kind.ERROR, limit=LIMIT)
        assert error["message"] == "The agent process failed: exec format error"


async def test_first_start_spec_is_used_until_the_agent_session_is_known() -> None:
    first = AgentSpec(cwd="/work/project", start=Copy("parent-agent"))
    backend = FakeBackend([init("child-agent"), Die()])
    async with running(backend, start=first) as session:
        session.send("forked")
        await sink_of(session).wait_for(Kind.STATUS, status="failed", limit=LIMIT)
        session.send("next")
        await turn_done(session)
        # The first start is the one given, named after the session (a new conversation);
        # the next resumes the conversation the first made, which keeps its name.
        assert backend.specs[0] == dataclasses.replace(first, title=session.title)
        assert session.title
        assert started_from(backend.specs[1]) == "child-agent"
        assert copies(backend.specs[1]) is False
        assert backend.specs[1].title is None


# --- close ---------------------------------------------------------------------------------------


async def test_close_ends_the_runner_and_closes_the_agent_in_its_task() -> None:
    backend = FakeBackend()
    async with anyio.create_task_group() as tg:
        sink = RecordingSink()
        session = new_session(backend, sink)
        tg.start_soon(session.run)
        session.send("hi")
        await turn_done(session)
        with anyio.fail_after(LIMIT):
            await session.close()
        assert session.status == "closed"
        assert session.closed
        assert sink.statuses()[-1] == "closed"
        assert_closed_where_opened(backend)
        assert backend.agent.closed_in_task != anyio.get_current_task().id
        with pytest.raises(protocol.CovenError) as info:
            session.send("more")
        assert info.value.code == protocol.ErrorCode.InvalidState == -32003
        assert "closed" in info.value.message
        with anyio.fail_after(LIMIT):
            await session.close()  # again: returns at once
    # the task group ends only because the runner did


async def test_close_during_a_turn() -> None:
    gate = Gate()
    backend = FakeBackend([init(), gate, result("never")])
    async with running(backend) as session:
        session.send("long")
        await gate.wait_reached()
        session.send("queued")
        with anyio.fail_after(LIMIT):
            await session.close()
        assert session.status == "closed"
        assert not sink_of(session).of(Kind.TURN_RESULT)
        assert not sink_of(session).of(Kind.ERROR)
        assert backend.sent == ["long"]
        assert sink_of(session).statuses() == ["starting", "running", "closed"]
        with pytest.raises(protocol.CovenError):
            session.send("x")
    assert_closed_where_opened(backend)


async def test_close_while_starting() -> None:
    opening = Gate()
    backend = FakeBackend()
    backend.open_plan.append(opening)
    async with running(backend) as session:
        session.send("hi")
        await opening.wait_reached()
        with anyio.fail_after(LIMIT):
            await session.close()
        assert session.status == "closed"
        assert backend.agents == []


async def test_send_is_refused_as_soon_as_close_begins() -> None:
    gate = Gate()
    backend = FakeBackend([init(), gate, result()])
    async with running(backend) as session:
        session.send("x")
        await gate.wait_reached()
        async with anyio.create_task_group() as tg:
            tg.start_soon(session.close)
            await anyio.wait_all_tasks_blocked()
            assert session.closed
            with pytest.raises(protocol.CovenError) as info:
                session.send("late")
            assert info.value.code == protocol.ErrorCode.InvalidState


# --- cost ----------------------------------------------------------------------------------------


async def test_cost_is_per_turn_from_the_running_total() -> None:
    backend = FakeBackend(
        reply("a", agent_session_id="agent-c", cost=0.01),
        reply("b", agent_session_id="agent-c", cost=0.03),
        [init("agent-c"), Die()],  # the process dies; the next one starts counting from 0
        reply("d", agent_session_id="agent-c", cost=0.005),
    )
    async with running(backend) as session:
        session.send("a")
        first = await turn_done(session)
        session.send("b")
        second = await turn_done(session, after=first["seq"])
        assert first["costUsd"] == pytest.approx(0.01)
        assert second["costUsd"] == pytest.approx(0.02)
        assert session.cost_usd == pytest.approx(0.03)
        assert session.info().costUsd == pytest.approx(0.03)

        session.send("c")
        await sink_of(session).wait_for(Kind.STATUS, status="failed", limit=LIMIT)
        session.send("d")
        fourth = await turn_done(session, after=second["seq"])
        assert fourth["costUsd"] == pytest.approx(0.005)
        assert session.cost_usd == pytest.approx(0.035)
        assert len(backend.agents) == 2


async def test_turn_without_cost_reports_none() -> None:
    backend = FakeBackend(reply("a", cost=None))
    async with running(backend) as session:
        session.send("a")
        turn = await turn_done(session)
        assert "costUsd" not in turn
        assert session.cost_usd == 0.0


async def test_cancelled_turn_result_is_accounted() -> None:
    gate = Gate()
    backend = FakeBackend(reply("a", cost=0.01), [init(), gate, result()])
    backend.interrupt_cost = 0.015
    async with running(backend) as session:
        session.send("a")
        first = await turn_done(session)
        session.send("b")
        await gate.wait_reached()
        await session.cancel()
        second = await turn_done(session, after=first["seq"])
        assert second["cancelled"] is True
        assert second["costUsd"] == pytest.approx(0.005)
        assert session.cost_usd == pytest.approx(0.015)


# --- permissions ---------------------------------------------------------------------------------


async def test_permission_request_and_decision_events() -> None:
    backend = FakeBackend(
        [
            init(),
            assistant(tool_use("toolu_1", "Bash", {"command": "rm -rf build"})),
            Ask("Bash", {"command": "rm -rf build"}, "toolu_1"),
            Ask("Write", {"file_path": "/x"}, "toolu_2"),
            result(),
        ]
    )
    sink = RecordingSink()
    sink.answers.extend([(False, "Denied by the user."), (True, "")])
    async with running(backend, sink) as session:
        session.send("clean")
        await turn_done(session)
        requests = sink.of(Kind.PERMISSION_REQUEST)
        decisions = sink.of(Kind.PERMISSION_DECISION)
        assert [(r["toolUseId"], r["toolName"], r["input"]) for r in requests] == [
            ("toolu_1", "Bash", {"command": "rm -rf build"}),
            ("toolu_2", "Write", {"file_path": "/x"}),
        ]
        assert decisions[0]["toolUseId"] == "toolu_1"
        assert decisions[0]["toolName"] == "Bash"
        assert decisions[0]["allow"] is False
        assert decisions[0]["message"] == "Denied by the user."
        assert decisions[1]["allow"] is True
        assert "message" not in decisions[1]
        assert requests[0]["seq"] < decisions[0]["seq"] < requests[1]["seq"]
        assert backend.answers == [(False, "Denied by the user."), (True, "")]
        assert sink.permission_calls[0][0] is session
        assert sink.permission_calls[0][1:] == ("Bash", {"command": "rm -rf build"}, "toolu_1")
        assert_gapless(session)


async def test_permission_sink_raising_denies_with_a_message() -> None:
    backend = FakeBackend([init(), Ask("Bash", {"command": "ls"}, "toolu_1"), result()])
    sink = RecordingSink()
    sink.answers.append(RuntimeError("connection lost"))
    async with running(backend, sink) as session:
        session.send("x")
        await turn_done(session)
        (decision,) = sink.of(Kind.PERMISSION_DECISION)
        assert decision["allow"] is False
        assert "could not be asked" in decision["message"]
        assert "connection lost" in decision["message"]
        allow, message = backend.answers[0]
        assert allow is False and message == decision["message"]


async def test_permission_request_waits_for_the_sink() -> None:
    answer = Gate()
    backend = FakeBackend([init(), Ask("Bash", {"command": "ls"}, "toolu_1"), result()])
    sink = RecordingSink()
    sink.answers.append(answer)
    async with running(backend, sink) as session:
        session.send("x")
        await answer.wait_reached()
        assert sink.of(Kind.PERMISSION_REQUEST)
        assert not sink.of(Kind.PERMISSION_DECISION)
        assert not sink.of(Kind.TURN_RESULT)
        answer.open()
        await turn_done(session)
        assert sink.of(Kind.PERMISSION_DECISION)[0]["allow"] is True


async def test_cancel_during_a_permission_request_still_decides_it() -> None:
    pending = Gate()
    backend = FakeBackend([init(), Ask("Bash", {"command": "ls"}, "toolu_1"), result()])
    sink = RecordingSink()
    sink.answers.append(pending)
    async with running(backend, sink) as session:
        session.send("x")
        await pending.wait_reached()
        await session.cancel()
        turn = await turn_done(session)
    assert turn["cancelled"] is True
    requests = sink.of(Kind.PERMISSION_REQUEST)
    decisions = sink.of(Kind.PERMISSION_DECISION)
    assert [r["toolUseId"] for r in requests] == ["toolu_1"]
    assert [d["toolUseId"] for d in decisions] == ["toolu_1"]
    assert decisions[0]["allow"] is False


# --- the turn-end hook ---------------------------------------------------------------------------


async def test_on_turn_end_gets_the_turn_result_as_published() -> None:
    calls: list[tuple[Session, events.TurnResult]] = []

    async def on_turn_end(session: Session, result: events.TurnResult) -> None:
        calls.append((session, result))

    async with running(FakeBackend(), on_turn_end=on_turn_end) as session:
        session.send("hi")
        turn = await turn_done(session)
        assert len(calls) == 1
        assert calls[0][0] is session
        # the typed payload of the very event clients got, not a dict to pick fields from
        assert isinstance(calls[0][1], events.TurnResult)
        assert events.event_dict(session.id, turn["seq"], turn["time"], calls[0][1]) == turn


async def test_on_turn_end_runs_before_the_next_queued_turn() -> None:
    hook = Gate()
    seen: list[str] = []
    both = anyio.Event()

    async def on_turn_end(session: Session, result: events.TurnResult) -> None:
        seen.append(result.text)
        if len(seen) == 1:
            await hook.pass_through()
        else:
            both.set()

    backend = FakeBackend()
    async with running(backend, on_turn_end=on_turn_end) as session:
        session.send("one")
        await hook.wait_reached()
        assert session.status == "running"  # the hook is part of the turn
        session.send("two")
        await anyio.wait_all_tasks_blocked()  # the hook still holds the runner
        assert backend.sent == ["one"]
        hook.open()
        with anyio.fail_after(LIMIT):
            await both.wait()
        assert seen == ["echo: one", "echo: two"]
        assert backend.sent == ["one", "two"]


async def test_close_during_a_slow_on_turn_end_hook() -> None:
    hook = Gate()

    async def on_turn_end(session: Session, result: events.TurnResult) -> None:
        await hook.pass_through()

    backend = FakeBackend()
    async with anyio.create_task_group() as tg:
        session = new_session(backend, on_turn_end=on_turn_end)
        tg.start_soon(session.run)
        session.send("one")
        await hook.wait_reached()
        with anyio.move_on_after(0.5):  # close() would wait out its own (30 s) timeout
            await session.close()
        status = session.status
        hook.open()  # let the runner finish either way
    assert status == "closed"


async def test_on_turn_end_not_called_for_failed_turns() -> None:
    calls: list[events.TurnResult] = []

    async def on_turn_end(session: Session, result: events.TurnResult) -> None:
        calls.append(result)

    backend = FakeBackend([init(), Die()])
    async with running(backend, on_turn_end=on_turn_end) as session:
        session.send("x")
        await sink_of(session).wait_for(Kind.STATUS, status="failed", limit=LIMIT)
        assert calls == []


# --- the CLI between turns: streaming, background tasks, turns it starts itself ------------------


def stream(message_id: str, *pieces: str, kind: str = "text") -> list[StreamEvent]:
    """The CLI's stream events for one block of a model message, piece by piece."""
    raw: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"id": message_id}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": kind}},
    ]
    key = "text_delta" if kind == "text" else "thinking_delta"
    raw += [
        {"type": "content_block_delta", "index": 0, "delta": {"type": key, kind: p}} for p in pieces
    ]
    raw.append({"type": "content_block_stop", "index": 0})
    return [StreamEvent(uuid=f"se-{n}", session_id="agent-1", event=e) for n, e in enumerate(raw)]


async def test_text_streams_as_deltas_and_the_whole_block_replaces_them() -> None:
    gate = Gate()
    whole = assistant("Hello there")
    whole.message_id = "msg_1"
    first_pieces = stream("msg_1", "Hel", "lo ")[:4]  # up to the second piece
    rest = stream("msg_1", "there")[2:]  # the last piece and the block's end
    backend = FakeBackend([init(), *first_pieces, gate, *rest, whole, result("Hello there")])
    async with running(backend) as session:
        session.send("hi")
        await gate.wait_reached()
        sink = sink_of(session)
        assert [d.text for d in sink.deltas] == ["Hel", "lo "]
        (partial,) = session.streams.partial()
        assert (partial.blockId, partial.kind, partial.text) == ("msg_1:0", "text", "Hello ")
        assert all(d.blockId == "msg_1:0" and d.afterSeq == session.last_seq for d in sink.deltas)
        gate.open()
        await turn_done(session)
        (text,) = [e for e in session.recent if e["kind"] == Kind.TEXT]
        assert text["text"] == "Hello there" and text["blockId"] == "msg_1:0"
        assert "".join(d.text for d in sink.deltas) == "Hello there"
        assert session.streams.partial() == []


async def test_a_turn_the_cli_starts_by_itself_is_a_turn_like_any_other() -> None:
    backend = FakeBackend([init(), assistant("On it."), result("On it.")])
    backend.default_reply = lambda text: [init(), assistant(f"re: {text}"), result(f"re: {text}")]
    async with running(backend) as session:
        session.send("start a background job")
        first = await turn_done(session)
        agent = backend.agents[0]
        agent.speak([task_started("t1", "Count files")])
        await sink_of(session).wait_for(Kind.TASK, after=first["seq"], status="started")
        assert session.status == "idle" and not session.settled  # a task still runs
        ended = task_notification("t1", "completed", "42 files")
        agent.speak([ended, init(), assistant("The job found 42 files."), result("42 files")])
        prompt = await sink_of(session).wait_for(Kind.PROMPT, after=first["seq"], origin="task")
        assert prompt["text"] == "Background task completed: Count files"
        # A message sent while the CLI's own turn runs waits for it.
        assert session.send("and now?") == 1
        report = await turn_done(session, after=prompt["seq"])
        assert report["text"] == "42 files"
        follow_up = await turn_done(session, after=report["seq"])
        assert follow_up["text"] == "re: and now?"
        assert session.settled and session.tasks == {}
        assert agent.sent == ["start a background job", "and now?"]  # the CLI's turn sent nothing


async def test_an_ended_task_keeps_the_session_busy_until_its_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = FakeBackend([init(), assistant("On it."), result("On it.")])
    async with running(backend) as session:
        session.send("start a background job")
        first = await turn_done(session)
        agent = backend.agents[0]
        agent.speak([task_started()])
        await sink_of(session).wait_for(Kind.TASK, after=first["seq"], status="started")
        # A progress message's description is what it does now, not its name.
        progress = task_progress("t1", "Running grep -r TODO", last_tool_name="Bash")
        agent.speak([progress])
        busy = await sink_of(session).wait_for(Kind.TASK, after=first["seq"], status="running")
        assert busy["description"] == "Count files" and busy["lastToolName"] == "Bash"
        # The bare notice first, then the summary: the second fills in the first.
        agent.speak([task_updated("t1", "completed")])
        bare = await sink_of(session).wait_for(Kind.TASK, after=first["seq"], status="completed")
        assert (bare["description"], bare["toolUseId"]) == ("Count files", "toolu_1")
        assert "summary" not in bare
        # Nothing runs, but the CLI is about to report the task: not settled yet.
        assert not session.settled and session.tasks == {}
        agent.speak([task_notification(usage=USAGE)])
        full = await sink_of(session).wait_for(Kind.TASK, after=bare["seq"], status="completed")
        assert (full["summary"], full["totalTokens"], full["description"]) == (
            "42 files",
            900,
            "Count files",
        )
        agent.speak([init(), assistant("Found 42."), result("Found 42.")])
        report = await turn_done(session, after=full["seq"])
        assert report["text"] == "Found 42." and session.settled


async def test_a_report_that_never_comes_is_not_waited_for_forever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(session_runner, "REPORT_GRACE_SECONDS", 0.2)
    backend = FakeBackend([init(), assistant("On it."), result("On it.")])
    async with running(backend) as session:
        session.send("start a background job")
        first = await turn_done(session)
        agent = backend.agents[0]
        agent.speak([task_started(), task_notification()])
        await sink_of(session).wait_for(Kind.TASK, after=first["seq"], status="completed")
        with anyio.fail_after(LIMIT):
            await session.wait_settled()
        assert session.status == "idle"


def _with_usage(message: Any, model: str, **tokens: int) -> Any:
    message.model = model
    message.usage = {"input_tokens": 0, "output_tokens": 1, **tokens}
    return message


async def test_the_gauge_is_the_last_main_model_request_not_a_subagents() -> None:
    main = "claude-sonnet-4-5"
    backend = FakeBackend(
        [
            init(),
            _with_usage(assistant("one"), main, input_tokens=100, cache_read_input_tokens=900),
            # A subagent's request (its own small context) is not the session's.
            _with_usage(
                assistant("sub", parent="toolu_1"), main, input_tokens=5, cache_read_input_tokens=5
            ),
            _with_usage(
                assistant("two"),
                main,
                input_tokens=50,
                cache_read_input_tokens=1000,
                cache_creation_input_tokens=150,
            ),
            result("two"),
        ],
        [init(), assistant("no usage"), result("none")],
    )
    async with running(backend) as session:
        assert session.info().contextUsage is None  # before any request
        session.send("go")
        done = await turn_done(session)
        expected = {"tokens": 1200, "window": 200_000, "model": main}
        assert done["contextUsage"] == expected
        assert session.info().contextUsage == ContextUsage(**expected)
        # A turn that reported no usage leaves the gauge where it was.
        session.send("again")
        again = await turn_done(session, after=done["seq"])
        assert again["contextUsage"] == expected


async def test_an_agent_that_dies_between_turns_is_said_at_once_and_the_next_message_resumes() -> (
    None
):
    backend = FakeBackend([init(), assistant("Hi."), result("Hi.")])
    backend.default_reply = lambda text: [init(), assistant("Back."), result("Back.")]
    async with running(backend) as session:
        session.send("hello")
        first = await turn_done(session)
        backend.agents[0].speak([Fail(AgentStartError("The codex app-server was killed."))])
        error = await sink_of(session).wait_for(Kind.ERROR, after=first["seq"])
        assert error["message"] == "The codex app-server was killed."
        assert session.status == "idle" and session.process.agent is None
        session.send("again")
        await turn_done(session, after=error["seq"])
        assert started_from(backend.agents[1].spec) == "agent-1"


async def test_an_agent_that_reports_no_ended_task_in_a_turn_leaves_the_session_settled() -> None:
    """Codex starts no turn to report a background command that ended: the session is settled
    as soon as the end arrives, not after waiting for a report turn."""
    backend = FakeBackend([init(), assistant("On it."), result("On it.")])
    async with running(backend) as session:
        session.send("start a background job")
        first = await turn_done(session)
        agent = backend.agents[0]
        agent.reports_ended_tasks = False
        agent.speak([task_started("t1", "serve")])
        await sink_of(session).wait_for(Kind.TASK, after=first["seq"], status="started")
        assert not session.settled
        agent.speak([task_notification("t1", "completed", "served")])
        await sink_of(session).wait_for(Kind.TASK, after=first["seq"], status="completed")
        with anyio.fail_after(LIMIT):
            await session.wait_settled()
        assert session.status == "idle" and not session.background.report_due


async def test_stopping_a_task_the_agent_no_longer_runs_is_invalid_state_and_ends_it() -> None:
    """A Codex agent opened again knows nothing of a command an earlier one left running:
    coven/stopTask says so (InvalidState, not an agent start failure), and the task, which
    nothing will ever report on, is no longer listed as running."""
    backend = FakeBackend([init(), assistant("On it."), result("On it.")])
    async with running(backend) as session:
        session.send("start a background job")
        first = await turn_done(session)
        agent = backend.agents[0]
        agent.reports_ended_tasks = False
        agent.speak([task_started("t1", "serve")])
        await sink_of(session).wait_for(Kind.TASK, after=first["seq"], status="started")
        agent.stop_task_error = TaskNotRunning("Codex runs no background command 't1'.")
        with pytest.raises(protocol.CovenError) as raised:
            await session.stop_task("t1")
        assert raised.value.code == protocol.ErrorCode.InvalidState
        assert "no longer runs the background task 't1'" in raised.value.message
        assert "Codex runs no background command 't1'." in raised.value.message
        assert raised.value.data == {"sessionId": session.id, "taskId": "t1"}
        ended = await sink_of(session).wait_for(Kind.TASK, after=first["seq"], status="stopped")
        assert (ended["taskId"], ended["description"]) == ("t1", "serve")
        assert ended["summary"] == "no longer run by the agent"
        assert session.tasks == {} and not session.background.report_due
        with anyio.fail_after(LIMIT):
            await session.wait_settled()
        # Asked again: no such task runs any more.
        with pytest.raises(protocol.CovenError, match="has no running background task"):
            await session.stop_task("t1")
        assert agent.stopped_tasks == []


# --- agent events of an agent other than Claude ---------------------------------------------------


async def test_a_turn_of_agent_events_that_claude_never_sends() -> None:
    """An agent's adapter may send what Claude and Codex do not (a tool call's kind and updates,
    a plan, a mode change, a context window of its own): the session takes them, shows what
    coven has events for, and the turn ends as any other."""
    call = ag.ModelCall(
        "call-1",
        "some-model",
        Usage(inputTokens=900, outputTokens=10),
        cost_usd=0.25,
        context_tokens=900,
        context_size=4000,
    )
    read = ag.ToolCall("t1", "read", {"path": "a.py"}, kind="read", title="Read a.py")
    backend = FakeBackend(
        [
            ag.AgentStarted("conv-1", model="some-model"),
            ag.PlanUpdated((ag.PlanEntry("look around", "in_progress"),)),
            ag.BlockStarted("b1", "text", "call-1"),
            ag.Delta("b1", "Hel"),
            ag.AgentMessage("m1", "call-1", (ag.TextPart("Hello"), read), call=call),
            ag.ToolCallUpdate("t1", status="in_progress", content="reading"),
            ag.ToolResult("t1", "print(1)"),
            ag.ModeChanged("plan"),
            ag.TurnEnded("success", "Hello", usage=call.usage, cost_usd=0.25, conversation_id="c2"),
        ]
    )
    async with running(backend) as session:
        session.send("hi")
        turn = await turn_done(session)
        sink = sink_of(session)
        assert sink.kinds() == [
            Kind.STATUS,
            Kind.PROMPT,
            Kind.STATUS,
            Kind.AGENT,
            Kind.PLAN,
            Kind.TEXT,
            Kind.TOOL_USE,
            Kind.TOOL_UPDATE,
            Kind.TOOL_RESULT,
            Kind.MODE_CHANGED,
            Kind.TURN_RESULT,
            Kind.STATUS,
        ]
        [text] = sink.of(Kind.TEXT)
        assert text["blockId"] == "b1" and text["messageId"] == "m1"
        assert [e["mode"] for e in sink.of(Kind.MODE_CHANGED)] == ["plan"]
        [plan] = sink.of(Kind.PLAN)
        assert plan["entries"] == [
            {"content": "look around", "status": "in_progress", "priority": "medium"}
        ]
        [update] = sink.of(Kind.TOOL_UPDATE)
        assert (update["toolUseId"], update["status"], update["content"]) == (
            "t1",
            "in_progress",
            "reading",
        )
        assert [d.text for d in sink.deltas] == ["Hel"]
        assert turn["costUsd"] == 0.25 and turn["subtype"] == "success"
        assert turn["contextUsage"] == {"tokens": 900, "window": 4000, "model": "some-model"}
        assert session.agent_session_id == "c2"


# --- cost of a conversation's earlier process ---------------------------------------------------


def _priced_turn(cost_usd: float, text: str = "Done.") -> list[Any]:
    call = ag.ModelCall(
        "call-1",
        "claude-sonnet-4-5",
        Usage(inputTokens=0, outputTokens=10, cacheReadTokens=1000, cacheCreationTokens=100),
        context_tokens=1100,
    )
    return [
        ag.AgentMessage("m1", "call-1", (ag.TextPart(text),), call=call),
        ag.TurnEnded("success", text, usage=call.usage, cost_usd=cost_usd),
    ]


async def test_a_copied_conversations_first_turn_costs_its_own_calls_not_the_parents() -> None:
    """Claude Code resuming a conversation (a fork child's copy, a session after a restart)
    starts its running total at what it restored of the conversation's earlier cost: the
    child's first turn reported its parent's cost too (tests/e2e/test_fork_cost_e2e.py)."""
    own = (1000 * 0.3 + 100 * 3.75 + 10 * 15) / 1_000_000  # the turn's usage, sonnet's prices
    backend = FakeBackend(_priced_turn(0.5 + own), _priced_turn(0.5 + own + 0.002))
    first = AgentSpec(cwd="/work/project", start=Copy("parent-agent"))
    async with running(backend, start=first) as session:
        session.send("forked")
        turn = await turn_done(session)
        assert turn["costUsd"] == pytest.approx(own)
        session.send("next")
        second = await turn_done(session, after=turn["seq"])
        assert second["costUsd"] == pytest.approx(0.002)  # the same process: its total's growth
        assert session.cost_usd == pytest.approx(own + 0.002)


async def test_a_new_conversations_first_turn_costs_what_the_cli_reports() -> None:
    backend = FakeBackend(_priced_turn(0.5))
    async with running(backend) as session:
        session.send("hi")
        assert (await turn_done(session))["costUsd"] == 0.5
