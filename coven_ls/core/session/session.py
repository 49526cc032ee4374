"""One agent session (Claude Code, Codex): what it is (`SessionState`, state.py) and the
commands clients and forks give it (a message, cancel, close, ...).

A session is driven by one runner task (`run`, runner.py), which alone opens and closes the agent
process, because an agent may need that (claude-agent-sdk's client must be connected and
disconnected in the same task). Every command here only queues work for the runner (the inbox)
or interrupts it.

No pygls here: events leave through the `Sink` the session is given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

import anyio

from ... import protocol
from ...protocol import EventDict, PermissionMode, Status, events
from ...protocol.types import BranchedFrom, Origin, PermissionOption
from ..agent import AgentSpec, Backend, Decision, TaskNotRunning
from ..agent.missing import refuse_if_missing
from . import record as session_record
from .config import SessionConfig
from .inbox import Turn
from .permission import PermissionQuestions
from .publishing import AgentEventPublisher
from .runner import Runner
from .slot import TurnGate
from .state import EventSink, SessionState

# How long `close` waits for the runner to stop the agent process (the SDK's own escalation from
# stdin EOF to SIGKILL is bounded at about 15 s).
CLOSE_SECONDS = 30.0


class Sink(EventSink, Protocol):
    """Where a session's events and questions go (the hub, in the server)."""

    async def ask_permission(
        self,
        session: Session,
        tool_name: str,
        tool_input: dict[str, Any],
        tool_use_id: str | None,
        options: Sequence[PermissionOption] = (),
    ) -> Decision: ...


