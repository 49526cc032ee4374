"""The node side: one Ray actor per child (`NodeChild`, named `coven-child-<id>` in the
`coven-ls` namespace), which makes the child's worktree in the node's cache, runs its agent with
the same adapter as the server would (the agents registry's `make_backend`, in an anyio task
group of the actor's own), and streams what it says back (`run`, a streaming generator):
`Placed`, then `Ready` or `Ended`, then its events, its permission questions (answered by
`answer`) and, before each turn's end, its work.

The agent is opened and closed in one task of the actor's (`_main`): claude-agent-sdk's client
must be connected and disconnected by the same task, and Ray runs each method call in a task of
its own."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from ... import __version__
from ...core.agent import (
    Agent,
    Decision,
    TaskNotRunning,
    describe_failure,
)
from ...core.agent.events import TurnEnded
from ...core.workspace.protected import protected_git_files
from ...core.workspace.worktrees import temp_folder
from ...protocol.types import PermissionMode, PermissionOption
from . import bundles, conversations, node_cache
from .items import Ended, Event, Placed, Question, Ready, Shipment, StreamItem, Work
from .remap import node_spec

ACTOR_PREFIX = "coven-child-"
NAMESPACE = "coven-ls"
# How long a closing agent may take before the actor gives up on it.
CLOSE_SECONDS = 30.0
# How long `items` waits for the first new item before it answers with none.
POLL_SECONDS = 1.0


def node_facts() -> dict[str, Any]:
    """Where this runs: the node's host name, its Ray id and its coven-ls version."""
    node_id: str | None = None
    with contextlib.suppress(Exception):
        import ray

        node_id = ray.get_runtime_context().get_node_id()
    return {"node": socket.gethostname(), "node_id": node_id, "version": __version__}


