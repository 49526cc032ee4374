"""Fork children on a Ray cluster (issue #33): `RayCluster` implements the core's `Cluster`
(core/fork/placement.py) from a plain `RayTarget`.

- target.py: the configuration, and which environment variables travel;
- connection.py: connecting (lazily, nothing on stdout), the version check;
- cluster.py: `RayCluster`, one actor per child;
- backend.py: the server's side of a child (`RayBackend`, `RayAgent`);
- node.py: the node's side, the actor that runs the child's agent with the same adapter;
- items.py: what travels between the two;
- bundles.py, local_work.py, node_cache.py: git objects and files both ways, the node's cache;
- conversations.py: how a conversation travels (Claude's session file);
- remap.py: paths between this machine and a node.

Ray is imported only when a cluster is used: `pip install 'coven-ls[ray]'`."""

from collections.abc import Mapping
from typing import Any

import msgspec

from .cluster import RayCluster
from .target import RayTarget

__all__ = ["RayCluster", "RayTarget", "cluster_from_options"]


def cluster_from_options(cluster: Any) -> RayCluster:
    """The cluster `initializationOptions.cluster` names (`{"ray": {...}}`, as JSON or as the
    protocol's struct): what a front end hands the hub. A ValueError says what is wrong."""
    plain = cluster if isinstance(cluster, Mapping) else msgspec.to_builtins(cluster)
    ray = plain.get("ray") if isinstance(plain, Mapping) else None
    if not isinstance(ray, Mapping):
        raise ValueError('initializationOptions.cluster names no cluster: {"ray": {...}}.')
    return RayCluster(RayTarget.from_wire(ray))
