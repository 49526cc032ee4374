"""Where a fork child's agent runs: on this machine, or on a cluster's node (issue #33).

The core knows a cluster only through `Cluster` (coven_ls/cluster/ray implements it, and the
front end hands it to the hub as it hands the agents, so the core never imports Ray): a cluster
wraps the backend a child would have run on here into one whose agents run on a node. The
wrapped backend's agents say where first (`Placed`), then speak as a local one would; the
child's worktree here is kept up to date with the node's work after each turn, so the merge back
is the same for every child.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ... import protocol
from ...protocol.types import (
    AgentName,
    ClusterOptions,
    ClusterPlacement,
    InitializationOptions,
    Isolation,
    Placement,
)
from ..agent import Backend
from ..slots import Slots

log = logging.getLogger(__name__)


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


# The front end's way to make the server's cluster from the client's options (coven_ls/cluster
# builds the real one; a test hands a fake), as it hands the agents (agent_registry.py).
ClusterFactory = Callable[[ClusterOptions], Cluster]


class PlacementRefused(Exception):
    """A fork's children cannot run where it asked: the fork fails with this reason."""


@dataclass(frozen=True)
class Where:
    """Where one fork child runs: here (`cluster` None) or on the cluster's nodes."""

    cluster: Cluster | None = None

    def backend(self, local: Backend, agent: AgentName, options: InitializationOptions) -> Backend:
        """The backend the child runs on: `local` itself, or `local` wrapped by the cluster."""
        return local if self.cluster is None else self.cluster.backend(local, agent, options)

    def wire(self) -> ClusterPlacement | None:
        """How the child's `placement` starts out: its node is known once it is placed."""
        return (
            None if self.cluster is None else ClusterPlacement(cluster=self.cluster.name, node=None)
        )


HERE = Where()


@dataclass
class Plan:
    """Where each of a fork's children runs, in task order, and why those the fork would have
    placed on the cluster run here instead (for the user), if any do."""

    places: list[Where]
    reason: str | None = None

    @property
    def on_cluster(self) -> bool:
        return any(w.cluster is not None for w in self.places)

    def kept_here(self, reason: str) -> Plan:
        return Plan([HERE] * len(self.places), reason)


class Placements:
    """The one place fork children are placed: the server's cluster (made once, from the first
    client options that configure one), how each fork's children are spread between here and
    there, and the slots each side's children take a turn in (the server's `maxParallel` here,
    the cluster's `max_children` there)."""

    def __init__(self, local_slots: Slots, factory: ClusterFactory | None) -> None:
        self._local = local_slots
        self._factory = factory
        self.cluster: Cluster | None = None
        self._cluster_slots: Slots | None = None
        # Why the options' cluster could not be made (said to each client that gives it).
        self.problem: str | None = None

    def configure(self, options: ClusterOptions | None) -> str | None:
        """Make the server's cluster from a client's options, once; returns what the user must be
        told when the options name a cluster this server cannot use, else None."""
        if options is None or self.cluster is not None:
            return None
        if self._factory is None:
            self.problem = (
                f"initializationOptions.cluster names a {options.name} cluster, but this coven-ls "
                f"has no cluster support: install it with `pip install 'coven-ls[{options.name}]'` "
                "and restart; every fork child runs on this machine until then."
            )
            return self.problem
        try:
            self.cluster = self._factory(options)
        except Exception as exc:  # a bad address, a missing package: said, and the server runs on
            log.warning("the cluster could not be set up", exc_info=True)
            self.problem = (
                f"The {options.name} cluster of initializationOptions.cluster could not be set "
                f"up: {exc}. Every fork child runs on this machine; fix the option and restart."
            )
            return self.problem
        self.problem = None
        self._cluster_slots = Slots(self.cluster.max_children)
        return None

    @property
    def cluster_name(self) -> str | None:
        return None if self.cluster is None else self.cluster.name

    def check(self, method: str, placement: Placement | None, isolation: Isolation | None) -> None:
        """InvalidParams for a placement this server cannot give a fork (before it is made)."""
        if placement not in ("cluster", "auto"):
            return
        if self.cluster is None and placement == "cluster":
            why = f" ({self.problem})" if self.problem else ""
            raise protocol.invalid_params(
                method,
                "'placement': 'cluster' needs a cluster, and this server has none"
                f"{why}: set initializationOptions.cluster (e.g. "
                '{"ray": {"address": "ray://head:10001"}}) and restart, or use \'local\'.',
                "placement",
            )
        if isolation == "shared" and placement == "cluster":
            raise protocol.invalid_params(
                method,
                "'placement': 'cluster' needs worktree isolation (a child on a node works in a "
                "worktree of its own, sent there and brought back), and the fork asks for "
                "'shared'; use 'worktree' isolation or 'local' placement.",
                "placement",
            )

    async def plan(self, placement: Placement, count: int) -> Plan:
        """Where each of `count` children runs. `cluster`: all on the cluster, or
        PlacementRefused when it cannot take them; `auto`: the first `maxParallel` here, the
        rest on the cluster (all here, saying why, when it cannot take them)."""
        if placement == "local":
            return Plan([HERE] * count)
        here = count if placement == "cluster" else min(count, self._local.limit)
        if here == count and placement == "auto":
            return Plan([HERE] * count)  # no child overflows: the cluster is not asked
        if self.cluster is None:
            if placement == "cluster":
                raise PlacementRefused(
                    "placement 'cluster' needs a cluster, and this server has none: set "
                    "initializationOptions.cluster"
                )
            return Plan([HERE] * count, "no cluster is configured (initializationOptions.cluster)")
        unreachable = await self.cluster.unreachable()
        if unreachable is not None:
            if placement == "cluster":
                raise PlacementRefused(f"the {self.cluster.name} cluster: {unreachable}")
            return Plan(
                [HERE] * count,
                f"the {self.cluster.name} cluster cannot take children ({unreachable}), so all "
                "run on this machine",
            )
        there = Where(self.cluster)
        if placement == "cluster":
            return Plan([there] * count)
        return Plan([HERE] * here + [there] * (count - here))

    def where_they_work(
        self, plan: Plan, placement: Placement, isolation: str, reason: str | None
    ) -> Plan:
        """The plan once the fork's isolation is known: cluster children work in worktrees (a
        node gets the worktree's snapshot and sends its commits back), so a fork whose children
        share the parent's folder keeps them here (`auto`) or fails (`cluster`)."""
        if isolation == "worktree" or not plan.on_cluster:
            return plan
        why = reason or "the children share the parent's folder"
        if placement == "cluster":
            raise PlacementRefused(
                f"its children cannot run on the cluster without worktrees ({why}); a child on "
                "a node works in a worktree of its own"
            )
        return plan.kept_here(f"children run on the cluster only in worktrees ({why})")

    def slots(self, placement: ClusterPlacement | None) -> Slots:
        """The slots a child takes its turns in: the cluster's for one placed there."""
        if placement is not None and self._cluster_slots is not None:
            return self._cluster_slots
        return self._local

    async def aclose(self) -> None:
        """The server stops cleanly: the cluster ends every child it runs for it."""
        if self.cluster is None:
            return
        try:
            await self.cluster.aclose()
        except Exception:  # the rest of the stop goes on; the log says what went wrong
            log.warning("closing the %s cluster failed", self.cluster.name, exc_info=True)
