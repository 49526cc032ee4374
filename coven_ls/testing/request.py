"""A request the CLI sent, as the rules see it: :class:`ModelRequest` and
:func:`parse_request`, which reads the Messages API body (the last user message's text without
``<system-reminder>`` spans but for the ``<task-notification>`` elements in them)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .prompt_cache import CacheCharge
    from .replies import Usage

_SYSTEM_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)
# What the CLI sends when a background agent (Agent tool) ends: inside a <system-reminder>, but
# the whole content of the turn it starts, so last_user_text keeps it.
_TASK_NOTIFICATION = re.compile(r"<task-notification>.*?</task-notification>", re.DOTALL)
_TASK_NOTIFICATION_INNER = re.compile(r"<task-notification>(.*?)</task-notification>", re.DOTALL)
_XML_CHILD = re.compile(r"<([A-Za-z][\w-]*)>(.*?)</\1>", re.DOTALL)
# The billing line the CLI puts first in a subagent's system prompt (general-purpose or fork).
_SUBAGENT_MARK = "cc_is_subagent=true"


@dataclass
class ModelRequest:
    time: float
    path: str
    body: dict[str, Any]
    model: str
    system_text: str
    messages: list[dict[str, Any]]
    last_user_text: str
    all_text: str
    rule_index: int | None = None
    finished: float | None = None
    last_user_raw: str = ""  # the last user message's text with its <system-reminder> spans
    aborted: bool = False  # the response was cut short: the client hung up or the model stopped
    dropped: bool = False  # the model reset the connection on purpose (Reply.drop_after)
    stream_error: bool = False  # the model ended its stream with an error (Reply.error_after)
    # What the simulated prompt cache charged (prompt_cache.py; None: answered with an error
    # before any stream, which reads and writes nothing), and the usage the reply reported
    # (a rule's own `usage`, else the charge).
    cache: CacheCharge | None = None
    usage: Usage | None = None

    @property
    def has_tools(self) -> bool:
        return bool(self.body.get("tools"))

    @property
    def is_main_turn(self) -> bool:
        """Heuristic: a conversation turn rather than a CLI side call.

        Claude Code's side calls (titles, summaries, command checks) traditionally go to the
        small fast model without tools; the conversation carries the tool list. None were
        seen with version 2.1.330, so this errs towards "main": a turn run with every tool
        disabled still counts unless it also runs on a haiku model.
        """
        return self.has_tools or "haiku" not in self.model.lower()

    @property
    def is_subagent(self) -> bool:
        """The request comes from a subagent the CLI runs for its Agent tool (a fresh agent or
        a ``"fork"``): its system prompt starts with a billing line holding
        ``cc_is_subagent=true``. A subagent's last user message is its prompt (a fork's: the
        fork boilerplate then ``Your directive: <prompt>``)."""
        return _SUBAGENT_MARK in self.system_text

    @property
    def task_notifications(self) -> list[dict[str, str]]:
        """The ``<task-notification>`` elements of the last user message, one dict per element
        from its child elements: ``task-id``, ``tool-use-id``, ``output-file``, ``status``
        (``completed``, ``killed``, …), ``summary``, ``result`` (the subagent's final text),
        ``usage`` …. The CLI sends one when a background agent ends, to start a turn."""
        return [
            {name: value.strip() for name, value in _XML_CHILD.findall(inner)}
            for inner in _TASK_NOTIFICATION_INNER.findall(self.last_user_raw)
        ]


def _content_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def _block_texts(block: dict[str, Any], *, with_tool_use: bool) -> Iterator[str]:
    kind = block.get("type")
    if kind == "text":
        yield str(block.get("text", ""))
    elif kind == "tool_result":
        for inner in _content_blocks(block.get("content", "")):
            yield from _block_texts(inner, with_tool_use=with_tool_use)
    elif kind == "thinking" and with_tool_use:
        yield str(block.get("thinking", ""))
    elif kind == "tool_use" and with_tool_use:
        yield json.dumps(block.get("input", {}), ensure_ascii=False)


def _strip_reminders(text: str) -> str:
    def keep_notifications(found: re.Match[str]) -> str:
        return "\n".join(_TASK_NOTIFICATION.findall(found.group(0)))

    return _SYSTEM_REMINDER.sub(keep_notifications, text).strip()


def _flatten_system(system: Any) -> str:
    return "\n".join(b.get("text", "") for b in _content_blocks(system) if b.get("type") == "text")


def parse_request(path: str, body: dict[str, Any], arrived: float) -> ModelRequest:
    messages = body.get("messages")
    if not isinstance(messages, list):
        messages = []
    last_user = next(
        (m for m in reversed(messages) if isinstance(m, dict) and m.get("role") == "user"), None
    )
    last_parts: list[str] = []
    raw_parts: list[str] = []
    if last_user is not None:
        for block in _content_blocks(last_user.get("content")):
            for text in _block_texts(block, with_tool_use=False):
                raw_parts.append(text)
                stripped = _strip_reminders(text)
                if stripped:
                    last_parts.append(stripped)
    all_parts = [
        text
        for m in messages
        if isinstance(m, dict)
        for block in _content_blocks(m.get("content"))
        for text in _block_texts(block, with_tool_use=True)
    ]
    return ModelRequest(
        time=arrived,
        path=path,
        body=body,
        model=str(body.get("model", "")),
        system_text=_flatten_system(body.get("system", "")),
        messages=messages,
        last_user_text="\n".join(last_parts),
        all_text="\n".join(all_parts),
        rule_index=None,
        finished=None,
        last_user_raw="\n".join(raw_parts),
    )
