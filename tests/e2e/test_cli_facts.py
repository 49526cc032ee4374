"""What the real Claude Code CLI tells the SDK, driven as coven-ls drives it.

Each test runs the CLI bundled with claude-agent-sdk through `ClaudeSDKClient`, with the options
`ClaudeBackend.open` uses (the claude_code preset system prompt, a `can_use_tool` callback, a
`stderr` callback, cwd and env), against the scripted model, and asserts the facts that
docs/cli-facts.md writes down: streaming, usage, retries, broken streams, background agents,
stopping them, failures and stderr, interrupts, and the Agent tool's "fork" type. Messages are
read with one `receive_messages()` iterator for the whole session, across turns, as coven-ls
reads them.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from coven_ls.testing.scripted_model import (
    HttpError,
    ModelRequest,
    Reply,
    ScriptedModel,
    Thinking,
    ToolUse,
    Usage,
)

from ..harness import processes_with_env

try:
    import claude_agent_sdk as sdk
    from claude_agent_sdk import (
        AssistantMessage,
        ClaudeAgentOptions,
        ClaudeSDKClient,
        PermissionResultAllow,
        ProcessError,
        ResultMessage,
        StreamEvent,
        SystemMessage,
        TaskNotificationMessage,
        TaskProgressMessage,
        TaskStartedMessage,
        TaskUpdatedMessage,
        TextBlock,
        ThinkingBlock,
        ToolResultBlock,
        ToolUseBlock,
        UserMessage,
    )
except ImportError:  # pragma: no cover - the SDK is a dependency
    sdk = None  # type: ignore[assignment]


def _bundled_claude() -> Path | None:
    if sdk is None:
        return None
    path = Path(sdk.__file__).parent / "_bundled" / "claude"
    return path if path.is_file() and os.access(path, os.X_OK) else None


CLAUDE = _bundled_claude()

pytestmark = [
    pytest.mark.skipif(CLAUDE is None, reason="claude-agent-sdk with a bundled claude needed"),
    pytest.mark.timeout(120),
]

Message = Any  # one of claude_agent_sdk's message classes
# System messages that come and go with timing: the "requesting" status (with partial
# messages) and thinking token estimates. Order checks leave them out.
NOISE = {"status", "thinking_tokens"}


# --------------------------------------------------------------------------- a session


class Session:
    """One connected ClaudeSDKClient, its messages (read by one long-lived
    `receive_messages()` iterator, with arrival times), its stderr lines and the
    `can_use_tool` calls it got."""

    def __init__(self, client: ClaudeSDKClient | None, marker: str) -> None:
        self.client = client
        self.marker = marker  # the session's CLAUDE_CONFIG_DIR: in its processes' environment
        self.messages: list[tuple[float, Message]] = []
        self.stderr: list[tuple[float, str]] = []
        self.permissions: list[tuple[str, dict[str, Any], Any]] = []
        self.error: BaseException | None = None
        self.cursor = 0
        self._changed = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None

    def start_reading(self) -> None:
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            async for message in self.client.receive_messages():
                self.messages.append((time.monotonic(), message))
                self._changed.set()
        except Exception as exc:
            self.error = exc
        self._changed.set()

    async def stop_reading(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)

    async def until(self, predicate: Callable[[Message], bool], timeout: float = 30) -> Message:
        """The next message (from the cursor on) that satisfies `predicate`; the cursor moves
        past it."""
        deadline = time.monotonic() + timeout
        while True:
            for i in range(self.cursor, len(self.messages)):
                if predicate(self.messages[i][1]):
                    self.cursor = i + 1
                    return self.messages[i][1]
            if self.error is not None:
                raise AssertionError(f"the SDK raised {self.error!r}") from self.error
            left = deadline - time.monotonic()
            if left <= 0:
                seen = [_brief(m) for _, m in self.messages[self.cursor :]]
                raise TimeoutError(f"waited {timeout}s; since the cursor: {seen}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except asyncio.TimeoutError:
                pass

    async def turn(self, timeout: float = 30) -> list[Message]:
        """The messages from the cursor up to and including the next ResultMessage."""
        start = self.cursor
        await self.until(lambda m: isinstance(m, ResultMessage), timeout)
        return [m for _, m in self.messages[start : self.cursor]]

    def since(self, mark: int) -> list[Message]:
        """The messages from cursor position `mark` up to the cursor."""
        return [m for _, m in self.messages[mark : self.cursor]]

    def time_of(self, message: Message) -> float:
        return next(t for t, m in self.messages if m is message)


def _brief(m: Message) -> str:
    if isinstance(m, SystemMessage):
        return f"{type(m).__name__}({m.subtype})"
    if isinstance(m, StreamEvent):
        return f"StreamEvent({m.event.get('type')})"
    return type(m).__name__


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def assert_nothing_left(marker: str) -> None:
    deadline = time.monotonic() + 30
    while left := processes_with_env(marker):
        assert time.monotonic() < deadline, f"left behind: {left}"
        time.sleep(0.1)


def session_options(
    scripted: ScriptedModel, tmp_path: Path, session: Session | None = None, **options: Any
) -> ClaudeAgentOptions:
    """The options ClaudeBackend.open passes (coven_ls/core/agent.py), on the scripted model,
    in folders of the test's own."""
    home, config, work = tmp_path / "home", tmp_path / "claude-config", tmp_path / "work"
    tmp = tmp_path / "tmp"  # the CLI keeps task outputs and a socket under $TMPDIR
    for folder in (home, config, work, tmp):
        folder.mkdir(exist_ok=True)
    env = {
        **scripted.cli_env(config),
        "HOME": str(home),
        "TMPDIR": str(tmp),
        **options.pop("env", {}),
    }

    async def can_use_tool(name: str, tool_input: dict[str, Any], context: Any) -> Any:
        if session is not None:
            session.permissions.append((name, tool_input, context))
        return PermissionResultAllow()

    def on_stderr(line: str) -> None:
        if session is not None:
            session.stderr.append((time.monotonic(), line))

    return ClaudeAgentOptions(
        cwd=str(work),
        system_prompt={"type": "preset", "preset": "claude_code"},
        cli_path=str(CLAUDE),
        env=env,
        can_use_tool=can_use_tool,
        stderr=on_stderr,
        **options,
    )


