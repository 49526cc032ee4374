"""A session's runner: the one task that runs its turns, one at a time, and alone opens and
closes its agent process (claude-agent-sdk's client must be connected and disconnected in the
same task). Between turns it publishes what the agent says by itself (background tasks' news)
and takes up a turn the agent starts to report an ended task; a fork child's turn waits for one
of the server's slots (maxParallel) and gives it back, with its process, when quiet.

Commands (`Session.send`, `cancel`, `begin_close`) only queue work for the runner (the inbox)
or interrupt it.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections.abc import Awaitable, Callable

import anyio

from ... import protocol
from ...protocol import Status, events
from ...protocol.types import Worktree
from ..agent import (
    Agent,
    AgentFailed,
    AgentSpec,
    Fence,
    New,
    PermissionAsker,
    Resume,
    describe_failure,
)
from ..agent import events as agent_events
from ..agent.events import AgentEvent
from ..workspace import worktrees
from ..workspace.protected import git_fence, protected_git_files
from .inbox import Turn
from .process import ChildIdle, StreamEnded
from .publishing import AgentEventPublisher
from .slot import SlotHold, TurnGate
from .state import Outcome, SessionState

if sys.version_info < (3, 11):  # anyio brings the backport there
    from exceptiongroup import BaseExceptionGroup

log = logging.getLogger(__name__)

# How long an interrupt may take to end a turn before the agent process is stopped outright.
INTERRUPT_GRACE_SECONDS = 10.0
# How long a session waits for the CLI to start the turn that reports an ended background task.
REPORT_GRACE_SECONDS = 10.0

# The turn-end hook (fork detection), given the turn's result.
TurnEndHook = Callable[[events.TurnResult], Awaitable[None]]


class Runner:
    def __init__(
        self,
        session: SessionState,
        publisher: AgentEventPublisher,
        ask_permission: PermissionAsker,
        *,
        turn_gate: TurnGate | None,
        on_turn_end: TurnEndHook | None,
    ) -> None:
        self._session = session
        self._publisher = publisher
        self._ask_permission = ask_permission
        self._slot = SlotHold(session, turn_gate)
        self._on_turn_end = on_turn_end
        self._turn_scope: anyio.CancelScope | None = None
        self._hook_scope: anyio.CancelScope | None = None
        self._turn_no = 0

    async def run(self) -> None:
        session = self._session
        try:
            async with anyio.create_task_group() as readers:
                session.process.task_group = readers
                try:
                    while True:
                        work = await self._next_work()
                        if work is None:
                            break
                        await self._run_turn(work if isinstance(work, Turn) else None)
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._give_back_slot()
                        await self.close_agent()
        except Exception as exc:  # a bug; say so rather than let the session hang silently
            log.exception("session %s crashed", session.id)
            session.emit(events.Error(message=f"internal error in coven-ls: {exc!r}"))
            session.set_status("failed")
        finally:
            with anyio.CancelScope(shield=True):
                await self.close_agent()
            session.closing = True
            session.in_turn = False
            session.inbox.clear()
            if session.final_status is not None:
                session.set_status(session.final_status)
            session.done.set()
            session.notify_changed()

    # --- what commands ask of it -----------------------------------------------------------------

    async def cancel(self) -> None:
        """Interrupt the running turn (see `Session.cancel`)."""
        session = self._session
        session.cancel_requested.set()
        agent, scope, turn_no = session.process.agent, self._turn_scope, self._turn_no
        if agent is not None and session.status == "running":
            try:
                with anyio.fail_after(INTERRUPT_GRACE_SECONDS):
                    await agent.interrupt()
            except Exception as exc:  # the process may be gone already; stop it outright below
                log.warning(
                    "session %s: interrupt failed (%s); stopping the agent", session.id, exc
                )
                if scope is not None:
                    scope.cancel()
                return
            # The CLI answers an interrupt with a result that ends the turn; if it does not come,
            # stop the process (the conversation is on disk and the next turn resumes it).
            if scope is not None and self._turn_no == turn_no:
                scope.deadline = min(scope.deadline, anyio.current_time() + INTERRUPT_GRACE_SECONDS)
        elif scope is not None:
            scope.cancel()  # still starting: nothing to interrupt yet

    def begin_close(self, final_status: Status | None, *, kill: bool) -> None:
        """Take no more turns and stop the one under way (see `Session.begin_close`)."""
        session = self._session
        if kill:
            session.process.kill()
        if not session.closing:
            session.closing = True
            session.final_status = final_status
            session.inbox.clear()
            for scope in (self._turn_scope, self._hook_scope):
                if scope is not None:
                    scope.cancel()
            session.inbox.wake()

    async def close_agent(self) -> None:
        session = self._session
        agent = session.process.stop_reading()
        session.streams.clear_all()
        for task in list(session.tasks.values()):  # background tasks die with the process
            self._publisher.publish_task_end(task)
        await session.process.close(agent)

    # --- between turns ---------------------------------------------------------------------------

    async def _next_work(self) -> Turn | _CliTurn | None:
        """What the runner does next: a queued turn, a turn the CLI started by itself
        (`_CLI_TURN`), or nothing more (None: the session is closing). Meanwhile it publishes
        what the CLI says between turns: its background tasks' news and their subagents'
        messages."""
        session = self._session
        inbox = session.inbox
        while True:
            if session.closing:
                return None
            if inbox.pause_requested:
                inbox.pause_requested = False
                await self.close_agent()
            while session.process.incoming:
                item = session.process.incoming[0]
                if _starts_a_turn(item):
                    return _CLI_TURN  # the turn reads it
                session.process.incoming.popleft()
                if isinstance(item, StreamEnded):
                    log.info("session %s: the CLI ended between turns (%s)", session.id, item)
                    if item.error is not None:
                        # Died while idle (killed, crashed): said now, not at the next message.
                        session.emit(events.Error(message=self._ended_by(item.error)))
                    await self.close_agent()
                else:
                    self._publisher.publish(item)
            turn = inbox.next()
            if turn is not None:
                return turn
            if not session.tasks and not session.background.report_due:
                # Quiet (or waiting for its own fork): a fork child's slot, and its CLI, go to
                # whoever waits for one.
                await self._give_back_slot()
            if session.background.report_due:
                # The CLI reports an ended task in a turn of its own, soon; if it does not
                # (it folded the news into a turn already under way), stop waiting for it.
                with anyio.move_on_after(REPORT_GRACE_SECONDS) as waited:
                    await inbox.wait()
                if waited.cancelled_caught:
                    session.background.report_due = False
                    session.notify_changed()
                    continue
            else:
                await inbox.wait()
            inbox.rearm()

    async def _fence(self, tree: Worktree) -> Fence | None:
        """The fence a worktree child's agent runs in, as its fork decided (core/fork/fence.py)."""
        sandbox = self._session.sandbox
        if sandbox is None or not sandbox.fenced:
            return None
        protected = await anyio.to_thread.run_sync(protected_git_files, tree.repository)
        shared = await anyio.to_thread.run_sync(git_fence, tree.path)
        return Fence(network=sandbox.network or "full", protected=tuple(protected), git=shared)

    async def _give_back_slot(self) -> None:
        await self._slot.give_back(self.close_agent)

    def _ended_by(self, error: Exception) -> str:
        # An AgentFailed says it in the agent's own words (how codex's app-server ended, say).
        return describe_failure(error, self._session.process.stderr())

    # --- a turn ----------------------------------------------------------------------------------

    async def _run_turn(self, turn: Turn | None) -> None:
        """One turn: a message of ours (`turn`), or one the CLI started by itself (None) to
        report on background tasks that ended."""
        session = self._session
        session.in_turn = True
        self._turn_no += 1
        session.cancel_requested = anyio.Event()
        session.background.report_due = (
            False  # whatever ended so far, this turn is where the CLI says so
        )
        session.turn_text, session.answered = [], False
        if turn is not None:
            session.emit(events.Prompt(text=turn.text, origin=turn.origin))
        else:
            session.emit(events.Prompt(text=session.background.report(), origin="task"))
        result: events.TurnResult | None = None
        failure: str | None = None
        try:
            with anyio.CancelScope() as scope:
                self._turn_scope = scope
                await self._slot.take()
                if session.started_at is None:
                    session.started_at = anyio.current_time()
                    session.started.set()
                if turn is not None:
                    agent = session.process.agent
                    if agent is None:
                        session.set_status("starting")
                        spec = self._next_spec()
                        if not isinstance(spec.start, Resume):  # a conversation of its own
                            spec = dataclasses.replace(spec, title=session.label or session.title)
                        if session.worktree is not None:
                            spec = dataclasses.replace(
                                spec,
                                read_only_roots=(session.worktree.repository,),
                                temp_dir=str(worktrees.temp_folder(session.worktree.path)),
                                fence=await self._fence(session.worktree),
                            )
                        agent = await session.process.open(spec, self._ask_permission)
                    session.set_status("running")
                    await agent.send(turn.text)
                else:
                    session.set_status("running")
                assert session.process.agent is not None
                session.process.heard_at = anyio.current_time()
                async with anyio.create_task_group() as watchers:
                    watchers.start_soon(self._repeat_interrupt, session.process.agent)
                    result = await self._relay()
                    watchers.cancel_scope.cancel()
                if result is None:
                    failure = (
                        "The agent process ended in the middle of a turn." + session.process.tail()
                    )
        except Exception as group:
            exc = _first_error(group)
            if isinstance(exc, protocol.CovenError):
                failure = exc.message
            elif isinstance(exc, ChildIdle):
                failure = str(exc)
                session.process.kill()  # silent this long: it would not heed a graceful close
            elif isinstance(exc, AgentFailed):
                failure = str(exc)
            else:
                log.warning("session %s: turn failed", session.id, exc_info=True)
                failure = describe_failure(exc, session.process.stderr())
        finally:
            self._turn_scope = None
        if result is None and failure is None and not session.closing:
            failure = (
                "The turn was stopped."
                if session.cancel_requested.is_set()
                else "The turn did not finish."
            )
        if result is None or failure is not None:
            # The process is in an unknown state: stop it; the next turn resumes the conversation.
            with anyio.CancelScope(shield=True):
                await self.close_agent()
        try:
            if session.closing:
                return
            if result is None:
                if session.cancel_requested.is_set():
                    session.last_outcome = Outcome(False, error="cancelled by the user")
                    session.emit(
                        events.TurnResult(
                            text="", isError=False, subtype="cancelled", cancelled=True, costUsd=0.0
                        )
                    )
                    session.set_status("idle")
                else:
                    failure = failure or "The turn failed."
                    session.last_outcome = Outcome(False, error=failure)
                    session.emit(events.Error(message=failure))
                    session.set_status("failed")
                return
            match result:
                case events.TurnResult(cancelled=True):
                    session.last_outcome = Outcome(False, result.text, "cancelled by the user")
                case events.TurnResult(isError=True):
                    session.last_outcome = Outcome(False, result.text, result.text or "failed")
                case _:
                    session.last_outcome = Outcome(True, result.text)
            if self._on_turn_end is not None:
                # Before `idle`: the hook may move the session on (a proposed or started fork).
                await self._run_hook(result)
            if session.status == "running":
                session.set_status("idle")
        finally:
            session.in_turn = False
            session.notify_changed()

    def _next_spec(self) -> AgentSpec:
        session = self._session
        if session.first_start is not None:
            return session.first_start
        config = session.config
        return AgentSpec(
            cwd=config.cwd,
            model=config.model,
            permission_mode=config.permission_mode,
            start=Resume(session.agent_session_id)
            if session.agent_session_id is not None
            else New(),
            append_system_prompt=config.append_system_prompt,
            env=config.env,
        )

    async def _repeat_interrupt(self, agent: Agent) -> None:
        """An interrupt that reaches the CLI before it has taken up the turn's message is lost;
        while a cancelled turn goes on, ask again every second (cancel() stops the process when
        the grace period is over)."""
        await self._session.cancel_requested.wait()
        while True:
            await anyio.sleep(1.0)
            try:
                await agent.interrupt()
            except Exception:
                log.debug("session %s: repeated interrupt failed", self._session.id, exc_info=True)

    async def _run_hook(self, result: events.TurnResult) -> None:
        """The turn-end hook (fork detection) is part of the turn: messages sent meanwhile queue
        behind it, and close() stops it."""
        assert self._on_turn_end is not None
        session = self._session
        try:
            with anyio.CancelScope() as scope:
                self._hook_scope = scope
                await self._on_turn_end(result)
        except Exception as exc:
            log.exception("session %s: turn-end hook failed", session.id)
            session.emit(
                events.Error(message=f"internal error in coven-ls after the turn: {exc!r}")
            )
        finally:
            self._hook_scope = None

    async def _relay(self) -> events.TurnResult | None:
        """Publish the agent's events until the turn's end; None if the process ends first (an
        error it died of is raised)."""
        session = self._session
        while True:
            limit = session.config.child_idle_timeout if session.fork_id else 0
            item = await session.process.next_message_or_idle(limit)
            if session.closing:
                return None  # stopped (a fork limit): what the agent says after that is not shown
            if isinstance(item, StreamEnded):
                if item.error is not None:
                    raise item.error
                return None
            result = self._publisher.publish(item)
            if isinstance(item, agent_events.TurnEnded):
                if item.conversation_id:
                    session.agent_session_id = item.conversation_id
                session.streams.clear(None)  # what the cut-off turn was still streaming is moot
                return result


class _CliTurn:
    """`_next_work`'s answer when the CLI started a turn by itself."""


_CLI_TURN = _CliTurn()


def _starts_a_turn(event: AgentEvent | StreamEnded) -> bool:
    """Whether an event that arrives between turns opens a turn of the agent's own: its start,
    the main agent's words or streaming, or a turn's end (a subagent's words and task news do
    not)."""
    if isinstance(event, (agent_events.AgentStarted, agent_events.TurnEnded)):
        return True
    if isinstance(
        event,
        (
            agent_events.AgentMessage,
            agent_events.BlockStarted,
            agent_events.Delta,
            agent_events.Activity,
            agent_events.ModelCall,
        ),
    ):
        return event.parent_tool_call_id is None
    return False


def _first_error(exc: BaseException) -> BaseException:
    """The error itself, out of the exception groups that task groups wrap it in."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
