"""What a Codex turn cost: codex reports tokens, never money, so coven-ls prices them itself,
from the one dated table of models (coven_ls/core/models.py). A model the table does not list
gets no cost (null), never a guess."""

from __future__ import annotations

from ...core.models import PRICES_AS_OF, model_info

__all__ = ["PRICES_AS_OF", "cost_usd"]


def cost_usd(
    model: str | None, input_tokens: int, cached_tokens: int, output_tokens: int
) -> float | None:
    """The cost of these tokens (input_tokens counts the cached ones too, as OpenAI does), or
    None for a model the table does not know."""
    price = model_info(model)
    if price is None:
        return None
    fresh = max(input_tokens - cached_tokens, 0)
    return (
        fresh * price.input + cached_tokens * price.cache_read + output_tokens * price.output
    ) / 1_000_000
