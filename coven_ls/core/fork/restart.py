"""Forks after a restart: restored as the stopped server left them (a proposal still open, a
running fork interrupted, a finished fork's results given if they never reached its parent),
and an interrupted fork resumed (coven/resumeFork) or abandoned (coven/abandonFork)."""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

import anyio

from ... import protocol
from ...protocol import Kind, events
from ...protocol.types import FORK_STATES, ForkState
from ..agent import AgentStartError
from ..agent.missing import refuse_if_missing
from ..session import Outcome, Session
from ..store import Store
from ..workspace import isolation
from ..workspace.git import GitError
from ..workspace.isolation import ForkTrees
from .bring_back import BringBack
from .child_env import stop_leftover_setup
from .children import Children, refs
from .choices import from_row
from .fork import Fork
from .host import ForkHost, ForkJournal, Spawn


class Restart:
    """What a restarted server does with the forks its store holds. `start` starts a fork that
    was cut off before its children existed, as the manager starts any fork."""

    def __init__(
        self,
        forks: MutableMapping[str, Fork],
        host: ForkHost,
        journal: ForkJournal,
        spawn: Spawn,
        children: Children,
        back: BringBack,
        start: Callable[[Fork], None],
    ) -> None:
        self._forks = forks
        self._host = host
        self._journal = journal
        self._spawn = spawn
        self._children = children
        self._back = back
        self._start = start

    def restore(self, rows: list[dict[str, Any]], reached: set[str]) -> None:
        """Forks as a stopped server left them. A proposal is still open; a fork that was running
        is interrupted (its parent waits for coven/resumeFork or coven/abandonFork); a finished
        fork whose results never reached its parent (it is not in `reached`, see
        `results_reached`) gives them now."""
        sessions = self._host.sessions
        for row in rows:
            parent = sessions.get(row["parent_id"])
            if parent is None or row["fork_id"] in self._forks:
                continue
            state = stored_state(row["state"])
            stored = row.get("isolation") or {}
            fork = Fork(
                row["fork_id"],
                parent,
                list(row["tasks_approved"] or row["tasks_proposed"]),
                row["source"],
                at_message_id=row["at_message_id"],
                state=state,
                proposed=list(row["tasks_proposed"]),
                decision=row["decision"],
                children=[sessions[c] for c in row["children"] or [] if c in sessions],
                trees=ForkTrees.from_record(stored) if "mode" in stored else None,
                choices=from_row(row.get("choices")),
            )
            fork.prepared.set()
            self._forks[fork.id] = fork
            if state == "reviewing":
                parent.hold()  # until every child's changes are decided
            elif state == "proposed":
                parent.hold()
                if parent.status == "interrupted":
                    parent.set_status("awaitingApproval")
            elif state in ("running", "interrupted"):
                for child in fork.children:  # a setup the stopped server left running
                    if child.worktree is not None:
                        stop_leftover_setup(child.worktree.path)
                if state == "running":
                    fork.move_to("interrupted")
                parent.hold()
                self._journal.fork_changed(fork)
                if state == "running":  # said once, by the restart that found it cut off
                    parent.emit(
                        events.ForkInterrupted(
                            forkId=fork.id,
                            state=fork.state,
                            unfinished=[c.id for c in unfinished(fork)],
                        )
                    )
            elif state == "finished" and fork.id not in reached:
                parent.hold()  # BringBack.finish releases it
                self._back.finish(fork)

    def resume(self, fork_id: str) -> None:
        """Run again the children of an interrupted fork that had not finished (fresh forks of
        the parent), then reintegrate as usual."""
        fork = self._interrupted(fork_id, protocol.RESUME_FORK)
        # Children whose agent was removed from the configuration cannot run again: refused
        # before anything moves (coven/abandonFork still gives the parent what finished).
        refuse_if_missing(fork.parent.backend, fork.parent.id)
        for child in unfinished(fork):
            refuse_if_missing(child.backend, child.id)
        if fork.parent.agent_session_id is None:
            raise protocol.CovenError(
                protocol.ErrorCode.InvalidState,
                f"Fork {fork_id}'s parent has no agent conversation to fork.",
                {"forkId": fork_id, "state": fork.state},
            )
        if not fork.children:
            # Cut off before its children existed (approved, its worktrees not made yet): it
            # starts now as it would have then. Worktrees planned and left half made were
            # removed by the restart (Hub._remove_orphans).
            fork.prepared = anyio.Event()
            self._start(fork)
            return
        again = unfinished(fork)
        fork.move_to("running")
        fork.parent.set_status("forking")
        fork.parent.emit(events.ForkResumed(forkId=fork.id, state=fork.state, children=refs(again)))
        for child in again:
            child.changes = None  # collected again when it ends
            # It runs again on the backend the restart gave it, this machine's (a child on a
            # cluster is reattached there only by a server that does so, not yet this one).
            child.placement = None
            child.restart_as_fork(self._children.child_spec(fork, child.config.cwd))
        self._journal.fork_changed(fork)
        self._spawn(self._resume_run(fork, again), name=f"fork {fork.id}")

    async def _resume_run(self, fork: Fork, again: list[Session]) -> None:
        try:
            await self._children.read_conversation(fork)
        except AgentStartError as exc:
            fork.parent.emit(events.Error(message=f"The fork could not resume: {exc}"))
            for child in again:
                not_resumed(child, str(exc))
        for child in again:
            if child.worktree is not None and child.status != "failed":
                try:
                    await isolation.ensure(child.worktree)
                except GitError as exc:
                    not_resumed(child, exc.message)
        await self._children.run(fork, [c for c in again if c.status != "failed"])

    def abandon(self, fork_id: str) -> None:
        """Give the parent what finished; the rest is reported as interrupted."""
        fork = self._interrupted(fork_id, protocol.ABANDON_FORK)
        fork.move_to("running")  # until its finished children's changes are brought back
        self._journal.fork_changed(fork)
        self._spawn(
            self._back.bring_back(fork, "interrupted: the server stopped before it finished"),
            name=f"abandon {fork.id}",
        )

    def _interrupted(self, fork_id: str, method: str) -> Fork:
        fork = self._forks.get(fork_id)
        if fork is None:
            raise protocol.fork_not_found(fork_id)
        if fork.state != "interrupted":
            raise protocol.CovenError(
                protocol.ErrorCode.InvalidState,
                f"{method}: fork {fork_id} is {fork.state}; only a fork interrupted by a "
                "server restart can be resumed or abandoned.",
                {"forkId": fork_id, "state": fork.state},
            )
        return fork


