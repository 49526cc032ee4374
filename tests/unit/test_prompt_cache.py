"""The scripted model's prompt cache (coven_ls/testing/prompt_cache.py): what a request reads,
writes and pays in full, as the Messages API charges it, and the usage the server reports."""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from coven_ls.testing.prompt_cache import (
    CacheCharge,
    CacheError,
    PromptCache,
    block_tokens,
    first_difference,
    prefix_blocks,
    prompt_tokens,
    shared_prefix_tokens,
)
from coven_ls.testing.scripted_model import ScriptedModel, Usage

EPHEMERAL = {"type": "ephemeral"}
TOOLS = [{"name": "Bash", "description": "d" * 396, "input_schema": {"type": "object"}}]
SYSTEM = [
    {"type": "text", "text": "billing line"},  # 12 characters: 3 tokens
    {"type": "text", "text": "s" * 4000, "cache_control": EPHEMERAL},  # 1000 tokens
]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def text(value: str, cached: bool = False, ttl: str | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": value}
    if cached:
        block["cache_control"] = {**EPHEMERAL, **({"ttl": ttl} if ttl else {})}
    return block


def request(*turns: list[dict[str, Any]] | str, model: str = "claude-test-1") -> dict[str, Any]:
    """A request as the CLI sends one: tools, system, then alternating user/assistant turns."""
    roles = ["user", "assistant"]
    return {
        "model": model,
        "tools": TOOLS,
        "system": SYSTEM,
        "messages": [{"role": roles[i % 2], "content": t} for i, t in enumerate(turns)],
    }


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cache(clock: Clock) -> PromptCache:
    return PromptCache(min_tokens=1024, clock=clock)


def head_tokens() -> int:
    return block_tokens(TOOLS[0], tool=True) + 3 + 1000


# --------------------------------------------------------------------------- the estimate


def test_block_tokens_are_a_token_per_four_characters_rounded_up() -> None:
    assert block_tokens("abcd") == 1 and block_tokens("abcde") == 2 and block_tokens("") == 0
    assert block_tokens(text("x" * 40, cached=True)) == 10  # cache_control costs nothing
    assert block_tokens({"type": "thinking", "thinking": "t" * 8, "signature": "s" * 99}) == 2
    assert block_tokens({"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}) == 2
    result = {"type": "tool_result", "tool_use_id": "t", "content": [text("r" * 12)]}
    assert block_tokens(result) == 3
    assert block_tokens({"type": "tool_result", "tool_use_id": "t", "content": "r" * 12}) == 3
    compact = json.dumps(TOOLS[0], separators=(",", ":"))
    assert block_tokens(TOOLS[0], tool=True) == (len(compact) + 3) // 4


def test_prompt_tokens_add_every_block_tools_system_and_messages() -> None:
    body = request([text("q" * 40)])
    assert prompt_tokens(body) == head_tokens() + 10
    assert prefix_blocks(body)[-1].tokens == head_tokens() + 10
    assert prompt_tokens({}) == 1


# --------------------------------------------------------------------------- reads and writes


def test_first_request_writes_up_to_its_last_breakpoint_and_pays_the_rest(
    cache: PromptCache,
) -> None:
    body = request([text("hello" * 8), text("q" * 40, cached=True)])
    charge = cache.charge(body)
    whole = prompt_tokens(body)
    assert charge == CacheCharge(
        input_tokens=0, cache_read_input_tokens=0, cache_creation_input_tokens=whole
    )
    # The same again: all read.
    assert cache.charge(body) == CacheCharge(0, cache_read_input_tokens=whole)


def test_a_later_turn_reads_the_earlier_prefix_and_writes_its_new_part(
    cache: PromptCache,
) -> None:
    first = request([text("q" * 40, cached=True)])
    cache.charge(first)
    later = request([text("q" * 40)], [text("a" * 20)], [text("n" * 80, cached=True)])
    charge = cache.charge(later)
    assert charge.cache_read_input_tokens == prompt_tokens(first)
    assert charge.cache_creation_input_tokens == 5 + 20
    assert charge.input_tokens == 0
    # After the last breakpoint, tokens are paid in full.
    tail = request([text("q" * 40, cached=True)], [text("a" * 20)], [text("z" * 400)])
    charge = cache.charge(tail)
    assert charge == CacheCharge(100 + 5, cache_read_input_tokens=prompt_tokens(first))


def test_breakpoints_in_the_system_prompt_cache_tools_and_system_for_any_conversation(
    cache: PromptCache,
) -> None:
    cache.charge(request([text("one")]))
    charge = cache.charge(request([text("another question")]))
    assert charge == CacheCharge(4, cache_read_input_tokens=head_tokens())


def test_a_changed_byte_before_the_breakpoint_misses(cache: PromptCache) -> None:
    cache.charge(request([text("q" * 40, cached=True)]))
    changed = request([text("Q" + "q" * 39, cached=True)])
    charge = cache.charge(changed)
    assert charge.cache_read_input_tokens == head_tokens()  # the system breakpoint still hits
    assert charge.cache_creation_input_tokens == 10
    other_model = request([text("q" * 40, cached=True)], model="claude-other-1")
    assert cache.charge(other_model).cache_read_input_tokens == 0
    # Another speaker for the same text is another prompt.
    body = request([text("q" * 40, cached=True)])
    body["messages"][0]["role"] = "assistant"
    assert cache.charge(body).cache_read_input_tokens == head_tokens()


def test_lookback_reaches_twenty_blocks_before_a_breakpoint(cache: PromptCache) -> None:
    cache.charge(request([text("q", cached=True)]))
    near = request([text("q")] + [text(f"b{i}") for i in range(19)] + [text("x", cached=True)])
    assert cache.charge(near).cache_read_input_tokens == head_tokens() + 1
    cache.clear()
    cache.charge(request([text("q", cached=True)]))
    far = request([text("q")] + [text(f"b{i}") for i in range(20)] + [text("x", cached=True)])
    assert cache.charge(far).cache_read_input_tokens == head_tokens()  # only the system's


def test_prefixes_below_the_minimum_are_not_cached(clock: Clock) -> None:
    cache = PromptCache(min_tokens=100_000, clock=clock)
    body = request([text("q" * 40, cached=True)])
    assert cache.charge(body) == CacheCharge(prompt_tokens(body))
    assert cache.charge(body) == CacheCharge(prompt_tokens(body))


# --------------------------------------------------------------------------- lifetime


def test_five_minute_entries_expire_unless_read(cache: PromptCache, clock: Clock) -> None:
    body = request([text("q" * 40, cached=True)])
    whole = prompt_tokens(body)
    cache.charge(body)
    clock.now += 299
    assert cache.charge(body).cache_read_input_tokens == whole  # read: renewed for 5 minutes
    clock.now += 299
    assert cache.charge(body).cache_read_input_tokens == whole
    clock.now += 301
    assert cache.charge(body) == CacheCharge(0, cache_creation_input_tokens=whole)


def test_one_hour_entries_last_an_hour_and_say_so(cache: PromptCache, clock: Clock) -> None:
    body = request([text("q" * 40, cached=True, ttl="1h")])
    charge = cache.charge(body)
    assert charge.cache_creation_1h_input_tokens == 10  # the system's part is a 5m write
    assert charge.cache_creation_input_tokens == prompt_tokens(body)
    clock.now += 3000
    read = cache.charge(body)
    assert read.cache_read_input_tokens == prompt_tokens(body)
    assert read.cache_creation_input_tokens == 0


def test_top_level_cache_control_puts_a_breakpoint_on_the_last_block(cache: PromptCache) -> None:
    body = {**request([text("q" * 40)]), "cache_control": EPHEMERAL}
    assert prefix_blocks(body)[-1].ttl is not None
    cache.charge(body)
    assert cache.charge(body).cache_read_input_tokens == prompt_tokens(body)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"cache_control": {"type": "persistent"}}, "must be {'type': 'ephemeral'}"),
        ({"cache_control": {"type": "ephemeral", "ttl": "2h"}}, "'5m' or '1h', not '2h'"),
    ],
)
def test_bad_cache_control_is_refused(change: dict[str, Any], message: str) -> None:
    body = request([{**text("q"), **change}])
    with pytest.raises(CacheError, match=re.escape("messages.0.content.0: cache_control")):
        prefix_blocks(body)
    with pytest.raises(CacheError, match=re.escape(message)):
        prefix_blocks(body)


