"""`RayCluster`: the core's `Cluster` (core/fork/placement.py) on a Ray cluster. It connects
when first needed (never at server start: a server that places nothing on the cluster never
talks to it), checks that the nodes run this coven-ls version, makes one actor per child
(node.py) with the resources children ask, and ends them all when the server stops."""

from __future__ import annotations

import logging
from typing import Any

import anyio

from ...core.agent import Backend
from ...protocol.types import AgentName, InitializationOptions
from . import connection
from .backend import PLACE_SECONDS, RayBackend
from .connection import first_line
from .node import ACTOR_PREFIX, NodeChild, node_facts
from .target import RayTarget

log = logging.getLogger(__name__)


class RayCluster:
    name = "ray"

    def __init__(self, target: RayTarget) -> None:
        self.target = target
        self.max_children = target.max_children
        self._lock = anyio.Lock()
        self._connected = False
        self._actors: dict[str, Any] = {}  # child name → its actor's handle

    def backend(self, local: Backend, agent: AgentName, options: InitializationOptions) -> Backend:
        return RayBackend(self, local, agent, options)

    async def connect(self) -> None:
        """Connect to the cluster (once; later calls return at once). Raises RuntimeError
        saying why for a person."""
        async with self._lock:
            if self._connected:
                return
            try:
                await anyio.to_thread.run_sync(connection.connect, self.target.address)
            except RuntimeError:
                raise
            except Exception as exc:
                raise RuntimeError(
                    f"The Ray cluster at {self.target.address} could not be reached: "
                    f"{first_line(exc)}"
                ) from exc
            self._connected = True

    async def unreachable(self) -> str | None:
        try:
            await self.connect()
        except RuntimeError as exc:
            return str(exc)
        ray = connection.import_ray()
        probe = ray.remote(node_facts).options(**self.target.actor_options())
        try:
            with anyio.fail_after(PLACE_SECONDS):
                facts = await probe.remote()
        except TimeoutError:
            return (
                f"No node of the Ray cluster at {self.target.address} offers what children ask "
                f"({dict(self.target.resources)}): none answered within {PLACE_SECONDS:.0f} s."
            )
        except Exception as exc:
            return (
                f"A node of the Ray cluster at {self.target.address} could not run coven-ls: "
                f"{first_line(exc)} ({connection.INSTALL_HINT})"
            )
        return connection.version_problem(facts, self.target.address)

    async def new_actor(self, name: str) -> Any:
        """A new actor for the child `name`, placed where children's resources are."""
        ray = connection.import_ray()
        actor_class = ray.remote(NodeChild)
        actor = actor_class.options(
            name=f"{ACTOR_PREFIX}{name}",
            namespace=connection.NAMESPACE,
            max_restarts=0,
            max_concurrency=1000,
            **self.target.actor_options(),
        ).remote()
        self._actors[name] = actor
        return actor

    def end_actor(self, name: str) -> None:
        """End the child's actor on its node (what it runs ends with it)."""
        actor = self._actors.pop(name, None)
        if actor is None:
            return
        try:
            connection.import_ray().kill(actor, no_restart=True)
        except Exception:
            log.debug("ending the actor of %s", name, exc_info=True)

    def running(self) -> list[str]:
        """The children whose actors this server runs on the cluster."""
        return list(self._actors)

    async def aclose(self) -> None:
        for name in list(self._actors):
            self.end_actor(name)
