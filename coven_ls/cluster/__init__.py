"""Clusters fork children may be placed on (issue #33), each implementing the core's `Cluster`
(core/fork/placement.py): `ray` runs them on a Ray cluster's nodes. Outside the core: the core
knows a cluster only through that protocol, and never imports these."""

from __future__ import annotations

import importlib.util

from ..core.fork.placement import Cluster
from ..protocol.cluster import ClusterOptions


def make_cluster(options: ClusterOptions) -> Cluster:
    """The cluster `initializationOptions.cluster` names: what the front ends hand the hub
    (`Hub(task_group, REGISTRY, make_cluster)`). Raises ValueError saying what to do when it
    cannot be made (Ray not installed, a bad field)."""
    if importlib.util.find_spec("ray") is None:
        raise ValueError("Ray is not installed here: pip install 'coven-ls[ray]'")
    from .ray import cluster_from_options

    return cluster_from_options(options)
