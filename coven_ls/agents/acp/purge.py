"""`coven/deleteSession` with `purge` for an ACP agent: its stored sessions are closed
(`session/close`) and deleted (`session/delete`) where the agent advertises those unstable
methods, through a process of the agent's started for that alone (the sessions' own processes
have ended with them). What cannot be removed is logged, not raised: the coven sessions are
gone already."""

from __future__ import annotations

import logging
from typing import Any

import anyio
from acp import RequestError
from acp.meta import AGENT_METHODS
from acp.schema import (
    DeleteSessionRequest,
    DeleteSessionResponse,
    DeniedOutcome,
    RequestPermissionResponse,
)
from acp.utils import request_model_from_dict

from ...core.agent import Conversation
from .process import initialize

log = logging.getLogger(__name__)

REQUEST_SECONDS = 30.0


class PurgeClient:
    """The ACP client side of a process that only removes sessions: it runs no turn, so
    whatever the agent says is dropped and whatever it asks is declined."""

    async def request_permission(self, *_: Any, **__: Any) -> RequestPermissionResponse:
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    async def session_update(self, *_: Any, **__: Any) -> None:
        pass

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        pass


async def purge_sessions(name: str, conn: Any, conversations: list[Conversation]) -> list[str]:
    """Close and delete `conversations` through the agent connection `conn` (not yet
    initialized); returns the session ids it deleted."""
    with anyio.fail_after(REQUEST_SECONDS):
        init = await initialize(conn)
    caps = init.agent_capabilities
    sessions = caps.session_capabilities if caps is not None else None
    can_close = sessions is not None and sessions.close is not None
    can_delete = sessions is not None and sessions.delete is not None
    deleted: list[str] = []
    for conversation in conversations:
        session_id = conversation.agent_session_id
        if can_close:
            try:
                with anyio.fail_after(REQUEST_SECONDS):
                    await conn.close_session(session_id=session_id)
            except Exception as exc:  # a session no process of the agent has open: nothing to free
                log.info("ACP agent %s: session/close of %s: %s", name, session_id, exc)
        if not can_delete:
            continue
        try:
            with anyio.fail_after(REQUEST_SECONDS):
                # The SDK's client side (0.12) has no method for the unstable session/delete.
                await request_model_from_dict(
                    conn._conn,
                    AGENT_METHODS["session_delete"],
                    DeleteSessionRequest(session_id=session_id),
                    DeleteSessionResponse,
                )
            deleted.append(session_id)
        except Exception as exc:
            log.warning(
                "ACP agent %s: its session %s (in %s) could not be deleted: %s",
                name,
                session_id,
                conversation.cwd,
                exc,
            )
    if not can_delete:
        log.info(
            "ACP agent %s has no session/delete: its sessions %s are kept where it stores them",
            name,
            [c.agent_session_id for c in conversations],
        )
    return deleted