@asynccontextmanager
async def cli_session(
    scripted: ScriptedModel, tmp_path: Path, **options: Any
) -> AsyncIterator[Session]:
    marker = str(tmp_path / "claude-config")
    session = Session(None, marker)
    session.client = ClaudeSDKClient(session_options(scripted, tmp_path, session, **options))
    try:
        await asyncio.wait_for(session.client.connect(), 60)
        session.start_reading()
        yield session
    finally:
        await session.stop_reading()
        await asyncio.wait_for(session.client.disconnect(), 30)
        assert_nothing_left(marker)


def kinds(messages: list[Message]) -> list[str]:
    """Message kinds, noise left out: class names, with a system message's subtype."""
    out = []
    for m in messages:
        if isinstance(m, SystemMessage) and m.subtype in NOISE:
            continue
        out.append(_brief(m) if type(m) is SystemMessage else type(m).__name__)
    return out


def squeeze(items: list[str]) -> list[str]:
    """Runs of the same item as one."""
    return [x for i, x in enumerate(items) if i == 0 or items[i - 1] != x]


def system(messages: list[Message], subtype: str) -> list[SystemMessage]:
    return [m for m in messages if isinstance(m, SystemMessage) and m.subtype == subtype]


# --------------------------------------------------------------------------- 1. streaming


async def test_streaming_deltas_and_per_block_assistant_messages(
    model: ScriptedModel, tmp_path: Path
) -> None:
    thinking, text = "Let me think about it.", "Hello there, streaming world!"
    tool = ToolUse("Bash", {"command": "echo streamed-tool-ran"})
    model.on("stream please", Thinking(thinking), text, tool, chunk_chars=5, chunk_delay=0.05)
    model.on("streamed-tool-ran", "Done.")
    async with cli_session(model, tmp_path, include_partial_messages=True) as s:
        await s.client.query("stream please")
        turn = await s.turn()

    init = turn[0]
    assert isinstance(init, SystemMessage) and init.subtype == "init"
    session_id = init.data["session_id"]
    events = [m for m in turn if isinstance(m, StreamEvent)]
    assert all(e.session_id == session_id and e.parent_tool_use_id is None for e in events)
    assert len({e.uuid for e in events}) == len(events)  # every event its own uuid
    types = [e.event["type"] for e in events]
    one_message = [
        "message_start",
        *["content_block_start", "content_block_delta", "content_block_stop"] * 3,
        "message_delta",
        "message_stop",
    ]
    assert squeeze(types) == [*one_message, "message_start", *one_message[1:4], *one_message[-2:]]
    first_id = events[0].event["message"]["id"]
    second_start = [e for e in events if e.event["type"] == "message_start"][1]
    assert first_id == "msg_scripted_1" and second_start.event["message"]["id"] == "msg_scripted_2"

    first = events[: types.index("message_stop") + 1]
    deltas = [e.event for e in first if e.event["type"] == "content_block_delta"]
    by_index: dict[int, list[dict[str, Any]]] = {}
    for d in deltas:
        by_index.setdefault(d["index"], []).append(d["delta"])
    assert [d["type"] for d in by_index[0]] == ["thinking_delta"] * 5 + ["signature_delta"]
    assert "".join(d.get("thinking", "") for d in by_index[0]) == thinking
    assert {d["type"] for d in by_index[1]} == {"text_delta"} and len(by_index[1]) == 6
    assert "".join(d["text"] for d in by_index[1]) == text
    assert {d["type"] for d in by_index[2]} == {"input_json_delta"}
    starts = [e.event for e in first if e.event["type"] == "content_block_start"]
    assert [b["content_block"]["type"] for b in starts] == ["thinking", "text", "tool_use"]
    assert starts[2]["content_block"]["name"] == "Bash"
    message_delta = next(e.event for e in first if e.event["type"] == "message_delta")
    assert message_delta["delta"]["stop_reason"] == "tool_use"

    # One AssistantMessage per content block, each sent when its block is complete (after its
    # last delta, before the stream's next block), all with the stream's message id.
    assistants = [m for m in turn if isinstance(m, AssistantMessage)]
    assert [type(m.content[0]).__name__ for m in assistants] == [
        "ThinkingBlock",
        "TextBlock",
        "ToolUseBlock",
        "TextBlock",
    ]
    assert all(len(m.content) == 1 for m in assistants)
    assert [m.message_id for m in assistants] == ["msg_scripted_1"] * 3 + ["msg_scripted_2"]
    assert len({m.uuid for m in assistants} | {e.uuid for e in events}) == len(assistants) + len(
        events
    )
    think_block = assistants[0].content[0]
    assert isinstance(think_block, ThinkingBlock) and think_block.thinking == thinking
    assert think_block.signature.startswith("scripted-sig-")
    assert isinstance(assistants[1].content[0], TextBlock) and assistants[1].content[0].text == text
    tool_block = assistants[2].content[0]
    assert isinstance(tool_block, ToolUseBlock) and tool_block.input == tool.input
    assert tool_block.id == starts[2]["content_block"]["id"]
    for m in assistants:
        assert m.stop_reason is None and m.usage is not None and m.usage["output_tokens"] == 1
        assert m.session_id == session_id and m.parent_tool_use_id is None
    for block_index, assistant in enumerate(assistants[:3]):
        at = turn.index(assistant)
        last_delta = max(
            turn.index(e)
            for e in first
            if e.event["type"] == "content_block_delta" and e.event["index"] == block_index
        )
        stop = next(
            turn.index(e)
            for e in first
            if e.event["type"] == "content_block_stop" and e.event["index"] == block_index
        )
        assert last_delta < at < stop  # right before the block's content_block_stop
    (tool_result,) = [m for m in turn if isinstance(m, UserMessage)]
    assert isinstance(tool_result.content[0], ToolResultBlock)
    assert turn.index(tool_result) > types.index("message_stop")

    # Deltas arrive as the model streams them: spread over the 50 ms gaps, not in one burst.
    text_times = [
        s.time_of(e)
        for e in first
        if e.event["type"] == "content_block_delta" and e.event["index"] == 1
    ]
    assert text_times[-1] - text_times[0] >= 0.15  # five gaps of 50 ms
    estimates = system(turn, "thinking_tokens")
    assert estimates and {"estimated_tokens", "estimated_tokens_delta"} <= set(estimates[0].data)
    result = turn[-1]
    assert isinstance(result, ResultMessage) and result.result == "Done." and not result.is_error


