"""From coven's agent events (core/agent/events.py) to `coven/event` payloads. Pure functions: no
I/O, no state. Streaming (deltas, which finished block ends which stream) is streaming.py's;
a model call's tokens are the session's (its meter and its context gauge)."""

from __future__ import annotations

from ...protocol import events
from ..agent import events as agent


def to_payloads(event: agent.AgentEvent) -> list[events.Payload]:
    """The coven events one agent event produces, in order. Events coven has no event for yet
    (streaming) produce none."""
    match event:
        case agent.AgentMessage():
            return message_payloads(event)
        case agent.ToolResult():
            return [
                events.ToolResult(
                    toolUseId=event.tool_call_id,
                    content=event.content,
                    isError=event.is_error,
                    parentToolUseId=event.parent_tool_call_id,
                )
            ]
        case agent.TurnEnded():
            return [turn_result(event)]
        case agent.TaskStarted():
            return [
                events.Task(
                    taskId=event.task_id,
                    status="started",
                    toolUseId=event.tool_call_id,
                    description=event.description,
                )
            ]
        case agent.TaskProgress():
            return [
                events.Task(
                    taskId=event.task_id,
                    status="running",
                    toolUseId=event.tool_call_id,
                    description=event.description,
                    lastToolName=event.last_tool_name,
                    totalTokens=event.total_tokens,
                    toolUses=event.tool_uses,
                    durationMs=event.duration_ms,
                )
            ]
        case agent.TaskEnded():
            return [
                events.Task(
                    taskId=event.task_id,
                    status=event.status,
                    toolUseId=event.tool_call_id,
                    summary=event.summary,
                    totalTokens=event.total_tokens,
                    toolUses=event.tool_uses,
                    durationMs=event.duration_ms,
                )
            ]
        case agent.PlanUpdated():
            return [
                events.Plan(
                    entries=[
                        events.PlanEntry(content=e.content, status=e.status, priority=e.priority)
                        for e in event.entries
                    ]
                )
            ]
        case agent.ToolCallUpdate():
            return [tool_update(event)] if _changes(event) else []
        case agent.ModeChanged():
            return [events.ModeChanged(mode=event.mode)]
        case agent.Placed():
            return [events.Placed(node=event.node, nodeId=event.node_id)]
        case agent.Restarted():
            return [
                events.AgentRestarted(
                    reason=event.reason, restart=event.restart, maxRestarts=event.max_restarts
                )
            ]
        case agent.ApiRetry():
            return [
                events.ApiRetry(
                    attempt=event.attempt,
                    maxRetries=event.max_retries,
                    retryDelayMs=event.retry_delay_ms,
                    errorStatus=event.error_status,
                    error=event.error,
                )
            ]
        case agent.AgentStarted():
            return [
                events.AgentStarted(
                    agentSessionId=event.conversation_id,
                    model=event.model,
                    cwd=event.cwd,
                    permissionMode=event.permission_mode,
                    claudeCodeVersion=event.agent_version,
                )
            ]
    return []


def message_payloads(message: agent.AgentMessage) -> list[events.Payload]:
    """A finished message's parts: its text, thinking (none when hidden) and tool calls."""
    parent, drafts = message.parent_tool_call_id, list[events.Payload]()
    for part in message.parts:
        if isinstance(part, agent.TextPart):
            if part.text:
                drafts.append(
                    events.Text(text=part.text, messageId=message.id, parentToolUseId=parent)
                )
        elif isinstance(part, agent.ThinkingPart):
            if part.text:  # redacted or signature-only thinking: nothing to show
                drafts.append(
                    events.Thinking(text=part.text, messageId=message.id, parentToolUseId=parent)
                )
        else:
            drafts.append(
                events.ToolUse(
                    toolUseId=part.id,
                    name=part.name,
                    input=part.input,
                    messageId=message.id,
                    parentToolUseId=parent,
                )
            )
    return drafts


def _changes(update: agent.ToolCallUpdate) -> bool:
    """The update changes something clients see (an input alone is not on the wire)."""
    return any(
        v is not None for v in (update.status, update.title, update.content, update.locations)
    )


def tool_update(update: agent.ToolCallUpdate) -> events.ToolUpdate:
    locations = None
    if update.locations is not None:
        locations = [events.ToolLocation(path=loc.path, line=loc.line) for loc in update.locations]
    return events.ToolUpdate(
        toolUseId=update.id,
        status=update.status,
        title=update.title,
        content=update.content,
        locations=locations,
    )


# The subtype clients see for an outcome the agent names no further.
_SUBTYPE = {
    "success": "success",
    "error": "error_during_execution",
    "interrupted": "interrupted",
}


def turn_result(end: agent.TurnEnded) -> events.TurnResult:
    return events.TurnResult(
        text=end.text,
        isError=end.outcome == "error",
        subtype=end.subtype or _SUBTYPE[end.outcome],
        costUsd=end.cost_usd,
        durationMs=end.duration_ms,
        numTurns=end.num_turns,
        agentSessionId=end.conversation_id,
        usage=end.usage,
    )
