"""The hub: every session of this server, the clients watching them, and the routing between.

One hub per server process. Clients (LSP connections) come and go; sessions outlive them when the
server stays up (a TCP server, say). The hub owns the task group every session runner lives in,
so closing the hub ends every agent process.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sqlite3
import stat
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio
import msgspec
from anyio.abc import TaskGroup
from msgspec import to_builtins

from .. import protocol
from ..protocol import EventDict, Status, events
from ..protocol.types import KeptBranch, PermissionOption, Usage
from . import failpoints, keep
from .agent import AgentSpec, Backend, Conversation, Decision
from .agent.missing import MissingBackend, refuse_if_missing
from .agent_registry import AgentRegistry
from .fork.branching import branch_settings, branch_spec, copies_there, written_conversation
from .fork.fork import Fork
from .fork.limits import tree_usage
from .fork.manager import ForkManager, fork_point_problem
from .fork.placement import HERE, ClusterFactory, Placements, Where
from .fork.restart import results_reached
from .fork.spend import limits_from_row
from .fork.tag import fork_prompt
from .journal import Journal
from .session import Session, SessionConfig
from .slots import Slots
from .store import Snapshot, Store, StoreError, StoreInUse, database_path
from .workspace import isolation

log = logging.getLogger(__name__)

# Closing a session can take a while (the SDK gives the CLI 5 s to flush its transcript, then
# escalates to SIGTERM and SIGKILL), but never forever.
CLOSE_ALL_SECONDS = 30.0


@dataclass(frozen=True)
class ClientSettings:
    """A client's workspace root and its `initializationOptions` (defaults applied)."""

    root: str
    options: protocol.InitializationOptions = field(default_factory=protocol.InitializationOptions)
    # The options the client named: a server-wide one it left out is not its to change.
    given: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, options: Any, root: str) -> ClientSettings:
        return cls(
            root,
            protocol.parse("initializationOptions", protocol.InitializationOptions, options),
            frozenset(options) if isinstance(options, dict) else frozenset(),
        )


class Client(Protocol):
    """A connected editor, as the hub sees it."""

    settings: ClientSettings
    store: Store | None

    def send_frame(self, frame: bytes) -> None:
        """Send an already encoded LSP message."""

    def observe(self, event: dict[str, Any]) -> None:
        """React to an event beyond forwarding it (standard-LSP progress and log lines)."""

    def observe_delta(self, delta: events.Delta) -> None:
        """React to a streamed piece beyond forwarding it (a client that is not LSP)."""

    def show_message(self, message: str, warning: bool) -> None:
        """Tell the user something about the server itself (the store, say)."""

    async def ask_permission(
        self,
        session: Session,
        tool_name: str,
        tool_input: dict[str, Any],
        tool_use_id: str | None,
        options: Sequence[PermissionOption] = (),
    ) -> Decision: ...

    async def ask_fork_approval(self, session: Session, tasks: list[str]) -> bool | None:
        """Ask the user to approve a proposed fork; None means the client has its own fork UI
        and will answer with coven/decideFork (or that the user dismissed the question)."""

    async def ask_review(self, child: Session) -> bool | None:
        """Ask the user to apply (True) or discard (False) a fork child's changes; None means
        the client has its own review UI (coven/applyChanges, coven/discardChanges) or that the
        user dismissed the question."""