# --------------------------------------------------------------------------- 2. usage


async def test_usage_adds_up_per_turn_and_model_usage_accumulates(
    model: ScriptedModel, tmp_path: Path
) -> None:
    model.on(
        "count please",
        "Counting.",
        ToolUse("Bash", {"command": "echo tally-done"}),
        usage=Usage(100, 20, cache_read_input_tokens=1000, cache_creation_input_tokens=50),
    )
    model.on("tally-done", "Counted.", usage=Usage(200, 30, 2000, 60))
    model.on("again", "Again.", usage=Usage(300, 40, 3000, 70))
    async with cli_session(model, tmp_path) as s:
        await s.client.query("count please")
        first = await s.turn()
        await s.client.query("again")
        second = await s.turn()

    def main_counts(usage: dict[str, Any]) -> tuple[int, int, int, int]:
        return (
            usage["input_tokens"],
            usage["output_tokens"],
            usage["cache_read_input_tokens"],
            usage["cache_creation_input_tokens"],
        )

    # An AssistantMessage carries message_start's usage (output_tokens 1), not the final one.
    assistants = [m for m in first if isinstance(m, AssistantMessage)]
    assert [main_counts(m.usage) for m in assistants] == [(100, 1, 1000, 50)] * 2 + [
        (200, 1, 2000, 60)
    ]
    r1, r2 = first[-1], second[-1]
    assert isinstance(r1, ResultMessage) and isinstance(r2, ResultMessage)
    # ResultMessage.usage: this turn's model calls summed (message_delta's counts).
    assert main_counts(r1.usage) == (300, 50, 3000, 110) and r1.num_turns == 2
    assert main_counts(r2.usage) == (300, 40, 3000, 70) and r2.num_turns == 1
    assert {"server_tool_use", "service_tier", "cache_creation"} <= set(r1.usage)
    # model_usage and total_cost_usd: the whole session so far, per model, camelCase.
    ((name1, m1),) = r1.model_usage.items()
    ((name2, m2),) = r2.model_usage.items()
    assert name1 == name2 == model.requests[0].model == "claude-opus-5-5"
    counts = ("inputTokens", "outputTokens", "cacheReadInputTokens", "cacheCreationInputTokens")
    assert [m1[k] for k in counts] == [300, 50, 3000, 110]
    assert [m2[k] for k in counts] == [600, 90, 6000, 180]
    assert {"webSearchRequests", "costUSD", "contextWindow", "maxOutputTokens"} <= set(m1)
    assert r1.total_cost_usd == pytest.approx(m1["costUSD"]) and r1.total_cost_usd > 0
    assert r2.total_cost_usd == pytest.approx(m2["costUSD"])
    assert r2.total_cost_usd > r1.total_cost_usd


# --------------------------------------------------------------------------- 3. retries


def retries(messages: list[Message]) -> list[SystemMessage]:
    return system(messages, "api_retry")


async def test_overloaded_529_is_retried_with_an_api_retry_message(
    model: ScriptedModel, tmp_path: Path
) -> None:
    model.on("flaky", Reply(error=HttpError(529, "Overloaded", "overloaded_error")), times=1)
    model.on("flaky", "Answered after retry.")
    async with cli_session(model, tmp_path) as s:
        await s.client.query("flaky")
        turn = await s.turn()
    (retry,) = retries(turn)
    assert type(retry) is SystemMessage  # no typed class for it in the SDK
    data = retry.data
    assert {"attempt", "max_retries", "retry_delay_ms", "error_status", "error"} <= set(data)
    assert (data["attempt"], data["max_retries"], data["error_status"], data["error"]) == (
        1,
        10,
        529,
        "overloaded",
    )
    assert 500 <= data["retry_delay_ms"] <= 700  # 500 ms backoff plus jitter
    failed, answered = model.requests
    # Announced as soon as the error came back (well before the retry), then the wait. The
    # bounds are loose for busy machines; an idle one shows ~0.05 s and delay + ~0.03 s.
    announced, delay = s.time_of(retry) - failed.time, data["retry_delay_ms"] / 1000
    assert announced < min(delay, 1.0)
    assert delay - 0.05 <= answered.time - failed.time <= delay + 1.0
    result = turn[-1]
    assert isinstance(result, ResultMessage) and not result.is_error
    assert result.result == "Answered after retry."


