"""How a branch (`coven/branch`) starts: a copy of its parent's agent conversation where the
agent can copy it at that message (Claude anywhere, Codex at a turn's end, an ACP agent with
`session/fork` only whole: at the last message), else a new conversation given the parent's,
written out as for a transcript fork child, ahead of its first message (through the agent's
instructions: for an ACP agent, the preamble of its first prompt)."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from ... import protocol
from ..agent import Abilities, AgentSpec, AgentStartError, Copy, New
from ..session import Session, SessionConfig
from . import recorded, transcript
from .recorded import ForkOf, last_message_id


async def copies_there(parent: Session, at_message_id: str | None, able: Abilities) -> bool:
    """Whether `parent`'s agent can copy its conversation up to `at_message_id` (None: all of
    it); where it copies at any message, `fork_point_problem` still has the last word."""
    if not able.copies:
        return False
    if able.copies_up_to_a_message or at_message_id is None:
        return True
    return at_message_id == await last_message_id(parent)


async def written_conversation(
    parent: Session, at_message_id: str | None, able: Abilities, fork_of: ForkOf
) -> str | None:
    """`parent`'s conversation up to `at_message_id` written out for a branch, or None when it
    has none yet (the branch is refused for that); InvalidState when it cannot be read."""
    if parent.agent_session_id is None:
        return None
    try:
        if able.reads_conversations:
            entries = await parent.backend.conversation(
                parent.agent_session_id, parent.config.cwd, at_message_id
            )
        else:
            entries = await recorded.conversation(parent, at_message_id, fork_of)
    except AgentStartError as exc:
        raise protocol.CovenError(
            protocol.ErrorCode.InvalidState,
            f"Session {parent.id} cannot be branched: its agent cannot copy the conversation "
            f"there, and it cannot be written out ({exc}).",
            {"sessionId": parent.id},
        ) from exc
    return transcript.written(entries, transcript.MESSAGES_FOLLOW)


def branch_spec(
    config: SessionConfig,
    conversation: str,
    at_message_id: str | None,
    able: Abilities | None = None,
    written: str | None = None,
) -> AgentSpec:
    """How a branch's agent starts: a copy of the parent's conversation `conversation`, cut at
    `at_message_id` (an agent that copies only whole conversations was checked to be at the last
    message), under an id chosen here so that its transcript is known before its agent says a
    word; or, `written` (the parent's conversation written out), a new conversation given it
    ahead of its first message."""
    whole = able is not None and not able.copies_up_to_a_message
    spec = AgentSpec(
        cwd=config.cwd,
        model=config.model,
        permission_mode=config.permission_mode,
        start=Copy(conversation, None if whole else at_message_id, str(uuid.uuid4())),
        append_system_prompt=config.append_system_prompt,
        env=config.env,
    )
    if written is None:
        return spec
    instructions = [config.append_system_prompt, written]
    return dataclasses.replace(
        spec,
        start=New(str(uuid.uuid4())),
        append_system_prompt="\n\n".join(i for i in instructions if i),
    )


def branch_settings(config: SessionConfig, row: dict[str, Any], able: Abilities) -> dict[str, Any]:
    """A stored branch's marker and, if its CLI never started, how it starts (from its
    parent's conversation, as it would have)."""
    stored = row.get("branched_from")
    if not stored:
        return {}
    settings: dict[str, Any] = {
        "branched_from": protocol.BranchedFrom(atMessageId=stored.get("atMessageId"))
    }
    if row["agent_session_id"] is None and stored.get("agentSessionId"):
        at_message_id = stored.get("atMessageId")
        settings["start"] = branch_spec(config, stored["agentSessionId"], at_message_id, able)
    return settings
