"""An ACP session's `session/update`s, in order, as coven's agent events (core/agent/events.py).

Message and thought chunks stream as a block (`BlockStarted`, `Delta`s) that the next update of
another kind, or the turn's end, ends with the finished `AgentMessage` carrying it whole. A
`tool_call` is a message of one `ToolCall` part; its `tool_call_update`s are `ToolCallUpdate`s,
and the one that completes or fails it is also its `ToolResult`. `plan` and
`current_mode_update` are `PlanUpdated` and `ModeChanged`; `usage_update` is a `ModelCall` that
sets the context gauge (`used`/`size` are what is in the context, not tokens spent) and, when it
carries a cost in USD, the session's running cost. The prompt's `stopReason` ends the turn.

Cost: ACP's `cost` is the session's cumulative spend with a currency. A session coven-ls
started counts from 0; one it took up (resumed, loaded, forked) counts from the first figure it
reports, since what it had spent before is not coven's to know, and the turn in which that
first figure arrives has an unknown share (it is not all of that turn's). Any currency but USD
makes the session's cost unknown from then on: never converted, never guessed. An agent that
never reports a cost leaves it unknown (the turn's `costUsd` absent).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, get_args

from acp import schema

from ...core.agent import events as agent
from ...protocol.types import StreamKind, Usage

log = logging.getLogger(__name__)

# ACP's tool kinds -> the tool name coven's clients draw (the rest keep their title).
TOOL_NAMES = {
    "execute": "Bash",
    "edit": "Edit",
    "read": "Read",
    "search": "Grep",
    "fetch": "WebFetch",
    "think": "Think",
}
_TOOL_KINDS = frozenset(get_args(agent.ToolKind))
_TOOL_STATUSES = frozenset(get_args(agent.ToolStatus))
# Updates coven has no event for and nothing to show of (yet): dropped without a word.
QUIET_UPDATES = frozenset(
    {
        "available_commands_update",
        "session_info_update",
        "config_option_update",
        "user_message_chunk",
    }
)


def block_text(block: Any) -> str:
    """A content block as text (an image is "[image]")."""
    text = getattr(block, "text", None)
    if isinstance(text, str):
        return text
    kind = getattr(block, "type", None)
    if kind == "resource_link":
        return str(getattr(block, "uri", "") or "")
    resource = getattr(block, "resource", None)
    if resource is not None and isinstance(getattr(resource, "text", None), str):
        return str(resource.text)
    return f"[{kind or 'content'}]"


def tool_content_text(content: list[Any] | None) -> str | None:
    """A tool call's content (text, diffs, terminals) as text; None when it has none."""
    if not content:
        return None
    pieces: list[str] = []
    for item in content:
        kind = getattr(item, "type", None)
        if kind == "content":
            pieces.append(block_text(item.content))
        elif kind == "diff":
            pieces.append(f"{item.path}\n{item.new_text}")
        elif kind == "terminal":
            pieces.append(f"[terminal {item.terminal_id}]")
    return "\n".join(pieces)