async def test_retry_after_lengthens_the_wait_retry_after_ms_is_ignored(
    model: ScriptedModel, tmp_path: Path
) -> None:
    model.on("short hint", Reply(error=HttpError(529, retry_after_ms=100)), times=1)
    model.on("long hint", Reply(error=HttpError(529, retry_after=2)), times=1)
    model.on("hint", "ok")
    async with cli_session(model, tmp_path) as s:
        await s.client.query("short hint")
        (short,) = retries(await s.turn())
        await s.client.query("long hint")
        (long,) = retries(await s.turn())
    r = model.requests
    assert 500 <= short.data["retry_delay_ms"] <= 700  # the usual backoff, not 100 ms
    assert r[1].time - r[0].time >= 0.45
    assert 2000 <= long.data["retry_delay_ms"] <= 2600  # retry-after: 2 (s), plus jitter
    assert r[3].time - r[2].time >= 1.95


async def test_broken_stream_is_retried_then_tried_without_streaming(
    model: ScriptedModel, tmp_path: Path
) -> None:
    model.on(
        "wobbly",
        "0123456789abcdef",
        chunk_chars=2,
        chunk_delay=0.1,
        drop_after=3,
        times=1,
        usage=Usage(100, 5),
    )
    model.on("wobbly", "Complete answer.", usage=Usage(200, 7))
    model.on("doomed", "never whole", chunk_chars=3, chunk_delay=0.02, drop_after=2)
    model.on("overloaded for good", Reply(error=HttpError(529, "Overloaded", "overloaded_error")))
    env = {"CLAUDE_CODE_MAX_RETRIES": "1"}
    async with cli_session(model, tmp_path, include_partial_messages=True, env=env) as s:
        await s.client.query("wobbly")
        wobbly = await s.turn()
        n_wobbly = len(model.requests)
        await s.client.query("overloaded for good")
        overloaded = await s.turn()
        n_overloaded = len(model.requests)
        await s.client.query("doomed")
        doomed = await s.turn()

    # (a) Broken off after three deltas: the CLI closes the block and the message itself
    # (no message_delta), says api_retry with no status, and streams the whole request again.
    events = [m.event for m in wobbly if isinstance(m, StreamEvent)]
    broken = events[: [e["type"] for e in events].index("message_stop") + 1]
    assert squeeze([e["type"] for e in broken]) == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_stop",
    ]
    # The deltas sent before the break, though the last one is now and then lost (1 run in
    # 10 or so, when the machine is busy).
    passed_on = [e["delta"]["text"] for e in broken if e["type"] == "content_block_delta"]
    assert passed_on in (["01", "23", "45"], ["01", "23"])
    (retry,) = retries(wobbly)
    assert (retry.data["error_status"], retry.data["error"]) == (None, "unknown")
    assert wobbly.index(retry) > wobbly.index(next(m for m in wobbly if isinstance(m, StreamEvent)))
    texts = [b.text for m in wobbly if isinstance(m, AssistantMessage) for b in m.content]
    assert texts == ["Complete answer."]  # the broken attempt leaves no AssistantMessage
    starts = [e["message"]["id"] for e in events if e["type"] == "message_start"]
    assert starts == ["msg_scripted_1", "msg_scripted_2"]
    result = wobbly[-1]
    assert isinstance(result, ResultMessage) and result.result == "Complete answer."
    # The broken attempt counts: its message_start's input and its output_tokens of 1.
    assert (result.usage["input_tokens"], result.usage["output_tokens"]) == (300, 8)
    assert [(r.dropped, r.body["stream"]) for r in model.requests[:n_wobbly]] == [
        (True, True),
        (False, True),
    ]

    # (b) 529 every time (CLAUDE_CODE_MAX_RETRIES=1: one retry): "API Error: 529 ..." with
    # the status, a synthetic assistant message, nothing counted.
    tries = model.requests[n_wobbly:n_overloaded]
    assert [r.body["stream"] for r in tries] == [True, True]
    (synthetic,) = [m for m in overloaded if isinstance(m, AssistantMessage)]
    assert synthetic.model == "<synthetic>" and synthetic.error == "server_error"
    result = overloaded[-1]
    assert isinstance(result, ResultMessage)
    assert (result.subtype, result.is_error, result.terminal_reason) == (
        "success",
        True,
        "api_error",
    )
    assert result.result.startswith("API Error: 529 Overloaded. This is a server-side issue")
    assert result.result == synthetic.content[0].text and result.api_error_status == 529
    assert result.usage["input_tokens"] == 0

    # (c) Broken every time: retried, then one request without streaming, then the same kind
    # of error result. The failed prompt stays in the conversation: the next prompt joins it
    # in one user message.
    tries = model.requests[n_overloaded:]
    assert [(r.dropped, r.body["stream"]) for r in tries] == [
        (True, True),
        (True, True),
        (True, False),
    ]
    assert tries[0].last_user_text == "overloaded for good\ndoomed"
    (synthetic,) = [m for m in doomed if isinstance(m, AssistantMessage)]
    lost = "API Error: Connection to the API was lost (ECONNRESET). This is usually temporary"
    assert synthetic.model == "<synthetic>" and synthetic.error == "server_error"
    assert synthetic.content[0].text.startswith(lost)
    result = doomed[-1]
    assert isinstance(result, ResultMessage)
    assert (result.subtype, result.is_error, result.terminal_reason) == (
        "success",
        True,
        "api_error",
    )
    assert result.result.startswith(lost) and result.api_error_status is None


