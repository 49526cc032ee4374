"""The adapter for any ACP agent (coven_ls/agents/acp), against a scripted agent on the official
SDK's agent side (tests/acp_fake_agent.py), in this process and as a process of its own; and the
configured agents (`initializationOptions.agents`) in the registry."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from acp import RequestError
from anyio.abc import TaskGroup

from coven_ls import agents, protocol
from coven_ls.agents.acp import AcpAgent, AcpBackend
from coven_ls.agents.acp import process as acp_process
from coven_ls.core.agent import AgentSpec, AgentStartError, Copy, Decision, Resume
from coven_ls.core.agent import events as ev
from coven_ls.protocol.codec import parse
from coven_ls.protocol.types import AcpAgentConfig, PermissionOption

from ..acp_fake_agent import FakeAgent, connector

LIMIT = 10
CONFIG = AcpAgentConfig(command=["fake-acp"])


class Asker:
    """A PermissionAsker that answers `allow` (or picks the option `pick`) and records the
    questions and the options they offered; `hold` makes it wait until cancelled (an interrupt
    withdraws the question)."""

    def __init__(self, allow: bool = True, hold: bool = False, pick: str | None = None) -> None:
        self.allow, self.hold, self.pick = allow, hold, pick
        self.questions: list[tuple[str, dict[str, Any], str | None]] = []
        self.options: list[list[PermissionOption]] = []
        self.asked = anyio.Event()

    async def __call__(
        self,
        name: str,
        tool_input: dict[str, Any],
        tool_id: str | None,
        options: Sequence[PermissionOption] = (),
    ) -> Decision:
        self.questions.append((name, tool_input, tool_id))
        self.options.append(list(options))
        self.asked.set()
        if self.hold:
            await anyio.sleep_forever()
        return Decision(self.allow, "" if self.allow else "denied", self.pick)


@asynccontextmanager
async def backend(fake: FakeAgent, config: AcpAgentConfig = CONFIG) -> AsyncIterator[AcpBackend]:
    async with anyio.create_task_group() as tg:
        yield AcpBackend("fake", config, tg, connect=connector(fake))
        tg.cancel_scope.cancel()


async def turn(agent: AcpAgent, text: str) -> list[Any]:
    """Send `text`; the events up to and including the turn's end."""
    said: list[Any] = []
    await agent.send(text)
    with anyio.fail_after(LIMIT):
        async for event in agent.messages():
            said.append(event)
            if isinstance(event, ev.TurnEnded):
                return said
    raise AssertionError(f"the stream ended before the turn: {said}")


def of(kind: type, said: list[Any]) -> list[Any]:
    return [e for e in said if isinstance(e, kind)]


async def test_a_turn_streams_its_text_then_the_finished_message_and_ends(
    tmp_path: Path,
) -> None:
    fake = FakeAgent()
    async with backend(fake) as b:
        assert b.reports_cost() is None  # not a known agent, and no turn yet
        agent = await b.open(AgentSpec(cwd=str(tmp_path)), Asker())
        said = await turn(agent, "hello")
        await agent.close()
        assert b.reports_cost() is True  # its turn had a cost in USD: a cost limit can hold
    assert fake.calls[0] == ("new", str(tmp_path))
    started, block = said[:2]
    assert isinstance(started, ev.AgentStarted) and started.conversation_id == "s1"
    assert isinstance(block, ev.BlockStarted) and block.kind == "text"
    assert [d.text for d in of(ev.Delta, said)] == ["echo: ", "hello"]
    assert all(d.block_id == block.block_id for d in of(ev.Delta, said))
    (message,) = of(ev.AgentMessage, said)
    assert message.parts == (ev.TextPart("echo: hello"),) and message.call_id == block.block_id
    (gauge,) = of(ev.ModelCall, said)
    assert (gauge.context_tokens, gauge.context_size, gauge.call_id) == (1200, 200000, None)
    end = said[-1]
    assert end.outcome == "success" and end.text == "echo: hello"
    assert end.cost_usd == pytest.approx(0.25) and end.conversation_id == "s1"