def test_more_than_four_breakpoints_is_refused() -> None:
    body = request([text(str(i), cached=True) for i in range(4)])
    with pytest.raises(CacheError, match="A maximum of 4 blocks with cache_control"):
        prefix_blocks(body)


# --------------------------------------------------------------------------- shared prefixes


def test_shared_prefix_tokens_counts_what_a_second_request_repeats() -> None:
    parent = request([text("q" * 40)], [text("a" * 40)], [text("n" * 40, cached=True)])
    whole = prompt_tokens(parent)
    child = request([text("q" * 40)], [text("a" * 40)], [text("n" * 40)], [text("more")])
    assert shared_prefix_tokens(parent, child) == (whole, whole)
    diverging = request([text("q" * 40)], [text("b" * 40)])
    assert shared_prefix_tokens(parent, diverging) == (head_tokens() + 10, whole)
    assert shared_prefix_tokens({"model": "m"}, child) == (0, 0)
    assert first_difference(parent, diverging) == "messages.1.content.0"
    assert first_difference(parent, child) == "messages.3.content.0"  # its own, past the end
    assert first_difference(child, parent) == "end"
    assert first_difference(parent, parent) is None
    # Without breakpoints the whole of the first request counts as its prefix.
    plain = {"model": "claude-test-1", "messages": [{"role": "user", "content": "x" * 8}]}
    assert shared_prefix_tokens(plain, plain) == (2, 2)


