"""The models coven-ls knows: their prices and context windows, in one dated table, and what
follows from them (how full a session's context is, what a fork will cost before it runs).

Neither CLI tells coven-ls the price of a token or, before a turn, its model's window, so the
table is coven-ls's own. It is small and dated on purpose: a model it does not list gets no
window and no cost (null), never a guess, and clients say so. Claude's figures are Anthropic's
list prices and windows as Claude Code's own model catalog has them (the CLI computes its
`total_cost_usd` from the same numbers); OpenAI's are its list prices (OpenAI has no cache-write
charge). USD per million tokens."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..protocol.types import AgentName, ContextUsage, ForkContext, ForkEstimate
from .fork import transcript

PRICES_AS_OF = "2026-11-26"

# Past this share of its window a session's context is called nearly full: a fork approval warns.
WARN_FRACTION = 0.8


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """One model's list prices (USD per million tokens) and context window (tokens)."""

    input: float
    output: float
    cache_read: float
    cache_write: float
    window: int


def _m(input: float, output: float, read: float, write: float, window: int) -> ModelInfo:
    return ModelInfo(input, output, read, write, window)


_K200 = 200_000
_M1 = 1_000_000
MODELS: dict[str, ModelInfo] = {
    # Anthropic (cache write: the 5-minute cache, the one Claude Code uses)
    "claude-opus-5-5": _m(4, 20, 0.2, 5, _M1),
    "claude-opus-5": _m(5, 25, 0.5, 6.25, _M1),
    "claude-opus-4-8": _m(5, 25, 0.5, 6.25, _M1),
    "claude-opus-4-7": _m(5, 25, 0.5, 6.25, _M1),
    "claude-opus-4-6": _m(5, 25, 0.5, 6.25, _K200),
    "claude-opus-4-5": _m(5, 25, 0.5, 6.25, _K200),
    "claude-opus-4-1": _m(15, 75, 1.5, 18.75, _K200),
    "claude-opus-4-0": _m(15, 75, 1.5, 18.75, _K200),
    "claude-opus-4": _m(15, 75, 1.5, 18.75, _K200),
    "claude-sonnet-5-5": _m(2, 10, 0.1, 2.5, _M1),
    "claude-sonnet-5": _m(2, 10, 0.2, 2.5, _M1),
    "claude-sonnet-4-6": _m(3, 15, 0.3, 3.75, _K200),
    "claude-sonnet-4-5": _m(3, 15, 0.3, 3.75, _K200),
    "claude-sonnet-4-0": _m(3, 15, 0.3, 3.75, _K200),
    "claude-sonnet-4": _m(3, 15, 0.3, 3.75, _K200),
    "claude-3-7-sonnet": _m(3, 15, 0.3, 3.75, _K200),
    "claude-haiku-5-5": _m(0.1, 0.5, 0.01, 0.125, _M1),
    "claude-haiku-4-5": _m(1, 5, 0.1, 1.25, _K200),
    "claude-3-5-haiku": _m(0.8, 4, 0.08, 1, _K200),
    # OpenAI (what Codex runs): cached input is the cache read; there is no cache write
    "gpt-5": _m(1.25, 10, 0.125, 1.25, 400_000),
    "gpt-5-codex": _m(1.25, 10, 0.125, 1.25, 400_000),
    "gpt-5.1": _m(1.25, 10, 0.125, 1.25, 400_000),
    "gpt-5.1-codex": _m(1.25, 10, 0.125, 1.25, 400_000),
    "gpt-5-mini": _m(0.25, 2, 0.025, 0.25, 400_000),
    "gpt-5.1-codex-mini": _m(0.25, 2, 0.025, 0.25, 400_000),
    "gpt-5-nano": _m(0.05, 0.4, 0.005, 0.05, 400_000),
    "o3": _m(2, 8, 0.5, 2, _K200),
    "o4-mini": _m(1.1, 4.4, 0.275, 1.1, _K200),
    "gpt-4.1": _m(2, 8, 0.5, 2, 1_047_576),
}

