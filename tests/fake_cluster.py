"""A fake `Cluster` (core/fork/placement.py) for unit tests: no Ray. Its backend wraps the local
one (the tests' FakeBackend), so a child "on a node" runs the same scripted agent; each of its
agents says where first (`Placed`), as a real cluster's do. It records which children it ran,
and can be told it cannot be reached."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from coven_ls.core.agent import AgentSpec, Backend, PermissionAsker
from coven_ls.core.agent import events as agent_events
from coven_ls.protocol.types import AgentName, ClusterOptions, InitializationOptions


class NodeAgent:
    """An agent of the local backend, said to run on `node`: `Placed` comes before its words."""

    def __init__(self, agent: Any, node: str, node_id: str) -> None:
        self._agent = agent
        self._placed = agent_events.Placed(node, node_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._agent, name)

    def messages(self) -> AsyncIterator[Any]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[Any]:
        yield self._placed
        async for event in self._agent.messages():
            yield event


class NodeBackend:
    """`local`, its agents placed on the cluster's node (abilities and the rest: `local`'s)."""

    def __init__(self, cluster: FakeCluster, local: Backend, agent: AgentName) -> None:
        self._cluster = cluster
        self._local = local
        self.agent = agent

    def __getattr__(self, name: str) -> Any:
        return getattr(self._local, name)

    async def open(self, spec: AgentSpec, ask_permission: PermissionAsker) -> Any:
        self._cluster.opened.append(spec)
        agent = await self._local.open(spec, ask_permission)
        return NodeAgent(agent, self._cluster.node, f"id-{self._cluster.node}")


@dataclass
class FakeCluster:
    name: str = "ray"
    max_children: int = 8
    node: str = "host-2"
    # Why it cannot take children (`unreachable`); None: it can.
    down: str | None = None
    options: ClusterOptions | None = None
    # What it was asked to run: the backends it made (by agent), the agents it opened.
    backends: list[tuple[AgentName, InitializationOptions]] = field(default_factory=list)
    opened: list[AgentSpec] = field(default_factory=list)
    asked: int = 0  # how often `unreachable` was asked
    closed: bool = False

    def backend(self, local: Backend, agent: AgentName, options: InitializationOptions) -> Any:
        self.backends.append((agent, options))
        return NodeBackend(self, local, agent)

    async def unreachable(self) -> str | None:
        self.asked += 1
        return self.down

    async def aclose(self) -> None:
        self.closed = True

    def factory(self, options: ClusterOptions) -> FakeCluster:
        """A `ClusterFactory` handing out this cluster (and keeping the options it was given)."""
        self.options = options
        return self