class Session(SessionState):
    def __init__(
        self,
        session_id: str,
        config: SessionConfig,
        backend: Backend,
        sink: Sink,
        *,
        title: str,
        created_at: str,
        parent_id: str | None = None,
        fork_id: str | None = None,
        label: str | None = None,
        branched_from: BranchedFrom | None = None,
        depth: int = 0,
        status: Status = "starting",
        turn_gate: TurnGate | None = None,
        start: AgentSpec | None = None,
        on_turn_end: Callable[[Session, events.TurnResult], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(
            session_id,
            config,
            backend,
            sink,
            title=title,
            created_at=created_at,
            parent_id=parent_id,
            fork_id=fork_id,
            label=label,
            branched_from=branched_from,
            depth=depth,
            status=status,
            start=start,
        )
        # Who wants to hear of each model call and turn's cost (its fork's limits).
        self.on_spend: Callable[[Session], None] | None = None
        self._publisher = AgentEventPublisher(self, self._spent)
        questions = PermissionQuestions(
            self,
            lambda tool, given, call, options: sink.ask_permission(
                self, tool, given, call, options
            ),
        )
        self._runner = Runner(
            self,
            self._publisher,
            questions.ask,
            turn_gate=turn_gate,
            on_turn_end=None if on_turn_end is None else (lambda result: on_turn_end(self, result)),
        )

    def _spent(self) -> None:
        if self.on_spend is not None:
            self.on_spend(self)

    async def events_after(self, after_seq: int, limit: int | None = None) -> list[EventDict]:
        """Events after `after_seq` that are safely stored (see `EventLog.events_after`)."""
        return await self.event_log.events_after(after_seq, limit)

    async def has_message(self, message_id: str) -> bool:
        """Whether an assistant message of this session has this id."""
        return await self.event_log.has_message(message_id)

    def record(self) -> dict[str, Any]:
        """The session's row in the store."""
        return session_record.record(self)

    def restore(self, row: dict[str, Any]) -> None:
        """Take up where a stopped server left off (see `record.restore`)."""
        session_record.restore(self, row)

    def restart_as_fork(self, start: AgentSpec) -> None:
        """Make an interrupted fork child run again from scratch: a fresh fork of its parent."""
        self._first_start = start
        self.agent_session_id = None
        self._publisher.agent_info = None
        self.last_outcome = None
        self.started_at, self.started = None, anyio.Event()
        self.set_status("queued")

    def add_env(self, extra: Mapping[str, str]) -> None:
        """Variables for its agent from now on (a fork child's COVEN_PORT, ...); before its first
        turn, so that its first process has them too."""
        self.config.env = {**self.config.env, **extra}  # a new dict: the parent's is shared
        if self._first_start is not None:
            self._first_start = dataclasses.replace(
                self._first_start, env={**self._first_start.env, **extra}
            )

    @property
    def settled(self) -> bool:
        """Nothing running, queued or held: the session's work, forks included, is done."""
        if self.closing:  # settled once it is closed, with its final status
            return self.done.is_set()
        return not (
            self.in_turn
            or self.inbox
            or self.inbox.holds
            or self.tasks
            or self.background.report_due
        )

    async def wait_settled(self) -> None:
        while not self.settled:
            await self.wait_changed()

    @property
    def closed(self) -> bool:
        return self.status in protocol.FINAL_STATUSES or self.closing

    @property
    def stopped_with_server(self) -> bool:
        """Closed because the server is stopping (not by a user): a restart takes it up again."""
        return self.closing and self.final_status is None

    @property
    def busy(self) -> bool:
        return self.in_turn

    # --- commands (called from request handlers) -------------------------------------------------

    def send(self, text: str, origin: Origin = "user", *, first: bool = False) -> int:
        """Queue a turn; returns how many turns are ahead of it (0: it starts now). `first` puts
        it ahead of the queued ones (fork results go before messages sent during the fork)."""
        if self.closed:
            raise protocol.CovenError(
                protocol.ErrorCode.InvalidState,
                f"Session {self.id} is "
                f"{self.status if self.status in protocol.FINAL_STATUSES else 'closing'}; "
                "it takes no more messages. Start a new session with coven/startSession.",
                {"sessionId": self.id, "status": self.status},
            )
        refuse_if_missing(self.backend, self.id)
        busy = self.in_turn or bool(self.inbox.holds)
        return self.inbox.put(Turn(text, origin), busy=busy, first=first)

    def hold(self) -> None:
        """Keep queued turns waiting (while a fork is proposed or runs) until `release`."""
        self.inbox.holds += 1

    def release(self) -> None:
        self.inbox.holds = max(self.inbox.holds - 1, 0)
        self.inbox.wake()
        self.notify_changed()

    def pause_agent(self) -> None:
        """Stop the agent process as soon as no turn runs (a forking parent must not keep working
        invisibly); the next turn resumes the conversation from disk."""
        self.inbox.pause_requested = True
        self.inbox.wake()

    async def stop_task(self, task_id: str) -> None:
        """Stop one background task of the CLI (a subagent): the CLI reports its end as usual."""
        if task_id not in self.tasks or self.process.agent is None:
            raise protocol.CovenError(
                protocol.ErrorCode.InvalidState,
                f"Session {self.id} has no running background task '{task_id}'; the `task` "
                "events say which run (SessionInfo.backgroundTasks lists them).",
                {"sessionId": self.id, "taskId": task_id},
            )
        try:
            await self.process.agent.stop_task(task_id)
        except TaskNotRunning as exc:
            # Nothing will ever report its end: it no longer runs, as far as anyone can tell.
            task, due = self.tasks.get(task_id), self.background.report_due
            if task is not None:
                self._publisher.publish_task_end(task, "no longer run by the agent")
                self.background.report_due = due  # nor will the agent report it
            raise protocol.CovenError(
                protocol.ErrorCode.InvalidState,
                f"Session {self.id}'s agent no longer runs the background task '{task_id}': "
                f"{exc} It is no longer listed as running.",
                {"sessionId": self.id, "taskId": task_id},
            ) from exc

    async def set_permission_mode(self, mode: PermissionMode) -> None:
        """From now on: the running CLI's next tool call, and every later start of it."""
        if self.process.agent is not None:
            # First: an agent that cannot take the mode refuses, and the session keeps its own.
            await self.process.agent.set_permission_mode(mode)
        self.config.permission_mode = mode

    async def cancel(self) -> int:
        """Interrupt the running turn and drop queued ones; returns how many were dropped. The
        session stays usable: its agent conversation is kept and the next message resumes it."""
        dropped = len(self.inbox)
        self.inbox.clear()
        if self.in_turn:
            await self._runner.cancel()
        return dropped

    async def close(self, final_status: Status | None = "closed") -> None:
        """End the session and its agent process; returns when the process is gone. A fork child
        stopped by the user ends as `cancelled` rather than `closed`; `None` (the server shutting
        down) leaves the status as it is, so a restart can take the session up again."""
        self.begin_close(final_status)
        with anyio.move_on_after(CLOSE_SECONDS):
            await self.done.wait()

    def begin_close(self, final_status: Status | None = "closed", *, kill: bool = False) -> None:
        """`close` without waiting: from here on the session takes no more turns, and the one
        under way ends without an outcome of its own (a fork limit has set it). `kill`: its
        process is killed at once rather than given time to end (the CLI keeps working while it
        is, and a child that reached its limit must not spend more)."""
        self._runner.begin_close(final_status, kill=kill)

    async def run(self) -> None:
        """The session's runner (runner.py): until it is closed."""
        await self._runner.run()
