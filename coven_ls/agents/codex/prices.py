"""What a Codex turn cost: codex reports tokens, never money, so coven-ls prices them itself.

The table is dated and small on purpose: a model it does not list gets no cost (null), never a
guess. USD per million tokens: (input, cached input, output), OpenAI's list prices as of
PRICES_AS_OF."""

from __future__ import annotations

PRICES_AS_OF = "2025-11-01"

PRICES: dict[str, tuple[float, float, float]] = {
    "gpt-5": (1.25, 0.125, 10.0),
    "gpt-5-codex": (1.25, 0.125, 10.0),
    "gpt-5.1": (1.25, 0.125, 10.0),
    "gpt-5.1-codex": (1.25, 0.125, 10.0),
    "gpt-5-mini": (0.25, 0.025, 2.0),
    "gpt-5.1-codex-mini": (0.25, 0.025, 2.0),
    "gpt-5-nano": (0.05, 0.005, 0.4),
    "o3": (2.0, 0.5, 8.0),
    "o4-mini": (1.1, 0.275, 4.4),
    "gpt-4.1": (2.0, 0.5, 8.0),
}


def cost_usd(
    model: str | None, input_tokens: int, cached_tokens: int, output_tokens: int
) -> float | None:
    """The cost of these tokens (input_tokens counts the cached ones too, as OpenAI does), or
    None for a model the table does not know."""
    price = PRICES.get(model or "")
    if price is None:
        return None
    fresh = max(input_tokens - cached_tokens, 0)
    return (fresh * price[0] + cached_tokens * price[1] + output_tokens * price[2]) / 1_000_000
