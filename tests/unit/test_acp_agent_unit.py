"""The ACP agent's fork approval and its `forkContext` session option, against a fake hub and a
fake ACP client (no server, no CLI)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest
from acp import RequestError
from acp.schema import AllowedOutcome, RequestPermissionResponse

from coven_ls import protocol
from coven_ls.acp.agent import CovenAgent, _Pending
from coven_ls.core.hub import Hub
from coven_ls.core.session import Session
from coven_ls.protocol.types import ForkChoices, PermissionOption


class FakeForks:
    def __init__(self, parent: Any) -> None:
        # its children's context, as the hub resolves it when the session chose none
        settings = SimpleNamespace(context="inherit")
        self.fork = SimpleNamespace(id="f-1", state="proposed", parent=parent, settings=settings)
        self.decided: list[tuple[Any, ...]] = []

    def active_fork(self, session: Any) -> Any:
        return self.fork if session is self.fork.parent else None

    def decide(
        self,
        fork_id: str,
        approve: bool,
        tasks: Any = None,
        reason: Any = None,
        choices: ForkChoices | None = None,
    ) -> None:
        self.decided.append((fork_id, approve, choices))
        self.fork.state = "running"


class FakeEditor:
    def __init__(self, choice: str) -> None:
        self.choice = choice
        self.asked: list[Any] = []

    async def request_permission(self, session_id: str, tool_call: Any, options: Any) -> Any:
        self.asked.append((session_id, tool_call))
        self.options = options
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=self.choice)
        )


def rig(agent_name: str, choice: str) -> tuple[CovenAgent, Any, FakeForks, FakeEditor]:
    parent = SimpleNamespace(
        id="s-1",
        parent_id=None,
        context=None,  # no model request yet: no estimate
        config=SimpleNamespace(agent=agent_name, permission_mode=None),
    )
    forks = FakeForks(parent)
    # The agents this machine offers, as coven_ls.agents' registry would find them.
    registry = SimpleNamespace(
        available=lambda _options: ["claude", "codex", "opencode"],
        title={"claude": "Claude Code", "codex": "Codex", "opencode": "OpenCode"}.get,
    )
    hub = SimpleNamespace(
        forks=forks, sessions={"s-1": parent}, get=lambda _sid: parent, agents=registry
    )
    acp = CovenAgent(cast(Hub, hub))
    editor = FakeEditor(choice)
    acp.conn = cast(Any, editor)
    acp._open.add("s-1")
    return acp, parent, forks, editor


async def test_an_approval_starts_the_fork_with_the_sessions_fork_context() -> None:
    acp, parent, forks, editor = rig("codex", "allow_once")
    chosen = await acp.set_config_option("forkContext", "s-1", "transcript")
    assert chosen is not None and chosen.config_options[1].current_value == "transcript"
    answer = await acp.ask_fork_approval(cast(Session, parent), ["a", "b"])
    assert answer is None  # decided by the agent itself: the hub has nothing more to do
    assert forks.decided == [("f-1", True, ForkChoices(context="transcript"))]
    [(asked_in, call)] = editor.asked
    assert asked_in == "s-1"
    assert call.title == (
        "Fork into 2 parallel tasks (Codex children, given this conversation written out)"
    )


async def test_by_default_children_inherit_and_a_rejection_is_the_hubs() -> None:
    acp, parent, forks, editor = rig("claude", "allow_once")
    assert await acp.ask_fork_approval(cast(Session, parent), ["a"]) is None
    # None chosen: the fork's own default (inherit here; a transcript for an agent that
    # cannot copy its conversation), which the approval leaves to the hub.
    assert forks.decided == [("f-1", True, ForkChoices())]
    assert editor.asked[0][1].title == (
        "Fork into 1 parallel task (Claude Code children, resuming this conversation)"
    )
    acp, parent, forks, _ = rig("claude", "reject_once")
    assert await acp.ask_fork_approval(cast(Session, parent), ["a"]) is False
    assert forks.decided == []


async def test_a_fork_decided_meanwhile_is_left_alone() -> None:
    acp, parent, forks, _ = rig("claude", "allow_once")
    forks.fork.state = "running"  # approved elsewhere while the question was open
    assert await acp.ask_fork_approval(cast(Session, parent), ["a"]) is None
    assert forks.decided == []


async def test_fork_context_takes_only_its_values() -> None:
    acp, _, _, _ = rig("claude", "allow_once")
    acp._pending["s-2"] = _Pending("/w", "default", "claude")
    chosen = await acp.set_config_option("forkContext", "s-2", "fresh")
    assert chosen is not None
    assert [(o.id, o.current_value) for o in chosen.config_options] == [
        ("agent", "claude"),
        ("forkContext", "fresh"),
    ]
    with pytest.raises(RequestError) as bad:
        await acp.set_config_option("forkContext", "s-2", "everything")
    assert bad.value.code == -32602
    with pytest.raises(RequestError):
        await acp.set_config_option("temperature", "s-2", "hot")


async def test_a_hosted_acp_agents_own_options_are_passed_on_and_the_pick_given_back() -> None:
    acp, parent, _, editor = rig("opencode", "always")
    offered = [
        PermissionOption(optionId="once", kind="allow_once", name="Allow once"),
        PermissionOption(optionId="always", kind="allow_always", name="Always allow"),
        PermissionOption(optionId="reject", kind="reject_once", name="Reject"),
    ]
    answer = await acp.ask_permission(
        cast(Session, parent), "Bash", {"command": "ls"}, "call-1", offered
    )
    assert answer.option_id == "always"  # its kind decides (core/session/permission.py)
    assert [(o.option_id, o.kind, o.name) for o in editor.options] == [
        ("once", "allow_once", "Allow once"),
        ("always", "allow_always", "Always allow"),
        ("reject", "reject_once", "Reject"),
    ]
    # The agent remembers an "always" itself: the next question is put again.
    await acp.ask_permission(cast(Session, parent), "Bash", {"command": "ls"}, "call-2", offered)
    assert len(editor.asked) == 2


async def test_a_mode_the_hosted_agent_cannot_take_is_an_invalid_params_error() -> None:
    acp, parent, _, _ = rig("opencode", "allow_once")
    refusal = protocol.CovenError(
        protocol.ErrorCode.InvalidParams, "ACP agent 'opencode' has no mode matching 'plan'"
    )

    async def refuse(mode: str) -> None:
        raise refusal

    parent.set_permission_mode = refuse
    with pytest.raises(RequestError) as refused:
        await acp.set_session_mode("s-1", "plan")
    assert refused.value.code == protocol.ErrorCode.InvalidParams
    assert "no mode matching 'plan'" in str(refused.value)


async def test_the_agent_option_offers_every_agent_found_and_takes_only_those() -> None:
    acp, _, _, editor = rig("opencode", "allow_once")
    acp._pending["s-2"] = _Pending("/w", "default", "claude")
    chosen = await acp.set_config_option("agent", "s-2", "opencode")
    assert chosen is not None
    agent = chosen.config_options[0]
    assert agent.current_value == "opencode"
    assert [(o.value, o.name) for o in agent.options] == [
        ("claude", "Claude Code"),
        ("codex", "Codex"),
        ("opencode", "OpenCode"),
    ]
    with pytest.raises(RequestError) as bad:
        await acp.set_config_option("agent", "s-2", "gemini")
    assert bad.value.data["agents"] == ["claude", "codex", "opencode"]
    # An ACP agent's children are named by its title in the fork question.
    await acp.ask_fork_approval(cast(Session, acp.hub.sessions["s-1"]), ["a"])
    assert editor.asked[0][1].title.startswith("Fork into 1 parallel task (OpenCode children")
