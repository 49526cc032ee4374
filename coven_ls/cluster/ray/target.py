"""Which Ray cluster children go to and what each asks of it: `RayTarget`, the plain
configuration the front end builds from `initializationOptions.cluster.ray`, and which of the
server's environment variables travel to a node (only those the user named)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_RESOURCES: Mapping[str, float] = {"CPU": 1}


@dataclass(frozen=True)
class RayTarget:
    """A Ray cluster to place children on."""

    # A cluster address ("head:6379"), a Ray client one ("ray://head:10001", which needs
    # `ray[client]`) or "auto" (the cluster this machine is part of). coven-ls never starts a
    # Ray of its own.
    address: str
    # The names of the server's environment variables that travel to a child's node (as call
    # arguments: never in a runtime environment a dashboard shows, never logged).
    env: tuple[str, ...] = ()
    # What each child asks of a node ("CPU", "GPU", "memory" or a custom resource).
    resources: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_RESOURCES))
    max_children: int = 8  # at once on the cluster, across the server
    reattach_seconds: float = 600.0  # how long children outlive a crashed server
    node_cache_bytes: int = 2_000_000_000  # each node's cache limit

    @classmethod
    def from_wire(cls, ray: Mapping[str, Any]) -> RayTarget:
        """From `initializationOptions.cluster.ray` as JSON (camelCase); a missing address or
        a field of the wrong type is a ValueError saying which."""
        address = ray.get("address")
        if not isinstance(address, str) or not address:
            raise ValueError(
                'cluster.ray.address is required: a Ray cluster address ("head:6379"), a Ray '
                'client address ("ray://head:10001") or "auto".'
            )
        env = ray.get("env", [])
        if not isinstance(env, list) or not all(isinstance(n, str) for n in env):
            raise ValueError('cluster.ray.env must be a list of variable names ("NAME").')
        resources = ray.get("resources", DEFAULT_RESOURCES)
        if not isinstance(resources, Mapping) or not all(
            isinstance(v, (int, float)) and v >= 0 for v in resources.values()
        ):
            raise ValueError('cluster.ray.resources must map names to amounts ({"CPU": 1}).')
        return cls(
            address=address,
            env=tuple(env),
            resources={str(k): float(v) for k, v in resources.items()},
            max_children=_positive(ray, "maxChildren", 8),
            reattach_seconds=float(_positive(ray, "reattachSeconds", 600)),
            node_cache_bytes=_positive(ray, "nodeCacheBytes", 2_000_000_000),
        )

    def actor_options(self) -> dict[str, Any]:
        """`resources` as Ray's actor options: CPU, GPU and memory by their own names."""
        rest = dict(self.resources)
        options: dict[str, Any] = {"num_cpus": rest.pop("CPU", 0)}
        if "GPU" in rest:
            options["num_gpus"] = rest.pop("GPU")
        if "memory" in rest:
            options["memory"] = rest.pop("memory")
        if rest:
            options["resources"] = rest
        return options


def _positive(ray: Mapping[str, Any], name: str, default: int) -> int:
    value = ray.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"cluster.ray.{name} must be a positive whole number.")
    return value


def travelling_env(
    names: tuple[str, ...], environ: Mapping[str, str], spec_env: Mapping[str, str]
) -> dict[str, str]:
    """The variables a child's agent gets on its node: the named ones the server has (a name it
    lacks is left out), then the session's own (`AgentSpec.env`, which wins)."""
    chosen = {name: environ[name] for name in names if name in environ}
    return {**chosen, **spec_env}
