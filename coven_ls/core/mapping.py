"""From claude-agent-sdk messages to `coven/event` payloads. Pure functions: no I/O, no state."""

from __future__ import annotations

import json
from typing import Any

from claude_agent_sdk import (
    AssistantMessage,
    ResultMessage,
    SystemMessage,
    TaskNotificationMessage,
    TaskProgressMessage,
    TaskStartedMessage,
    TaskUpdatedMessage,
    TaskUsage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)

from ..protocol import events
from ..protocol.types import TaskStatus, Usage


def tool_result_text(content: Any) -> str:
    """A tool result's content as text: the CLI sends a string or a list of content blocks."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict):
                if block.get("type") == "text":
                    parts.append(str(block.get("text", "")))
                elif block.get("type") == "image":
                    parts.append("[image]")
                else:
                    parts.append(json.dumps(block, ensure_ascii=False))
            else:
                parts.append(str(block))
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False, default=str)


def map_message(message: Any) -> list[events.Payload]:
    """The events one SDK message produces, in order. Unknown messages produce none: the CLI
    adds message types between versions and a client must not see half-understood ones."""
    if isinstance(message, AssistantMessage):
        return _assistant(message)
    if isinstance(message, UserMessage):
        return _user(message)
    if isinstance(message, ResultMessage):
        return [_result(message)]
    if isinstance(message, (TaskStartedMessage, TaskProgressMessage)):
        return [_task_running(message)]
    if isinstance(message, (TaskNotificationMessage, TaskUpdatedMessage)):
        ended = _task_ended(message)
        return [ended] if ended is not None else []
    if isinstance(message, SystemMessage) and message.subtype == "api_retry":
        data = message.data
        return [
            events.ApiRetry(
                attempt=_int(data.get("attempt")),
                maxRetries=_int(data.get("max_retries")),
                retryDelayMs=_int(data.get("retry_delay_ms")),
                errorStatus=data.get("error_status")
                if isinstance(data.get("error_status"), int)
                else None,
                error=str(data["error"]) if data.get("error") is not None else None,
            )
        ]
    if isinstance(message, SystemMessage) and message.subtype == "init":
        data = message.data
        return [
            events.AgentStarted(
                agentSessionId=data.get("session_id"),
                model=data.get("model"),
                cwd=data.get("cwd"),
                permissionMode=data.get("permissionMode"),
                claudeCodeVersion=data.get("claude_code_version"),
            )
        ]
    return []


# The model name of the assistant messages the CLI writes itself (an API error it gave up on):
# not the model's words, and the turn's result says the same.
SYNTHETIC_MODEL = "<synthetic>"


def _assistant(message: AssistantMessage) -> list[events.Payload]:
    if message.model == SYNTHETIC_MODEL:
        return []
    parent = message.parent_tool_use_id
    drafts: list[events.Payload] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            if block.text:
                drafts.append(
                    events.Text(text=block.text, messageId=message.uuid, parentToolUseId=parent)
                )
        elif isinstance(block, ThinkingBlock):
            if not block.thinking:
                continue  # redacted or signature-only thinking: nothing to show
            drafts.append(
                events.Thinking(text=block.thinking, messageId=message.uuid, parentToolUseId=parent)
            )
        elif isinstance(block, ToolUseBlock):
            drafts.append(
                events.ToolUse(
                    toolUseId=block.id,
                    name=block.name,
                    input=block.input,
                    messageId=message.uuid,
                    parentToolUseId=parent,
                )
            )
    return drafts


def _user(message: UserMessage) -> list[events.Payload]:
    if isinstance(message.content, str):
        return []  # the prompt itself; the session published it when it sent it
    drafts: list[events.Payload] = []
    for block in message.content:
        if isinstance(block, ToolResultBlock):
            drafts.append(
                events.ToolResult(
                    toolUseId=block.tool_use_id,
                    content=tool_result_text(block.content),
                    isError=bool(block.is_error),
                    parentToolUseId=message.parent_tool_use_id,
                )
            )
    return drafts


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def usage_of(raw: Any) -> Usage | None:
    """The CLI's `usage` object (Anthropic's field names) as the protocol's `Usage`."""
    if not isinstance(raw, dict):
        return None
    return Usage(
        inputTokens=_int(raw.get("input_tokens")),
        outputTokens=_int(raw.get("output_tokens")),
        cacheReadTokens=_int(raw.get("cache_read_input_tokens")),
        cacheCreationTokens=_int(raw.get("cache_creation_input_tokens")),
    )


def _task_running(message: TaskStartedMessage | TaskProgressMessage) -> events.Task:
    if isinstance(message, TaskStartedMessage):
        return events.Task(
            taskId=message.task_id,
            status="started",
            toolUseId=message.tool_use_id,
            description=message.description or None,
        )
    return events.Task(
        taskId=message.task_id,
        status="running",
        toolUseId=message.tool_use_id,
        description=message.description or None,
        lastToolName=message.last_tool_name,
        totalTokens=_task_usage(message.usage, "total_tokens"),
        toolUses=_task_usage(message.usage, "tool_uses"),
        durationMs=_task_usage(message.usage, "duration_ms"),
    )


def _task_usage(usage: TaskUsage | None, key: str) -> int | None:
    value = usage.get(key) if usage is not None else None
    return value if isinstance(value, int) else None


# The CLI's two vocabularies for a task's end: `task_notification` says `stopped`,
# `task_updated` says `killed` for the same thing.
_ENDED: dict[str, TaskStatus] = {
    "completed": "completed",
    "failed": "failed",
    "stopped": "stopped",
    "killed": "stopped",
}


def _task_ended(message: TaskNotificationMessage | TaskUpdatedMessage) -> events.Task | None:
    """A task's end, from either message that can say so (the CLI sends one or both); None for
    an update that does not end it."""
    status = _ENDED.get(str(message.status))
    if status is None:
        return None
    if isinstance(message, TaskUpdatedMessage):
        return events.Task(taskId=message.task_id, status=status)
    return events.Task(
        taskId=message.task_id,
        status=status,
        toolUseId=message.tool_use_id,
        summary=message.summary or None,
        totalTokens=_task_usage(message.usage, "total_tokens"),
        toolUses=_task_usage(message.usage, "tool_uses"),
        durationMs=_task_usage(message.usage, "duration_ms"),
    )


def _result(message: ResultMessage) -> events.TurnResult:
    text = message.result
    if text is None and message.errors:
        text = "\n".join(message.errors)
    return events.TurnResult(
        text=text or "",
        isError=bool(message.is_error),
        subtype=message.subtype,
        costUsd=message.total_cost_usd,
        durationMs=message.duration_ms,
        numTurns=message.num_turns,
        agentSessionId=message.session_id,
        usage=usage_of(message.usage),
    )
