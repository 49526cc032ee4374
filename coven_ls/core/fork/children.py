"""A started fork's children: where they work (their worktrees planned and made), how each
starts (a copy of the parent's conversation, or a new one with a brief), each child's run from
its assignment to its end, and the work brought back once all have ended."""

from __future__ import annotations

import logging
import time
import uuid

import anyio

from ...protocol import events
from ...protocol.types import ForkChoices, Isolation, Sandbox, Worktree
from .. import failpoints
from ..agent import AgentSpec, AgentStartError, Copy, New
from ..session import Session
from ..workspace import isolation, sandbox_stubs
from ..workspace.git import GitError
from . import fence, recorded, transcript
from .ahead import Ahead
from .bring_back import BringBack
from .child_env import ChildEnvironments
from .choices import overlay
from .fork import Fork
from .host import ForkHost, ForkJournal
from .limits import Limits
from .tag import child_prompt, fork_prompt

log = logging.getLogger(__name__)


class Children:
    """Makes a started fork's children and runs them."""

    def __init__(
        self,
        host: ForkHost,
        journal: ForkJournal,
        envs: ChildEnvironments,
        ahead: Ahead,
        limits: Limits,
        back: BringBack,
        forks: dict[str, Fork],
    ) -> None:
        self._forks = forks  # every fork, by id (a copy's conversation begins in its parent's)
        self._host = host
        self._journal = journal
        self._envs = envs
        self._ahead = ahead
        self._limits = limits
        self._back = back

    async def prepare(self, fork: Fork) -> None:
        """Decide where the children work (making their worktrees), create them, say so, and
        launch them."""
        parent, config, chosen = fork.parent, fork.parent.config, fork.settings
        if fork.ahead is not None and chosen.isolation == "shared":
            ahead, fork.ahead = fork.ahead, None
            await isolation.remove_ahead(ahead)  # approved to share the parent's folder after all
        backend = self._host.child_backend(parent, chosen.agent)
        await anyio.to_thread.run_sync(backend.check)  # no such agent: the fork cannot start
        if chosen.native and not (await backend.find_abilities()).copies:
            # An agent found out only now not to copy (one not asked before the fork was
            # approved): its children start from a transcript where the fork left the context
            # to the defaults (kept in its choices, so a restart goes on so); else it cannot.
            if fork.choices.context is not None:
                able = backend.abilities()
                raise AgentStartError(
                    able.no_copy_reason
                    or f"Agent '{chosen.agent}' cannot copy the parent's conversation."
                )
            fork.choices = overlay(fork.choices, ForkChoices(context="transcript"))
            chosen = fork.settings
        support = await anyio.to_thread.run_sync(fence.support_of, backend)
        if chosen.child_sandbox == "required":
            # Before any worktree is made: an agent that cannot be fenced here fails at once.
            self._fence(fork, "worktree", None, support)
        await self.read_conversation(fork)
        # Where each child runs, before anything is made: a cluster that cannot take them fails
        # the fork here (`cluster`), or keeps them on this machine (`auto`).
        placements = self._host.placements
        plan = await placements.plan(chosen.placement, len(fork.tasks))
        started = time.monotonic()
        trees = await isolation.plan(
            config.cwd,
            chosen.isolation,
            chosen.merge_mode,
            config.state_dir,
            fork.id,
        )
        plan = placements.where_they_work(plan, chosen.placement, trees.mode, trees.reason)
        planned = time.monotonic()
        trees_made: list[Worktree] = []
        if trees.mode == "worktree":
            places = [
                isolation.place(trees, fork.id, n, label) for n, label in enumerate(fork.tasks, 1)
            ]
            trees.planned = [{"path": p, "branch": b} for p, b in places]
            fork.trees = trees
            self._journal.fork_changed(fork)
            await self._journal.flushed()  # stored before git makes them: a crash leaves no orphan
            await failpoints.reached("worktrees")
            assert trees.repository is not None
            try:
                trees_made = await self._ahead.take(fork, trees, places) or []
                if not trees_made:
                    spares = self._ahead.pools.take(config.state_dir, trees.repository, len(places))
                    trees_made = await isolation.make(trees, places, spares)
            except (GitError, OSError) as exc:
                reason = getattr(exc, "message", None) or str(exc)
                log.warning("fork %s: worktrees could not be made: %s", fork.id, reason)
                trees = isolation.shared(
                    f"the worktrees could not be made: {reason}", trees.merge_mode
                )
                plan = placements.where_they_work(plan, chosen.placement, trees.mode, trees.reason)
        fork.trees = trees
        sandbox = self._fence(fork, trees.mode, trees.reason, support)
        log.info(
            "fork %s: %s; snapshot %.2f s, worktrees %.2f s",
            fork.id,
            trees.mode,
            planned - started,
            time.monotonic() - planned,
        )
        for n, label in enumerate(fork.tasks):
            tree = trees_made[n] if trees_made else None
            cwd = config.cwd if tree is None else isolation.child_cwd(tree, config.cwd)
            child = self._host.new_child(
                parent, fork.id, label, self.child_spec(fork, cwd), chosen.agent, plan.places[n]
            )
            child.isolation, child.isolation_reason = trees.mode, trees.reason
            child.sandbox = sandbox
            child.worktree = tree
            fork.children.append(child)
        self._journal.fork_changed(fork)
        worktree_mode = trees.mode == "worktree"
        parent.emit(
            events.ForkStarted(
                forkId=fork.id,
                state=fork.state,
                source=fork.source,
                atMessageId=fork.at_message_id,
                tasks=fork.tasks,
                children=refs(fork.children),
                isolation=trees.mode,
                isolationReason=trees.reason,
                mergeMode=trees.merge_mode if worktree_mode else None,
                base=trees.base if worktree_mode else None,
                context=None if chosen.context == "inherit" else chosen.context,
                agent=None if chosen.own_agent else chosen.agent,
                limits=chosen.limits,
                placement=None if chosen.placement == "local" else chosen.placement,
                placementReason=plan.reason,
            )
        )
        if plan.reason is not None:
            log.warning("fork %s: its children run on this machine: %s", fork.id, plan.reason)
        for child in fork.children:
            self._host.launch(child)

    @staticmethod
    def _fence(
        fork: Fork, mode: Isolation, reason: str | None, support: fence.SandboxSupport | None
    ) -> Sandbox:
        chosen = fork.settings
        return fence.decide(
            chosen.child_sandbox,
            chosen.child_sandbox_network,
            mode,
            reason,
            chosen.agent,
            support,
            fork.parent.config.permission_mode,
        )

    async def read_conversation(self, fork: Fork) -> None:
        """The parent's conversation, for `transcript` children (once per fork and server)."""
        parent = fork.parent
        if fork.settings.context != "transcript" or fork.conversation is not None:
            return
        if parent.agent_session_id is None:
            raise AgentStartError(f"Session {parent.id} has no conversation to write out.")
        if parent.backend.abilities().reads_conversations:
            fork.conversation = await parent.backend.conversation(
                parent.agent_session_id, parent.config.cwd, fork.at_message_id
            )
        else:  # the agent cannot give it back: coven's own record of it
            fork.conversation = await recorded.conversation(
                parent, fork.at_message_id, self._forks.get
            )

    @staticmethod
    def child_spec(fork: Fork, cwd: str) -> AgentSpec:
        parent, config, chosen = fork.parent, fork.parent.config, fork.settings
        # An agent that copies only whole conversations was checked to fork at the last message.
        whole = not parent.backend.abilities().copies_up_to_a_message
        up_to = None if whole else fork.at_message_id
        if chosen.context != "inherit":
            # A new conversation of the child's agent; the parent's model is its own agent's.
            return AgentSpec(
                cwd=cwd,
                model=config.model if chosen.own_agent else None,
                permission_mode=config.permission_mode,
                start=New(str(uuid.uuid4())),
                append_system_prompt=fork_prompt(config, parent.depth + 1),
                env=config.env,
            )
        return AgentSpec(
            cwd=cwd,
            model=config.model,
            permission_mode=config.permission_mode,
            # The copy's id is chosen here, so that its transcript is known before its agent
            # says a word.
            start=New(str(uuid.uuid4()))
            if parent.agent_session_id is None
            else Copy(parent.agent_session_id, up_to, str(uuid.uuid4())),
            append_system_prompt=fork_prompt(config, parent.depth + 1),
            env=config.env,
        )

    async def run(self, fork: Fork, children: list[Session]) -> None:
        finished = False
        # The empty mount points a fenced child's sandbox leaves in the parent's repository go
        # once the children have ended (those that were there before stay).
        fenced = fork.trees.repository if fork.trees is not None else None
        if not any(c.worktree is not None and c.sandbox and c.sandbox.fenced for c in children):
            fenced = None
        if fenced is not None:
            await anyio.to_thread.run_sync(sandbox_stubs.watch, fenced)
        try:
            async with anyio.create_task_group() as tg:
                for child in children:
                    tg.start_soon(self.run_child, fork, child)
            finished = True
        finally:
            # When the server stops (killed, or closing every session on its way out), the fork
            # stays `running` in the store: it comes back interrupted, to be resumed or abandoned.
            stopped = any(child.stopped_with_server for child in children)
            if fenced is not None:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(sandbox_stubs.release, fenced)
        if finished and not stopped:
            await self._back.bring_back(fork)

    async def run_child(self, fork: Fork, child: Session) -> None:
        """One child's part of the fork: its assignment, and every turn that follows from it (a
        fork of its own, and the turn that reads its results). Each of its turns waits for one
        of the server's slots (`maxParallel`, the hub's `Slots`)."""
        if child.closed:
            return  # cancelled before it started
        try:
            # Its copies, ports and setup (see child_env), before its agent starts.
            index = fork.children.index(child) + 1
            chosen = fork.settings
            if not await self._envs.ready(
                fork.id, fork.parent, child, index, chosen.worktree_setup
            ):
                return  # its setup failed (it has ended, failed) or it was cancelled meanwhile
            workdir = parent_dir = None
            if child.worktree is not None:
                workdir, parent_dir = child.config.cwd, fork.parent.config.cwd
            context = chosen.context
            brief = child_prompt(
                child.label or "", fork.tasks, workdir, parent_dir, fresh=context == "fresh"
            )
            if context == "transcript":
                brief = transcript.render(fork.conversation or [], brief)
            child.send(brief, origin="fork")
            seconds = chosen.limits.childSeconds if chosen.limits is not None else None
            async with anyio.create_task_group() as timer:
                if seconds:
                    timer.start_soon(self._limits.time_limit, fork, child, seconds)
                await child.wait_settled()
                timer.cancel_scope.cancel()
            if child.worktree is not None and not child.stopped_with_server:
                await self._back.collect(fork, child)
                if any(c is not child and not c.settled for c in fork.children):
                    # Its disk, walked while siblings work; the last child's is walked while
                    # the changes are merged (`BringBack.bring_back`), not before.
                    await self._back.measure(fork, child)
        finally:
            self._envs.release(child)


def refs(children: list[Session]) -> list[events.ChildRef]:
    return [
        events.ChildRef(
            sessionId=c.id, label=c.label or "", sandbox=c.sandbox, placement=c.placement
        )
        for c in children
    ]
