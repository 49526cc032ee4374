"""From claude-agent-sdk messages to `coven/event` payloads. Pure functions: no I/O, no state."""

from __future__ import annotations

import json
from typing import Any

from claude_agent_sdk import (
    AssistantMessage,
    ResultMessage,
    SystemMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)

from ..protocol import events


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


def _assistant(message: AssistantMessage) -> list[events.Payload]:
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
    )
