"""The agents a server can run, as its front end hands them to the hub: the core knows agents
only through this value and the `Backend` interface (`core/agent.py`), never by importing
coven_ls/agents, which stands above the core and builds it (`agents.REGISTRY`). A test hands the
hub fakes the same way."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, replace

from anyio.abc import TaskGroup

from ..protocol.types import AgentName, InitializationOptions
from .agent import Backend

# (agent name, the client's options, the hub's task group) -> a backend for that agent.
BackendFactory = Callable[[str, InitializationOptions, TaskGroup], Backend]


@dataclass(frozen=True)
class AgentRegistry:
    names: Collection[str]
    """every agent known by name (a stored session of another is run as claude)"""
    make_backend: BackendFactory
    backend_key: Callable[[str, InitializationOptions], tuple[str, str | None]]
    """which backend a session of an agent uses under these options: one per agent and binary"""
    available: Callable[[InitializationOptions], list[AgentName]]
    """the agents whose binary is found under these options: what a client may offer"""
    title: Callable[[str], str] = lambda name: name
    """an agent's name for people ("Claude Code", "OpenCode"); the name itself if none"""

    def knows(self, agent: str, options: InitializationOptions) -> bool:
        """Whether sessions of `agent` can run under these options: one coven-ls hosts itself,
        or an ACP agent they configure."""
        return agent in self.names or agent in (options.agents or {})

    def with_backends(self, make_backend: BackendFactory) -> AgentRegistry:
        """The same agents, their backends made by `make_backend` (a test's fakes)."""
        return replace(self, make_backend=make_backend)
