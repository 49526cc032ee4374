"""A session's questions to the user: may this tool run? Each question and its answer are events
of the session's (`permissionRequest`, `permissionDecision`), and the agent process is not
counted silent while the user thinks."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio

from ...protocol import events
from ...protocol.types import PermissionOption
from ..agent import Decision
from .state import SessionState

log = logging.getLogger(__name__)

# Asks the user (the session's sink): the tool, its input, its tool use id, the agent's options.
AskUser = Callable[
    [str, dict[str, Any], str | None, Sequence[PermissionOption]], Awaitable[Decision]
]


class PermissionQuestions:
    def __init__(self, session: SessionState, ask_user: AskUser) -> None:
        self._session = session
        self._ask_user = ask_user

    async def ask(
        self,
        tool_name: str,
        tool_input: dict[str, Any],
        tool_use_id: str | None,
        options: Sequence[PermissionOption] = (),
    ) -> Decision:
        session = self._session
        session.emit(
            events.PermissionRequest(
                toolUseId=tool_use_id,
                toolName=tool_name,
                input=tool_input,
                options=list(options) or None,
            )
        )
        # Every request gets a decision event, even when the turn is cut off while the user
        # thinks, so that no client is left showing a question nobody will answer.
        answer = Decision(False, "Denied: the turn ended before the user answered.")
        session.process.asking += 1
        try:
            # Decision(*...): a sink may answer with a bare (allow, message).
            said = await self._ask_user(tool_name, tool_input, tool_use_id, options)
            answer = picked(Decision(*said), options)
        except ConnectionError as exc:  # the editor went away while the user thought
            answer = Decision(False, f"Denied: {exc}.")
        except Exception as exc:
            log.exception("session %s: permission request failed", session.id)
            answer = Decision(False, f"The editor could not be asked for permission: {exc}")
        finally:
            session.process.asking -= 1
            session.process.heard_at = anyio.current_time()
            session.emit(
                events.PermissionDecision(
                    toolUseId=tool_use_id,
                    toolName=tool_name,
                    allow=answer.allow,
                    message=answer.message or None,
                    optionId=answer.option_id,
                )
            )
        return answer


def picked(answer: Decision, options: Sequence[PermissionOption]) -> Decision:
    """The answer made whole: a picked option decides `allow` by its kind; one the question did
    not offer is a denial saying so."""
    if answer.option_id is None:
        return answer
    option = next((o for o in options if o.optionId == answer.option_id), None)
    if option is None:
        offered = ", ".join(o.optionId for o in options) or "none"
        return Decision(
            False,
            f"Denied: the editor answered with option '{answer.option_id}', which the question "
            f"did not offer (it offered: {offered}).",
        )
    allow = option.kind.startswith("allow")
    message = "" if allow else answer.message or "Denied by the user."
    return Decision(allow, message, option.optionId)
