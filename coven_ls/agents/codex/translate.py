"""From codex app-server notifications to coven's agent events (core/agent/events.py), which
the session reads. Pure: no I/O.

An agent message or reasoning item streams as a text or thinking block (`BlockStarted`, its
`Delta`s) and ends as a finished message; a command is a `Bash` tool call, a file change an `Edit`
tool call (codex's own item type kept in the input as `codexItem`), and their results are tool
results; each model call's tokens are a `ModelCall` (with its cost from the price table);
`turn/completed` is the turn's end, with the turn's tokens and cost, and codex's error (HTTP
status and message) when it failed. A command still running when its turn completes (codex left
it in the background) is a background task: its tool call ends with the turn, and the task ends
when the command does.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from ...core.agent import events as agent
from ...core.agent.events import AgentEvent
from ...protocol.types import StreamKind, Usage
from .prices import cost_usd

# Tool names clients already draw, for codex's item types.
COMMAND_TOOL = "Bash"
EDIT_TOOL = "Edit"

# codexErrorInfo values that stand for an HTTP status without carrying it.
_ERROR_STATUS = {
    "internalServerError": 500,
    "unauthorized": 401,
    "badRequest": 400,
    "usageLimitExceeded": 429,
}


def command_input(item: dict[str, Any]) -> dict[str, Any]:
    """A commandExecution item (or its approval request) as `Bash` tool input."""
    out: dict[str, Any] = {
        "command": str(item.get("command") or ""),
        "codexItem": "commandExecution",
    }
    if item.get("cwd"):
        out["cwd"] = item["cwd"]
    if item.get("reason"):
        out["description"] = item["reason"]
    return out


def file_change_input(item: dict[str, Any]) -> dict[str, Any]:
    """A fileChange item as `Edit` tool input: the (first) file's path and the whole diff; every
    change stays in `changes`."""
    changes = [c for c in item.get("changes") or [] if isinstance(c, dict)]
    paths = [str(c.get("path", "")) for c in changes]
    diff = "".join(_change_diff(c) for c in changes)
    return {
        "file_path": paths[0] if paths else "",
        "diff": diff,
        "changes": [
            {"path": str(c.get("path", "")), "kind": _kind(c), "diff": str(c.get("diff") or "")}
            for c in changes
        ],
        "codexItem": "fileChange",
    }


def _kind(change: dict[str, Any]) -> str:
    kind = change.get("kind")
    if isinstance(kind, dict):
        return str(kind.get("type", ""))
    return str(kind or "")


def _change_diff(change: dict[str, Any]) -> str:
    diff = str(change.get("diff") or "")
    if diff.startswith(("--- ", "diff ", "@@")):
        return diff if diff.endswith("\n") else diff + "\n"
    # An added or deleted file's "diff" is its content.
    path = str(change.get("path", ""))
    sign = "-" if _kind(change) == "delete" else "+"
    lines = "".join(f"{sign}{line}\n" for line in diff.splitlines())
    if sign == "+":
        return f"--- /dev/null\n+++ {path}\n{lines}"
    return f"--- {path}\n+++ /dev/null\n{lines}"


def error_text(error: Any) -> str:
    """codex's TurnError as a sentence with the HTTP status in it, when codex knows one."""
    if not isinstance(error, dict):
        return "Codex failed the turn."
    message = str(error.get("message") or "Codex failed the turn.")
    status = http_status(error.get("codexErrorInfo"))
    details = error.get("additionalDetails")
    text = (
        f"HTTP {status}: {message}"
        if status is not None and str(status) not in message
        else message
    )
    return f"{text} ({details})" if details else text


def http_status(info: Any) -> int | None:
    if isinstance(info, str):
        return _ERROR_STATUS.get(info)
    if isinstance(info, dict):
        for value in info.values():
            if isinstance(value, dict) and isinstance(value.get("httpStatusCode"), int):
                return int(value["httpStatusCode"])
    return None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _usage(total_input: int, cached: int, output: int) -> Usage:
    """codex's tokens (its input counts the cached ones too) as coven's."""
    return Usage(
        inputTokens=max(total_input - cached, 0),
        outputTokens=output,
        cacheReadTokens=cached,
        cacheCreationTokens=0,
    )


