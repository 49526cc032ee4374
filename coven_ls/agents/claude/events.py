"""From what Claude Code says (claude-agent-sdk's messages, and the Anthropic stream events inside
its `StreamEvent`s) to coven's agent events (core/agent/events.py). No I/O.

A `Reader` reads one CLI process's messages in order: it remembers, for the main agent and each
subagent, which model call is streaming (`message_start`), so that a block's pieces get their
block id (`<message id>:<index>`, which clients see) and the call's final usage (`message_delta`)
its key and model.
"""

from __future__ import annotations

import json
from typing import Any

from claude_agent_sdk import (
    AssistantMessage,
    ResultMessage,
    StreamEvent,
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

from ...core.agent import events as agent
from ...core.fork.spend import claude_cost
from ...protocol.types import StreamKind, TaskStatus, Usage

# The model name of the assistant messages the CLI writes itself (an API error it gave up on):
# not the model's words, and the turn's result says the same.
SYNTHETIC_MODEL = "<synthetic>"

_DELTA_KEYS: dict[str, tuple[StreamKind, str]] = {
    "text_delta": ("text", "text"),
    "thinking_delta": ("thinking", "thinking"),
}


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


class Reader:
    """One CLI process's messages, in order, to agent events."""

    def __init__(self) -> None:
        # parent tool use -> the id of the model message it streams (for its blocks' ids), and
        # that call's (id, model) (for its usage)
        self._message: dict[str | None, str] = {}
        self._calls: dict[str | None, tuple[str | None, str | None]] = {}

    def read(self, message: Any) -> list[agent.AgentEvent]:
        """The agent events one SDK message says. Unknown messages say none: the CLI adds message
        types between versions and a client must not see half-understood ones."""
        if isinstance(message, StreamEvent):
            return [self._stream(message.event, message.parent_tool_use_id)]
        if isinstance(message, AssistantMessage):
            return [_assistant(message)]
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
            status = data.get("error_status")
            return [
                agent.ApiRetry(
                    attempt=_int(data.get("attempt")),
                    max_retries=_int(data.get("max_retries")),
                    retry_delay_ms=_int(data.get("retry_delay_ms")),
                    error_status=status if isinstance(status, int) else None,
                    error=str(data["error"]) if data.get("error") is not None else None,
                )
            ]
        if isinstance(message, SystemMessage) and message.subtype == "init":
            data = message.data
            tools = data.get("tools")
            return [
                agent.AgentStarted(
                    conversation_id=data.get("session_id"),
                    model=data.get("model"),
                    cwd=data.get("cwd"),
                    permission_mode=data.get("permissionMode"),
                    agent_version=data.get("claude_code_version"),
                    tools=tuple(str(t) for t in tools) if isinstance(tools, list) else (),
                )
            ]
        return []

    def _stream(self, event: dict[str, Any], parent: str | None) -> agent.AgentEvent:
        """One raw stream event (Anthropic's SSE payload): a block's start or piece, a call's
        final usage, or activity coven does not show (tool input, pings, ...)."""
        kind = event.get("type")
        if kind == "message_start":
            call = event.get("message")
            if isinstance(call, dict) and isinstance(call.get("id"), str):
                self._message[parent] = call["id"]
            call = call or {}
            self._calls[parent] = (call.get("id"), call.get("model"))
            return agent.Activity(parent)
        if kind == "message_delta":
            # The call's final usage (its output tokens) comes only here: the assistant lines
            # repeat message_start's.
            key, model = self._calls.get(parent, (None, None))
            usage = usage_of(event.get("usage"))
            if usage is None or not key:
                return agent.Activity(parent)
            return agent.ModelCall(
                call_id=key,
                model=model,
                usage=usage,
                cost_usd=claude_cost(model, usage),
                parent_tool_call_id=parent,
            )
        message_id = self._message.get(parent)
        index = event.get("index")
        if message_id is None or not isinstance(index, int):
            return agent.Activity(parent)
        block_id = f"{message_id}:{index}"
        if kind == "content_block_start":
            block_kind = (event.get("content_block") or {}).get("type")
            if block_kind in ("text", "thinking"):
                return agent.BlockStarted(block_id, block_kind, message_id, parent)
            return agent.Activity(parent)
        if kind == "content_block_delta":
            delta = event.get("delta") or {}
            keys = _DELTA_KEYS.get(delta.get("type", ""))
            text = delta.get(keys[1]) if keys is not None else None
            if isinstance(text, str) and text:
                return agent.Delta(block_id, text, parent)
        return agent.Activity(parent)


def _assistant(message: AssistantMessage) -> agent.AgentMessage:
    parts: list[agent.Part] = []
    synthetic = message.model == SYNTHETIC_MODEL
    for block in [] if synthetic else message.content:
        if isinstance(block, TextBlock):
            parts.append(agent.TextPart(block.text))
        elif isinstance(block, ThinkingBlock):
            parts.append(agent.ThinkingPart(block.thinking))
        elif isinstance(block, ToolUseBlock):
            parts.append(agent.ToolCall(id=block.id, name=block.name, input=block.input))
    usage = usage_of(message.usage)
    call = None
    if usage is not None:
        call = agent.ModelCall(
            call_id=message.message_id or message.uuid,
            model=message.model,
            usage=usage,
            cost_usd=claude_cost(message.model, usage),
            # The CLI sends the request's input side on every assistant message of the call.
            context_tokens=None
            if synthetic
            else usage.inputTokens + usage.cacheReadTokens + usage.cacheCreationTokens,
            parent_tool_call_id=message.parent_tool_use_id,
        )
    return agent.AgentMessage(
        id=message.uuid,
        call_id=message.message_id,
        parts=tuple(parts),
        model=message.model,
        call=call,
        parent_tool_call_id=message.parent_tool_use_id,
    )


def _user(message: UserMessage) -> list[agent.AgentEvent]:
    if isinstance(message.content, str):
        return []  # the prompt itself; the session published it when it sent it
    return [
        agent.ToolResult(
            tool_call_id=block.tool_use_id,
            content=tool_result_text(block.content),
            is_error=bool(block.is_error),
            parent_tool_call_id=message.parent_tool_use_id,
        )
        for block in message.content
        if isinstance(block, ToolResultBlock)
    ]


def _task_running(
    message: TaskStartedMessage | TaskProgressMessage,
) -> agent.TaskStarted | agent.TaskProgress:
    if isinstance(message, TaskStartedMessage):
        return agent.TaskStarted(
            task_id=message.task_id,
            tool_call_id=message.tool_use_id,
            description=message.description or None,
        )
    return agent.TaskProgress(
        task_id=message.task_id,
        tool_call_id=message.tool_use_id,
        description=message.description or None,
        last_tool_name=message.last_tool_name,
        total_tokens=_task_usage(message.usage, "total_tokens"),
        tool_uses=_task_usage(message.usage, "tool_uses"),
        duration_ms=_task_usage(message.usage, "duration_ms"),
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


def _task_ended(message: TaskNotificationMessage | TaskUpdatedMessage) -> agent.TaskEnded | None:
    """A task's end, from either message that can say so (the CLI sends one or both); None for
    an update that does not end it."""
    status = _ENDED.get(str(message.status))
    if status is None:
        return None
    if isinstance(message, TaskUpdatedMessage):
        return agent.TaskEnded(task_id=message.task_id, status=status)
    return agent.TaskEnded(
        task_id=message.task_id,
        status=status,
        tool_call_id=message.tool_use_id,
        summary=message.summary or None,
        total_tokens=_task_usage(message.usage, "total_tokens"),
        tool_uses=_task_usage(message.usage, "tool_uses"),
        duration_ms=_task_usage(message.usage, "duration_ms"),
    )


def _result(message: ResultMessage) -> agent.TurnEnded:
    text = message.result
    if text is None and message.errors:
        text = "\n".join(message.errors)
    return agent.TurnEnded(
        outcome="error" if message.is_error else "success",
        text=text or "",
        subtype=message.subtype,
        usage=usage_of(message.usage),
        cost_usd=message.total_cost_usd,
        duration_ms=message.duration_ms,
        num_turns=message.num_turns,
        conversation_id=message.session_id,
    )