class Hub:
    def __init__(
        self,
        task_group: TaskGroup,
        agents: AgentRegistry,
        clusters: ClusterFactory | None = None,
    ):
        self._tg = task_group
        # Handed over by the front end: the core never imports coven_ls/agents, nor a cluster's
        # engine (`clusters` makes the cluster from a client's options; None: no cluster).
        self.agents = agents
        self._backends: dict[tuple[str, str | None], Backend] = {}
        self.sessions: dict[str, Session] = {}
        self._owners: dict[str, Client] = {}
        self.clients: list[Client] = []
        self.stores: dict[Path, Store] = {}
        # Events of stored sessions are committed before they are sent, in bursts.
        self.journal = Journal(task_group, self._deliver, self._send_delta, self._store_trouble)
        # Fork children's turns, server-wide: at most maxParallel run at once.
        self.slots = Slots(protocol.InitializationOptions().maxParallel)
        # Where fork children run: here (in `slots`), or on the cluster (in its own slots).
        self.placements = Placements(self.slots, clusters)
        # Fork children whose changes a client is being asked to apply or discard right now.
        self._in_review: set[str] = set()
        self.forks = ForkManager(self, self.journal, self.spawn)

    # --- clients ---------------------------------------------------------------------------------

    def attach(self, client: Client) -> None:
        client.settings = self._settings_of(client.settings)
        self.clients.append(client)
        if "maxParallel" in client.settings.given:
            self.slots.limit = client.settings.options.maxParallel
        problem = self.placements.configure(client.settings.options.cluster)
        if problem is not None:
            client.show_message(problem, warning=True)

    def _settings_of(self, settings: ClientSettings) -> ClientSettings:
        """A client that names no option but its token (a terminal attached to an editor's
        server: `coven-ls chat --tcp`) runs its sessions as the editor that owns the server runs
        its own, not with the defaults: it takes the options of the earliest client still
        connected that named any (fork mode, isolation, merge mode, setup, limits, ...). What it
        named (`given`) stays as it was: it still changes none of the server-wide settings."""
        if settings.given - {"token"}:
            return settings
        owner = next((c for c in self.clients if c.settings.given - {"token"}), None)
        if owner is None:
            return settings
        options = msgspec.structs.replace(owner.settings.options, token=settings.options.token)
        return dataclasses.replace(settings, options=options)

    def detach(self, client: Client) -> None:
        if client in self.clients:
            self.clients.remove(client)

    def publish(self, event: EventDict) -> None:
        self.journal.publish(event)

    def publish_delta(self, delta: events.Delta) -> None:
        self.journal.publish_delta(delta)

    async def flushed(self) -> None:
        """Wait until everything published so far is stored and sent."""
        await self.journal.flushed()

    def _send_frame(
        self, frame: bytes, event: EventDict | None = None, delta: events.Delta | None = None
    ) -> None:
        """Send an encoded notification to every connected client, who also observe the event
        or streamed piece it carries."""
        for client in list(self.clients):
            try:
                client.send_frame(frame)
                if event is not None:
                    client.observe(event)
                elif delta is not None:
                    client.observe_delta(delta)
            except Exception:  # one broken connection must not starve the others
                log.warning("could not send to a client", exc_info=True)

    def _send_delta(self, frame: bytes, delta: events.Delta) -> None:
        self._send_frame(frame, delta=delta)

    def _deliver(self, event: EventDict, body: bytes) -> None:
        """Send an event (encoded once) to every connected client."""
        self._send_frame(protocol.event_frame(body), event)

    def _store_trouble(self, store: Store, error: Exception | None) -> None:
        """Tell every client when sessions stop being saved (and when they are again)."""
        if error is None:
            message = f"coven-ls can save its sessions to {store.path} again; nothing was lost."
        else:
            message = (
                f"coven-ls cannot save its sessions to {store.path} ({error}). Sessions keep "
                "running, and what they do is kept in memory and saved once it can be, but a "
                "restart now would lose it. Free some disk space, or make the folder writable "
                "(or set initializationOptions.stateDir to another folder and restart)."
            )
        for client in list(self.clients):
            try:
                client.show_message(message, warning=error is not None)
            except Exception:
                log.warning("could not tell a client about the store", exc_info=True)

    async def ask_permission(
        self,
        session: Session,
        tool_name: str,
        tool_input: dict[str, Any],
        tool_use_id: str | None,
        options: Sequence[PermissionOption] = (),
    ) -> Decision:
        if session.worktree is not None:
            instead = isolation.outside_write(session.worktree, tool_name, tool_input)
            if instead is not None:
                return Decision(
                    False,
                    "Denied: you work in your own worktree, "
                    f"{session.worktree.path}; that file belongs to the conversation you were "
                    f"forked from. Write {instead} instead.",
                )
            instead = isolation.outside_command(
                session.worktree, tool_name, tool_input, session.config.cwd
            )
            if instead is not None:
                return Decision(
                    False,
                    "Denied: you work in your own worktree, "
                    f"{session.worktree.path}; this command reaches into "
                    f"{session.worktree.repository}, which belongs to the conversation you were "
                    f"forked from. Work on {instead} instead.",
                )
        client = self.client_for(session)
        if client is None:
            return Decision(
                False, "Denied: no editor is connected to coven-ls to approve this tool use."
            )
        await self.flushed()  # the permissionRequest event reaches clients before the question
        timeout = client.settings.options.permissionTimeoutSeconds
        with anyio.move_on_after(timeout):
            # A client of before options may answer with a bare (allow, message).
            return Decision(
                *await client.ask_permission(session, tool_name, tool_input, tool_use_id, options)
            )
        return Decision(
            False,
            f"Denied: the user did not answer the permission request within {timeout:g} seconds.",
        )

    def client_for(self, session: Session) -> Client | None:
        """Who answers a session's questions: the client that started it (or its fork root), or
        else the most recently connected one."""
        root: Session | None = session
        while root is not None and root.id not in self._owners and root.parent_id:
            root = self.sessions.get(root.parent_id)
        client = self._owners.get(root.id) if root is not None else None
        if client not in self.clients:
            client = self.clients[-1] if self.clients else None
        return client

    def ask_fork_approval(self, session: Session, fork: Fork) -> None:
        client = self.client_for(session)
        if client is None:
            return  # it waits for a client to connect and send coven/decideFork

        async def ask() -> None:
            await self.flushed()  # forkProposed first, then the question
            try:
                approved = await client.ask_fork_approval(session, list(fork.tasks))
            except ConnectionError:
                return  # the editor went away: the proposal waits for coven/decideFork
            if approved is None or fork.state != "proposed":
                return
            self.forks.decide(
                fork.id, approved, None, None if approved else "rejected in the editor"
            )

        self.spawn(ask(), name=f"approval of {fork.id}")

    def ask_review(self, fork: Fork, children: list[Session]) -> None:
        client = self.client_for(fork.parent)
        children = [c for c in children if c.id not in self._in_review]
        if client is None or not children:
            return  # they wait for coven/applyChanges or coven/discardChanges

        async def ask() -> None:
            await self.flushed()  # forkReviewing first, then the questions
            for child in children:
                self._in_review.add(child.id)
                try:
                    apply = await client.ask_review(child)
                except ConnectionError:
                    return  # the editor went away: the changes wait for applyChanges
                finally:
                    self._in_review.discard(child.id)
                if apply is None or child.changes is None or child.changes.merge != "pending":
                    continue
                if apply:
                    await self.forks.apply_changes(child)
                else:
                    self.forks.discard_changes(child)

        self.spawn(ask(), name=f"review of {fork.id}")

    def ask_open_reviews(self) -> None:
        """A client is ready: changes that wait for review and that no one is being asked about
        (a restart brought them back, or the editor that was asked went away) are asked about
        again, through the client that answers for their fork (the one just connected, after a
        restart)."""
        for fork in list(self.forks.forks.values()):
            pending = [
                c for c in fork.children if c.changes is not None and c.changes.merge == "pending"
            ]
            if pending and fork.state in ("reviewing", "finished"):
                self.ask_review(fork, pending)

    def spawn(self, coro: Any, name: str) -> None:
        """Run background work in the hub's task group; a failure is logged, never swallowed
        silently, and never takes the other sessions down."""

        async def guarded() -> None:
            try:
                await coro
            except Exception:
                log.exception("%s failed", name)

        self._tg.start_soon(guarded, name=name)

    # --- sessions --------------------------------------------------------------------------------

    def backend(self, agent: str, options: protocol.InitializationOptions) -> Backend:
        """The backend of `agent` for the binary these options name: one each, shared by every
        session that runs on it (Codex's threads share one app-server process)."""
        key = self.agents.backend_key(agent, options)
        if key not in self._backends:
            self._backends[key] = self.agents.make_backend(agent, options, self._tg)
        return self._backends[key]

    def get(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            raise protocol.session_not_found(session_id)
        return session

    async def start_session(
        self, client: Client, params: protocol.StartSessionParams, session_id: str | None = None
    ) -> Session:
        """`session_id`: one the client chose (ACP names a session before its first prompt)."""
        settings = client.settings
        cwd = os.path.abspath(os.path.expanduser(params.cwd or settings.root))
        problem = directory_problem(cwd)
        if problem is not None:
            raise protocol.invalid_params(
                protocol.START_SESSION, f"cwd '{cwd}' is not an existing directory: {problem}"
            )
        if not params.prompt.strip():
            raise protocol.invalid_params(protocol.START_SESSION, "'prompt' must not be empty")
        agent = params.agent or settings.options.agent
        backend = self.backend(agent, settings.options)
        await anyio.to_thread.run_sync(backend.check)
        config = SessionConfig.from_options(
            settings.options,
            cwd,
            agent=agent,
            model=params.model,
            permission_mode=params.permissionMode,
            fork_mode=params.forkMode,
        )
        config.append_system_prompt = fork_prompt(config, depth=0)
        session = self._new_session(
            backend,
            config,
            store=client.store,
            title=params.title or _title(params.prompt),
            session_id=session_id,
        )
        self._owners[session.id] = client
        session.send(params.prompt)
        return session

    def child_backend(self, parent: Session, agent: protocol.AgentName) -> Backend:
        """The backend of a fork child of `agent`: its parent's for the same agent, else the one
        the options of the client that answers for the parent name (its binary)."""
        if agent == parent.config.agent:
            return parent.backend
        return self.backend(agent, self._options_for(parent))

    def _options_for(self, session: Session) -> protocol.InitializationOptions:
        """The options of the client that answers for `session` (the defaults without one)."""
        client = self.client_for(session)
        return client.settings.options if client is not None else protocol.InitializationOptions()

    def new_child(
        self,
        parent: Session,
        fork_id: str,
        label: str,
        start: AgentSpec,
        agent: protocol.AgentName,
        where: Where = HERE,
    ) -> Session:
        """A fork child: a session of its own, starting from its parent's conversation (or
        afresh, see Fork.child_context), its agent running `where` it was placed. It is not
        launched yet: clients hear of it in the parent's forkStarted first."""
        config = dataclasses.replace(
            parent.config,
            cwd=start.cwd,
            append_system_prompt=start.append_system_prompt,
            agent=agent,
            model=start.model,
        )
        child = self._new_session(
            where.backend(self.child_backend(parent, agent), agent, self._options_for(parent)),
            config,
            store=self.journal.store_of(parent.id),
            launch=False,
            status="queued",
            title=label,
            parent_id=parent.id,
            fork_id=fork_id,
            label=label,
            depth=parent.depth + 1,
            start=start,
        )
        child.placement = where.wire()
        return child

    async def branch(
        self, client: Client, parent: Session, at_message_id: str | None, prompt: str | None
    ) -> Session:
        """coven/branch: a new session of the same agent holding `parent`'s conversation (up to
        `at_message_id`), in the parent's folder, with `prompt` as its first message. The parent
        is left as it is and never hears of it."""
        method = protocol.BRANCH
        if prompt is not None and not prompt.strip():
            raise protocol.invalid_params(method, "'prompt' must not be empty", "prompt")
        # Looked up first (maybe in the store): the checks below and the branch's start must not
        # be separated by an await.
        message_found = at_message_id is None or await parent.has_message(at_message_id)
        # Where its agent cannot copy the conversation there, a transcript (branching.py).
        refuse_if_missing(parent.backend, parent.id)  # before its agent is asked anything
        able = await parent.backend.find_abilities()
        native = await copies_there(parent, at_message_id, able)
        problem = (
            await fork_point_problem(parent, at_message_id) if message_found and native else None
        )
        written = None
        if message_found and not native:
            written = await written_conversation(parent, at_message_id, able, self.forks.forks.get)
        conversation = self.forks.check_copyable(parent, "branch", "it cannot be branched")
        if not message_found:
            raise protocol.invalid_params(
                method,
                f"'atMessageId' {at_message_id!r} is not an assistant message of session "
                f"{parent.id}; use the messageId of one of its text events.",
                "atMessageId",
            )
        if problem is not None:
            raise protocol.invalid_params(method, problem, "atMessageId")
        config = dataclasses.replace(parent.config)
        start = branch_spec(config, conversation, at_message_id, able, written)
        session = self._new_session(
            parent.backend,
            config,
            status="starting" if prompt else "idle",
            store=self.journal.store_of(parent.id),
            title=_title(prompt) if prompt else parent.title,
            parent_id=parent.id,
            branched_from=protocol.BranchedFrom(atMessageId=at_message_id),
            depth=parent.depth,
            start=start,
        )
        self._owners[session.id] = client
        if prompt:
            session.send(prompt)
        return session

    @asynccontextmanager
    async def _child_turns(
        self, session_id: str, on_position: Callable[[int | None], None]
    ) -> AsyncIterator[None]:
        """What a fork child holds while its agent runs: a slot where it runs (here or on the
        cluster), and its block of ports (its own again for a turn after its fork's work)."""
        child = self.sessions.get(session_id)
        slots = self.placements.slots(None if child is None else child.placement)
        async with slots.hold(session_id, on_position):
            if child is None:
                yield
                return
            async with self.forks.envs.later_turn(child):
                yield

    def _new_session(
        self,
        backend: Backend,
        config: SessionConfig,
        status: Status = "starting",
        launch: bool = True,
        store: Store | None = None,
        session_id: str | None = None,
        **kw: Any,
    ) -> Session:
        session_id = session_id or f"s-{uuid.uuid4().hex[:12]}"
        session = Session(
            session_id,
            config,
            backend,
            self,
            status=status,
            turn_gate=self._child_turns if kw.get("fork_id") else None,
            created_at=protocol.now_iso(),
            on_turn_end=self.forks.on_turn_end,
            **kw,
        )
        if kw.get("fork_id"):
            session.on_spend = self.forks.on_spend  # its fork's limits
        self.sessions[session_id] = session
        if store is not None:
            self.journal.keep(session, store)
        if launch:
            self.launch(session)
        return session

    def launch(self, session: Session, announce: bool = True) -> None:
        """Announce a session (its first event) and start its runner."""
        if announce:
            session.emit(events.StatusChanged(status=session.status))
        self._tg.start_soon(session.run, name=f"session {session.id}")

    def children_of(self, session: Session) -> list[Session]:
        return [s for s in self.sessions.values() if s.parent_id == session.id]

    async def cancel(self, session: Session) -> int:
        """coven/cancel: a forking parent cancels its whole fork, a running fork child ends alone,
        anything else interrupts its turn. Returns how many queued messages were dropped."""
        fork = self.forks.active_fork(session)
        if fork is not None:
            await self.forks.cancel_fork(fork)
            return 0
        parent_fork = self.forks.forks.get(session.fork_id or "")
        if parent_fork is not None and parent_fork.state == "running":
            await self.forks.cancel_child(session)
            return 0
        return await session.cancel()

    async def close(self, session: Session) -> None:
        """Close a session and, first, its fork children (their results would have no one to go
        to); its branches are conversations of their own and stay open."""
        async with anyio.create_task_group() as tg:
            for child in self.children_of(session):
                if child.branched_from is None:
                    tg.start_soon(self.close, child)
        await session.close()

    def list_sessions(self) -> list[protocol.SessionInfo]:
        # Every session's tree usage in one pass over the sessions: asking `tree_usage` of each
        # would look at every pair of sessions (15 s for 10,000 of them).
        children: dict[str, list[Session]] = {}
        for session in self.sessions.values():
            if session.parent_id is not None:
                children.setdefault(session.parent_id, []).append(session)
        totals: dict[str, Usage] = {}
        for root in self.sessions.values():
            if root.id in totals:
                continue
            # Post-order without recursion: a child's total is known before its parent's.
            stack: list[tuple[Session, bool]] = [(root, False)]
            while stack:
                node, expanded = stack.pop()
                if expanded:
                    total = node.usage
                    for child in children.get(node.id, ()):
                        total = total + totals[child.id]
                    totals[node.id] = total
                elif node.id not in totals:
                    stack.append((node, True))
                    stack.extend((c, False) for c in children.get(node.id, ()))
        latest = self.forks.latest()
        infos = []
        for s in self.sessions.values():
            info, fork = s.info(totals[s.id]), latest.get(s.id)
            infos.append(
                info if fork is None else msgspec.structs.replace(info, lastFork=fork.ref())
            )
        return infos

    def tree_usage(self, session: Session) -> Usage:
        """A session's tokens and those of its fork children, theirs, and so on."""
        return tree_usage(self.sessions, session)

    async def close_all(self) -> None:
        """The server is stopping: end every agent process, keep every session's state as it
        is (a restart takes them up again), and make sure the store has everything."""
        with anyio.move_on_after(CLOSE_ALL_SECONDS):
            async with anyio.create_task_group() as tg:
                for session in list(self.sessions.values()):
                    tg.start_soon(session.close, None)
            await self.flushed()
        with anyio.move_on_after(CLOSE_ALL_SECONDS), anyio.CancelScope(shield=True):
            for backend in list(self._backends.values()):
                try:
                    await backend.aclose()
                except Exception:
                    log.warning("closing an agent backend failed", exc_info=True)
            await self.placements.aclose()  # a clean stop ends its children on the cluster
        for store in self.stores.values():
            await anyio.to_thread.run_sync(store.close)
        self.stores.clear()

    # --- persistence -----------------------------------------------------------------------------

    async def open_store(self, settings: ClientSettings) -> tuple[Store | None, str | None]:
        """The store of a client's workspace root, opened (and its sessions restored) once per
        server. Returns it and a warning for the user, if there is one. A state dir that cannot
        be written at all (read-only, missing permissions) gives no store: sessions then run
        unsaved, and the warning says so and what to do."""
        path = database_path(settings.root, settings.options.stateDir)
        if path in self.stores:
            return self.stores[path], None
        if "stateDir" not in settings.given:
            # A client that names no folder (a terminal attached to an editor's server) shares
            # the store the server already has for its root, wherever the editor keeps it.
            for open_path, open_store in self.stores.items():
                if open_path.name == path.name:
                    return open_store, None
        try:
            store, warning = await anyio.to_thread.run_sync(Store.open, path)
        except StoreError as exc:
            data: dict[str, Any] = {"path": str(path)}
            if isinstance(exc, StoreInUse) and exc.pid is not None:
                data["pid"] = exc.pid
            raise protocol.CovenError(protocol.ErrorCode.StoreUnavailable, str(exc), data) from exc
        except (OSError, sqlite3.Error) as exc:
            log.warning("cannot open the session database %s", path, exc_info=True)
            return None, (
                f"coven-ls cannot keep its sessions in {path.parent} ({exc}). Sessions run, but "
                "nothing of them is saved: a restart loses them. Make that folder writable, or "
                "set initializationOptions.stateDir to one that is, then restart coven-ls."
            )
        self.stores[path] = store
        snapshot = await anyio.to_thread.run_sync(store.load)
        reached = await anyio.to_thread.run_sync(results_reached, store, snapshot.forks)
        self._restore(store, snapshot, reached, settings)
        # git runs only when there are orphans
        await self._remove_orphans(snapshot.forks, snapshot.kept)
        self.forks.resume_pools(settings.options.stateDir, settings.options.worktreePool)
        return store, warning

    def _restore(
        self, store: Store, snapshot: Snapshot, reached: set[str], settings: ClientSettings
    ) -> None:
        restored: list[Session] = []
        for row in snapshot.sessions:
            if row["session_id"] in self.sessions:
                continue
            depth = row["depth"] or 0
            agent: protocol.AgentName = row.get("agent") or "claude"
            # An agent no longer configured: the session is kept as it was, and says so when used.
            known = self.agents.knows(agent, settings.options)
            backend = self.backend(agent, settings.options) if known else MissingBackend(agent)
            # What it stored over its client's options (a restart may come from another client).
            config = dataclasses.replace(
                SessionConfig.from_options(settings.options, row["cwd"]),
                agent=agent,
                model=row["model"],
                permission_mode=row["permission_mode"],
                fork_mode=row["fork_mode"],
                max_children=row["max_children"],
                max_parallel=row["max_parallel"],
                max_depth=row["max_depth"],
                fork_limits=limits_from_row(row.get("fork_limits")),
            )
            config.append_system_prompt = fork_prompt(config, depth)
            session = self._new_session(
                backend,
                config,
                status=row["status"],
                launch=False,
                store=store,
                session_id=row["session_id"],
                title=row["title"],
                parent_id=row["parent_id"],
                fork_id=row["fork_id"],
                label=row["label"],
                depth=depth,
                **branch_settings(config, row, backend.abilities()),
            )
            session.created_at = row["created_at"]
            session.restore(row)
            restored.append(session)
        self.forks.restore(snapshot.forks, reached)
        for session in restored:
            self.launch(session, announce=False)

    async def _remove_orphans(
        self, forks: list[dict[str, Any]], kept: list[dict[str, Any]]
    ) -> None:
        """Remove the worktrees a killed server made but never gave a session (it stores where
        they go before it makes them), with their branches; a branch kept for its unapplied
        work (a deleted child's, `kept`) stays."""
        known = {s.worktree.path for s in self.sessions.values() if s.worktree is not None}
        keep = {(k["repository"], k["branch"]) for k in kept}
        for row in forks:
            trees = row.get("isolation") or {}
            repository = trees.get("repository")
            for planned in trees.get("planned") or []:
                if planned["path"] in known or not repository:
                    continue
                if (repository, planned["branch"]) in keep:
                    if Path(planned["path"]).exists():
                        await isolation.remove_quietly(
                            repository, planned["path"], planned["branch"], keep_branch=True
                        )
                    continue
                await isolation.remove_quietly(repository, planned["path"], planned["branch"])

    async def delete(
        self, session: Session, purge: bool, discard_work: bool = False
    ) -> tuple[list[str], list[KeptBranch]]:
        """Remove a session and its subtree from the server and its store; with `purge`, the
        CLI's own transcripts too. A fork child's worktree goes, and its branch too unless it
        holds work never applied: that branch is kept (and recorded in the store) unless
        `discard_work`. Returns the ids removed and the branches kept."""
        subtree = [session]
        for node in subtree:
            subtree.extend(self.children_of(node))
        await self.close(session)
        store = self.journal.store_of(session.id)
        kept = [] if discard_work else await keep.unapplied_branches(subtree)
        if kept and store is not None:
            # Recorded before any worktree goes: a restart then never removes these branches.
            await anyio.to_thread.run_sync(store.keep_branches, [to_builtins(k) for k in kept])
        keep_ids = {k.sessionId for k in kept}
        for node in subtree:
            if node.worktree is not None:
                tree = node.worktree
                await isolation.remove_quietly(
                    tree.repository, tree.path, tree.branch, keep_branch=node.id in keep_ids
                )
        await failpoints.reached("delete")  # worktrees gone, the sessions still stored
        ids = [s.id for s in subtree]
        await self.flushed()
        if store is not None:
            await anyio.to_thread.run_sync(store.delete_sessions, ids)
        if purge:
            await _purge(subtree)
        for sid in ids:
            self.sessions.pop(sid, None)
            self._owners.pop(sid, None)
        self.journal.forget(ids)
        self.forks.forget(ids)
        # Not stored (there is nothing left to store it in): it tells watching clients to drop
        # the session and everything under it.
        deleted = protocol.event_dict(
            session.id, session.last_seq + 1, protocol.now_iso(), events.Deleted(sessionIds=ids)
        )
        self._deliver(deleted, protocol.event_body(deleted))
        return ids, kept


async def _purge(subtree: list[Session]) -> None:
    """What each session's agent stored of its conversation, deepest first: a conversation
    forked from another comes before it (codex refuses to delete a thread that forks still
    reference). `subtree` lists parents before their children."""
    by_backend: dict[int, tuple[Backend, list[Conversation]]] = {}
    for node in reversed(subtree):
        if node.agent_session_id:
            _, conversations = by_backend.setdefault(id(node.backend), (node.backend, []))
            conversations.append(Conversation(node.agent_session_id, node.config.cwd))
    for backend, conversations in by_backend.values():
        try:
            await backend.purge(conversations)
        except Exception:
            log.warning("purging %d conversations failed", len(conversations), exc_info=True)


def _title(prompt: str, limit: int = 80) -> str:
    line = next((ln.strip() for ln in prompt.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def directory_problem(path: str) -> str | None:
    """Why `path` cannot be a session's folder, or None. Never raises: a client's path may be
    anything, and pathlib's is_dir() raises for some (a name too long for the file system)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return exc.strerror or str(exc)
    except ValueError as exc:  # a NUL in it
        return str(exc)
    return None if stat.S_ISDIR(mode) else "it is not a directory"
