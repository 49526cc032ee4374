"""A fork's limits typed on one line (`childTokens=200000 forkCostUsd=2.5`), for the terminal's
approval with edits: parsed into coven/decideFork's `limits`, and written back for the question.
Names are ForkLimits' (case does not matter; `coven-ls run`'s flag spellings, `child-tokens`,
are taken too); 0 lifts a limit; a limit left out keeps the session's."""

from __future__ import annotations

import math
from collections.abc import Mapping

# ForkLimits' fields, and whether each is a whole number.
LIMITS: dict[str, bool] = {
    "childTokens": True,
    "childCostUsd": False,
    "childSeconds": False,
    "forkCostUsd": False,
}
EXAMPLE = "childTokens=200000 childCostUsd=1 childSeconds=600 forkCostUsd=2.5"
_BY_KEY = {name.lower(): name for name in LIMITS}


class LimitsError(ValueError):
    """What is wrong with a typed line of limits, said so the user can type it again."""


def parse_limits(text: str) -> dict[str, int | float]:
    """`name=value` pairs separated by spaces or commas; an empty line is no change."""
    limits: dict[str, int | float] = {}
    for item in text.replace(",", " ").split():
        key, sep, raw = item.partition("=")
        name = _BY_KEY.get(key.replace("-", "").replace("_", "").lower())
        if not sep or name is None:
            raise LimitsError(
                f"{item!r} is not a limit: type name=value, the names being "
                f"{', '.join(LIMITS)} (e.g. {EXAMPLE}; 0: no limit)"
            )
        whole = LIMITS[name]
        try:
            value: int | float = int(raw) if whole else float(raw)
        except ValueError:
            noun = "a whole number" if whole else "a number"
            raise LimitsError(f"{name} takes {noun}, not {raw!r}") from None
        if value < 0 or not math.isfinite(value):
            raise LimitsError(f"{name} must be 0 (no limit) or more, not {raw}")
        limits[name] = value
    return limits


def limits_text(limits: Mapping[str, int | float]) -> str:
    """The limits as they would be typed (`childTokens=200000 forkCostUsd=2.5`)."""
    return " ".join(f"{name}={_number(value)}" for name, value in limits.items())


def _number(value: int | float) -> str:
    return str(int(value)) if value == int(value) else str(value)
