"""The server's side of a child on a node: `RayBackend` (what `RayCluster.backend` gives: the
local backend's abilities, conversations, purge and fork points, but agents that run on a
node) and `RayAgent`, whose calls are its actor's (node.py).

`open` ships the start (the worktree's HEAD as a bundle of the commits the node's cache lacks,
the `.worktreeinclude` files whose contents it lacks, the conversation a copy or resume continues,
the environment as call arguments) and waits until the agent is up there. `messages` passes on
what the node says, `Placed` first; it answers permission questions through the local `ask`
and takes each turn's work into the worktree here before passing the turn's end on. A node
lost (its actor died, the node died) ends it with an AgentFailed saying so; the work of
earlier turns stays. What the node says comes by long polls (`NodeFeed`), not a streaming
actor method, which Ray's client (`ray://`) lacks."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import uuid
from collections.abc import AsyncGenerator
from typing import Any, Protocol

import anyio

from ...core.agent import (
    Abilities,
    Agent,
    AgentEvent,
    AgentFailed,
    AgentSpec,
    AgentStartError,
    Backend,
    Conversation,
    Copy,
    Decision,
    Entry,
    New,
    PermissionAsker,
    TaskNotRunning,
)
from ...core.agent.events import Placed
from ...protocol.types import AgentName, InitializationOptions, PermissionMode
from . import bundles, conversations, items, local_work
from .connection import first_line, version_problem
from .remap import localised, remap_value
from .target import RayTarget, travelling_env

log = logging.getLogger(__name__)

# How long a child's actor may take to be placed and answer (a cluster with no node that offers
# what children ask never places it).
PLACE_SECONDS = 120.0


class ChildActors(Protocol):
    """Where a backend's children get their actors (`RayCluster`)."""

    target: RayTarget

    async def connect(self) -> None: ...

    async def new_actor(self, name: str) -> Any: ...

    def end_actor(self, name: str) -> None: ...


def child_name(spec: AgentSpec) -> str:
    """The child's name on the cluster: the conversation id coven chose for it, else a new one."""
    match spec.start:
        case New(conversation_id=chosen) if chosen:
            return chosen
        case Copy(new_id=chosen) if chosen:
            return chosen
    return uuid.uuid4().hex


class RayBackend:
    """A backend whose agents run `agent` on the cluster's nodes."""

    def __init__(
        self,
        cluster: ChildActors,
        local: Backend,
        agent: AgentName,
        options: InitializationOptions,
    ) -> None:
        self._cluster = cluster
        self.local = local
        self._agent = agent
        self._options = options

    def abilities(self) -> Abilities:
        return self.local.abilities()

    async def find_abilities(self) -> Abilities:
        return await self.local.find_abilities()

    def check(self) -> None:
        self.local.check()

    async def conversation(
        self, agent_session_id: str, cwd: str, up_to: str | None = None
    ) -> list[Entry]:
        return await self.local.conversation(agent_session_id, cwd, up_to)

    async def aclose(self) -> None:
        return None  # the cluster's actors end with their agents, or with `RayCluster.aclose`

    async def fork_point_problem(self, conversation: str, message_id: str) -> str | None:
        return await self.local.fork_point_problem(conversation, message_id)

    async def purge(self, conversations: list[Conversation]) -> None:
        await self.local.purge(conversations)

    async def open(self, spec: AgentSpec, ask_permission: PermissionAsker) -> Agent:
        cluster = self._cluster
        kind = self.local.abilities().kind
        conversation_id, conversation = await anyio.to_thread.run_sync(
            conversations.shipped_conversation, kind, spec
        )
        try:
            await cluster.connect()
        except RuntimeError as exc:
            raise AgentStartError(str(exc)) from exc
        name = child_name(spec)
        actor = await cluster.new_actor(name)
        try:
            return await self._start(
                actor, name, spec, ask_permission, conversation_id, conversation
            )
        except BaseException:
            cluster.end_actor(name)
            raise

    async def _start(
        self,
        actor: Any,
        name: str,
        spec: AgentSpec,
        ask_permission: PermissionAsker,
        conversation_id: str | None,
        conversation: bytes | None,
    ) -> RayAgent:
        cluster, where = self._cluster, self._cluster.target.address
        try:
            with anyio.fail_after(PLACE_SECONDS):
                facts = await actor.facts.remote()
        except TimeoutError as exc:
            raise AgentStartError(
                f"No node of the Ray cluster at {where} took the child within "
                f"{PLACE_SECONDS:.0f} s: does a node offer what children ask "
                f"({dict(cluster.target.resources)})?"
            ) from exc
        except Exception as exc:
            raise AgentStartError(
                f"The child could not be placed on the Ray cluster at {where}: {first_line(exc)}"
            ) from exc
        problem = version_problem(facts, where)
        if problem is not None:
            raise AgentStartError(problem)
        cwd = spec.cwd
        head, branch = await anyio.to_thread.run_sync(local_work.head_of, cwd)
        origin = await anyio.to_thread.run_sync(local_work.origin_of, cwd)
        offered = bundles.have_candidates(
            await anyio.to_thread.run_sync(bundles.ancestry, cwd, head)
        )
        have = await actor.have.remote(origin, offered)
        bundle = await anyio.to_thread.run_sync(local_work.start_bundle, cwd, head, have)
        files, where_is = await anyio.to_thread.run_sync(local_work.included_files, cwd)
        lacking = await actor.missing.remote([f.digest for f in files if f.digest])
        contents = {d: await anyio.to_thread.run_sync(where_is[d].read_bytes) for d in lacking}
        shipment = items.Shipment(
            name=name,
            agent=self._agent,
            options=self._options,
            spec=dataclasses.replace(spec, env={}),
            origin=origin,
            head=head,
            branch=branch,
            bundle=bundle,
            bundle_ref=None,
            included=tuple(files),
            contents=contents,
            conversation=conversation,
            conversation_id=conversation_id,
            cache_bytes=cluster.target.node_cache_bytes,
        )
        env = travelling_env(cluster.target.env, os.environ, spec.env)
        node = str(facts.get("node"))
        try:
            placed = await actor.start.remote(shipment, env)
            node = placed.node
            feed = NodeFeed(actor)
            async with contextlib.aclosing(feed.each()) as stream:
                async for item in stream:
                    if isinstance(item, items.Ready):
                        return RayAgent(
                            actor, name, feed, placed, item, spec, ask_permission, cluster
                        )
                    if isinstance(item, items.Ended):
                        raise AgentStartError(
                            item.error or "The child's agent ended as it started."
                        )
        except AgentStartError:
            raise
        except Exception as exc:
            raise AgentStartError(f"The node {node} was lost: {first_line(exc)}") from exc
        raise AgentStartError(f"The node {node} ended the child before its agent started.")


