"""`RayAgent` (coven_ls/cluster/ray/backend.py) against a fake actor, no Ray: what a node's
stream says becomes agent events (`Placed` first, paths made this machine's), questions are
asked here and answered there, and a stream that breaks is the node lost."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from coven_ls.cluster.ray import items
from coven_ls.cluster.ray.backend import NodeFeed, RayAgent
from coven_ls.cluster.ray.node import NodeChild
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


class FakeFeed:
    """A `NodeFeed` whose node says `things` (an exception: the call raised it)."""

    def __init__(self, *things: Any) -> None:
        self._things = things

    async def each(self) -> AsyncIterator[Any]:
        for thing in self._things:
            if isinstance(thing, BaseException):
                raise thing
            yield thing


def stream_of(*things: Any) -> Any:
    return FakeFeed(*things)


def agent_for(
    stream: Any, asked: list[tuple[str, dict[str, Any]]]
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


class PollingActor:
    """An actor whose `items(since)` answers from its numbered items, two at a time."""

    def __init__(self, *things: Any) -> None:
        self.things = list(things)
        self.asked: list[int] = []
        self.items = self

    async def remote(self, since: int) -> list[Any]:
        self.asked.append(since)
        return self.things[since : since + 2]


async def test_a_feed_asks_from_where_it_stopped_and_ends_at_ended() -> None:
    said = [items.Event(AgentStarted("c1")), items.Ready("/x"), items.Event(TurnEnded("success"))]
    actor = PollingActor(*said, items.Ended(None), items.Ready("/never"))
    feed = NodeFeed(actor)
    async with contextlib.aclosing(feed.each()) as stream:
        whole = [item async for item in stream]
    assert whole == [*said, items.Ended(None)]  # not the item after Ended
    assert actor.asked == [0, 2]
    # A feed left after its first item asks again for the rest of the batch: nothing lost.
    actor = PollingActor(*said, items.Ended(None))
    feed = NodeFeed(actor)
    async with contextlib.aclosing(feed.each()) as stream:
        async for _ in stream:
            break
    async with contextlib.aclosing(feed.each()) as stream:
        rest = [item async for item in stream]
    assert rest == [*said[1:], items.Ended(None)]
    assert actor.asked == [0, 1, 3]


async def test_a_nodes_items_wait_for_the_first_and_are_forgotten_once_asked_past() -> None:
    child = NodeChild()
    assert await child.items(0, wait=0.01) == []  # nothing yet: answers after the wait
    said = [items.Ready("/x"), items.Event(TurnEnded("success"))]

    async def later() -> None:
        await anyio.sleep(0.05)
        for item in said:
            child._put(item)

    async with anyio.create_task_group() as tg:
        tg.start_soon(later)
        with anyio.fail_after(10):
            assert await child.items(0, wait=30) == said  # woken long before the wait's end
    assert await child.items(0) == said  # asked again: nothing was lost
    assert await child.items(1) == said[1:]
    child._put(items.Ended(None))
    child._put(items.Ended("after the end"))
    assert await child.items(2) == [items.Ended(None)]