@pytest.mark.parametrize(
    "error",
    [HttpError(529, "Overloaded", "overloaded_error"), HttpError(500, "Internal", "api_error")],
    ids=["529", "500"],
)
async def test_an_error_event_mid_stream_is_tried_again_without_streaming(
    model: ScriptedModel, tmp_path: Path, error: HttpError
) -> None:
    """The API's `error` event after three deltas (an overload mid-answer, HTTP status 200):
    the CLI closes the block and the message itself, as for a broken connection, but says no
    api_retry: it asks again at once, without streaming, and the answer comes whole."""
    model.on(
        "shaky",
        "0123456789abcdef",
        chunk_chars=2,
        chunk_delay=0.05,
        error=error,
        error_after=3,
        times=1,
        usage=Usage(100, 5),
    )
    model.on("shaky", "Complete answer.", usage=Usage(200, 7))
    async with cli_session(model, tmp_path, include_partial_messages=True) as s:
        await s.client.query("shaky")
        shaky = await s.turn()

    events = [m.event for m in shaky if isinstance(m, StreamEvent)]
    assert squeeze([e["type"] for e in events]) == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_stop",
    ]
    assert [e["delta"]["text"] for e in events if e["type"] == "content_block_delta"] == [
        "01",
        "23",
        "45",
    ]
    assert retries(shaky) == []
    texts = [b.text for m in shaky if isinstance(m, AssistantMessage) for b in m.content]
    assert texts == ["Complete answer."]
    result = shaky[-1]
    assert isinstance(result, ResultMessage) and not result.is_error
    assert result.result == "Complete answer."
    # The cut-off attempt counts, as a broken connection's does.
    assert (result.usage["input_tokens"], result.usage["output_tokens"]) == (300, 8)
    assert [(r.stream_error, r.body["stream"]) for r in model.requests] == [
        (True, True),
        (False, False),
    ]


# --------------------------------------------------------------------------- 4. background agents


def agent_script(model: ScriptedModel) -> ToolUse:
    call = ToolUse(
        "Agent",
        {
            "description": "Say done",
            "prompt": "SUBAGENT-PROMPT: say done",
            "subagent_type": "general-purpose",
        },
    )
    model.on("delegate please", "Delegating.", call, subagent=False)
    model.on("Async agent launched", "Started it in the background.", subagent=False)
    model.on("<task-notification>", "The agent has finished.", subagent=False)
    return call