class NodeChild:
    """A child's agent on a node (a Ray actor: `ray.remote(NodeChild)`, async)."""

    def __init__(self) -> None:
        self._items: list[StreamItem] = []  # not yet taken by the server
        self._first = 0  # the number of `_items[0]`
        self._arrived = asyncio.Event()
        self._answers: dict[str, asyncio.Future[Decision]] = {}
        self._agent: Agent | None = None
        self._closing = asyncio.Event()
        self._main_task: asyncio.Task[None] | None = None
        self._ended = False
        self._have: list[str] = []  # commits the server has
        self._worktree: Path | None = None
        self._repo: Path | None = None
        self._config: Path | None = None

    async def facts(self) -> dict[str, Any]:
        return node_facts()

    async def have(self, origin: str, commits: Sequence[str]) -> list[str]:
        """Those of `commits` this node's cache of `origin` has."""
        root = node_cache.cache_root()
        repo = await anyio.to_thread.run_sync(node_cache.origin_repo, root, origin)
        return await anyio.to_thread.run_sync(bundles.has_commits, repo, list(commits))

    async def missing(self, digests: Sequence[str]) -> list[str]:
        root = node_cache.cache_root()
        return await anyio.to_thread.run_sync(node_cache.missing_contents, root, list(digests))

    async def start(self, shipment: Shipment, env: dict[str, str]) -> Placed:
        """Start the child's agent (once); what happens comes from `items`."""
        if self._main_task is None:
            self._main_task = asyncio.get_running_loop().create_task(self._main(shipment, env))
        facts = node_facts()
        return Placed(facts["node"], facts["node_id"], facts["version"])

    async def items(self, since: int, wait: float = POLL_SECONDS) -> list[StreamItem]:
        """The items from number `since` on (the earlier ones are forgotten), waiting up to
        `wait` seconds for one when there are none yet; `Ended` is the last there is."""
        drop = min(max(since - self._first, 0), len(self._items))
        del self._items[:drop]
        self._first += drop
        if not self._items:
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), wait)
        return list(self._items)

    def _put(self, item: StreamItem) -> None:
        if self._ended:
            return
        if isinstance(item, Ended):
            self._ended = True
        self._items.append(item)
        self._arrived.set()

    async def _main(self, shipment: Shipment, env: dict[str, str]) -> None:
        from ...agents import make_backend

        agent: Agent | None = None
        try:
            async with anyio.create_task_group() as tg:
                try:
                    spec = await anyio.to_thread.run_sync(self._prepare, shipment, env)
                    backend = make_backend(shipment.agent, shipment.options, tg)
                    try:
                        agent = await backend.open(spec, self._ask)
                    except BaseException:
                        await backend.aclose()
                        raise
                except Exception as exc:
                    self._put(Ended(describe_failure(exc, ""), starting=True))
                    return
                self._agent = agent
                self._put(Ready(spec.cwd, agent.reports_ended_tasks))
                tg.start_soon(self._pump, agent)
                try:
                    await self._closing.wait()
                finally:
                    with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_SECONDS):
                        await agent.close()
                        await backend.aclose()
                    tg.cancel_scope.cancel()
        except Exception as exc:
            self._put(Ended(describe_failure(exc, agent.stderr_tail() if agent else "")))
        finally:
            self._put(Ended(None))
            await anyio.to_thread.run_sync(self._remove_worktree)

    def _prepare(self, shipment: Shipment, env: dict[str, str]) -> Any:
        root = node_cache.cache_root()
        repo = node_cache.origin_repo(root, shipment.origin)
        if shipment.bundle is not None:
            bundles.take_bundle(repo, shipment.bundle)
        if shipment.cache_bytes is not None:
            wanted = [f.digest for f in shipment.included if f.digest]
            node_cache.prune(root, shipment.cache_bytes, keep=wanted, keep_repo=repo)
        node_cache.store_contents(root, shipment.contents)
        worktree = node_cache.make_worktree(
            repo, root, shipment.name, shipment.head, shipment.branch
        )
        self._worktree, self._repo = worktree, repo
        node_cache.place_included(root, worktree, shipment.included)
        temp = temp_folder(worktree)
        temp.mkdir(parents=True, exist_ok=True)
        self._config = conversations.config_dir(env)
        if shipment.conversation is not None and shipment.conversation_id is not None:
            conversations.place_session(
                self._config, str(worktree), shipment.conversation_id, shipment.conversation
            )
        self._have = [shipment.head]
        fence = shipment.spec.fence
        protected = tuple(protected_git_files(str(repo))) if fence is not None else ()
        return node_spec(
            shipment.spec,
            worktree=str(worktree),
            repository=str(repo),
            temp_dir=str(temp),
            env=env,
            protected=protected,
        )

    def _remove_worktree(self) -> None:
        if self._worktree is not None and self._repo is not None:
            node_cache.remove_worktree(self._repo, self._worktree)
            self._worktree = None

    async def _pump(self, agent: Agent) -> None:
        try:
            async with contextlib.aclosing(agent.messages()) as stream:
                async for event in stream:
                    if isinstance(event, TurnEnded):
                        work = await anyio.to_thread.run_sync(self._work, event.conversation_id)
                        self._put(work)
                    self._put(Event(event))
        except Exception as exc:
            self._put(Ended(describe_failure(exc, agent.stderr_tail())))
        else:
            self._put(Ended(None))

    def _work(self, conversation_id: str | None) -> Work:
        assert self._worktree is not None
        conversation = None
        if conversation_id is not None and self._config is not None:
            found = conversations.find_session(self._config, conversation_id, str(self._worktree))
            conversation = found.read_bytes() if found is not None else None
        work = node_cache.work_item(self._worktree, self._have, conversation, conversation_id)
        self._have += [c for c in (work.head, work.state) if c is not None]
        return work

    async def _ask(
        self,
        tool_name: str,
        tool_input: dict[str, Any],
        tool_use_id: str | None,
        options: Sequence[PermissionOption] = (),
    ) -> Decision:
        question = uuid.uuid4().hex
        answered: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
        self._answers[question] = answered
        try:
            self._put(Question(question, tool_name, tool_input, tool_use_id, tuple(options)))
            return await answered
        finally:
            self._answers.pop(question, None)

    async def answer(self, question: str, decision: Decision) -> None:
        found = self._answers.get(question)
        if found is not None and not found.done():
            found.set_result(Decision(*decision))

    def _running(self) -> Agent:
        if self._agent is None:
            raise RuntimeError("the child's agent has not started on the node")
        return self._agent

    async def send(self, text: str) -> None:
        await self._running().send(text)

    async def interrupt(self) -> None:
        await self._running().interrupt()

    async def stop_task(self, task_id: str) -> str | None:
        """None when stopped; else why not (TaskNotRunning's words)."""
        try:
            await self._running().stop_task(task_id)
        except TaskNotRunning as exc:
            return str(exc) or f"no task {task_id}"
        return None

    async def set_permission_mode(self, mode: PermissionMode) -> None:
        await self._running().set_permission_mode(mode)

    async def kill(self) -> None:
        if self._agent is not None:
            self._agent.kill()

    async def stderr_tail(self) -> str:
        return self._agent.stderr_tail() if self._agent is not None else ""

    async def close(self) -> None:
        """Close the agent (in the task that opened it) and remove the child's worktree."""
        self._closing.set()
        if self._main_task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._main_task), CLOSE_SECONDS + 10)