async def test_a_mode_that_asks_is_chosen_and_a_configured_one_must_exist(
    tmp_path: Path,
) -> None:
    fake = FakeAgent(modes=("auto", "default"))
    async with backend(fake) as b:
        agent = await b.open(AgentSpec(cwd=str(tmp_path)), Asker())
        await agent.close()
    assert ("mode", "default") in fake.calls  # "auto" decides by itself: not kept

    fake = FakeAgent(modes=("read-only", "full"))
    async with backend(fake) as b:
        await (await b.open(AgentSpec(cwd=str(tmp_path)), Asker())).close()
    assert not [c for c in fake.calls if c[0] == "mode"]  # it asks already

    fake = FakeAgent(modes=("auto", "default", "careful"))
    async with backend(fake, AcpAgentConfig(command=["x"], mode="careful")) as b:
        await (await b.open(AgentSpec(cwd=str(tmp_path)), Asker())).close()
        with pytest.raises(AgentStartError, match=r"has no mode 'nope'.*auto, default, careful"):
            b.config = AcpAgentConfig(command=["x"], mode="nope")
            await b.open(AgentSpec(cwd=str(tmp_path)), Asker())
    assert ("mode", "careful") in fake.calls


async def test_covens_permission_modes_map_to_the_agents_or_are_refused(
    tmp_path: Path,
) -> None:
    fake = FakeAgent(modes=("auto", "default", "acceptEdits", "plan"))
    async with backend(fake) as b:
        agent = await b.open(AgentSpec(cwd=str(tmp_path), permission_mode="plan"), Asker())
        assert fake.calls[-1] == ("mode", "plan") and agent.mode == "plan"
        await agent.set_permission_mode("acceptEdits")
        said = await next_of(agent, ev.ModeChanged)  # between turns: said by coven-ls
        assert said == [ev.ModeChanged("acceptEdits")]
        await agent.set_permission_mode("default")  # the mode that asks
        with pytest.raises(protocol.CovenError, match=r"no mode matching .*'bypassPermissions'"):
            await agent.set_permission_mode("bypassPermissions")
        await agent.close()
    modes = [c[1] for c in fake.calls if c[0] == "mode"]
    assert modes == ["plan", "acceptEdits", "default"] and agent.mode == "default"

    # A permission mode the agent cannot match at the start: the mode that asks.
    fake = FakeAgent(modes=("auto", "default"))
    async with backend(fake) as b:
        spec = AgentSpec(cwd=str(tmp_path), permission_mode="bypassPermissions")
        agent = await b.open(spec, Asker())
        await agent.close()
    assert [c for c in fake.calls if c[0] == "mode"] == [("mode", "default")]

    # codex-acp's names; an agent without modes refuses every one.
    fake = FakeAgent(modes=("read-only", "auto", "full-access"))
    async with backend(fake) as b:
        agent = await b.open(AgentSpec(cwd=str(tmp_path)), Asker())
        await agent.set_permission_mode("bypassPermissions")
        await agent.close()
    assert [c for c in fake.calls if c[0] == "mode"] == [("mode", "full-access")]
    fake = FakeAgent(modes=())
    async with backend(fake) as b:
        agent = await b.open(AgentSpec(cwd=str(tmp_path)), Asker())
        with pytest.raises(protocol.CovenError, match="lists no session modes"):
            await agent.set_permission_mode("plan")
        await agent.close()


