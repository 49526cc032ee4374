"""The wire's cluster shapes (issue #33): the cluster fork children may be placed on
(`initializationOptions.cluster`) and where one placed there runs (`ClusterPlacement`). types.py
re-exports them; read their field docstrings as the reference, as types.py's."""

from __future__ import annotations

from .errors import invalid_params
from .wire import NonNegativeFloat, NonNegativeInt, PositiveInt, Wire


class RayClusterOptions(Wire, omit_defaults=True):
    """A Ray cluster fork children may be placed on (`initializationOptions.cluster.ray`; needs
    the `ray` extra, `pip install coven-ls[ray]`, here and on every node). coven-ls never starts a
    Ray of its own: the cluster is one you run (`ray start --head`, a VM group, KubeRay), and
    coven-ls connects to it when a fork first places a child there."""

    address: str = "auto"
    """where the cluster is: a Ray client address (`ray://head:10001`, the head's client server
    port), a cluster address (`head:6379`, the GCS, for a server that runs on one of the
    cluster's machines), or `auto` (the cluster a `ray start` on this machine joined, as
    `ray.init(address="auto")` finds it)"""
    env: list[str] = []
    """names of the environment variables that travel with each child to its node (an API key,
    say: `["ANTHROPIC_API_KEY"]`), read from the server's environment when the child starts and
    sent as call arguments, never in a runtime environment a dashboard shows, never logged; no
    other variable travels"""
    resources: dict[str, float] | None = None
    """what each child asks of a node, as Ray resources (`{"CPU": 1, "coven": 1}`: a custom
    resource the nodes meant for children declare keeps them off the others); default `{"CPU":
    1}`"""
    maxChildren: PositiveInt = 8
    """how many children may run on the cluster at once, across the server: the cluster's own
    slots, apart from `maxParallel` (which counts only the children that run here); the rest
    wait, `queued`, in order"""
    reattachSeconds: NonNegativeFloat = 600.0
    """how long children on the cluster outlive a server that stopped without closing them (a
    crash): a server started again within it takes them up again, else they end themselves. A
    clean stop ends them at once"""
    nodeCacheBytes: NonNegativeInt = 2_000_000_000
    """how much each node keeps of what children were sent (the fork's snapshots as git objects,
    `.worktreeinclude` files by their digest), so that the next child there sends only what is
    new; past it the least recently used goes first"""


class ClusterOptions(Wire, omit_defaults=True):
    """Clusters fork children may be placed on (`initializationOptions.cluster`); one is used, and
    only by forks whose `placement` is `cluster` or `auto`."""

    ray: RayClusterOptions | None = None
    """a Ray cluster (see RayClusterOptions)"""

    def __post_init__(self) -> None:
        if self.ray is None:
            raise invalid_params(
                "initializationOptions",
                'cluster names no cluster: give cluster.ray (e.g. {"ray": {"address": '
                '"ray://head:10001"}}), or leave cluster out',
                "cluster",
            )

    @property
    def name(self) -> str:
        """The configured cluster's kind, as messages and the wire name it."""
        return "ray"


class ClusterPlacement(Wire):
    """Where a fork child placed on a cluster runs (a child that runs on this machine has none)."""

    cluster: str
    """the cluster's name, as `initializationOptions.cluster` names it (`ray`)"""
    node: str | None
    """the node it runs on, for a person (its host name or address); null until the cluster has
    placed it (a `placed` event says when)"""
    nodeId: str | None = None
    """the cluster's own id of that node, when it has one"""
