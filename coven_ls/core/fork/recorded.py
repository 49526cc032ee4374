"""A session's conversation read from what coven-ls recorded of it (its events), for an agent
that cannot give one back (`Abilities.reads_conversations` False: an ACP agent), so that its
sessions' children and branches can start from a transcript (core/fork/transcript.py renders
it).

The user's side is each `prompt` (what the session sent the agent: a transcript child's holds
the conversation it was given, written out), the agent's its `text`, `thinking`, `toolUse` and
`toolResult` events; a background task's own messages (`parentToolUseId`) are not the
conversation's. A session that started as a copy of its parent's conversation (a fork child
that inherits it) holds in its own events only what came after: its parent's, up to the fork,
come first. A branch copied with `session/fork` is read from its own events only (what it
copied is not recorded with it): a transcript of it lacks its parent's part.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...protocol import EventDict, Kind
from ..agent import Entry

if TYPE_CHECKING:
    from ..session import Session
    from .fork import Fork

# A fork by its id (None: not known to this server).
ForkOf = Callable[[str], "Fork | None"]


def entry(event: EventDict) -> Entry | None:
    """One event as a part of the conversation, or None for an event that is not one."""
    if event.get("parentToolUseId"):
        return None
    kind = event["kind"]
    if kind == Kind.PROMPT:
        return Entry("user", str(event["text"]))
    if kind == Kind.TEXT:
        return Entry("assistant", str(event["text"]))
    if kind == Kind.THINKING:
        return Entry("thinking", str(event["text"]))
    if kind == Kind.TOOL_USE:
        tool_input: Any = event.get("input") or {}
        return Entry("toolCall", json.dumps(tool_input, ensure_ascii=False), name=event["name"])
    if kind == Kind.TOOL_RESULT:
        return Entry("toolResult", str(event["content"]), error=bool(event.get("isError")))
    return None


def entries(events: list[EventDict], up_to: str | None = None) -> list[Entry]:
    """The conversation these events hold, up to and including the message `up_to` (its last
    event; None: all of it)."""
    said: list[Entry] = []
    end: int | None = None
    for event in events:
        found = entry(event)
        if found is not None:
            said.append(found)
        if up_to is not None and event.get("messageId") == up_to:
            end = len(said)
    return said if up_to is None or end is None else said[:end]


def _before_fork(events: list[EventDict], fork_id: str) -> list[EventDict]:
    """The events before the fork `fork_id` was proposed or started (what its children copy)."""
    for n, event in enumerate(events):
        if (
            event["kind"] in (Kind.FORK_PROPOSED, Kind.FORK_STARTED)
            and event.get("forkId") == fork_id
        ):
            return events[:n]
    return events


async def conversation(
    session: Session, up_to: str | None, fork_of: ForkOf, before_fork: str | None = None
) -> list[Entry]:
    """The session's conversation up to its message `up_to` (None: all of it; `before_fork`:
    only what came before that fork of its), its parent's first where it started as a copy of
    its parent's."""
    events = await session.event_log.everything()
    if before_fork is not None:
        events = _before_fork(events, before_fork)
    own = entries(events, up_to)
    fork = fork_of(session.fork_id) if session.fork_id else None
    if fork is None or not fork.settings.native:
        return own
    inherited = await conversation(fork.parent, fork.at_message_id, fork_of, fork.id)
    return inherited + own


async def last_message_id(session: Session) -> str | None:
    """The messageId of the session's latest assistant message (None: it has none)."""
    for event in reversed(await session.event_log.everything()):
        if event["kind"] in (Kind.TEXT, Kind.THINKING, Kind.TOOL_USE) and event.get("messageId"):
            if not event.get("parentToolUseId"):
                return str(event["messageId"])
    return None