async def test_a_tool_call_asks_permission_and_maps_the_answer_by_kind(tmp_path: Path) -> None:
    for allow, option, outcome in ((True, "yes", "completed"), (False, "no", "failed")):
        fake = FakeAgent()
        asker = Asker(allow)
        async with backend(fake) as b:
            agent = await b.open(AgentSpec(cwd=str(tmp_path)), asker)
            said = await turn(agent, "tool")
            await agent.close()
        # By kind (allow_once / reject_once), not by the first option nor by id.
        assert fake.permission.option_id == option
        assert asker.questions == [("Bash", {"command": "ls -a", "description": "ls -a"}, "call-1")]
        # The agent's options go with the question, as they are.
        assert asker.options == [
            [
                PermissionOption(optionId="yes-always", kind="allow_always", name="Always"),
                PermissionOption(optionId="yes", kind="allow_once", name="Allow"),
                PermissionOption(optionId="no", kind="reject_once", name="Reject"),
            ]
        ]
        thinking, call_message = of(ev.AgentMessage, said)[:2]
        assert thinking.parts == (ev.ThinkingPart("I should look."),)
        (call,) = call_message.parts
        assert isinstance(call, ev.ToolCall)
        assert (call.id, call.name, call.kind, call.title, call.status) == (
            "call-1",
            "Bash",
            "execute",
            "ls -a",
            "pending",
        )
        assert call.locations == (ev.Location(str(tmp_path), 3),)
        assert of(ev.PlanUpdated, said) == [
            ev.PlanUpdated((ev.PlanEntry("list files", "in_progress", "medium"),))
        ]
        updates = of(ev.ToolCallUpdate, said)
        assert [u.status for u in updates] == ["in_progress", outcome]
        (result,) = of(ev.ToolResult, said)
        assert result.tool_call_id == "call-1"
        assert result.is_error == (not allow)
        assert result.content == ("a.txt" if allow else "rejected")
        # The tool call comes before the question is put (the session shows it first).
        assert said.index(call_message) < said.index(updates[0])
        assert of(ev.AgentMessage, said)[-1].parts == (ev.TextPart("Listed."),)
        assert said[-1].outcome == "success"


async def test_an_option_the_user_picked_is_the_answer(tmp_path: Path) -> None:
    fake = FakeAgent()
    async with backend(fake) as b:
        agent = await b.open(AgentSpec(cwd=str(tmp_path)), Asker(pick="yes-always"))
        said = await turn(agent, "tool")
        await agent.close()
    assert fake.permission.option_id == "yes-always"
    assert of(ev.ToolResult, said)[0].content == "a.txt"


async def test_a_closing_session_is_closed_in_the_agent_where_it_has_session_close(
    tmp_path: Path,
) -> None:
    for can_close in (True, False):
        fake = FakeAgent(close=can_close)
        async with backend(fake) as b:
            agent = await b.open(AgentSpec(cwd=str(tmp_path)), Asker())
            await turn(agent, "hello")
            await agent.close()
            await agent.close()  # once is enough
        assert [c for c in fake.calls if c[0] == "close"] == (
            [("close", "s1")] if can_close else []
        )


async def test_interrupt_cancels_the_turn_and_ends_its_open_tool_calls(tmp_path: Path) -> None:
    fake = FakeAgent()
    async with backend(fake) as b:
        agent = await b.open(AgentSpec(cwd=str(tmp_path)), Asker())
        await agent.send("wait")
        said: list[Any] = []
        with anyio.fail_after(LIMIT):
            async for event in agent.messages():
                said.append(event)
                if isinstance(event, ev.AgentMessage) and isinstance(event.parts[0], ev.ToolCall):
                    await agent.interrupt()
                if isinstance(event, ev.TurnEnded):
                    break
        await agent.close()
    assert ("cancel", "s1") in fake.calls
    end = said[-1]
    assert end.outcome == "interrupted"
    (result,) = of(ev.ToolResult, said)
    assert result.tool_call_id == "call-2" and result.is_error
    assert of(ev.AgentMessage, said)[0].parts == (ev.TextPart("Working"),)


