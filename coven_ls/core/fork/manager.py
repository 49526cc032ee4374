"""The fork manager: a fork's life from its proposal (the model's `<fork>` tag, read at the end
of each turn) or coven/fork, through the user's decision (coven/decideFork, coven/estimateFork)
and cancels, to its children's results. It owns the forks (by id) and hands each part of their
life to a collaborator of its own: the worktrees made ahead (`Ahead`), the children's runs
(`Children`), their limits (`Limits`), bringing their work back (`BringBack`), the user's
review (`Review`) and what a restart finds (`Restart`). Children are ordinary sessions: each
resumes the parent's agent conversation as a copy, under an agent session id chosen here.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import anyio

from ... import protocol
from ...protocol import events
from ...protocol.types import Changes, ForkChoices, ForkEstimate, ForkSource, GetChangesResult
from .. import failpoints
from ..agent.missing import refuse_if_missing
from ..session import Session
from .ahead import Ahead
from .bring_back import BringBack
from .child_env import ChildEnvironments
from .children import Children
from .choices import ForkSettings, overlay, resolve
from .choices import check as check_choices
from .estimate import ANY_FORK_ID, fork_estimate, note_tokens
from .fence import FenceRequired
from .fork import Fork, active_fork
from .host import ForkHost, ForkJournal, Spawn
from .limits import Limits
from .placement import PlacementRefused
from .recorded import last_message_id
from .restart import Restart
from .review import Review
from .spend import cost_limit_problem
from .tag import ForkSyntaxError, check_tasks, may_fork, parse_fork_tag, problem_message

log = logging.getLogger(__name__)


async def fork_point_problem(session: Session, at_message_id: str | None) -> str | None:
    """Why the session's agent cannot copy its conversation up to `at_message_id` (an assistant
    message of the session's), or None; for coven/fork and coven/branch."""
    if at_message_id is None or session.agent_session_id is None:
        return None
    able = session.backend.abilities()
    if not able.copies_up_to_a_message and at_message_id == await last_message_id(session):
        return None  # a copy of the whole conversation ends there
    return await session.backend.fork_point_problem(session.agent_session_id, at_message_id)


