"""coven-ls events as ACP `session/update`s: pure functions over the typed events and a little
state per session (the tree of it and its fork children, folded by protocol/tree.py; which blocks
were streamed; what each fork has shown), tested on their own.

What maps to what (docs/acp.md): streamed pieces are `agent_message_chunk` /
`agent_thought_chunk`; a whole text or thinking block is sent only when none of it was streamed;
`toolUse` / `toolResult` are `tool_call` / `tool_call_update`; a fork is a `plan` (one entry a
task) and a `tool_call` "Fork: N tasks" whose content is each child's progress and answer;
`prompt` events (on `session/load`) are `user_message_chunk`; a turn's tokens and cost are a
`usage_update`. What an ACP agent behind coven-ls says passes on as it came: its `plan` is a
`plan` (ACP keeps one plan per session: the agent's and a fork's replace each other, the latest
shown), its `toolUpdate` a `tool_call_update`; `agentRestarted` is a line of the answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from acp import (
    plan_entry,
    start_tool_call,
    text_block,
    tool_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_plan,
    update_tool_call,
    update_user_message_text,
)
from acp.schema import (
    Cost,
    PlanEntryStatus,
    SessionInfoUpdate,
    ToolCallLocation,
    ToolCallStatus,
    ToolKind,
    UsageUpdate,
)

from ..protocol import events as ev
from ..protocol.describe import summarize_input
from ..protocol.events import Delta, EventDict
from ..protocol.tree import Event, ForkNode, SessionTree

Update = Any  # one of ACP's SessionUpdate variants

# usage_update's `size` when the model's window is not known (not in coven-ls's price table, or
# no model request yet): ACP requires a number, and this is the smallest window of Claude's and
# OpenAI's current models. `used` is the session's context: its last model request's input.
FALLBACK_WINDOW = 200_000

# Claude Code's tools by what ACP calls their kind.
_KINDS: dict[str, ToolKind] = {
    "Read": "read", "NotebookRead": "read",
    "Write": "edit", "Edit": "edit", "MultiEdit": "edit", "NotebookEdit": "edit",
    "Bash": "execute", "BashOutput": "execute", "KillShell": "execute",
    "Grep": "search", "Glob": "search", "LS": "search",
    "WebFetch": "fetch", "WebSearch": "fetch",
    "Task": "think", "Agent": "think", "TodoWrite": "think",
}  # fmt: skip
# The coven statuses a fork child can be in, by plan entry status.
_CHILD_STATUS: dict[str, PlanEntryStatus] = {
    "queued": "pending", "starting": "in_progress", "running": "in_progress",
    "forking": "in_progress", "awaitingApproval": "in_progress", "reviewing": "in_progress",
    "idle": "completed", "failed": "completed", "closed": "completed",
    "interrupted": "pending",
}  # fmt: skip


def tool_kind(name: str) -> ToolKind:
    return _KINDS.get(name, "other")


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' if count != 1 else ''}"


def tool_title(name: str, tool_input: dict[str, Any]) -> str:
    summary = summarize_input(tool_input, 80)
    return f"{name}: {summary}" if summary else name


def tool_locations(tool_input: dict[str, Any]) -> list[ToolCallLocation] | None:
    path = tool_input.get("file_path") or tool_input.get("notebook_path") or tool_input.get("path")
    return [ToolCallLocation(path=path)] if isinstance(path, str) and path else None


@dataclass
class SessionView:
    """What one ACP session's translation keeps: the tree its events and its fork children's
    describe, and what was shown of it."""

    tree: SessionTree = field(default_factory=SessionTree)
    streamed: set[str] = field(default_factory=set)  # blockIds of which pieces went out
    entries: dict[str, PlanEntryStatus] = field(default_factory=dict)  # a child's, as shown
    said: dict[str, str] = field(default_factory=dict)  # a child's answer, or why it failed

    def plan(self, fork: ForkNode) -> Update:
        return update_plan(
            plan_entry(task, status=self._entry(fork, n)) for n, task in enumerate(fork.tasks)
        )

    def content(self, fork: ForkNode) -> list[Any]:
        lines = []
        for n, task in enumerate(fork.tasks):
            line = f"[{self._entry(fork, n).replace('_', ' ')}] {task}"
            said = self.said.get(self._child(fork, n), "")
            lines.append(f"{line}\n{said}" if said else line)
        return [tool_content(text_block("\n\n".join(lines)))]

    def progress(self, fork: ForkNode, status: ToolCallStatus = "in_progress") -> Update:
        return update_tool_call(tool_call_id(fork), status=status, content=self.content(fork))

    def _child(self, fork: ForkNode, n: int) -> str:
        return fork.children[n].sessionId if n < len(fork.children) else ""

    def _entry(self, fork: ForkNode, n: int) -> PlanEntryStatus:
        return self.entries.get(self._child(fork, n), "pending")


def tool_call_id(fork: ForkNode) -> str:
    return f"fork-{fork.fork_id}"


def delta_update(delta: Delta) -> Update:
    if delta.kind == "thinking":
        return update_agent_thought_text(delta.text)
    return update_agent_message_text(delta.text)


def event_updates(
    event: Event | EventDict, view: SessionView, replay: bool = False
) -> list[Update]:
    """The updates an event of the session itself becomes (none for most bookkeeping events).
    `replay`: a stored event replayed by `session/load` (its prompts are shown too)."""
    typed = view.tree.apply(event)
    if typed is None:
        return []
    payload = typed.payload
    parent = getattr(payload, "parentToolUseId", None)
    if parent is not None:
        # A subagent's (the CLI's Agent tool): its tool calls show, marked with the Agent call
        # they belong to (ACP has no nesting of its own); its words stay in its own transcript.
        if isinstance(payload, ev.ToolUse | ev.ToolResult):
            return [_nested(u, parent) for u in _updates(payload, view, replay)]
        return []
    return _updates(payload, view, replay)


def _updates(payload: ev.Payload, view: SessionView, replay: bool) -> list[Update]:
    match payload:
        case ev.Text(blockId=block) | ev.Thinking(blockId=block) if block in view.streamed:
            return []
        case ev.Thinking(text=text):
            return [update_agent_thought_text(text)]
        case ev.Text(text=text):
            return [update_agent_message_text(text)]
        case ev.Prompt(text=text, origin=origin):
            # A live prompt is the client's own message; fork results and queued messages are not.
            return [update_user_message_text(text)] if replay or origin != "user" else []
        case ev.ToolUse(toolUseId=tool_use_id, name=name, input=tool_input):
            return [
                start_tool_call(
                    tool_use_id,
                    tool_title(name, tool_input),
                    kind=tool_kind(name),
                    status="in_progress",
                    locations=tool_locations(tool_input),
                    raw_input=tool_input,
                )
            ]
        case ev.ToolResult(toolUseId=tool_use_id, content=content, isError=failed):
            return [
                update_tool_call(
                    tool_use_id,
                    status="failed" if failed else "completed",
                    content=[tool_content(text_block(content))],
                )
            ]
        case ev.TurnResult(contextUsage=context, costUsd=cost):
            return [
                UsageUpdate(
                    session_update="usage_update",
                    used=context.tokens if context else 0,
                    size=context.window if context and context.window else FALLBACK_WINDOW,
                    cost=None if cost is None else Cost(amount=cost, currency="USD"),
                )
            ]
        case ev.ForkStarted(forkId=fork_id):
            fork = view.tree.forks[fork_id]
            for child in fork.children:
                view.entries.pop(child.sessionId, None)
                view.said.pop(child.sessionId, None)
            return [
                view.plan(fork),
                start_tool_call(
                    tool_call_id(fork), f"Fork: {plural(len(fork.tasks), 'task')}", kind="think",
                    status="in_progress", content=view.content(fork),
                    raw_input={"tasks": list(fork.tasks)},
                ),
            ]  # fmt: skip
        case ev.ForkFinished(forkId=fork_id, results=results):
            fork = view.tree.forks[fork_id]
            if not fork.children:
                return []  # started before this view knew of it: nothing of it was shown
            for child, result in zip(fork.children, results, strict=False):
                child_id = child.sessionId
                view.entries[child_id] = "completed"  # its answer is already shown
                if not result.ok:
                    view.said[child_id] = f"failed: {result.error or 'no reason given'}"
                elif result.merge:
                    view.said[child_id] = (
                        view.said.get(child_id, "") + f"\n(changes: {result.merge})"
                    )
            failed = not any(r.ok for r in results)
            return [view.plan(fork), view.progress(fork, "failed" if failed else "completed")]
        case ev.Plan(entries=entries):
            return [
                update_plan(
                    plan_entry(e.content, status=e.status, priority=e.priority) for e in entries
                )
            ]
        case ev.ToolUpdate():
            return [tool_update(payload)]
        case ev.AgentRestarted(reason=reason, restart=restart, maxRestarts=most):
            return [
                update_agent_message_text(
                    f"\n(The agent's process ended: {reason}; restarted, {restart} of {most}.)\n"
                )
            ]
        case ev.ForkRejected(reason=reason):
            return [update_agent_message_text(f"\n(Fork rejected: {reason or 'no'})\n")]
        case ev.Error(message=message) | ev.ForkError(message=message):
            return [update_agent_message_text(f"\n{message}\n")]
    return []


def tool_update(payload: ev.ToolUpdate) -> Update:
    """A `toolUpdate` as ACP's `tool_call_update`: only what it changes."""
    changes: dict[str, Any] = {}
    if payload.status is not None:
        changes["status"] = payload.status
    if payload.title is not None:
        changes["title"] = payload.title
    if payload.content is not None:
        changes["content"] = [tool_content(text_block(payload.content))]
    if payload.locations is not None:
        changes["locations"] = [
            ToolCallLocation(path=loc.path, line=loc.line) for loc in payload.locations
        ]
    return update_tool_call(payload.toolUseId, **changes)


def _nested(update: Update, parent: str) -> Update:
    if getattr(update, "title", None):
        update.title = f"↳ {update.title}"
    update.field_meta = {"coven": {"parentToolCallId": parent}}
    return update


def child_updates(event: Event | EventDict, view: SessionView) -> list[Update]:
    """What an event of a fork child changes in its parent's fork (the parent's view)."""
    typed = view.tree.apply(event)
    fork = view.tree.fork_of(typed.session_id) if typed is not None else None
    if typed is None or fork is None:
        return []
    sid = typed.session_id
    match typed.payload:
        case ev.StatusChanged(status=status):
            entry = _CHILD_STATUS.get(status)
            if entry is None or entry == view.entries.get(sid, "pending"):
                return []
            view.entries[sid] = entry
            return [view.plan(fork), view.progress(fork)]
        case ev.TurnResult(cancelled=cancelled, text=text) if not cancelled:
            view.said[sid] = text
            return [view.progress(fork)]
    return []


def title_update(title: str) -> Update:
    return SessionInfoUpdate(session_update="session_info_update", title=title)