def _block_id(item_id: str) -> str:
    """The streaming block of an agent message or reasoning item (clients see it)."""
    return f"{item_id}:0"


@dataclass
class Translator:
    """One thread's notifications, in order, to session messages."""

    thread_id: str
    model: str | None = None
    turn_id: str | None = None
    # The turn so far: the last agent message (the turn's answer), tokens, an error.
    _answer: str = ""
    _input: int = 0
    _cached: int = 0
    _output: int = 0
    _calls: int = 0  # the turn's model calls so far
    _error: str | None = None
    _streaming: set[str] = field(default_factory=set)  # items whose block is open
    items: dict[str, dict[str, Any]] = field(default_factory=dict)  # tool items of the turn
    # Tool items an interrupted turn already ended: a completion codex sends later is not news.
    _ended_early: set[str] = field(default_factory=set)
    # Commands a completed turn left running (codex's background terminals), by item id.
    background: dict[str, dict[str, Any]] = field(default_factory=dict)
    stopping: set[str] = field(default_factory=set)  # background commands coven asked to stop
    # The turn's tool items codex reported, and its model's command calls (raw items) by call id.
    _reported: set[str] = field(default_factory=set)
    _command_calls: dict[str, str] = field(default_factory=dict)
    total_cost: float = 0.0  # this agent's running total, as the session expects (TurnEnded)
    priced: bool = True

    def started(self, cwd: str, permission_mode: str | None) -> agent.AgentStarted:
        """What the session hears when the thread is ready."""
        return agent.AgentStarted(
            conversation_id=self.thread_id,
            model=self.model,
            cwd=cwd,
            permission_mode=permission_mode,
        )

    def feed(self, method: str, params: dict[str, Any]) -> list[AgentEvent]:
        if params.get("threadId") not in (None, self.thread_id):
            return []
        if method == "turn/started":
            turn = params.get("turn") or {}
            self._begin(str(turn.get("id") or ""))
            return []
        if method == "item/started":
            return self._item_started(params.get("item") or {})
        if method == "item/agentMessage/delta":
            return self._delta(params)
        if method in ("item/reasoning/summaryTextDelta", "item/reasoning/textDelta"):
            return self._delta(params)
        if method == "item/completed":
            return self._item_completed(params.get("item") or {})
        if method == "rawResponseItem/completed":
            return self._raw_item(params.get("item") or {})
        if method == "thread/tokenUsage/updated":
            if params.get("turnId") != self.turn_id:
                return []
            last = (params.get("tokenUsage") or {}).get("last") or {}
            tokens = (
                _int(last.get("inputTokens")),
                _int(last.get("cachedInputTokens")),
                _int(last.get("outputTokens")),
            )
            self._input += tokens[0]
            self._cached += tokens[1]
            self._output += tokens[2]
            self._calls += 1
            # One model call's tokens, as soon as codex says them (a fork's limits count them;
            # the turn's end says the same again, added up).
            usage = _usage(*tokens)
            return [
                agent.ModelCall(
                    call_id=f"{self.turn_id}/{self._calls}",
                    model=self.model,
                    usage=usage,
                    cost_usd=cost_usd(self.model, *tokens),
                    context_tokens=usage.inputTokens + usage.cacheReadTokens,
                )
            ]
        if method == "error":
            text = error_text(params.get("error"))
            if params.get("willRetry"):
                return [agent.ApiRetry(error=text)]
            self._error = text
            return []
        if method == "turn/completed":
            turn = params.get("turn") or {}
            if turn.get("status") != "interrupted":
                left = self._to_background()
            else:
                # A tool call the turn left open (codex says nothing more of an interrupted
                # command) gets its end, so that no client keeps showing it as running.
                left = [
                    self._tool_result(item_id, "Interrupted: the turn was stopped.", True)
                    for item_id in self.items
                ]
                self._ended_early.update(self.items)
            self.items.clear()
            return [*left, self._result(turn)]
        return []

    def _to_background(self) -> list[AgentEvent]:
        """The turn completed with commands still running: codex keeps them going (its model
        was told they run on). Each one's tool call ends and a background task starts."""
        said: list[AgentEvent] = []
        for item_id, item in list(self.items.items()):
            if item.get("type") != "commandExecution":
                said.append(self._tool_result(item_id, "Ended with the turn.", True))
                self._ended_early.add(item_id)
                continue
            self.background[item_id] = item
            command = str(item.get("command") or "")
            said.append(self._tool_result(item_id, "Running in the background.", False))
            said.append(
                agent.TaskStarted(
                    task_id=item_id, tool_call_id=item_id, description=command or None
                )
            )
        return said

    def _background_ended(self, item_id: str, item: dict[str, Any]) -> list[AgentEvent]:
        self.background.pop(item_id, None)
        exit_code = item.get("exitCode")
        status: Literal["completed", "failed", "stopped"] = (
            "stopped"
            if item_id in self.stopping
            else "completed"
            if item.get("status") == "completed" and exit_code in (0, None)
            else "failed"
        )
        self.stopping.discard(item_id)
        output = str(item.get("aggregatedOutput") or "").strip()
        summary = output.splitlines()[-1][:200] if output else None
        if exit_code not in (0, None) and status != "stopped":
            summary = f"exit code {exit_code}" + (f": {summary}" if summary else "")
        return [
            agent.TaskEnded(
                task_id=item_id, status=status, tool_call_id=item_id, summary=summary or status
            )
        ]

    def _begin(self, turn_id: str) -> None:
        self.turn_id = turn_id
        self._answer, self._error = "", None
        self._input = self._cached = self._output = self._calls = 0
        self._streaming.clear()
        self.items.clear()
        self._reported.clear()
        self._command_calls.clear()

    def _raw_item(self, item: dict[str, Any]) -> list[AgentEvent]:
        """A command the model called that codex reported no item for (it could not start it,
        or its sandbox refused it: `bwrap: execvp …`) is a failed tool call with the output the
        model was given. Raw items come only for threads started with `experimentalRawEvents`,
        after the command's own item events when there are any; for other threads the agent
        feeds the rollout file's at the turn's end (rollout.py)."""
        kind, call_id = item.get("type"), str(item.get("call_id") or "")
        if kind == "function_call" and item.get("name") == "exec_command":
            try:
                arguments = json.loads(str(item.get("arguments") or "{}"))
            except ValueError:
                arguments = {}
            command = arguments.get("cmd") if isinstance(arguments, dict) else None
            self._command_calls[call_id] = str(command or "")
            return []
        if kind != "function_call_output" or call_id not in self._command_calls:
            return []
        command = self._command_calls.pop(call_id)
        if call_id in self._reported or call_id in self.items:
            return []
        self._reported.add(call_id)
        output = item.get("output")
        text = output if isinstance(output, str) else json.dumps(output)
        code = re.search(r"^Process exited with code (-?\d+)$", text, re.MULTILINE)
        body = text.split("\nOutput:\n", 1)[1] if "\nOutput:\n" in text else text
        if code is not None and code.group(1) != "0":
            body = f"{body.rstrip()}\n(exit code {code.group(1)})".lstrip()
        tool_input = {"command": command, "codexItem": "commandExecution"}
        return [
            self._tool_use(call_id, COMMAND_TOOL, tool_input),
            self._tool_result(call_id, body, code is None or code.group(1) != "0"),
        ]

    def _item_started(self, item: dict[str, Any]) -> list[AgentEvent]:
        kind, item_id = item.get("type"), str(item.get("id") or "")
        if kind in ("agentMessage", "reasoning"):
            # Each item is a block of its own, ended by the item's completion (its "call").
            self._streaming.add(item_id)
            block: StreamKind = "text" if kind == "agentMessage" else "thinking"
            return [agent.BlockStarted(_block_id(item_id), block, item_id)]
        if kind == "commandExecution":
            self.items[item_id] = item
            self._reported.add(item_id)
            return [self._tool_use(item_id, COMMAND_TOOL, command_input(item))]
        if kind == "fileChange":
            self.items[item_id] = item
            return [self._tool_use(item_id, EDIT_TOOL, file_change_input(item))]
        if kind in ("mcpToolCall", "dynamicToolCall", "webSearch"):
            self.items[item_id] = item
            name = str(item.get("tool") or kind) if kind != "webSearch" else "WebSearch"
            data = {k: v for k, v in item.items() if k not in ("id", "type", "status")}
            return [self._tool_use(item_id, name, {**data, "codexItem": kind})]
        return []

    def _tool_use(self, item_id: str, name: str, tool_input: dict[str, Any]) -> AgentEvent:
        return self._message(item_id, agent.ToolCall(id=item_id, name=name, input=tool_input))

    def _delta(self, params: dict[str, Any]) -> list[AgentEvent]:
        item_id = str(params.get("itemId") or "")
        delta = params.get("delta")
        if item_id not in self._streaming or not isinstance(delta, str) or not delta:
            return []
        return [agent.Delta(_block_id(item_id), delta)]

    def _item_completed(self, item: dict[str, Any]) -> list[AgentEvent]:
        kind, item_id = item.get("type"), str(item.get("id") or "")
        self._streaming.discard(item_id)
        if item_id in self._ended_early:
            # Its end was already said when the turn was interrupted; a command killed after
            # that still reports completing: one result per tool call.
            return []
        if item_id in self.background:
            return self._background_ended(item_id, item)
        if kind == "agentMessage":
            text = str(item.get("text") or "")
            if text:
                self._answer = text
            return [self._message(item_id, agent.TextPart(text))] if text else []
        if kind == "reasoning":
            parts = item.get("summary") or item.get("content") or []
            text = "\n\n".join(str(p) for p in parts if p)
            return [self._message(item_id, agent.ThinkingPart(text))] if text else []
        if kind == "commandExecution":
            self.items.pop(item_id, None)
            self._reported.add(item_id)
            status = item.get("status")
            output = str(item.get("aggregatedOutput") or "")
            if status == "declined":
                output = output or "Declined: the command was not run."
            exit_code = item.get("exitCode")
            failed = status in ("failed", "declined") or (
                isinstance(exit_code, int) and exit_code != 0
            )
            if isinstance(exit_code, int) and exit_code != 0:
                output = (
                    f"{output}\n(exit code {exit_code})" if output else f"exit code {exit_code}"
                )
            return [self._tool_result(item_id, output, failed)]
        if kind == "fileChange":
            self.items.pop(item_id, None)
            status = item.get("status")
            changes = [c for c in item.get("changes") or [] if isinstance(c, dict)]
            summary = "\n".join(f"{_kind(c)} {c.get('path', '')}" for c in changes)
            if status == "completed":
                return [self._tool_result(item_id, summary or "applied", False)]
            return [self._tool_result(item_id, f"{status or 'failed'}: {summary}".strip(), True)]
        if kind in ("mcpToolCall", "dynamicToolCall", "webSearch"):
            self.items.pop(item_id, None)
            result = item.get("result") or item.get("contentItems") or item.get("results") or ""
            failed = item.get("status") == "failed" or item.get("success") is False
            return [
                self._tool_result(
                    item_id, result if isinstance(result, str) else str(result), failed
                )
            ]
        return []

    def _message(self, item_id: str, part: agent.Part) -> agent.AgentMessage:
        """A finished item as a message of its own: codex's item id is its message id."""
        return agent.AgentMessage(
            id=item_id, call_id=item_id, parts=(part,), model=self.model or "codex"
        )

    def _tool_result(self, item_id: str, content: str, failed: bool) -> agent.ToolResult:
        return agent.ToolResult(tool_call_id=item_id, content=content, is_error=failed)

    def _result(self, turn: dict[str, Any]) -> agent.TurnEnded:
        status = turn.get("status")
        error = self._error
        if status == "failed" and turn.get("error"):
            error = error_text(turn["error"])
        failed = status == "failed"
        cost = cost_usd(self.model, self._input, self._cached, self._output)
        if cost is None:
            self.priced = False
        else:
            self.total_cost += cost
        result = agent.TurnEnded(
            outcome="error" if failed else "interrupted" if status == "interrupted" else "success",
            text=(error or "Codex failed the turn.") if failed else self._answer,
            usage=_usage(self._input, self._cached, self._output),
            cost_usd=self.total_cost if cost is not None else None,
            duration_ms=_int(turn.get("durationMs")),
            num_turns=1,
            conversation_id=self.thread_id,
        )
        self.turn_id = None
        self._streaming.clear()
        return result
