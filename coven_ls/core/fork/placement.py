"""Where a fork child's agent runs: on this machine, or on a cluster's node (issue #33).

The core knows a cluster only through `Cluster` (coven_ls/cluster/ray implements it, and the
front end hands it to the hub as it hands the agents, so the core never imports Ray): a cluster
wraps the backend a child would have run on here into one whose agents run on a node. The
wrapped backend's agents say where first (`Placed`), then speak as a local one would; the
child's worktree here is kept up to date with the node's work after each turn, so the merge back
is the same for every child.
"""

from __future__ import annotations

from typing import Protocol

from ...protocol.types import AgentName, InitializationOptions
from ..agent import Backend


class Cluster(Protocol):
    """A cluster fork children may be placed on."""

    # What the user calls it ("ray"), in messages and on the wire.
    name: str
    # How many children may run on it at once, across the server (its own slots: a child there
    # does not take one of the server's `maxParallel`).
    max_children: int

    def backend(self, local: Backend, agent: AgentName, options: InitializationOptions) -> Backend:
        """A backend whose agents run `agent` on one of the cluster's nodes, as `local` runs it
        here (its abilities are `local`'s). Its agents' first event is `Placed`."""
        ...

    async def unreachable(self) -> str | None:
        """Why no child can be placed on the cluster now, for a person (not reachable, a node's
        coven-ls of another version, ...); None when it can take children."""
        ...

    async def aclose(self) -> None:
        """The server stops cleanly: end every child the cluster runs for it."""
        ...