# --------------------------------------------------------------------------- over HTTP


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel(cache=PromptCache(min_tokens=0)) as m:
        yield m


def post(m: ScriptedModel, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", m.port, timeout=10)
    try:
        conn.request("POST", "/v1/messages", body=json.dumps(payload).encode())
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def test_the_server_reports_what_the_cache_charged(model: ScriptedModel) -> None:
    model.on("q", "x" * 40)
    body = request([text("q" * 40, cached=True)])
    whole = prompt_tokens(body)
    status, first = post(model, body)
    assert status == 200
    assert first["usage"] == {
        "input_tokens": 0,
        "output_tokens": 10,
        "cache_creation_input_tokens": whole,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": whole, "ephemeral_1h_input_tokens": 0},
    }
    _, second = post(model, body)
    assert second["usage"]["cache_read_input_tokens"] == whole
    assert second["usage"]["cache_creation_input_tokens"] == 0
    reqs = model.requests
    assert [r.cache for r in reqs] == [
        CacheCharge(0, cache_creation_input_tokens=whole),
        CacheCharge(0, cache_read_input_tokens=whole),
    ]
    assert reqs[1].usage == Usage(0, 10, cache_read_input_tokens=whole)


def test_a_rule_with_usage_keeps_it_but_the_cache_is_still_written(model: ScriptedModel) -> None:
    model.on("q", "x", usage=Usage(7, 3), times=1)
    body = request([text("q" * 40, cached=True)])
    _, first = post(model, body)
    assert first["usage"]["input_tokens"] == 7
    assert first["usage"]["cache_read_input_tokens"] == 0
    _, second = post(model, body)
    assert second["usage"]["cache_read_input_tokens"] == prompt_tokens(body)


def test_an_error_reply_reads_and_writes_nothing(model: ScriptedModel) -> None:
    from coven_ls.testing.scripted_model import HttpError, Reply

    model.on("q", Reply(error=HttpError(529, should_retry=False)), times=1)
    body = request([text("q" * 40, cached=True)])
    assert post(model, body)[0] == 529
    assert model.requests[0].cache is None and model.requests[0].usage is None
    _, answered = post(model, body)
    assert answered["usage"]["cache_creation_input_tokens"] == prompt_tokens(body)


def test_bad_cache_control_is_a_400_saying_what_is_wrong(model: ScriptedModel) -> None:
    body = request([text(str(i), cached=True) for i in range(5)])
    status, answer = post(model, body)
    assert status == 400
    assert answer["error"]["type"] == "invalid_request_error"
    assert "A maximum of 4 blocks with cache_control" in answer["error"]["message"]


def test_a_string_content_is_the_same_prompt_as_one_text_block(cache: PromptCache) -> None:
    # The CLI sends a message as a string, then as a block list once it carries a breakpoint.
    listed = request([text("q" * 40, cached=True)])
    plain = request("q" * 40, [text("a" * 40, cached=True)])
    assert prefix_blocks(listed)[-1].key == prefix_blocks(plain)[-2].key
    cache.charge(listed)
    assert cache.charge(plain).cache_read_input_tokens == prompt_tokens(listed)
    system = {**request([text("q")]), "system": "s" * 40}
    listed_system = {**system, "system": [text("s" * 40)]}
    assert prefix_blocks(system)[-1].key == prefix_blocks(listed_system)[-1].key