class NodeFeed:
    """What a child's actor says, fetched by long polls (node.py's `items`): `each` yields the
    items not yet yielded, up to `Ended`; after a break, a new `each` goes on where it stopped.
    A Ray error (the actor or its node died) is raised as it is."""

    def __init__(self, actor: Any) -> None:
        self._actor = actor
        self._next = 0  # the number of the next item to yield

    async def each(self) -> AsyncGenerator[items.StreamItem, None]:
        while True:
            for item in await self._actor.items.remote(self._next):
                self._next += 1
                yield item
                if isinstance(item, items.Ended):
                    return


class RayAgent:
    """A child's agent on a node, through its actor."""

    def __init__(
        self,
        actor: Any,
        name: str,
        feed: NodeFeed,
        placed: items.Placed,
        ready: items.Ready,
        spec: AgentSpec,
        ask_permission: PermissionAsker,
        cluster: ChildActors,
    ) -> None:
        self._actor = actor
        self._name = name
        self._feed = feed
        self._placed = placed
        self.reports_ended_tasks = ready.reports_ended_tasks
        self._cwd = spec.cwd
        self._config = conversations.config_dir(spec.env)  # Claude's, here
        # Node paths in what the agent says or asks read as this machine's.
        self._back = [(ready.cwd, spec.cwd)]
        self._ask = ask_permission
        self._cluster = cluster
        self._stderr = ""
        self._lost: str | None = None
        self._closing = False  # closed or killed here: the stream's end is no loss

    @property
    def node(self) -> str:
        return self._placed.node

    def _node_lost(self, exc: BaseException) -> AgentFailed:
        self._lost = f"The node {self.node} was lost: {first_line(exc)}"
        return AgentFailed(self._lost)

    async def _call(self, method: str, *args: Any) -> Any:
        if self._lost is not None:
            raise AgentFailed(self._lost)
        try:
            return await getattr(self._actor, method).remote(*args)
        except Exception as exc:
            raise self._node_lost(exc) from exc

    async def send(self, text: str) -> None:
        await self._call("send", text)

    async def messages(self) -> AsyncGenerator[AgentEvent, None]:
        yield Placed(node=self._placed.node, node_id=self._placed.node_id)
        try:
            async with contextlib.aclosing(self._feed.each()) as stream:
                async for item in stream:
                    match item:
                        case items.Event(event=event):
                            yield localised(event, self._back)
                        case items.Question():
                            await self._answer(item)
                        case items.Work():
                            await anyio.to_thread.run_sync(self._take_work, item)
                        case items.Ended(error=error):
                            if error:
                                self._stderr = error
                                raise AgentFailed(error)
                            return
        except AgentFailed:
            raise
        except Exception as exc:
            if self._closing:
                return  # its actor was ended here
            raise self._node_lost(exc) from exc

    async def _answer(self, question: items.Question) -> None:
        decision = await self._ask(
            question.tool_name,
            remap_value(question.tool_input, self._back),
            question.tool_use_id,
            question.options,
        )
        await self._call("answer", question.id, Decision(*decision))

    def _take_work(self, work: items.Work) -> None:
        local_work.apply_work(self._cwd, work)
        if work.conversation is not None and work.conversation_id is not None:
            conversations.place_session(
                self._config, self._cwd, work.conversation_id, work.conversation
            )

    async def interrupt(self) -> None:
        await self._call("interrupt")

    async def stop_task(self, task_id: str) -> None:
        why = await self._call("stop_task", task_id)
        if why is not None:
            raise TaskNotRunning(why)

    async def set_permission_mode(self, mode: PermissionMode) -> None:
        await self._call("set_permission_mode", mode)

    async def close(self) -> None:
        self._closing = True
        try:
            if self._lost is None:
                with anyio.move_on_after(60):
                    await self._actor.close.remote()
        except Exception:
            log.debug("closing the child %s on its node", self._name, exc_info=True)
        finally:
            self._cluster.end_actor(self._name)

    def kill(self) -> None:
        self._closing = True
        self._cluster.end_actor(self._name)

    def stderr_tail(self) -> str:
        return self._stderr
