"""coven-ls events as ACP `session/update`s: pure functions over the events and a little state
per session (which blocks were streamed, what each fork has shown), tested on their own.

What maps to what (docs/acp.md): streamed pieces are `agent_message_chunk` /
`agent_thought_chunk`; a whole text or thinking block is sent only when none of it was streamed;
`toolUse` / `toolResult` are `tool_call` / `tool_call_update`; a fork is a `plan` (one entry a
task) and a `tool_call` "Fork: N tasks" whose content is each child's progress and answer;
`prompt` events (on `session/load`) are `user_message_chunk`; a turn's tokens and cost are a
`usage_update`."""

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

from ..protocol.describe import summarize_input
from ..protocol.events import Delta

Update = Any  # one of ACP's SessionUpdate variants

# usage_update's `size`: the context window of Claude Code's models (the CLI does not say which
# a turn had); `used` is what the last turn put through it.
CONTEXT_WINDOW = 200_000
_CONTEXT_TOKENS = ("inputTokens", "cacheReadTokens", "cacheCreationTokens", "outputTokens")

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


def tool_title(name: str, tool_input: dict[str, Any]) -> str:
    summary = summarize_input(tool_input, 80)
    return f"{name}: {summary}" if summary else name


def tool_locations(tool_input: dict[str, Any]) -> list[ToolCallLocation] | None:
    path = tool_input.get("file_path") or tool_input.get("notebook_path") or tool_input.get("path")
    return [ToolCallLocation(path=path)] if isinstance(path, str) and path else None


@dataclass
class ForkView:
    """What a fork's plan and tool call show: its tasks, each child's state and last words."""

    fork_id: str
    tasks: list[str]
    children: list[str]  # coven session ids, in task order
    status: list[PlanEntryStatus] = field(default_factory=list)
    said: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.status = self.status or ["pending"] * len(self.tasks)
        self.said = self.said or [""] * len(self.tasks)

    @property
    def tool_call_id(self) -> str:
        return f"fork-{self.fork_id}"

    def plan(self) -> Update:
        return update_plan(
            plan_entry(task, status=status)
            for task, status in zip(self.tasks, self.status, strict=True)
        )

    def content(self) -> list[Any]:
        lines = []
        for task, status, said in zip(self.tasks, self.status, self.said, strict=True):
            line = f"[{status.replace('_', ' ')}] {task}"
            lines.append(f"{line}\n{said}" if said else line)
        return [tool_content(text_block("\n\n".join(lines)))]

    def progress(self, status: ToolCallStatus = "in_progress") -> Update:
        return update_tool_call(self.tool_call_id, status=status, content=self.content())


@dataclass
class SessionView:
    """The per-session state the translation needs."""

    streamed: set[str] = field(default_factory=set)  # blockIds of which pieces went out
    forks: dict[str, ForkView] = field(default_factory=dict)


def delta_update(delta: Delta) -> Update:
    if delta.kind == "thinking":
        return update_agent_thought_text(delta.text)
    return update_agent_message_text(delta.text)


def event_updates(event: dict[str, Any], view: SessionView, replay: bool = False) -> list[Update]:
    """The updates an event of the session itself becomes (none for most bookkeeping events).
    `replay`: a stored event replayed by `session/load` (its prompts are shown too)."""
    kind = event["kind"]
    parent = event.get("parentToolUseId")
    if parent is not None:
        # A subagent's (the CLI's Agent tool): its tool calls show, marked with the Agent call
        # they belong to (ACP has no nesting of its own); its words stay in its own transcript.
        return [_nested(u, parent) for u in event_updates({**event, "parentToolUseId": None}, view)
                if kind in ("toolUse", "toolResult")]  # fmt: skip
    if kind == "text" or kind == "thinking":
        block = event.get("blockId")
        if block is not None and block in view.streamed:
            return []
        if kind == "thinking":
            return [update_agent_thought_text(event["text"])]
        return [update_agent_message_text(event["text"])]
    if kind == "prompt":
        # A live prompt is the client's own message; fork results and queued messages are not.
        if replay or event.get("origin") != "user":
            return [update_user_message_text(event["text"])]
        return []
    if kind == "toolUse":
        tool_input = event.get("input") or {}
        return [
            start_tool_call(
                event["toolUseId"],
                tool_title(event["name"], tool_input),
                kind=tool_kind(event["name"]),
                status="in_progress",
                locations=tool_locations(tool_input),
                raw_input=tool_input,
            )
        ]
    if kind == "toolResult":
        return [
            update_tool_call(
                event["toolUseId"],
                status="failed" if event.get("isError") else "completed",
                content=[tool_content(text_block(event.get("content") or ""))],
            )
        ]
    if kind == "turnResult":
        usage = event.get("usage") or {}
        used = sum(int(usage.get(k) or 0) for k in _CONTEXT_TOKENS)
        cost = event.get("costUsd")
        return [
            UsageUpdate(
                session_update="usage_update",
                used=used,
                size=CONTEXT_WINDOW,
                cost=None if cost is None else Cost(amount=cost, currency="USD"),
            )
        ]
    if kind == "forkStarted":
        fork = ForkView(
            event["forkId"], list(event["tasks"]), [c["sessionId"] for c in event["children"]]
        )
        view.forks[fork.fork_id] = fork
        title = f"Fork: {len(fork.tasks)} task{'s' if len(fork.tasks) != 1 else ''}"
        return [
            fork.plan(),
            start_tool_call(
                fork.tool_call_id, title, kind="think", status="in_progress",
                content=fork.content(), raw_input={"tasks": fork.tasks},
            ),
        ]  # fmt: skip
    if kind == "forkFinished":
        finished = view.forks.get(event["forkId"])
        if finished is None:
            return []
        fork = finished
        for n, result in enumerate(event["results"][: len(fork.tasks)]):
            fork.status[n] = "completed"  # a child's answer is already shown (child_updates)
            if not result.get("ok"):
                fork.said[n] = f"failed: {result.get('error') or 'no reason given'}"
            elif result.get("merge"):
                fork.said[n] += f"\n(changes: {result['merge']})"
        failed = not any(r.get("ok") for r in event["results"])
        return [fork.plan(), fork.progress("failed" if failed else "completed")]
    if kind == "forkRejected":
        return [update_agent_message_text(f"\n(Fork rejected: {event.get('reason') or 'no'})\n")]
    if kind == "error" or kind == "forkError":
        return [update_agent_message_text(f"\n{event['message']}\n")]
    return []


def _nested(update: Update, parent: str) -> Update:
    if getattr(update, "title", None):
        update.title = f"↳ {update.title}"
    update.field_meta = {"coven": {"parentToolCallId": parent}}
    return update


def child_updates(event: dict[str, Any], view: SessionView) -> list[Update]:
    """What an event of a fork child changes in its parent's fork (the parent's view)."""
    for fork in view.forks.values():
        if event["sessionId"] not in fork.children:
            continue
        n = fork.children.index(event["sessionId"])
        if event["kind"] == "status":
            status = _CHILD_STATUS.get(event["status"])
            if status is None or status == fork.status[n]:
                return []
            fork.status[n] = status
            return [fork.plan(), fork.progress()]
        if event["kind"] == "turnResult" and not event.get("cancelled"):
            fork.said[n] = event.get("text") or ""
            return [fork.progress()]
    return []


def title_update(title: str) -> Update:
    return SessionInfoUpdate(session_update="session_info_update", title=title)
