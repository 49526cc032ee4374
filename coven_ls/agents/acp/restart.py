"""An ACP agent whose process ends by itself is started again, a bounded number of times per
session, and its session taken up again (`session/resume`, else `session/load`, as after a
server restart): a turn that was running ends failed with how the process ended, and the session
is told (`Restarted`, the coven event `agentRestarted`). Once the restarts are used up, or when
starting it again fails, the end is the session's as for any agent (`AgentFailed`: an `error`
event, and the next message starts the agent anew)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

import anyio

from ...core.agent import AgentFailed
from ...core.agent.events import Restarted

log = logging.getLogger(__name__)

# How many times one session's agent process is started again after it ended by itself.
MAX_RESTARTS = 3
# How long a restart (process, initialize, session/resume or load, its mode) may take.
RESTART_SECONDS = 90.0


class Revivable(Protocol):
    name: str
    session_id: str | None
    restarts: int
    max_restarts: int

    def put(self, item: object) -> None: ...

    def end(self) -> None: ...

    async def turn_over(self) -> None: ...


async def revive(
    agent: Revivable, reason: str, reopen: Callable[[], Awaitable[None]], ready: anyio.Event
) -> None:
    """Start `agent` again after its process ended (`reason`); `reopen` starts a process and
    takes the session up again; `ready` is set when the agent can take a turn again (or never
    will). The turn that was running ends first."""
    try:
        await agent.turn_over()
        agent.restarts += 1
        log.warning(
            "ACP agent %s (session %s): %s Starting it again (%d of %d).",
            agent.name,
            agent.session_id,
            reason,
            agent.restarts,
            agent.max_restarts,
        )
        try:
            with anyio.fail_after(RESTART_SECONDS):
                await reopen()
        except Exception as exc:
            log.warning("ACP agent %s could not be started again: %s", agent.name, exc)
            agent.put(AgentFailed(f"{reason} Starting it again failed: {exc}"))
            agent.end()
            return
        agent.put(Restarted(reason=reason, restart=agent.restarts, max_restarts=agent.max_restarts))
    finally:
        ready.set()