async def test_background_agent_messages_after_the_first_result(
    model: ScriptedModel, tmp_path: Path
) -> None:
    agent_script(model)
    # The subagent's own requests: its prompt is its last user message.
    bash = ToolUse("Bash", {"command": "touch made-by-subagent && echo sub-tool-ran"})
    model.on("SUBAGENT-PROMPT", "Checking.", bash, latency=0.5, subagent=True)
    model.on("sub-tool-ran", "Subagent says: done.", subagent=True)
    async with cli_session(model, tmp_path, forward_subagent_text=True) as s:
        await s.client.query("delegate please")
        first = await s.turn()
        second = await s.turn()  # nothing sent: the CLI starts this turn by itself

    # The parent's turn: the Agent call returns at once, the task runs in the background.
    assert kinds(first) == [
        "SystemMessage(init)",
        "AssistantMessage",
        "AssistantMessage",
        "SystemMessage(background_tasks_changed)",
        "TaskStartedMessage",
        "UserMessage",
        "AssistantMessage",
        "ResultMessage",
    ]
    session_id = first[0].data["session_id"]
    agent_call = first[2].content[0]
    assert isinstance(agent_call, ToolUseBlock) and agent_call.name == "Agent"
    (started,) = [m for m in first if isinstance(m, TaskStartedMessage)]
    assert started.tool_use_id == agent_call.id and started.description == "Say done"
    assert started.task_type == "local_agent"
    assert started.data["prompt"] == "SUBAGENT-PROMPT: say done"
    assert started.data["subagent_type"] == "general-purpose"
    assert started.data["is_backgrounded"] is True
    (changed,) = system(first, "background_tasks_changed")
    assert changed.data["tasks"] == [
        {
            "task_id": started.task_id,
            "run_id": started.data["run_id"],
            "task_type": "local_agent",
            "subagent_type": "general-purpose",
            "description": "Say done",
        }
    ]
    launched = first[5]
    assert isinstance(launched, UserMessage)
    assert launched.tool_use_result["status"] == "async_launched"
    assert launched.tool_use_result["agentId"] == started.task_id
    assert first[-1].result == "Started it in the background."

    # After the first result, through the same receive_messages(): the subagent's messages,
    # the task's end, and a whole turn the CLI starts for the task notification.
    assert kinds(second) == [
        "AssistantMessage",  # subagent: "Checking."
        "AssistantMessage",  # subagent: the Bash call
        "TaskProgressMessage",
        "UserMessage",  # subagent: the Bash result
        "AssistantMessage",  # subagent: its final text
        "TaskUpdatedMessage",
        "TaskNotificationMessage",
        "SystemMessage(background_tasks_changed)",
        "SystemMessage(init)",
        "AssistantMessage",
        "ResultMessage",
    ]
    sub = [m for m in second[:5] if isinstance(m, (AssistantMessage, UserMessage))]
    assert all(m.parent_tool_use_id == agent_call.id for m in sub)
    assert sub[-1].content[0].text == "Subagent says: done."
    progress = next(m for m in second if isinstance(m, TaskProgressMessage))
    assert progress.task_id == started.task_id and progress.last_tool_name == "Bash"
    assert set(progress.usage) == {"total_tokens", "tool_uses", "duration_ms"}
    updated = next(m for m in second if isinstance(m, TaskUpdatedMessage))
    assert updated.task_id == started.task_id and updated.status == "completed"
    assert set(updated.patch) == {"status", "end_time"}
    note = next(m for m in second if isinstance(m, TaskNotificationMessage))
    assert (note.task_id, note.tool_use_id, note.status) == (
        started.task_id,
        agent_call.id,
        "completed",
    )
    assert note.summary == "Subagent says: done." and note.data["summary_is_report"] is True
    assert note.output_file.startswith(f"{tmp_path}/tmp/claude-{os.getuid()}/")
    assert note.output_file.endswith(f"/{session_id}/tasks/{started.task_id}.output")
    assert Path(note.output_file).is_file()  # the subagent's transcript, as JSON lines
    assert note.usage is not None and note.usage["tool_uses"] == 1
    assert system(second, "background_tasks_changed")[0].data["tasks"] == []
    result = second[-1]
    assert isinstance(result, ResultMessage) and result.result == "The agent has finished."
    assert result.origin == {
        "kind": "task-notification",
        "producer": "session-task",
        "runId": started.data["run_id"],
    }
    assert result.num_turns == 1
    # The subagent's tool call went through can_use_tool, with the subagent's id.
    # (The Agent call itself did not ask: the CLI allows it.)
    ((name, tool_input, context),) = s.permissions
    assert (name, tool_input) == ("Bash", bash.input)
    assert context.agent_id == started.task_id

    # What the scripted model saw.
    subagent_requests = [r for r in model.requests if r.is_subagent]
    assert [r.last_user_text for r in subagent_requests] == [
        "SUBAGENT-PROMPT: say done",
        "sub-tool-ran",
    ]
    notified = model.requests[-1]
    assert not notified.is_subagent
    (task,) = notified.task_notifications
    assert (task["task-id"], task["tool-use-id"], task["status"], task["result"]) == (
        started.task_id,
        agent_call.id,
        "completed",
        "Subagent says: done.",
    )


async def test_subagent_text_comes_even_without_forward_subagent_text(
    model: ScriptedModel, tmp_path: Path
) -> None:
    """The SDK documents forward_subagent_text=False as leaving a subagent's text blocks out;
    with 2.1.330 a background agent's text comes all the same."""
    agent_script(model)
    model.on("SUBAGENT-PROMPT", "Subagent text.", latency=0.3, subagent=True)
    async with cli_session(model, tmp_path, forward_subagent_text=False) as s:
        await s.client.query("delegate please")
        started = next(m for m in await s.turn() if isinstance(m, TaskStartedMessage))
        second = await s.turn()
    sub = [m for m in second if isinstance(m, AssistantMessage) and m.parent_tool_use_id]
    assert [m.content for m in sub] == [[TextBlock("Subagent text.")]]
    assert sub[0].parent_tool_use_id == started.tool_use_id


async def test_stop_task_kills_a_background_agent(model: ScriptedModel, tmp_path: Path) -> None:
    agent_script(model)
    model.on("SUBAGENT-PROMPT", "too late", latency=10, subagent=True)
    async with cli_session(model, tmp_path, forward_subagent_text=True) as s:
        await s.client.query("delegate please")
        first = await s.turn()
        started = next(m for m in first if isinstance(m, TaskStartedMessage))
        await asyncio.to_thread(model.wait_for_requests, 1, 10, lambda r: r.is_subagent)
        stopped_at = time.monotonic()
        assert await s.client.stop_task(started.task_id) is None
        second = await s.turn()

    assert kinds(second) == [
        "TaskUpdatedMessage",
        "TaskNotificationMessage",
        "SystemMessage(background_tasks_changed)",
        "UserMessage",
        "SystemMessage(init)",
        "AssistantMessage",
        "ResultMessage",
    ]
    updated, note = second[0], second[1]
    assert updated.status == "killed" and s.time_of(updated) - stopped_at < 2
    assert (note.status, note.summary, note.usage) == ("stopped", "Say done", None)
    interrupted = second[3]
    assert interrupted.parent_tool_use_id == started.tool_use_id
    assert interrupted.content[0].text == "[Request interrupted by user]"
    assert second[-1].origin["kind"] == "task-notification"
    (task,) = model.requests[-1].task_notifications
    assert task["status"] == "killed" and "result" not in task


# --------------------------------------------------------------------------- 5. stderr, failures