# A dated snapshot name (`claude-sonnet-4-5-20250929`) or the 1M-context suffix (`…[1m]`) names
# the same model as its alias.
_DATED = re.compile(r"-\d{8}$")
_ONE_MILLION = "[1m]"


def model_info(model: str | None) -> ModelInfo | None:
    """The table's entry for a model name as a CLI reports it, or None for one it does not know."""
    if not model:
        return None
    name = model.strip().lower()
    long_context = name.endswith(_ONE_MILLION)
    name = _DATED.sub("", name.removesuffix(_ONE_MILLION))
    info = MODELS.get(name)
    if info is None or not long_context:
        return info
    return ModelInfo(info.input, info.output, info.cache_read, info.cache_write, _M1)


def context_usage(tokens: int, model: str | None) -> ContextUsage:
    """A session's gauge: the tokens of its last model request against its model's window."""
    info = model_info(model)
    return ContextUsage(tokens=tokens, window=info.window if info else None, model=model)


def nearly_full(usage: ContextUsage) -> bool:
    return usage.window is not None and usage.tokens > WARN_FRACTION * usage.window


def estimate_fork(
    usage: ContextUsage,
    children: int,
    context: ForkContext = "inherit",
    agent: AgentName | None = None,
    parent_agent: AgentName = "claude",
    child_model: str | None = None,
    brief_tokens: int = 0,
    answer_tokens: int = 0,
    note_tokens: int = 0,
) -> ForkEstimate:
    """What a fork's children will pay to read what they start from, before any does anything:
    - `inherit`: the parent's context each, at the cache-read price for children that resume
      the parent's conversation natively (the same agent, Claude: the cache is warm), else at
      the full input price (Codex children);
    - `fresh`: only their briefs and tasks (`brief_tokens`, all children's together), at the
      full input price;
    - `transcript`: the parent's conversation written out, after its cuts (about the parent's
      context, at most the transcript's token limit) each, and their briefs, at the full input
      price.
    Children that read the parent's context from the cache also write to it what their first
    request adds to the parent's last one: the parent's last answer (`answer_tokens`, which that
    request did not hold) each, and their briefs (`brief_tokens`, all together), at the
    cache-write price (`writeTokens`). Worktree children's first requests also hold what
    their agent adds there (`note_tokens`, all children's together: where they work now, their
    sandbox when fenced): written to the cache by children that read the parent's context from
    it, else read at the input price.
    The price is the children's model's: the parent's unless `child_model` or another `agent`
    says otherwise; a child model not in the table leaves the cost null."""
    child_agent = agent or parent_agent
    cached = context == "inherit" and child_agent == parent_agent == "claude"
    model = child_model or (usage.model if child_agent == parent_agent else None)
    info = model_info(model)
    per_token = (info.cache_read if cached else info.input) if info else None
    if context == "fresh":
        tokens = brief_tokens
    elif context == "transcript":
        tokens = children * min(usage.tokens, transcript.TOKEN_LIMIT) + brief_tokens
    else:
        tokens = children * usage.tokens
    written = children * answer_tokens + brief_tokens + note_tokens if cached else 0
    if not cached:
        tokens += note_tokens
    cost = None
    if info is not None and per_token is not None:
        cost = round((tokens * per_token + written * info.cache_write) / 1_000_000, 6)
    warning = None
    if nearly_full(usage) and usage.window:
        warning = (
            f"the parent's context is {usage.tokens * 100 // usage.window}% full "
            f"({usage.tokens:,} of {usage.window:,} tokens)"
        )
    return ForkEstimate(
        contextTokens=usage.tokens,
        window=usage.window,
        model=usage.model,
        children=children,
        context=context,
        tokens=tokens,
        pricedAs="cacheRead" if cached else "input",
        writeTokens=written,
        costUsd=cost,
        pricesAsOf=PRICES_AS_OF,
        warning=warning,
    )