async def test_an_interrupt_withdraws_an_open_permission_question(tmp_path: Path) -> None:
    fake = FakeAgent()
    asker = Asker(hold=True)
    async with backend(fake) as b:
        agent = await b.open(AgentSpec(cwd=str(tmp_path)), asker)
        await agent.send("tool")
        with anyio.fail_after(LIMIT):
            await asker.asked.wait()
            await agent.interrupt()
            await fake.answered.wait()
        await agent.close()
    assert fake.permission.outcome == "cancelled"


async def test_unknown_updates_are_logged_and_unknown_requests_not_found(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeAgent()
    caplog.set_level(logging.INFO)
    async with backend(fake) as b:
        agent = await b.open(AgentSpec(cwd=str(tmp_path)), Asker())
        said = await turn(agent, "unknown")
        await agent.close()
    assert said[-1].outcome == "success" and said[-1].text == "still here"
    assert isinstance(fake.unknown_answer, RequestError)
    assert fake.unknown_answer.code == -32601  # method not found
    # An update type the SDK does not know fails its validation, which it logs (an error with
    # the traceback); the session goes on. One the SDK knows and coven does not, coven logs.
    assert "brand_new_thing" in caplog.text


async def test_resume_prefers_session_resume_else_load_whose_replay_is_not_news(
    tmp_path: Path,
) -> None:
    fake = FakeAgent(resume=True)
    async with backend(fake) as b:
        await (await b.open(AgentSpec(cwd=str(tmp_path), start=Resume("s9")), Asker())).close()
    assert ("resume", "s9") in fake.calls

    fake = FakeAgent(resume=False, currency="EUR")
    async with backend(fake) as b:
        agent = await b.open(AgentSpec(cwd=str(tmp_path), start=Resume("s9")), Asker())
        said = await turn(agent, "again")
        await agent.close()
        assert b.reports_cost() is False  # in EUR: no cost coven-ls can count
    assert ("load", "s9") in fake.calls
    texts = [p.text for m in of(ev.AgentMessage, said) for p in m.parts]
    assert texts == ["echo: again"]  # "old answer" was the replay
    assert said[-1].cost_usd is None  # a cost in EUR is unknown, never converted
    assert said[-1].conversation_id == "s9"


async def test_a_copy_is_a_session_fork_where_the_agent_has_one(tmp_path: Path) -> None:
    fake = FakeAgent(fork=True)
    async with backend(fake) as b:
        agent = await b.open(AgentSpec(cwd=str(tmp_path), start=Copy("s7")), Asker())
        said = await turn(agent, "child")
        again = await turn(agent, "child again")
        await agent.close()
    assert ("fork", "s7") in fake.calls
    assert said[0].conversation_id == "s1"  # the fork's own, not "s7"
    # A forked session's cost is cumulative from its parent's: its first figure is the base,
    # and the turn that reported it has an unknown share (not a guessed 0); the next turn's
    # figure is the running total since the base (the session makes the turn's share of it).
    assert said[-1].cost_usd is None
    assert again[-1].cost_usd == pytest.approx(0.25)

    fake = FakeAgent(fork=False)
    async with backend(fake) as b:
        with pytest.raises(AgentStartError, match="no session/fork"):
            await b.open(AgentSpec(cwd=str(tmp_path), start=Copy("s7")), Asker())
        with pytest.raises(AgentStartError, match="up to one of its messages"):
            await b.open(AgentSpec(cwd=str(tmp_path), start=Copy("s7", up_to="m1")), Asker())


def test_a_tool_call_announced_twice_is_one_call_and_its_update() -> None:
    from acp.helpers import start_tool_call

    from coven_ls.agents.acp.translate import Translator

    translator = Translator("s1", "fake")
    first = translator.feed(start_tool_call("c1", "ls", kind="execute", raw_input={"cmd": "ls"}))
    again = translator.feed(start_tool_call("c1", "ls", kind="execute", status="in_progress"))
    assert [type(e) for e in first] == [ev.AgentMessage]
    assert again == [ev.ToolCallUpdate(id="c1", status="in_progress", title="ls")]
    assert translator.inputs["c1"] == {"cmd": "ls"}


def test_an_update_the_sdk_knows_and_coven_does_not_is_logged_and_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from types import SimpleNamespace

    from coven_ls.agents.acp.translate import Translator

    caplog.set_level(logging.INFO)
    translator = Translator("s1", "fake")
    assert translator.feed(SimpleNamespace(session_update="plan_removed")) == []
    assert "fake sent an update coven-ls does not know: 'plan_removed'" in caplog.text
    quiet = translator.feed(SimpleNamespace(session_update="available_commands_update"))
    assert quiet == [] and "available_commands_update" not in caplog.text


# --- a process of its own


def fake_command(*extra: str) -> AcpAgentConfig:
    root = Path(__file__).resolve().parents[2]
    return AcpAgentConfig(
        command=[sys.executable, "-m", "tests.acp_fake_agent", *extra],
        env={"PYTHONPATH": str(root)},
    )


@asynccontextmanager
async def process_backend(config: AcpAgentConfig) -> AsyncIterator[tuple[AcpBackend, TaskGroup]]:
    async with anyio.create_task_group() as tg:
        yield AcpBackend("fake", config, tg), tg
        tg.cancel_scope.cancel()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_a_real_process_runs_a_turn_and_one_that_lingers_is_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(acp_process, "EXIT_GRACE_SECONDS", 0.5)
    for config in (fake_command(), fake_command("--linger")):
        async with process_backend(config) as (b, _tg):
            b.check()
            agent = await b.open(AgentSpec(cwd=str(tmp_path)), Asker())
            said = await turn(agent, "hi")
            assert said[-1].text == "echo: hi"
            assert agent.link is not None and agent.link.process is not None
            pid = agent.link.process.pid
            with anyio.fail_after(LIMIT):
                await agent.close()
            assert not alive(pid)


async def next_of(agent: AcpAgent, kind: type) -> list[Any]:
    """The agent's events up to and including the next of `kind`."""
    said: list[Any] = []
    with anyio.fail_after(LIMIT):
        async for event in agent.messages():
            said.append(event)
            if isinstance(event, kind):
                return said
    raise AssertionError(f"the stream ended before a {kind.__name__}: {said}")


async def test_a_process_killed_while_idle_is_started_again_a_bounded_number_of_times(
    tmp_path: Path,
) -> None:
    async with process_backend(fake_command()) as (b, _tg):
        agent = await b.open(AgentSpec(cwd=str(tmp_path)), Asker())
        assert agent.max_restarts == 3  # protocol.md says so
        agent.max_restarts = 2
        assert (await turn(agent, "hi"))[-1].text == "echo: hi"
        pids = []
        for restart in (1, 2):
            assert agent.link is not None and agent.link.process is not None
            pids.append(agent.link.process.pid)
            agent.link.process.kill()
            (restarted,) = await next_of(agent, ev.Restarted)
            assert "'fake' was killed by SIGKILL" in restarted.reason
            assert (restarted.restart, restarted.max_restarts) == (restart, 2)
            # The same session, taken up again by a new process (session/resume).
            assert agent.session_id == "s1" and not alive(pids[-1])
            said = await turn(agent, "again")
            assert said[-1].outcome == "success" and said[-1].text == "echo: again"
        assert agent.link is not None and agent.link.process is not None
        assert agent.link.process.pid not in pids
        agent.link.process.kill()  # the restarts are used up: the session hears the end
        with (
            anyio.fail_after(LIMIT),
            pytest.raises(Exception, match=r"killed by SIGKILL.*started again 2 times already"),
        ):
            async for _ in agent.messages():
                pass
        await agent.close()


async def test_a_process_that_dies_mid_turn_fails_the_turn_and_is_started_again(
    tmp_path: Path,
) -> None:
    async with process_backend(fake_command()) as (b, _tg):
        agent = await b.open(AgentSpec(cwd=str(tmp_path)), Asker())
        said = await turn(agent, "die")
        assert [d.text for d in of(ev.Delta, said)] == ["dying"]
        end = said[-1]
        assert end.outcome == "error" and "'fake' exited with code 3" in end.text
        (restarted,) = await next_of(agent, ev.Restarted)
        assert restarted.restart == 1 and "exited with code 3" in restarted.reason
        assert (await turn(agent, "hi"))[-1].text == "echo: hi"
        await agent.close()


def test_a_process_that_ends_while_closing_is_not_started_again() -> None:
    agent = AcpAgent("fake", AgentSpec(cwd="/"), Asker(), None)  # type: ignore[arg-type]
    agent.session_id = "s1"
    agent.reopen = lambda: anyio.lowlevel.checkpoint()
    agent.kill()
    agent.gone("The ACP agent 'fake' was killed by SIGKILL.")
    assert agent.restarts == 0 and agent._ready.is_set()


async def test_a_command_not_found_or_failing_to_initialize_says_so(tmp_path: Path) -> None:
    missing = AcpAgentConfig(command=["no-such-acp-agent-here"])
    async with process_backend(missing) as (b, _tg):
        with pytest.raises(protocol.CovenError, match="'no-such-acp-agent-here' was not found"):
            b.check()
        with pytest.raises(AgentStartError, match=r"agents.fake.command"):
            await b.open(AgentSpec(cwd=str(tmp_path)), Asker())
    mute = AcpAgentConfig(command=[sys.executable, "-c", "import sys; print('no ACP here')"])
    async with process_backend(mute) as (b, _tg):
        with pytest.raises(AgentStartError, match=r"ACP agent 'fake'.*failed to initialize"):
            await b.open(AgentSpec(cwd=str(tmp_path)), Asker())


# --- configuration


def test_configured_agents_are_parsed_and_reserved_names_refused() -> None:
    options = parse(
        "initializationOptions",
        protocol.InitializationOptions,
        {"agents": {"oc": {"command": ["opencode", "acp"], "env": {"A": "1"}, "mode": "build"}}},
    )
    assert options.agents == {
        "oc": AcpAgentConfig(command=["opencode", "acp"], env={"A": "1"}, mode="build")
    }
    for name in ("claude", "codex"):
        with pytest.raises(protocol.CovenError, match=f"agents.{name}: '{name}' is reserved"):
            parse(
                "initializationOptions",
                protocol.InitializationOptions,
                {"agents": {name: {"command": ["x"]}}},
            )
    with pytest.raises(protocol.CovenError, match=r"missing required field 'agents.oc.command'"):
        parse("initializationOptions", protocol.InitializationOptions, {"agents": {"oc": {}}})
    with pytest.raises(protocol.CovenError, match="must name a program"):
        parse(
            "initializationOptions",
            protocol.InitializationOptions,
            {"agents": {"oc": {"command": []}}},
        )


async def test_the_registry_knows_configured_agents_and_names_an_unknown_one() -> None:
    options = protocol.InitializationOptions(
        agents={
            "here": AcpAgentConfig(command=[sys.executable]),
            "gone": AcpAgentConfig(command=["no-such-acp-agent-here"]),
        }
    )
    assert agents.backend_key("here", options)[0] == "here"
    assert "here" in agents.available_agents(options)
    assert "gone" not in agents.available_agents(options)
    # A stored session of a configured agent is restored on it (not run as claude).
    assert agents.REGISTRY.knows("here", options) and agents.REGISTRY.knows("codex", options)
    assert not agents.REGISTRY.knows("nope", options)
    with pytest.raises(
        protocol.CovenError, match=r"Unknown agent 'nope'.*'claude', 'codex', 'here'"
    ):
        agents.backend_key("nope", options)
    async with anyio.create_task_group() as tg:
        made = agents.make_backend("here", options, tg)
        assert isinstance(made, AcpBackend) and made.name == "here"
