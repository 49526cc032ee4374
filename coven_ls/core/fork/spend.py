"""What a fork child spends, against its fork's limits. Pure: no I/O, no state of its own.

The CLI reports tokens and cost once per turn (its result), but a child that keeps calling tools
may run one turn for a long time: each model call's usage (the usage of every assistant message
the CLI writes, a Codex `thread/tokenUsage/updated`) is counted as it arrives, so that a limit
stops the child right after the call that reached it. The turn's result then replaces those
calls' figures with the CLI's own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ...protocol.types import ForkLimits, LimitName, Usage
from ..models import model_info


def claude_cost(model: str | None, usage: Usage) -> float | None:
    """What one call of `model` with this usage cost, at the prices of the one dated table
    (models.py); None for a model the table does not know (the CLI's own figure comes at the end
    of the turn), never a guess. Claude's `input_tokens` leave out the cache's: each kind has its
    own price."""
    info = model_info(model)
    if info is None:
        return None
    return (
        usage.inputTokens * info.input
        + usage.cacheCreationTokens * info.cache_write
        + usage.cacheReadTokens * info.cache_read
        + usage.outputTokens * info.output
    ) / 1_000_000


def cost_limit_problem(limits: ForkLimits | None, agent: str, reports: bool | None) -> str | None:
    """Why a fork with these limits cannot start children of `agent`, whose reporting of its
    cost is `reports` (Abilities.reports_cost): a cost limit is kept only with a cost to count,
    and an agent that says none would let its children spend past it unseen. None: it can."""
    if limits is None or not (limits.childCostUsd or limits.forkCostUsd) or reports:
        return None
    why = "reports no cost" if reports is False else "has not reported a cost in USD yet"
    return (
        f"the children's agent '{agent}' {why}, so a cost limit (childCostUsd, forkCostUsd) "
        "cannot be kept; set it to 0, or limit childTokens or childSeconds instead"
    )


def total_tokens(usage: Usage) -> int:
    """Every kind of token the usage reports, added up (what `childTokens` counts)."""
    return (
        usage.inputTokens + usage.outputTokens + usage.cacheReadTokens + usage.cacheCreationTokens
    )


def merge_limits(base: ForkLimits | None, override: ForkLimits | None) -> ForkLimits | None:
    """A fork's limits: `override`'s where it gives one, else `base`'s; 0 (no limit) is left
    out. None when no limit is left."""
    values: dict[str, Any] = {}
    for name in ForkLimits.__struct_fields__:
        given = getattr(override, name, None) if override is not None else None
        value = given if given is not None else getattr(base, name, None)
        if value:
            values[name] = value
    return ForkLimits(**values) if values else None


def limits_row(limits: ForkLimits | None) -> dict[str, float | int] | None:
    """The limits as stored (JSON), None when there are none."""
    return None if limits is None else dict(msgspec.to_builtins(limits))


def limits_from_row(row: object) -> ForkLimits | None:
    if not isinstance(row, dict) or not row:
        return None
    return msgspec.convert(row, ForkLimits)


def child_limit_reached(
    limits: ForkLimits, usage: Usage, cost_usd: float, seconds: float | None = None
) -> LimitName | None:
    """The first of a child's own limits its spend has reached, if any."""
    if limits.childTokens and total_tokens(usage) >= limits.childTokens:
        return "childTokens"
    if limits.childCostUsd and cost_usd >= limits.childCostUsd:
        return "childCostUsd"
    if limits.childSeconds and seconds is not None and seconds >= limits.childSeconds:
        return "childSeconds"
    return None


def describe(limit: LimitName, limits: ForkLimits) -> str:
    """Why a child was stopped, for its task's `error` (the model reads it)."""
    value = getattr(limits, limit)
    what = {
        "childTokens": f"its limit of {value:,} tokens",
        "childCostUsd": f"its cost limit of ${value:g}",
        "childSeconds": f"its time limit of {value:g} seconds",
        "forkCostUsd": f"the fork's cost limit of ${value:g}",
    }[limit]
    return f"stopped: it reached {what} (forkLimits.{limit})"


@dataclass
class Meter:
    """The model calls of a session's turn under way (and of its background tasks), until the
    turn's result says what it used: one entry per model message, since the CLI writes one
    assistant line per content block, each with the message's usage so far."""

    calls: dict[str, Usage] = field(default_factory=dict)
    costs: dict[str, float] = field(default_factory=dict)

    def add(self, key: str, usage: Usage, cost: float | None) -> bool:
        """A call's usage (again, maybe grown); returns whether the figures changed."""
        before = self.calls.get(key)
        if before is not None:
            usage = Usage(
                max(before.inputTokens, usage.inputTokens),
                max(before.outputTokens, usage.outputTokens),
                max(before.cacheReadTokens, usage.cacheReadTokens),
                max(before.cacheCreationTokens, usage.cacheCreationTokens),
            )
        if usage == before:
            return False
        self.calls[key] = usage
        if cost is not None and math.isfinite(cost):
            self.costs[key] = max(cost, self.costs.get(key, 0.0))
        return True

    def clear(self) -> None:
        self.calls.clear()
        self.costs.clear()

    @property
    def usage(self) -> Usage:
        return sum(self.calls.values(), Usage())

    @property
    def cost_usd(self) -> float:
        return sum(self.costs.values())
