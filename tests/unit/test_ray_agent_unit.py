"""`RayAgent` (coven_ls/cluster/ray/backend.py) against a fake actor, no Ray: what a node's
stream says becomes agent events (`Placed` first, paths made this machine's), questions are
asked here and answered there, and a stream that breaks is the node lost."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from coven_ls.cluster.ray import items
from coven_ls.cluster.ray.backend import RayAgent
from coven_ls.cluster.ray.target import RayTarget
from coven_ls.core.agent import AgentFailed, AgentSpec, Decision, New
from coven_ls.core.agent.events import AgentStarted, Placed, TurnEnded


class Call:
    def __init__(self, actor: FakeActor, name: str) -> None:
        self._actor, self._name = actor, name

    async def remote(self, *args: Any) -> Any:
        self._actor.calls.append((self._name, args))
        return None


class FakeActor:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> Call:
        return Call(self, name)


class FakeCluster:
    target = RayTarget("head:6379")

    def __init__(self) -> None:
        self.ended: list[str] = []

    async def connect(self) -> None:
        return None

    async def new_actor(self, name: str) -> Any:
        raise AssertionError("not here")

    def end_actor(self, name: str) -> None:
        self.ended.append(name)


async def value(item: Any) -> Any:
    if isinstance(item, BaseException):
        raise item
    return item


async def stream_of(*things: Any) -> AsyncIterator[Any]:
    for thing in things:
        yield value(thing)


def agent_for(
    stream: AsyncIterator[Any], asked: list[tuple[str, dict[str, Any]]]
) -> tuple[RayAgent, FakeActor, FakeCluster]:
    async def ask(name: str, tool_input: dict[str, Any], tool_use_id: Any, options: Any = ()):
        asked.append((name, tool_input))
        return Decision(False, "no")

    actor, cluster = FakeActor(), FakeCluster()
    agent = RayAgent(
        actor,
        "c1",
        stream,
        items.Placed("node-a", "id-a", "0.1.0"),
        items.Ready("/cache/work/c1", reports_ended_tasks=True),
        AgentSpec(cwd="/work/child", start=New("c1")),
        ask,
        cluster,
    )
    return agent, actor, cluster


async def test_a_nodes_stream_becomes_the_agents_events() -> None:
    asked: list[tuple[str, dict[str, Any]]] = []
    agent, actor, _ = agent_for(
        stream_of(
            items.Event(AgentStarted("c1", cwd="/cache/work/c1")),
            items.Question("q1", "Write", {"file_path": "/cache/work/c1/a.py"}, "t1"),
            items.Event(TurnEnded("success", "done")),
            items.Ended(None),
        ),
        asked,
    )
    assert agent.reports_ended_tasks
    async with contextlib.aclosing(agent.messages()) as stream:
        seen = [event async for event in stream]
    assert seen == [
        Placed("node-a", "id-a"),
        AgentStarted("c1", cwd="/work/child"),
        TurnEnded("success", "done"),
    ]
    assert asked == [("Write", {"file_path": "/work/child/a.py"})]
    assert actor.calls == [("answer", ("q1", Decision(False, "no")))]


async def test_an_agent_that_failed_on_the_node_says_why() -> None:
    agent, _, _ = agent_for(stream_of(items.Ended("the CLI exited with code 1")), [])
    with pytest.raises(AgentFailed, match="the CLI exited with code 1"):
        async with contextlib.aclosing(agent.messages()) as stream:
            async for _ in stream:
                pass
    assert agent.stderr_tail() == "the CLI exited with code 1"


async def test_a_broken_stream_is_the_node_lost_and_later_calls_say_so() -> None:
    lost = RuntimeError("The actor died unexpectedly before finishing this task.\nmore")
    agent, _, cluster = agent_for(stream_of(items.Event(AgentStarted("c1")), lost), [])
    seen = []
    with pytest.raises(AgentFailed, match=r"^The node node-a was lost: The actor died .*task\.$"):
        async with contextlib.aclosing(agent.messages()) as stream:
            async for event in stream:
                seen.append(event)
    assert len(seen) == 2
    with pytest.raises(AgentFailed, match="node-a was lost"):
        await agent.send("more")
    await agent.close()
    assert cluster.ended == ["c1"]


async def test_a_stream_ended_by_closing_here_is_no_loss() -> None:
    agent, _, cluster = agent_for(stream_of(RuntimeError("actor killed")), [])
    agent.kill()
    async with contextlib.aclosing(agent.messages()) as stream:
        assert [e async for e in stream] == [Placed("node-a", "id-a")]
    assert cluster.ended == ["c1"]
