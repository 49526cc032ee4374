"""A session's row in the store: what `record` writes and `restore` takes up again after a
restart (the events themselves are stored by the journal, one by one). It reads and writes the
session's state (state.py), which the session is made of: it does not know the session."""

from __future__ import annotations

from typing import Any

import msgspec

from ... import protocol
from ...protocol.types import (
    LIMIT_NAMES,
    Changes,
    ClusterPlacement,
    ContextUsage,
    Sandbox,
    Usage,
    Worktree,
)
from ..agent import Copy
from ..fork.spend import limits_row
from .state import Outcome, SessionState


def record(session: SessionState) -> dict[str, Any]:
    """The session's row in the store."""
    outcome = session.last_outcome
    return {
        "session_id": session.id,
        "parent_id": session.parent_id,
        "fork_id": session.fork_id,
        "label": session.label,
        "title": session.title,
        "status": session.status,
        "agent_session_id": session.agent_session_id,
        "agent": session.config.agent,
        "cwd": session.config.cwd,
        "model": session.config.model,
        "permission_mode": session.config.permission_mode,
        "fork_mode": session.config.fork_mode,
        "created_at": session.created_at,
        "cost_usd": session.cost_usd,
        # The gauge rides in the usage column (no column of its own): older servers ignore it.
        "usage": {
            **msgspec.to_builtins(session.usage),
            "context": msgspec.to_builtins(session.context),
            "answerTokens": session.answer_tokens,
        },
        "depth": session.depth,
        "max_children": session.config.max_children,
        "max_parallel": session.config.max_parallel,
        "max_depth": session.config.max_depth,
        "outcome": None
        if outcome is None
        else {"ok": outcome.ok, "text": outcome.text, "error": outcome.error}
        | ({"limit": outcome.limit} if outcome.limit else {}),
        "isolation": None
        if session.isolation is None
        else {
            "mode": session.isolation,
            "reason": session.isolation_reason,
            "worktree": msgspec.to_builtins(session.worktree),
            "changes": msgspec.to_builtins(session.changes),
            "since": session.changes_since,
            "sandbox": None if session.sandbox is None else msgspec.to_builtins(session.sandbox),
        },
        "branched_from": None if session.branched_from is None else _branch_row(session),
        "fork_limits": limits_row(session.config.fork_limits),
        "placement": None if session.placement is None else msgspec.to_builtins(session.placement),
    }


def _branch_row(session: SessionState) -> dict[str, Any]:
    """Where a branch left its parent, and, until its CLI has a conversation of its own, the
    parent's conversation it starts from (a restart before then starts it from there again)."""
    assert session.branched_from is not None
    start = session.first_start
    return {
        "atMessageId": session.branched_from.atMessageId,
        "agentSessionId": start.start.conversation_id
        if start is not None and isinstance(start.start, Copy)
        else None,
    }


def restore(session: SessionState, row: dict[str, Any]) -> None:
    """Take up where a stopped server left off: its log (where it ends; the events stay in
    the store until a client asks for them), cost, agent session and outcome. Whatever was
    under way is `interrupted`, and says so in a new event."""
    session.event_log.recent = []
    session.event_log.last_seq = session.event_log.committed_seq = row["last_seq"] or 0
    session.agent_session_id = row["agent_session_id"]
    session.cost_usd = row["cost_usd"] or 0.0
    if row.get("usage"):
        session.usage = msgspec.convert(row["usage"], Usage)
        if row["usage"].get("context"):
            session.context = msgspec.convert(row["usage"]["context"], ContextUsage)
        session.answer_tokens = int(row["usage"].get("answerTokens") or 0)
    outcome = row.get("outcome")
    if outcome is not None:
        limit = outcome.get("limit")
        session.last_outcome = Outcome(
            outcome["ok"],
            outcome.get("text") or "",
            outcome.get("error"),
            next((n for n in LIMIT_NAMES if n == limit), None),
        )
    isolation = row.get("isolation")
    if isolation is not None:
        session.isolation = isolation["mode"]
        session.isolation_reason = isolation.get("reason")
        if isolation.get("worktree"):
            session.worktree = msgspec.convert(isolation["worktree"], Worktree)
        if isolation.get("changes"):
            session.changes = msgspec.convert(isolation["changes"], Changes)
        session.changes_since = isolation.get("since")
        if isolation.get("sandbox"):
            session.sandbox = msgspec.convert(isolation["sandbox"], Sandbox)
    if row.get("placement"):
        session.placement = msgspec.convert(row["placement"], ClusterPlacement)
    if session.status in protocol.BUSY_STATUSES:
        session.set_status("interrupted")