def _input(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    return {} if raw is None else {"input": raw}


def _locations(raw: list[Any] | None) -> tuple[agent.Location, ...]:
    return tuple(agent.Location(str(loc.path), loc.line) for loc in raw or [])


def _kind(raw: Any) -> agent.ToolKind | None:
    return raw if raw in _TOOL_KINDS else None


def _status(raw: Any) -> agent.ToolStatus | None:
    return raw if raw in _TOOL_STATUSES else None


def turn_usage(usage: Any) -> Usage | None:
    """A prompt answer's `usage` (unstable in ACP), as coven's."""
    if usage is None:
        return None
    return Usage(
        inputTokens=int(getattr(usage, "input_tokens", 0) or 0),
        outputTokens=int(getattr(usage, "output_tokens", 0) or 0),
        cacheReadTokens=int(getattr(usage, "cached_read_tokens", 0) or 0),
        cacheCreationTokens=int(getattr(usage, "cached_write_tokens", 0) or 0),
    )


@dataclass
class CostReports:
    """What one agent's sessions showed of its cost, for a fork's cost limits
    (Backend.reports_cost): True once a finished turn had a cost in USD, False once one had
    none (or another currency), None before any turn finished."""

    usd: bool | None = None

    def saw(self, translator: Translator) -> None:
        """A turn of `translator`'s session finished."""
        if translator.reports_cost and not translator.cost_unknown:
            self.usd = True
        elif self.usd is None or translator.cost_unknown:
            self.usd = False


# stopReason -> (outcome, subtype for clients; None: the outcome's name)
STOP_REASONS: dict[str, tuple[agent.TurnOutcome, str | None]] = {
    "end_turn": ("success", None),
    "cancelled": ("interrupted", None),
    "max_tokens": ("error", "error_max_tokens"),
    "max_turn_requests": ("error", "error_max_turns"),
    "refusal": ("error", "error_refusal"),
}


@dataclass
class Translator:
    """One ACP session's updates to agent events."""

    session_id: str
    agent_name: str
    # The cost the session had before this process took it up (a resumed or forked session's
    # cumulative cost counts from the first figure it reports); 0.0 for a new one.
    cost_base: float | None = 0.0
    cost: float | None = None  # the latest cumulative cost in USD
    cost_unknown: bool = False  # a cost in another currency was reported
    reports_cost: bool = False  # the agent reported a cost in USD at least once
    # The turn under way started with a known base, so its share of the cost can be known.
    _share_known: bool = True
    # When the turn's prompt was sent (monotonic): ACP tells no turn's duration, coven times it.
    _started: float | None = None
    _blocks: int = 0
    _block: tuple[str, StreamKind] | None = None  # the open block: its id and kind
    _text: list[str] = field(default_factory=list)
    _answer: str = ""  # the turn's last text block
    open_tools: dict[str, str] = field(default_factory=dict)  # running tool calls -> name
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)  # each tool call's input

    def feed(self, update: Any) -> list[agent.AgentEvent]:
        kind = getattr(update, "session_update", None)
        if kind in ("agent_message_chunk", "agent_thought_chunk"):
            stream: StreamKind = "text" if kind == "agent_message_chunk" else "thinking"
            return self._chunk(stream, block_text(update.content))
        said = self.end_block()
        if kind == "tool_call":
            return said + self._tool_call(update)
        if kind == "tool_call_update":
            return said + self._tool_call_update(update)
        if kind == "plan":
            entries = tuple(
                agent.PlanEntry(str(e.content), e.status, e.priority) for e in update.entries
            )
            return [*said, agent.PlanUpdated(entries)]
        if kind == "current_mode_update":
            return [*said, agent.ModeChanged(str(update.current_mode_id))]
        if kind == "usage_update":
            return [*said, *self._usage(update)]
        if kind in QUIET_UPDATES:
            return said
        log.info("ACP agent %s sent an update coven-ls does not know: %r", self.agent_name, kind)
        return said

    # --- text and thinking

    def _chunk(self, stream: StreamKind, text: str) -> list[agent.AgentEvent]:
        said: list[agent.AgentEvent] = []
        if self._block is None or self._block[1] != stream:
            said = self.end_block()
            self._blocks += 1
            block_id = f"{self.session_id}:{self._blocks}"
            self._block = (block_id, stream)
            said.append(agent.BlockStarted(block_id, stream, block_id))
        if text:
            self._text.append(text)
            said.append(agent.Delta(self._block[0], text))
        return said

    def end_block(self) -> list[agent.AgentEvent]:
        """End the open block with its finished message."""
        if self._block is None:
            return []
        (block_id, stream), self._block = self._block, None
        text, self._text = "".join(self._text), []
        if stream == "text":
            self._answer = text
        part: agent.Part = agent.TextPart(text) if stream == "text" else agent.ThinkingPart(text)
        return [agent.AgentMessage(id=block_id, call_id=block_id, parts=(part,))]

    # --- tools

    def _announce(self, update: Any) -> agent.AgentMessage:
        tool_id = str(update.tool_call_id)
        kind = _kind(update.kind)
        title = update.title or None
        name = TOOL_NAMES.get(kind or "", title or kind or "tool")
        self.inputs[tool_id] = _input(update.raw_input)
        self.open_tools[tool_id] = name
        call = agent.ToolCall(
            id=tool_id,
            name=name,
            input=self.inputs[tool_id],
            kind=kind,
            title=title,
            locations=_locations(update.locations),
            status=_status(update.status),
        )
        return agent.AgentMessage(id=tool_id, call_id=None, parts=(call,))

    def _tool_call(self, update: Any) -> list[agent.AgentEvent]:
        if str(update.tool_call_id) in self.inputs:
            # Announced again (codex-acp says a command's `tool_call` once for its permission
            # question and once when it starts): news about the same call.
            return self._tool_call_update(update)
        return [self._announce(update), *self._maybe_ended(update)]

    def _tool_call_update(self, update: Any) -> list[agent.AgentEvent]:
        tool_id = str(update.tool_call_id)
        said: list[agent.AgentEvent] = []
        if tool_id not in self.inputs:
            said.append(self._announce(update))  # an agent that skipped the `tool_call`
        if update.raw_input is not None:
            self.inputs[tool_id] = _input(update.raw_input)
        said.append(
            agent.ToolCallUpdate(
                id=tool_id,
                status=_status(update.status),
                title=update.title or None,
                input=_input(update.raw_input) if update.raw_input is not None else None,
                content=tool_content_text(update.content),
                locations=_locations(update.locations) if update.locations is not None else None,
            )
        )
        return said + self._maybe_ended(update)

    def _maybe_ended(self, update: Any) -> list[agent.AgentEvent]:
        tool_id = str(update.tool_call_id)
        if update.status not in ("completed", "failed") or tool_id not in self.open_tools:
            return []
        del self.open_tools[tool_id]
        text = tool_content_text(update.content)
        if text is None and update.raw_output is not None:
            raw = update.raw_output
            text = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
        return [
            agent.ToolResult(
                tool_call_id=tool_id, content=text or "", is_error=update.status == "failed"
            )
        ]

    def pending(self, update: Any) -> list[agent.AgentEvent]:
        """A permission question's tool call, announced first when the agent has not yet."""
        said = self.end_block()
        if str(update.tool_call_id) not in self.inputs:
            said.append(self._announce(update))
        return said

    # --- usage, the end

    def turn_started(self) -> None:
        """A prompt is sent: its cost can be told only if the base was known before it."""
        self._share_known = self.cost_base is not None
        self._started = time.monotonic()

    def _elapsed_ms(self) -> int | None:
        return None if self._started is None else round((time.monotonic() - self._started) * 1000)

    def _usage(self, update: schema.UsageUpdate) -> list[agent.AgentEvent]:
        cost = update.cost
        if cost is not None:
            if cost.currency.upper() != "USD":
                if not self.cost_unknown:
                    log.info(
                        "ACP agent %s reports its cost in %s: the session's cost is unknown",
                        self.agent_name,
                        cost.currency,
                    )
                self.cost_unknown = True
            else:
                if self.cost_base is None:
                    self.cost_base = cost.amount
                self.cost = cost.amount
                self.reports_cost = True
        return [
            agent.ModelCall(
                call_id=None,
                model=None,
                usage=Usage(),
                context_tokens=int(update.used),
                context_size=int(update.size) or None,
            )
        ]

    def running_cost(self) -> float | None:
        """The session's spend since this process took it up, in USD, as the turn that ends now
        tells it (TurnEnded.cost_usd); None: unknown."""
        if self.cost_unknown or self.cost is None or self.cost_base is None:
            return None
        if not self._share_known:
            return None  # the base arrived in this turn: its share is not known
        return max(0.0, self.cost - self.cost_base)

    def ended(self, stop_reason: str, usage: Any = None) -> list[agent.AgentEvent]:
        """The prompt's answer: the open block and the tool calls left open end, then the turn."""
        said = self.end_block()
        outcome, subtype = STOP_REASONS.get(stop_reason, ("error", f"error_{stop_reason}"))
        # Tool calls the agent left open end with the turn, so that no client shows them
        # running. After an answer, how one ended is not known (codex-acp 0.16.0 at times
        # never sends a command's completion): not an error.
        for tool_id in list(self.open_tools):
            del self.open_tools[tool_id]
            said.append(
                agent.ToolResult(
                    tool_call_id=tool_id,
                    content="Interrupted: the turn was stopped."
                    if outcome == "interrupted"
                    else "Ended with the turn (the agent did not say how).",
                    is_error=outcome != "success",
                )
            )
        text = self._answer if outcome != "error" else f"The turn ended: {stop_reason}."
        self._answer = ""
        said.append(
            agent.TurnEnded(
                outcome=outcome,
                text=text,
                subtype=subtype,
                usage=turn_usage(usage),
                cost_usd=self.running_cost(),
                duration_ms=self._elapsed_ms(),
                num_turns=1,
                conversation_id=self.session_id,
            )
        )
        return said

    def failed(self, reason: str) -> list[agent.AgentEvent]:
        """The prompt request failed (an error answer): the turn ends failed with the reason."""
        said = self.end_block()
        for tool_id in list(self.open_tools):
            del self.open_tools[tool_id]
            said.append(agent.ToolResult(tool_call_id=tool_id, content=reason, is_error=True))
        self._answer = ""
        said.append(
            agent.TurnEnded(
                outcome="error",
                text=reason,
                cost_usd=self.running_cost(),
                duration_ms=self._elapsed_ms(),
                conversation_id=self.session_id,
            )
        )
        return said
