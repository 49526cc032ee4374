"""What a rule answers: the blocks of a reply (:class:`Text`, :class:`Thinking`,
:class:`ToolUse`), its timing, token counts (:class:`Usage`) and failures (:class:`HttpError`,
a stream broken off or ended by an error)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    # Unpack is in `typing` from 3.11; only type checkers import it.
    from typing_extensions import Unpack


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Thinking:
    text: str


@dataclass(frozen=True)
class ToolUse:
    name: str
    input: dict[str, Any]
    id: str | None = None  # None: a fresh "toolu_..." per response, as ids must not repeat


Block = Text | Thinking | ToolUse


@dataclass(frozen=True)
class HttpError:
    status: int = 500
    message: str = "scripted failure"
    error_type: str = "api_error"
    # Sent as ``x-should-retry`` when set. The CLI obeys it, whereas it retries a bare 5xx ten
    # times with exponential backoff (about three minutes).
    should_retry: bool | None = None
    # Sent as ``retry-after`` (seconds) and ``retry-after-ms`` when set. Claude Code 2.1.330
    # waits the longer of retry-after and its own backoff (0.5 s, 1 s, 2 s, ...) and ignores
    # retry-after-ms (docs/cli-facts.md, retries).
    retry_after: float | None = None
    retry_after_ms: float | None = None

    def __post_init__(self) -> None:
        for name in ("retry_after", "retry_after_ms"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must not be negative")

    def headers(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.should_retry is not None:
            out["x-should-retry"] = "true" if self.should_retry else "false"
        if self.retry_after is not None:
            out["retry-after"] = _number(self.retry_after)
        if self.retry_after_ms is not None:
            out["retry-after-ms"] = _number(self.retry_after_ms)
        return out


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


@dataclass(frozen=True)
class Usage:
    """Token counts a reply reports, instead of what the simulated prompt cache charges
    (prompt_cache.py: about four characters a token).

    ``message_start`` carries the input side (and ``output_tokens: 1``); ``message_delta``
    carries all of them, ``output_tokens`` being the final count, as the real API sends them.
    ``cache_creation_1h_input_tokens`` is the part of ``cache_creation_input_tokens`` written
    with the one-hour lifetime: the API reports the split as ``cache_creation:
    {ephemeral_5m_input_tokens, ephemeral_1h_input_tokens}``.
    """

    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_creation_1h_input_tokens: int = 0

    def __post_init__(self) -> None:
        for name, value in self.counts().items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a whole number >= 0, not {value!r}")
        if self.cache_creation_1h_input_tokens > self.cache_creation_input_tokens:
            raise ValueError(
                "cache_creation_1h_input_tokens is a part of cache_creation_input_tokens: "
                "it cannot be larger"
            )

    def counts(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation_1h_input_tokens": self.cache_creation_1h_input_tokens,
        }

    def as_dict(self) -> dict[str, Any]:
        """The ``usage`` object of the API's answer."""
        long_lived = self.cache_creation_1h_input_tokens
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation": {
                "ephemeral_5m_input_tokens": self.cache_creation_input_tokens - long_lived,
                "ephemeral_1h_input_tokens": long_lived,
            },
        }


@dataclass(frozen=True)
class Reply:
    blocks: tuple[Block, ...] | list[Block] = ()
    latency: float = 0.0
    chunk_chars: int = 40
    chunk_delay: float = 0.0
    error: HttpError | None = None
    usage: Usage | None = None
    # Break the connection off after this many content_block_delta events (and one more
    # chunk_delay): no message_delta or message_stop, the connection closed then reset. 0 cuts
    # it right after message_start; a non-streaming answer breaks off halfway through.
    drop_after: int | None = None
    # With `error`: the error comes as an `error` event in the middle of the stream, after this
    # many content_block_delta events (and one more chunk_delay), as the API sends an overload
    # that happens mid-answer; 0: right after message_start. None: an HTTP status before any
    # stream. A non-streaming request gets the HTTP status either way.
    error_after: int | None = None

    def __post_init__(self) -> None:
        if self.chunk_chars < 1:
            raise ValueError("chunk_chars must be at least 1")
        if self.drop_after is not None and self.drop_after < 0:
            raise ValueError("drop_after must not be negative")
        if self.error_after is not None:
            if self.error is None:
                raise ValueError("error_after needs an error to send")
            if self.error_after < 0:
                raise ValueError("error_after must not be negative")
            if self.drop_after is not None:
                raise ValueError("give drop_after or error_after, not both")
        for block in self.blocks:
            if not isinstance(block, (Text, Thinking, ToolUse)):
                raise TypeError(f"not a reply block: {block!r}")

    @property
    def has_tool_use(self) -> bool:
        return any(isinstance(b, ToolUse) for b in self.blocks)


class ReplyOptions(TypedDict, total=False):
    """The keyword arguments of :func:`reply` (and :meth:`ScriptedModel.on`): a Reply's fields
    other than its blocks."""

    latency: float
    chunk_chars: int
    chunk_delay: float
    error: HttpError | None
    usage: Usage | None
    drop_after: int | None
    error_after: int | None


def _as_block(item: Block | str) -> Block:
    return Text(item) if isinstance(item, str) else item


def reply(*blocks_or_strings: Block | str, **kw: Unpack[ReplyOptions]) -> Reply:
    """``reply("text", ToolUse(...), latency=0.2)``: plain strings become :class:`Text`."""
    return Reply(blocks=tuple(_as_block(b) for b in blocks_or_strings), **kw)