def stored_state(value: str) -> ForkState:
    for state in FORK_STATES:
        if state == value:
            return state
    raise ValueError(f"the store has a fork in an unknown state {value!r}")


def not_resumed(child: Session, reason: str) -> None:
    """A child that cannot run again ends `failed` without starting, like one whose worktree
    setup failed: its task's error in `<fork-results>` is the real reason (not "cancelled by the
    user"), and a message to it tries again."""
    if child.closed:
        return
    child.emit(events.Error(message=f"The child could not resume: {reason}"))
    child.last_outcome = Outcome(ok=False, error=f"could not resume: {reason}")
    child.set_status("failed")


def results_reached(store: Store, rows: list[dict[str, Any]]) -> set[str]:
    """Of the finished forks among these rows, those whose parent's log shows it was given
    their results. Blocking (it reads the store): a few indexed lookups per finished fork, never
    a whole log."""
    reached = set()
    for row in rows:
        if row["state"] != "finished":
            continue
        parent = row["parent_id"]
        finished = store.first_seq(parent, (Kind.FORK_FINISHED,), {"forkId": row["fork_id"]})
        if (
            finished is not None
            and store.first_seq(parent, (Kind.PROMPT,), {"origin": "forkResults"}, finished)
            is not None
        ):
            reached.add(row["fork_id"])
    return reached


def unfinished(fork: Fork) -> list[Session]:
    return [c for c in fork.children if c.status == "interrupted" or c.last_outcome is None]
