"""A session's questions to the user: may this tool run? Each question and its answer are events
of the session's (`permissionRequest`, `permissionDecision`), and the agent process is not
counted silent while the user thinks."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from ...protocol import events
from .state import SessionState

log = logging.getLogger(__name__)

# Asks the user (the session's sink): allowed, and a message.
AskUser = Callable[[str, dict[str, Any], str | None], Awaitable[tuple[bool, str]]]


class PermissionQuestions:
    def __init__(self, session: SessionState, ask_user: AskUser) -> None:
        self._session = session
        self._ask_user = ask_user

    async def ask(
        self, tool_name: str, tool_input: dict[str, Any], tool_use_id: str | None
    ) -> tuple[bool, str]:
        session = self._session
        session.emit(
            events.PermissionRequest(toolUseId=tool_use_id, toolName=tool_name, input=tool_input)
        )
        # Every request gets a decision event, even when the turn is cut off while the user
        # thinks, so that no client is left showing a question nobody will answer.
        allow, message = False, "Denied: the turn ended before the user answered."
        session.process.asking += 1
        try:
            allow, message = await self._ask_user(tool_name, tool_input, tool_use_id)
        except ConnectionError as exc:  # the editor went away while the user thought
            allow, message = False, f"Denied: {exc}."
        except Exception as exc:
            log.exception("session %s: permission request failed", session.id)
            allow, message = False, f"The editor could not be asked for permission: {exc}"
        finally:
            session.process.asking -= 1
            session.process.heard_at = anyio.current_time()
            session.emit(
                events.PermissionDecision(
                    toolUseId=tool_use_id, toolName=tool_name, allow=allow, message=message or None
                )
            )
        return allow, message
