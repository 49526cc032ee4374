"""Prompt caching as the Messages API charges it, for the scripted model: what a request reads
from the cache, what it writes, and what it pays in full (:class:`PromptCache`).

The real API (docs.claude.com, "Prompt caching"), as simulated here:

- A request is a sequence of blocks in the order ``tools``, ``system``, ``messages``: each tool
  definition, each system block, each content block of each message (a string content is one
  text block, the same as ``[{"type": "text", "text": ...}]``). A block with
  ``cache_control`` is a *breakpoint*; a top-level ``cache_control`` (automatic caching) puts
  one on the last block. At most four, else a 400.
- The cache is keyed by the exact prefix up to a breakpoint (and the model). For each
  breakpoint the API looks for the longest cached prefix ending at that breakpoint or at one of
  the :data:`LOOKBACK` block boundaries before it; the longest found is *read*
  (``cache_read_input_tokens``) and its lifetime renewed. The prefix up to each breakpoint past
  it is *written* (``cache_creation_input_tokens``) if it is at least ``min_tokens`` long;
  everything else is ``input_tokens``. A written prefix lives ``ttl`` (``"5m"``, the default, or
  ``"1h"``) from its last write or read.
- Not simulated: the other invalidations (a changed ``thinking`` or ``tool_choice`` keeps the
  tools and system cached on the real API), the rule that 1h breakpoints come before 5m ones,
  per-model minimums (one ``min_tokens`` for all), and a cache shared only by concurrent requests
  once the first answer has begun (here a request's writes count from its arrival).

Token counts are an estimate, the same for every run: a block's text (a tool definition's JSON,
a text block's text, a tool call's name and input JSON, a tool result's texts, any other block's
JSON), a token per four characters rounded up (:func:`block_tokens`). The CLI's
``x-anthropic-billing-header`` system line is part of the prefix like any other block.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FIVE_MINUTES",
    "LOOKBACK",
    "MAX_BREAKPOINTS",
    "MIN_TOKENS",
    "ONE_HOUR",
    "CacheCharge",
    "CacheError",
    "PrefixBlock",
    "PromptCache",
    "block_tokens",
    "first_difference",
    "prefix_blocks",
    "prompt_tokens",
    "shared_prefix_tokens",
]

FIVE_MINUTES = 300.0
ONE_HOUR = 3600.0
_TTLS = {"5m": FIVE_MINUTES, "1h": ONE_HOUR}
# Block boundaries before a breakpoint where the API still looks for a cached prefix.
LOOKBACK = 20
MAX_BREAKPOINTS = 4
# The shortest prefix the API caches (1024 tokens for Sonnet; Opus and Haiku ask more). A
# CLI's tools and system prompt alone are several thousand.
MIN_TOKENS = 1024


class CacheError(ValueError):
    """A request the real API refuses (400 invalid_request_error) for its cache_control."""


@dataclass(frozen=True)
class PrefixBlock:
    """One block of a request, with what the prompt holds up to and including it."""

    key: str  # digest of the model and every block up to here, cache_control left out
    tokens: int  # the prompt's tokens up to here
    ttl: float | None  # a breakpoint's lifetime in seconds; None: not a breakpoint


@dataclass(frozen=True)
class CacheCharge:
    """What a request pays for its prompt: the three parts add up to its whole prompt."""

    input_tokens: int
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    # The part of cache_creation_input_tokens written with the 1h lifetime.
    cache_creation_1h_input_tokens: int = 0


def _tokens(text: str) -> int:
    return (len(text) + 3) // 4


def _without_cache_control(value: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if k != "cache_control"}


def _canonical(value: Any) -> str:
    if isinstance(value, dict):
        value = _without_cache_control(value)
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _texts(content: Any) -> Iterator[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for inner in content:
            if isinstance(inner, dict) and inner.get("type") == "text":
                yield str(inner.get("text", ""))
            else:
                yield _canonical(inner)


def block_tokens(block: Any, *, tool: bool = False) -> int:
    """The estimated tokens of one block (a tool definition when `tool`)."""
    if isinstance(block, str):
        return _tokens(block)
    if not isinstance(block, dict) or tool:
        return _tokens(_canonical(block))
    kind = block.get("type")
    if kind == "text":
        return _tokens(str(block.get("text", "")))
    if kind == "thinking":
        return _tokens(str(block.get("thinking", "")))
    if kind == "tool_use":
        return _tokens(str(block.get("name", "")) + _canonical(block.get("input", {})))
    if kind == "tool_result":
        return _tokens("".join(_texts(block.get("content", ""))))
    return _tokens(_canonical(block))


def _ttl(control: Any, where: str) -> float | None:
    if control is None:
        return None
    if not isinstance(control, dict) or control.get("type") != "ephemeral":
        raise CacheError(f"{where}: cache_control must be {{'type': 'ephemeral'}}")
    ttl = control.get("ttl", "5m")
    if ttl not in _TTLS:
        raise CacheError(f"{where}: cache_control.ttl is '5m' or '1h', not {ttl!r}")
    return _TTLS[ttl]


def _blocks(body: dict[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """(where, whose, block) for each block in the order the prompt is read: whose is "tool",
    "system" or a message's role (in the key: the same text from another party is another
    prompt); a string content is one text block, as the API reads it."""
    tools = body.get("tools")
    for i, tool in enumerate(tools if isinstance(tools, list) else []):
        yield f"tools.{i}", "tool", tool
    system = body.get("system")
    if isinstance(system, str) and system:
        yield "system", "system", {"type": "text", "text": system}
    elif isinstance(system, list):
        for i, block in enumerate(system):
            yield f"system.{i}", "system", block
    messages = body.get("messages")
    for m, message in enumerate(messages if isinstance(messages, list) else []):
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        role = str(message.get("role", ""))
        if isinstance(content, str):
            # The same prompt as one text block: the CLI sends a message either way (a block
            # list once it carries a breakpoint), and the cache holds across the two.
            yield f"messages.{m}", role, {"type": "text", "text": content}
        elif isinstance(content, list):
            for i, block in enumerate(content):
                yield f"messages.{m}.content.{i}", role, block


def prefix_blocks(body: dict[str, Any]) -> list[PrefixBlock]:
    """The request's blocks in prompt order with their running key and token count; raises
    :class:`CacheError` for cache_control the API would refuse."""
    digest = hashlib.sha256(_canonical(str(body.get("model", ""))).encode())
    out: list[PrefixBlock] = []
    tokens = 0
    for where, whose, block in _blocks(body):
        digest.update(b"\x00" + whose.encode() + b"\x00" + _canonical(block).encode())
        tokens += block_tokens(block, tool=whose == "tool")
        control = block.get("cache_control") if isinstance(block, dict) else None
        out.append(PrefixBlock(digest.hexdigest(), tokens, _ttl(control, where)))
    top = _ttl(body.get("cache_control"), "cache_control")
    if top is not None and out and out[-1].ttl is None:
        out[-1] = PrefixBlock(out[-1].key, out[-1].tokens, top)
    if sum(b.ttl is not None for b in out) > MAX_BREAKPOINTS:
        raise CacheError(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided."
        )
    return out


def prompt_tokens(body: dict[str, Any]) -> int:
    """The request's whole prompt, estimated (what count_tokens answers)."""
    return max(1, sum(block_tokens(b, tool=whose == "tool") for _, whose, b in _blocks(body)))