class ForkManager:
    def __init__(self, host: ForkHost, journal: ForkJournal, spawn: Spawn) -> None:
        self._host = host
        self._journal = journal  # stores fork rows with the next burst of events
        self._spawn = spawn
        self.forks: dict[str, Fork] = {}
        self.envs = ChildEnvironments(host.ask_permission)
        self.ahead = Ahead(journal, spawn)
        self.limits = Limits(self.forks, host.sessions)
        self.back = BringBack(host, journal, self.envs)
        self.review = Review(self.forks, host, spawn, self.back)
        self.children = Children(
            host, journal, self.envs, self.ahead, self.limits, self.back, self.forks
        )
        self.restart = Restart(
            self.forks, host, journal, spawn, self.children, self.back, self._start
        )

    def get(self, fork_id: str) -> Fork:
        fork = self.forks.get(fork_id)
        if fork is None:
            raise protocol.fork_not_found(fork_id)
        return fork

    def latest(self) -> dict[str, Fork]:
        """Each parent's (by session id) latest fork, whatever its state."""
        # in the order they were made (or restored): a later fork replaces an earlier one
        return {fork.parent.id: fork for fork in self.forks.values()}

    def active_fork(self, session: Session) -> Fork | None:
        return active_fork(self.forks.values(), session)

    # --- detection (runs in the parent's runner task, at the end of each turn) -------------------

    async def on_turn_end(self, session: Session, result: events.TurnResult) -> None:
        await self.review.bring_later_work(session)
        config = session.config
        if not may_fork(config, session.depth):
            return  # the tag, if any, stays in the answer as plain text
        match result:
            case events.TurnResult(isError=True) | events.TurnResult(cancelled=True):
                return  # a failed or stopped turn asks for nothing
        try:
            tasks = parse_fork_tag(result.text, config.max_children)
        except ForkSyntaxError as exc:
            session.emit(events.ForkError(message=str(exc)))
            session.send(problem_message(str(exc)), origin="forkError", first=True)
            return
        if tasks is None:
            return
        noted = 0
        if config.fork_mode != "auto":
            # Before the fork exists (nothing may come between its proposal and forkProposed),
            # and off the event loop: git says where the worktrees would be, and the sandbox's
            # first probe runs bubblewrap.
            proposed = resolve(ForkChoices(), config, session.backend.abilities().copies)
            noted = await anyio.to_thread.run_sync(self._note_tokens, session, tasks, proposed)
        fork = self._new_fork(session, tasks, source="model")
        if config.fork_mode == "auto":
            problem = self.cost_problem(session, fork.settings)
            if problem is not None:
                self._reject(fork, problem, tell_model=True, failed=True)
                return
            self._start(fork)
            return
        session.set_status("awaitingApproval")
        chosen = fork.settings
        fork.estimate = fork_estimate(session, tasks, chosen.context, chosen.agent, noted)
        session.emit(
            events.ForkProposed(
                forkId=fork.id, state=fork.state, tasks=tasks, estimate=fork.estimate
            )
        )
        self.ahead.make(fork)
        self._host.ask_fork_approval(session, fork)

    def _new_fork(
        self,
        parent: Session,
        tasks: list[str],
        source: ForkSource,
        **kw: Any,
    ) -> Fork:
        fork = Fork(f"f-{uuid.uuid4().hex[:12]}", parent, tasks, source, proposed=list(tasks), **kw)
        self.forks[fork.id] = fork
        self._journal.fork_changed(fork)
        # From here until the results are in, the parent's own messages wait, and its agent
        # process is stopped: a paused-but-alive parent could keep working where no one sees it.
        parent.hold()
        parent.pause_agent()
        return fork

    # --- commands --------------------------------------------------------------------------------

    async def estimate(
        self,
        fork_id: str,
        tasks: list[str] | None = None,
        choices: ForkChoices | None = None,
    ) -> ForkEstimate | None:
        """coven/estimateFork: what a proposed fork would cost were it approved with these
        choices (the ones left out: the fork's own), so that a question the user edits shows the
        cost of what it would start."""
        fork = self.get(fork_id)
        if fork.state != "proposed":
            raise protocol.CovenError(
                protocol.ErrorCode.InvalidState,
                f"Fork {fork_id} is {fork.state}; only a proposed fork has an estimate.",
                {"forkId": fork_id, "state": fork.state},
            )
        given = choices or ForkChoices()
        able = fork.parent.backend.abilities()
        check_choices(protocol.ESTIMATE_FORK, given, fork.parent.config.agent, able)
        if tasks is not None:
            try:
                tasks = check_tasks(tasks, fork.parent.config.max_children)
            except ForkSyntaxError as exc:
                raise protocol.invalid_params(protocol.ESTIMATE_FORK, str(exc)) from exc
        chosen = resolve(overlay(fork.choices, given), fork.parent.config, able.copies)
        self.check_placement(protocol.ESTIMATE_FORK, chosen)
        # Off the event loop: git says where the worktrees would be, and the sandbox's first
        # probe runs bubblewrap.
        return await anyio.to_thread.run_sync(self._estimate, fork, tasks or fork.tasks, chosen)

    def _estimate(self, fork: Fork, tasks: list[str], chosen: ForkSettings) -> ForkEstimate | None:
        """The estimate of `fork` with these tasks and settings, what the agent adds to worktree
        children's first requests included. Blocking (the first time the sandbox is probed)."""
        noted = self._note_tokens(fork.parent, tasks, chosen, fork.id)
        return fork_estimate(fork.parent, tasks, chosen.context, chosen.agent, noted)

    def _note_tokens(
        self, parent: Session, tasks: list[str], chosen: ForkSettings, fork_id: str = ANY_FORK_ID
    ) -> int:
        """What the agent would add to the children's first requests (estimate.note_tokens).
        Blocking."""
        try:
            backend: object = self._host.child_backend(parent, chosen.agent)
        except protocol.CovenError:
            return 0  # no such agent: starting the children says so
        return note_tokens(parent, tasks, chosen, backend, fork_id)

    def decide(
        self,
        fork_id: str,
        approve: bool,
        tasks: list[str] | None = None,
        reason: str | None = None,
        choices: ForkChoices | None = None,
    ) -> None:
        """coven/decideFork: approve (with other tasks, and the fork's choices) or reject."""
        fork = self.get(fork_id)
        if fork.state != "proposed":
            raise protocol.CovenError(
                protocol.ErrorCode.InvalidState,
                f"Fork {fork_id} is {fork.state}; only a proposed fork can be decided.",
                {"forkId": fork_id, "state": fork.state},
            )
        if approve:
            given = choices or ForkChoices()
            able = fork.parent.backend.abilities()
            check_choices(protocol.DECIDE_FORK, given, fork.parent.config.agent, able)
            if tasks is not None:
                try:
                    fork.tasks = check_tasks(tasks, fork.parent.config.max_children)
                except ForkSyntaxError as exc:
                    raise protocol.invalid_params(protocol.DECIDE_FORK, str(exc)) from exc
            chosen = resolve(overlay(fork.choices, given), fork.parent.config)
            self.check_placement(protocol.DECIDE_FORK, chosen)
            problem = self.cost_problem(fork.parent, chosen)
            if problem is not None:
                raise protocol.invalid_params(protocol.DECIDE_FORK, problem, "limits")
            fork.decision = "approved"
            fork.choices = overlay(fork.choices, given)
            self._start(fork)
            return
        fork.decision = "rejected"
        self._reject(fork, reason, tell_model=True)

    def _reject(
        self, fork: Fork, reason: str | None, *, tell_model: bool, failed: bool = False
    ) -> None:
        """The fork will not run: declined or withdrawn (or, `failed`, it could not start)."""
        fork.move_to("rejected")
        self.ahead.drop(fork)
        self._journal.fork_changed(fork)
        parent = fork.parent
        parent.emit(events.ForkRejected(forkId=fork.id, state=fork.state, reason=reason))
        told = tell_model and not parent.closed
        if told:
            if failed:
                text = f"Your fork could not start, so nothing was forked: {reason}."
            else:
                because = f" Their reason: {reason}" if reason else ""
                text = f"The user declined your proposed fork, so nothing was forked.{because}"
            parent.send(f"{text}\nCarry on without forking.", origin="forkRejected", first=True)
        # A parent told why goes on from `forking` into that turn; otherwise it is done waiting.
        if parent.status == "awaitingApproval" or (parent.status == "forking" and not told):
            parent.set_status("idle")
        parent.release()

    def cost_problem(self, parent: Session, settings: ForkSettings) -> str | None:
        """Why children with these settings cannot start: a cost limit on an agent that does
        not report its cost (ACP agents may not); None: they can."""
        limits = settings.limits
        if limits is None or not (limits.childCostUsd or limits.forkCostUsd):
            return None
        try:
            backend = self._host.child_backend(parent, settings.agent)
        except protocol.CovenError:
            return None  # no such agent: starting the children says so
        return cost_limit_problem(limits, settings.agent, backend.abilities().reports_cost)

    def check_placement(self, method: str, settings: ForkSettings) -> None:
        """InvalidParams (`data.field: placement`) for children that cannot be placed as the
        fork asks: no cluster configured, or one asked of children that share a folder."""
        self._host.placements.check(method, settings.placement, settings.isolation)

    def check_copyable(self, session: Session, verb: str, refused: str) -> str:
        """The session's agent conversation id, or InvalidState unless that conversation can be
        copied now (a fork's children or a branch start from it): open, settled, not forking,
        with an agent conversation. `verb` and `refused` word the errors for what was asked."""
        if session.closed:
            raise protocol.CovenError(
                protocol.ErrorCode.InvalidState,
                f"Session {session.id} is {session.status}; {refused}.",
                {"sessionId": session.id, "status": session.status},
            )
        refuse_if_missing(session.backend, session.id)
        if not session.settled or self.active_fork(session) is not None:
            raise protocol.CovenError(
                protocol.ErrorCode.InvalidState,
                f"Session {session.id} is busy ({session.status}); {verb} it when its turn has "
                "ended, or cancel the turn first.",
                {"sessionId": session.id, "status": session.status},
            )
        if session.agent_session_id is None:
            raise protocol.CovenError(
                protocol.ErrorCode.InvalidState,
                f"Session {session.id} has no agent conversation yet, so there is nothing to "
                f"{verb}; wait for its first turn to start.",
                {"sessionId": session.id},
            )
        return session.agent_session_id

    async def fork_by_hand(
        self,
        session: Session,
        tasks: list[str],
        at_message_id: str | None = None,
        choices: ForkChoices | None = None,
    ) -> Fork:
        """coven/fork: fork an idle session into `tasks` now, as `choices` say."""
        choices = choices or ForkChoices()
        # Looked up first (maybe in the store): the checks below and the start of the fork must
        # not be separated by an await, lest the session get busy in between.
        message_found = at_message_id is None or await session.has_message(at_message_id)
        # What its agent can do (an ACP agent not asked yet is started once to ask).
        able = await session.backend.find_abilities()
        if (
            choices.context is None
            and at_message_id is not None
            and not able.copies_up_to_a_message
            and at_message_id != await last_message_id(session)
        ):
            # Its agent copies only whole conversations: at an earlier message, a transcript.
            choices = overlay(choices, ForkChoices(context="transcript"))
        # Only a child that resumes the conversation natively is bound by where its agent can
        # copy it: a transcript is cut at any message.
        native = resolve(choices, session.config, able.copies).native
        problem = (
            await fork_point_problem(session, at_message_id) if message_found and native else None
        )
        self.check_copyable(session, "fork", "it cannot fork")
        check_choices(protocol.FORK, choices, session.config.agent, able)
        try:
            tasks = check_tasks(tasks, session.config.max_children)
        except ForkSyntaxError as exc:
            raise protocol.invalid_params(protocol.FORK, str(exc)) from exc
        if not message_found:
            raise protocol.invalid_params(
                protocol.FORK,
                f"'atMessageId' {at_message_id!r} is not an assistant message of session "
                f"{session.id}; use the messageId of one of its text events.",
            )
        if problem is not None:
            raise protocol.invalid_params(protocol.FORK, problem, "atMessageId")
        chosen = resolve(choices, session.config)
        self.check_placement(protocol.FORK, chosen)
        problem = self.cost_problem(session, chosen)
        if problem is not None:
            raise protocol.invalid_params(protocol.FORK, problem, "limits")
        fork = self._new_fork(
            session,
            tasks,
            source="user",
            at_message_id=at_message_id,
            choices=choices,
        )
        self._start(fork)
        return fork

    async def cancel_fork(self, fork: Fork) -> None:
        """The user stops a whole fork: a proposal is withdrawn; running children are stopped
        (their processes end), queued ones never start, and what finished is reintegrated."""
        if fork.state == "proposed":
            fork.decision = "cancelled"
            self._reject(fork, "cancelled by the user", tell_model=False)
            return
        await fork.prepared.wait()  # its children are being made
        async with anyio.create_task_group() as tg:
            for child in fork.children:
                if not child.closed and not (child.settled and child.last_outcome is not None):
                    tg.start_soon(self.cancel_child, child)

    async def cancel_child(self, child: Session) -> None:
        """Only this child ends; its task is reported as cancelled and the others go on. Its
        CLI is killed at once, as at a limit: closed gracefully, a CLI in a tool loop goes on
        calling the model (and spending) for seconds."""
        child.begin_close("cancelled", kill=True)
        await child.close("cancelled")

    # --- running ---------------------------------------------------------------------------------

    def _start(self, fork: Fork) -> None:
        fork.move_to("running")
        fork.parent.set_status("forking")
        self._journal.fork_changed(fork)
        self._spawn(self._prepare_and_run(fork), name=f"fork {fork.id}")

    async def _prepare_and_run(self, fork: Fork) -> None:
        try:
            await failpoints.reached("approved")
            await self.children.prepare(fork)
        except Exception as exc:
            # A bug or a broken state folder (or children that cannot be fenced as required, or
            # placed on a cluster that cannot take them):
            # the parent must not wait for children that will never exist, so the fork ends as
            # refused, and the model and the user are told why.
            if isinstance(exc, (FenceRequired, PlacementRefused)):
                log.warning("fork %s could not start: %s", fork.id, exc)
            else:
                log.exception("fork %s could not start", fork.id)
            fork.parent.emit(events.Error(message=f"The fork could not start: {exc}"))
            self._reject(
                fork,
                f"the fork could not start: {exc}",
                tell_model=fork.source == "model",
                failed=True,
            )
            return
        finally:
            fork.prepared.set()
        await self.children.run(fork, fork.children)
        self.ahead.refill(fork)  # the machine is the user's again: make up the pool

    def forget(self, session_ids: list[str]) -> None:
        gone = set(session_ids)
        for fork_id in [f.id for f in self.forks.values() if f.parent.id in gone]:
            del self.forks[fork_id]

    # --- what its collaborators do, for the hub --------------------------------------------------

    def resume_pools(self, state_dir: str | None, size: int) -> None:
        self.ahead.resume_pools(state_dir, size)

    def on_spend(self, session: Session) -> None:
        self.limits.on_spend(session)

    async def get_changes(self, child: Session, path: str | None) -> GetChangesResult:
        return await self.review.get_changes(child, path)

    async def apply_changes(self, child: Session) -> Changes:
        return await self.review.apply_changes(child)

    def discard_changes(self, child: Session) -> None:
        self.review.discard_changes(child)

    def restore(self, rows: list[dict[str, Any]], reached: set[str]) -> None:
        self.restart.restore(rows, reached)

    def resume(self, fork_id: str) -> None:
        self.restart.resume(fork_id)

    def abandon(self, fork_id: str) -> None:
        self.restart.abandon(fork_id)
