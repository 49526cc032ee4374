"""A session's agent process: opened for a turn, read for as long as it lives (turn or no turn),
watched for silence, closed or killed.

The session's runner alone opens and closes it (claude-agent-sdk's client must be connected and
disconnected in the same task); a reader task in the runner's task group puts what the CLI says
in `incoming`, and the runner takes it from there.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Callable

import anyio
from anyio.abc import TaskGroup

from ..agent import (
    Agent,
    AgentEvent,
    AgentSpec,
    Backend,
    New,
    PermissionAsker,
    meaningful_lines,
)

log = logging.getLogger(__name__)


class ChildIdle(Exception):
    """A fork child's CLI said nothing for `childIdleTimeoutSeconds` in a turn."""


class StreamEnded:
    """The agent's event stream ended: the process is gone (`error`: what ended it, an
    `AgentFailed` in the agent's own words where its adapter knows them)."""

    def __init__(self, error: Exception | None) -> None:
        self.error = error

    def __repr__(self) -> str:
        return f"stream ended: {self.error!r}" if self.error else "stream ended"


class AgentProcess:
    def __init__(self, session_id: str, backend: Backend, on_message: Callable[[], None]) -> None:
        """`on_message`: the CLI said something (it wakes the session's runner)."""
        self._session_id = session_id
        self.backend = backend
        self.agent: Agent | None = None
        self._on_message = on_message
        # The agent is read all the time, not only during a turn: a reader task puts what it says
        # (coven's agent events) here, and the runner takes it from here (in a turn, or between
        # turns).
        self.incoming: deque[AgentEvent | StreamEnded] = deque()
        self._arrived = anyio.Event()
        self._reader: anyio.CancelScope | None = None
        self.task_group: TaskGroup | None = None  # the runner's, where the reader runs
        self.cost = 0.0  # total_cost_usd the current process has reported so far
        # The current process goes on with an earlier conversation (resumed, or a fork child's
        # copy), and has not ended a turn yet: its first running total may hold what it
        # restored of that conversation's cost (publishing.py, _account).
        self.carried_cost = False
        self.asking = 0  # permission questions waiting for the user (the CLI waits silently)
        self.heard_at = 0.0  # when the CLI last said something, or the user last answered it

    async def open(self, spec: AgentSpec, ask_permission: PermissionAsker) -> Agent:
        self.agent = await self.backend.open(spec, ask_permission)
        self.cost = 0.0
        self.carried_cost = not isinstance(spec.start, New)
        self._start_reader(self.agent)
        return self.agent

    def kill(self) -> None:
        """Stop the process outright: it would not heed a graceful close."""
        if self.agent is not None:
            self.agent.kill()

    def stderr(self) -> str:
        return self.agent.stderr_tail() if self.agent is not None else ""

    def tail(self) -> str:
        reason = meaningful_lines(self.stderr())
        return f" Its last output: {reason}" if reason else ""

    def _start_reader(self, agent: Agent) -> None:
        """Read the CLI for as long as its process lives, turn or no turn."""
        assert self.task_group is not None
        scope = anyio.CancelScope()
        self._reader = scope

        async def read() -> None:
            with scope:
                try:
                    async with contextlib.aclosing(agent.messages()) as stream:
                        async for message in stream:
                            self._push(message)
                except Exception as exc:
                    self._push(StreamEnded(exc))
                else:
                    self._push(StreamEnded(None))

        self.task_group.start_soon(read, name=f"reader of {self._session_id}")

    def _push(self, item: AgentEvent | StreamEnded) -> None:
        self.incoming.append(item)
        self._arrived.set()
        self._on_message()

    async def next_message(self) -> AgentEvent | StreamEnded:
        while not self.incoming:
            self._arrived = anyio.Event()
            await self._arrived.wait()
        return self.incoming.popleft()

    async def next_message_or_idle(self, limit: float) -> AgentEvent | StreamEnded:
        """The CLI's next message; a fork child whose CLI stays silent too long (a frozen
        process, a connection that hangs without an error) must not hold its fork forever.
        Silence is counted from its last message or the user's last permission answer.
        `limit` <= 0: no limit."""
        if limit <= 0:
            return await self.next_message()
        while True:
            wait = self.heard_at + limit - anyio.current_time()
            with anyio.move_on_after(max(wait, 0.0)):
                item = await self.next_message()
                self.heard_at = anyio.current_time()
                return item
            if self.asking:  # the CLI waits for the user, not the other way round
                log.debug(
                    "session %s: quiet while the user answers a permission question",
                    self._session_id,
                )
                self.heard_at = anyio.current_time()
            elif anyio.current_time() >= self.heard_at + limit:
                raise ChildIdle(
                    f"The agent said nothing for {limit:g} seconds (childIdleTimeoutSeconds), "
                    "so the fork child was stopped."
                )

    def stop_reading(self) -> Agent | None:
        """Stop listening to the process; returns it, to be closed with `close`."""
        agent, self.agent = self.agent, None
        if self._reader is not None:
            self._reader.cancel()
            self._reader = None
        self.incoming.clear()  # what it says once we stop listening is moot
        return agent

    async def close(self, agent: Agent | None) -> None:
        """Close a process `stop_reading` gave back; returns when it is gone."""
        if agent is not None:
            try:
                await agent.close()
            except Exception:
                log.warning("session %s: closing the agent failed", self._session_id, exc_info=True)
