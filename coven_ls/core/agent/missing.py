"""The backend of a stored session whose agent is no longer configured (its entry was removed
from `initializationOptions.agents`): the session is kept as it was, listed, readable and
deletable, but anything that would run its agent (a message, a fork, a branch) is refused with
an error naming the agent and saying how to bring it back."""

from __future__ import annotations

import logging

from ...protocol import CovenError, ErrorCode
from .errors import AgentStartError
from .interface import Abilities, Agent, AgentSpec, Conversation, Entry, PermissionAsker

log = logging.getLogger(__name__)


def agent_missing(agent: str, session_id: str | None = None) -> CovenError:
    """ClaudeUnavailable (no usable agent): the agent `agent` is not configured any more."""
    whose = f"Session {session_id} runs" if session_id else "That session runs"
    data: dict[str, str] = {"agent": agent}
    if session_id:
        data["sessionId"] = session_id
    return CovenError(
        ErrorCode.ClaudeUnavailable,
        f"{whose} the agent '{agent}', which this server no longer knows: its entry is missing "
        f"from initializationOptions.agents. Add it back (initializationOptions.agents.{agent}: "
        '{"command": [...]}) and restart coven-ls to use the session again; '
        "coven/deleteSession removes it.",
        data,
    )


class MissingBackend:
    """A `Backend` that starts nothing: every start raises `agent_missing`."""

    def __init__(self, agent: str) -> None:
        self.agent = agent

    def problem(self, session_id: str | None = None) -> CovenError:
        return agent_missing(self.agent, session_id)

    def abilities(self) -> Abilities:
        # Only an ACP agent can be removed from the configuration; nothing is known of it.
        problem = self.problem().message
        return Abilities("acp", copies=False, reports_cost=None, no_copy_reason=problem)

    async def find_abilities(self) -> Abilities:
        return self.abilities()

    def check(self) -> None:
        raise self.problem()

    async def open(self, spec: AgentSpec, ask_permission: PermissionAsker) -> Agent:
        raise AgentStartError(self.problem().message)

    async def conversation(
        self, agent_session_id: str, cwd: str, up_to: str | None = None
    ) -> list[Entry]:
        raise AgentStartError(self.problem().message)

    async def aclose(self) -> None:
        pass

    async def fork_point_problem(self, conversation: str, message_id: str) -> str | None:
        return self.problem().message

    async def purge(self, conversations: list[Conversation]) -> None:
        # What the agent stored cannot be reached without it; the sessions are gone already.
        log.warning(
            "agent %r is not configured: its stored conversations %s are left as they are",
            self.agent,
            [c.agent_session_id for c in conversations],
        )


def refuse_if_missing(backend: object, session_id: str) -> None:
    """Raise `agent_missing` when a session's backend is a `MissingBackend`."""
    if isinstance(backend, MissingBackend):
        raise backend.problem(session_id)