@pytest.mark.skipif(os.geteuid() != 0, reason="the CLI refuses bypassPermissions only as root")
@pytest.mark.filterwarnings("ignore:can_use_tool will not be invoked")
async def test_bypass_permissions_as_root_fails_on_connect_with_stderr(
    model: ScriptedModel, tmp_path: Path
) -> None:
    session = Session(None, str(tmp_path / "claude-config"))
    options = session_options(model, tmp_path, session, permission_mode="bypassPermissions")
    client = ClaudeSDKClient(options)
    with pytest.raises(ProcessError) as info:
        await asyncio.wait_for(client.connect(), 60)
    assert info.value.exit_code == 1
    assert str(info.value) == (
        "Command failed with exit code 1 (exit code: 1)\n"
        "Error output: Check stderr output for details"
    )
    assert [line for _, line in session.stderr] == [
        "--dangerously-skip-permissions cannot be used with root/sudo privileges for security "
        "reasons"
    ]
    assert model.requests == []
    await client.disconnect()
    assert_nothing_left(session.marker)


async def test_sigkill_mid_turn_raises_process_error(model: ScriptedModel, tmp_path: Path) -> None:
    model.on("long one", "y" * 300, chunk_chars=3, chunk_delay=0.05)
    async with cli_session(model, tmp_path) as s:
        await s.client.query("long one")
        await asyncio.to_thread(model.wait_for_requests, 1, 30)
        for pid in processes_with_env(s.marker):  # the CLI this test started
            os.kill(pid, signal.SIGKILL)
        with pytest.raises(AssertionError, match="the SDK raised"):
            await s.until(lambda m: isinstance(m, ResultMessage))
    assert isinstance(s.error, ProcessError) and s.error.exit_code == -9
    assert str(s.error) == (
        "Command failed with exit code -9 (exit code: -9)\n"
        "Error output: Check stderr output for details"
    )
    assert s.stderr == []  # a killed CLI says nothing


async def test_unknown_model_404_ends_the_turn_with_model_not_found(
    model: ScriptedModel, tmp_path: Path
) -> None:
    bad = "claude-nonexistent-9"
    model.on(
        lambda r: r.model == bad,
        Reply(error=HttpError(404, f"model: {bad}", "not_found_error")),
    )
    async with cli_session(model, tmp_path, model=bad) as s:
        await s.client.query("hi")
        turn = await s.turn()
    assert turn[0].data["model"] == bad  # init takes the name as given
    (synthetic,) = [m for m in turn if isinstance(m, AssistantMessage)]
    text = (
        f"There's an issue with the selected model ({bad}). It may not exist or you may not "
        "have access to it."
    )
    assert (synthetic.model, synthetic.error, synthetic.content[0].text) == (
        "<synthetic>",
        "model_not_found",
        text,
    )
    result = turn[-1]
    assert isinstance(result, ResultMessage)
    assert (result.subtype, result.is_error, result.result) == ("success", True, text)
    assert (result.api_error_status, result.terminal_reason) == (404, "api_error")
    assert [r.body["stream"] for r in model.requests] == [True, False]
    assert [line for _, line in s.stderr] == [
        f'[claude-code:unrecognized_model] {{"model":"{bad}","query_source":"sdk"}}'
    ]


# --------------------------------------------------------------------------- 6. interrupt


async def test_interrupt_mid_stream_and_mid_tool(model: ScriptedModel, tmp_path: Path) -> None:
    model.on("long one", "y" * 300, chunk_chars=3, chunk_delay=0.05)
    model.on("slow tool", ToolUse("Bash", {"command": "sleep 20"}))
    model.on("follow up", "Followed up.")
    async with cli_session(model, tmp_path) as s:
        await s.client.query("long one")
        await asyncio.to_thread(model.wait_for_requests, 1, 30)
        await asyncio.sleep(0.5)
        await s.client.interrupt()
        streaming = await s.turn()
        mark = s.cursor
        await s.client.query("slow tool")
        await s.until(lambda m: isinstance(m, AssistantMessage))
        # Interrupt mid-tool: once the CLI runs `sleep 20` (after asking can_use_tool).
        deadline = time.monotonic() + 30
        while not [c for c in map(_cmdline, processes_with_env(s.marker)) if "sleep 20" in c]:
            assert time.monotonic() < deadline, "the tool never started"
            await asyncio.sleep(0.05)
        await s.client.interrupt()
        await s.turn()
        tooling = s.since(mark)
        # The interrupt kills the running command (within moments of the result).
        deadline = time.monotonic() + 5
        while [c for c in map(_cmdline, processes_with_env(s.marker)) if "sleep 20" in c]:
            assert time.monotonic() < deadline, "the interrupted command still runs"
            await asyncio.sleep(0.1)
        await s.client.query("follow up")
        after = await s.turn()

    # Mid-stream: what had arrived becomes an AssistantMessage; then a user message and an
    # error result whose `errors` (not `result`) holds the [ede_diagnostic] line.
    assert kinds(streaming) == [
        "SystemMessage(init)",
        "AssistantMessage",
        "UserMessage",
        "ResultMessage",
    ]
    partial = streaming[1].content[0].text
    assert 0 < len(partial) < 300 and set(partial) == {"y"}
    assert streaming[2].content[0].text == "[Request interrupted by user]"
    result = streaming[-1]
    assert (result.subtype, result.is_error, result.result, result.stop_reason) == (
        "error_during_execution",
        True,
        None,
        None,
    )
    assert result.errors == [
        "[ede_diagnostic] result_type=user last_content_type=n/a stop_reason=null"
    ]
    assert result.terminal_reason == "aborted_streaming"

    # Mid-tool: the tool call gets an error result, then the same kind of error result.
    assert kinds(tooling) == [
        "SystemMessage(init)",
        "AssistantMessage",
        "UserMessage",
        "UserMessage",
        "ResultMessage",
    ]
    refused = tooling[2].content[0]
    assert isinstance(refused, ToolResultBlock) and refused.is_error
    assert refused.content.startswith("The user doesn't want to proceed with this tool use.")
    assert tooling[2].tool_use_result == "User rejected tool use"
    assert tooling[3].content[0].text == "[Request interrupted by user for tool use]"
    result = tooling[-1]
    assert (result.subtype, result.is_error, result.result, result.stop_reason) == (
        "error_during_execution",
        True,
        None,
        "tool_use",
    )
    assert result.errors == [
        "[ede_diagnostic] result_type=user last_content_type=n/a stop_reason=tool_use"
    ]
    assert result.terminal_reason == "aborted_tools"
    assert after[-1].result == "Followed up." and not after[-1].is_error

    # The model then sees the interruption note merged into the next prompt's user message,
    # and the interrupted partial text as an assistant message.
    _, slow, follow = model.requests
    assert slow.last_user_text == "[Request interrupted by user]\nslow tool"
    assert follow.last_user_text.endswith("[Request interrupted by user for tool use]\nfollow up")
    assistant_texts = [
        b.get("text")
        for m in slow.messages
        if m["role"] == "assistant"
        for b in m["content"]
        if isinstance(b, dict)
    ]
    assert assistant_texts == [partial]