def shared_prefix_tokens(first: dict[str, Any], second: dict[str, Any]) -> tuple[int, int]:
    """(tokens of `first`'s cacheable prefix that `second` repeats from the start, tokens of that
    prefix): `first`'s cacheable prefix runs up to its last breakpoint (its whole prompt when it
    has none). What a request following `first` could read from the cache, whatever its own
    breakpoints."""
    a, b = prefix_blocks(first), prefix_blocks(second)
    ends = [i for i, block in enumerate(a) if block.ttl is not None]
    end = ends[-1] if ends else len(a) - 1
    if end < 0:
        return 0, 0
    shared = 0
    for mine, theirs in zip(a[: end + 1], b, strict=False):
        if mine.key != theirs.key:
            break
        shared = mine.tokens
    return shared, a[end].tokens


def first_difference(first: dict[str, Any], second: dict[str, Any]) -> str | None:
    """Where `second` stops repeating `first` from the start: its first block that is not
    `first`'s, as ``tools.3``, ``system.0``, ``messages.2.content.1`` (``messages.5``: a
    message's string content); ``end`` when `second` ends within `first`; None when both hold
    the same blocks."""
    a, b = prefix_blocks(first), prefix_blocks(second)
    places = [where for where, _, _ in _blocks(second)]
    for i, theirs in enumerate(b):
        if i >= len(a) or a[i].key != theirs.key:
            return places[i]
    return None if len(a) == len(b) else "end"


class PromptCache:
    """The cache of one scripted API (every request to one server shares it, as requests with
    one API key share the real one). `clock` (seconds) is replaceable for tests."""

    def __init__(
        self, min_tokens: int = MIN_TOKENS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.min_tokens = min_tokens
        self._clock = clock
        self._lock = threading.Lock()
        self._expiry: dict[str, float] = {}
        self._ttl: dict[str, float] = {}

    def clear(self) -> None:
        with self._lock:
            self._expiry.clear()
            self._ttl.clear()

    def charge(self, body: dict[str, Any]) -> CacheCharge:
        """Read and write the cache for a request the API answers; what its prompt costs."""
        blocks = prefix_blocks(body)
        total = blocks[-1].tokens if blocks else 0
        breakpoints = [i for i, block in enumerate(blocks) if block.ttl is not None]
        with self._lock:
            now = self._clock()
            for key in [k for k, t in self._expiry.items() if t <= now]:
                del self._expiry[key], self._ttl[key]
            hit = -1
            for bp in breakpoints:
                for i in range(bp, max(-1, bp - LOOKBACK - 1), -1):
                    if blocks[i].key in self._expiry:
                        hit = max(hit, i)
                        break
            read = blocks[hit].tokens if hit >= 0 else 0
            written = read
            long_lived = 0
            for index in ([hit] if hit >= 0 else []) + breakpoints:
                block = blocks[index]
                if index <= hit:  # read (or as long as what was read): renewed
                    if block.key in self._expiry:
                        self._expiry[block.key] = now + self._ttl[block.key]
                    continue
                if block.tokens < self.min_tokens or block.tokens <= written:
                    continue
                ttl = block.ttl or FIVE_MINUTES
                if ttl == ONE_HOUR:
                    long_lived += block.tokens - written
                written = block.tokens
                self._expiry[block.key] = now + max(ttl, self._ttl.get(block.key, 0.0))
                self._ttl[block.key] = max(ttl, self._ttl.get(block.key, 0.0))
        return CacheCharge(
            input_tokens=total - written,
            cache_read_input_tokens=read,
            cache_creation_input_tokens=written - read,
            cache_creation_1h_input_tokens=long_lived,
        )