# --------------------------------------------------------------------------- 7. the fork type


def plain(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages without what the CLI varies between requests: cache_control marks, and a
    string content as one text block."""

    def block(b: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in b.items() if k != "cache_control"}

    return [
        {
            "role": m["role"],
            "content": [{"type": "text", "text": m["content"]}]
            if isinstance(m["content"], str)
            else [block(b) for b in m["content"]],
        }
        for m in messages
    ]


def _request_where(model: ScriptedModel, predicate: Callable[[ModelRequest], bool]) -> ModelRequest:
    return next(r for r in model.requests if predicate(r))


async def test_agent_tool_offers_a_fork_type_that_inherits_the_conversation(
    model: ScriptedModel, tmp_path: Path
) -> None:
    model.on("first prompt", "Noted the first prompt.")
    fork_call = ToolUse(
        "Agent",
        {
            "description": "Forked job",
            "prompt": "FORK-DIRECTIVE: write the docs",
            "subagent_type": "fork",
        },
    )
    model.on("fork now", "Forking.", fork_call, subagent=False)
    model.on("Your directive: FORK-DIRECTIVE", "Fork did the docs.", latency=0.3, subagent=True)
    model.on("Async agent launched", "Fork started.", subagent=False)
    model.on("<task-notification>", "The fork reported.", subagent=False)
    async with cli_session(model, tmp_path, forward_subagent_text=True) as s:
        await s.client.query("first prompt")
        (init,) = system(await s.turn(), "init")
        await s.client.query("fork now")
        launched = await s.turn()
        finished = await s.turn()

    # The SDK's init lists the tool as "Task"; the model is offered "Agent".
    parent = _request_where(model, lambda r: r.last_user_text == "fork now")
    tools = {t["name"]: t for t in parent.body["tools"]}
    assert "Task" in init.data["tools"] and "Agent" not in init.data["tools"]
    assert "Agent" in tools and "Task" not in tools
    schema = tools["Agent"]["input_schema"]
    assert schema["properties"]["subagent_type"] == {
        "description": "The type of specialized agent to use for this task",
        "type": "string",
    }  # no enum: "fork" is only in the description
    assert schema["required"] == ["description", "prompt"]
    assert '`"fork"` forks yourself' in tools["Agent"]["description"]
    assert 'Ignored for subagent_type: "fork"' in schema["properties"]["model"]["description"]
    assert "fork" not in init.data["agents"]

    started = next(m for m in launched if isinstance(m, TaskStartedMessage))
    assert started.data["subagent_type"] == "fork"
    fork = _request_where(model, lambda r: r.is_subagent)
    # Same model, tools and system prompt as the parent (the billing line aside) ...
    assert fork.model == parent.model and fork.body["tools"] == parent.body["tools"]
    assert fork.body["system"][1:] == parent.body["system"][1:]
    assert "cc_is_subagent=true" in fork.body["system"][0]["text"]
    # ... and the parent's whole conversation, its Agent call included, then the directive.
    assert plain(fork.messages[: len(parent.messages)]) == plain(parent.messages)
    call, last = fork.messages[len(parent.messages) :]
    assert call["role"] == "assistant" and call["content"][-1]["input"] == fork_call.input
    tool_result, directive = last["content"]
    assert tool_result["type"] == "tool_result"
    assert tool_result["content"] == [{"type": "text", "text": "Fork started — that fork is you."}]
    assert directive["text"].startswith("<fork-boilerplate>\nYou are a worker fork.")
    assert directive["text"].endswith(
        "</fork-boilerplate>\n\nYour directive: FORK-DIRECTIVE: write the docs"
    )
    sub = [m for m in finished if isinstance(m, AssistantMessage) and m.parent_tool_use_id]
    assert [m.content[0].text for m in sub] == ["Fork did the docs."]
    note = next(m for m in finished if isinstance(m, TaskNotificationMessage))
    assert note.status == "completed" and note.summary == "Fork did the docs."
    assert finished[-1].result == "The fork reported."
