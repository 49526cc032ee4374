"""The context gauge and a fork's cost, end to end: the real CLI against the scripted model, whose
usage each test sets, and a real LSP client. The scripted model is `claude-opus-5-5` (1M tokens,
cache reads at $0.20 per million in coven-ls's table)."""

from __future__ import annotations

from typing import Any

import pytest
from pygls.exceptions import JsonRpcException

from coven_ls.core.models import MODELS, PRICES_AS_OF
from coven_ls.testing.scripted_model import ScriptedModel, Usage

from ..harness import Coven

PLAN = "Plan the release"
FORK_TWO = "I will split this.\n<fork>\n- Write the docs\n- Fix the bugs\n</fork>"
OPUS = MODELS["claude-opus-5-5"]


async def sessions(coven: Coven) -> dict[str, dict]:
    listed = await coven.request("coven/listSessions", {})
    return {s["sessionId"]: s for s in listed["sessions"]}


async def test_the_approval_shows_the_parents_last_request_and_the_forks_cost(
    coven: Coven, model: ScriptedModel
) -> None:
    # Two turns: the gauge is the last request's input side, not the sum of the session's.
    model.on("Hello", "Hi.", usage=Usage(100, 10, cache_read_input_tokens=2000))
    model.on(
        PLAN, FORK_TWO,
        usage=Usage(300, 20, cache_read_input_tokens=5000, cache_creation_input_tokens=700),
    )  # fmt: skip
    sid = await coven.start("Hello")
    first = await coven.wait_kind(sid, "turnResult")
    assert first["contextUsage"] == {
        "tokens": 2100,
        "window": 1_000_000,
        "model": "claude-opus-5-5",
    }
    await coven.wait_status(sid, "idle")
    await coven.request("coven/sendMessage", {"sessionId": sid, "text": PLAN})
    proposed = await coven.wait_kind(sid, "forkProposed")

    context = 300 + 5000 + 700
    written = proposed["estimate"]["writeTokens"]
    answer = (len(FORK_TWO) + 3) // 4  # more than the 20 output tokens the rule reports
    assert 2 * answer + 2 * 50 < written < 2 * answer + 2 * 400  # and two briefs
    assert proposed["estimate"] == {
        "contextTokens": context,
        "window": 1_000_000,
        "model": "claude-opus-5-5",
        "children": 2,
        "tokens": 2 * context,
        "pricedAs": "cacheRead",  # the children resume the parent: its cache is warm
        # ... and write to it their copies of the parent's last answer and their briefs.
        "costUsd": pytest.approx(
            (2 * context * OPUS.cache_read + written * OPUS.cache_write) / 1_000_000
        ),
        "pricesAsOf": PRICES_AS_OF,
        "warning": None,
        "context": "inherit",  # a model's fork: its children inherit unless the user says
        "writeTokens": written,
    }
    [_, second] = coven.of(sid, "turnResult")
    assert second["contextUsage"]["tokens"] == context
    info = (await sessions(coven))[sid]
    assert info["contextUsage"] == {
        "tokens": context,
        "window": 1_000_000,
        "model": "claude-opus-5-5",
    }
    assert info["usage"]["cacheReadTokens"] == 7000  # both turns' tokens, added up
    await coven.request("coven/decideFork", {"forkId": proposed["forkId"], "approve": False})


async def test_the_cost_follows_the_users_choices_before_the_approval(
    coven: Coven, model: ScriptedModel
) -> None:
    # The user edits the question: other tasks, fresh children, another agent's children.
    model.on(
        PLAN, FORK_TWO,
        usage=Usage(300, 20, cache_read_input_tokens=5000, cache_creation_input_tokens=700),
    )  # fmt: skip
    sid = await coven.start(PLAN)
    proposed = await coven.wait_kind(sid, "forkProposed")
    fork_id, context = proposed["forkId"], 300 + 5000 + 700

    async def estimate(**choices: Any) -> dict[str, Any]:
        answer = await coven.request("coven/estimateFork", {"forkId": fork_id, **choices})
        return answer["estimate"]

    same = await estimate()
    assert same == proposed["estimate"]
    three = ["Write the docs", "Fix the bugs", "Tidy the tests"]
    fresh = await estimate(tasks=three, context="fresh")
    assert (fresh["children"], fresh["context"], fresh["pricedAs"]) == (3, "fresh", "input")
    # Only the briefs (each names its task and the two others): far less than the context.
    assert 3 * 20 < fresh["tokens"] < 3 * 400 and fresh["tokens"] < context
    assert fresh["costUsd"] == pytest.approx(fresh["tokens"] * OPUS.input / 1_000_000)
    written = await estimate(context="transcript")
    assert written["tokens"] > 2 * context and written["pricedAs"] == "input"
    assert written["costUsd"] == pytest.approx(written["tokens"] * OPUS.input / 1_000_000)
    codex = await estimate(agent="codex")  # the transcript, at a price the table cannot say
    assert (codex["context"], codex["costUsd"]) == ("transcript", None)
    with pytest.raises(JsonRpcException) as caught:
        await estimate(agent="codex", context="inherit")
    assert caught.value.code == -32602
    # Once decided, there is nothing left to estimate.
    await coven.request("coven/decideFork", {"forkId": fork_id, "approve": False})
    with pytest.raises(JsonRpcException) as over:
        await estimate()
    assert over.value.code == -32003


async def test_past_80_percent_of_the_window_the_question_warns(
    coven_factory, model: ScriptedModel
) -> None:
    coven = await coven_factory(custom_forks=False)
    coven.message_answer = lambda request: "Reject"
    model.on(PLAN, FORK_TWO, usage=Usage(1000, 20, cache_read_input_tokens=849_000))
    model.on("declined your proposed fork", "Fine, alone then.")
    sid = await coven.start(PLAN)
    proposed = await coven.wait_kind(sid, "forkProposed")
    await coven.wait_kind(sid, "prompt", origin="forkRejected")

    estimate = proposed["estimate"]
    assert estimate["warning"] == "the parent's context is 85% full (850,000 of 1,000,000 tokens)"
    [asked] = coven.message_requests
    assert asked["type"] == 2  # a warning, not an information message
    lines = asked["message"].split("\n")
    assert lines[0].startswith("Claude proposes to fork session") and "2 parallel tasks" in lines[0]
    written = estimate["writeTokens"]
    cost = (2 * 850_000 * OPUS.cache_read + written * OPUS.cache_write) / 1_000_000
    assert lines[1:] == [
        "Context: 850k / 1M tokens (85%)",
        f"Fork cost: 2 × 850k = 1.7M tokens read from the cache + {written} written to it "
        f"≈ ${cost:.2f} (prices of {PRICES_AS_OF})",
        "⚠ Warning: the parent's context is 85% full (850,000 of 1,000,000 tokens)",
    ]


async def test_a_model_the_table_does_not_know_gets_tokens_only(
    coven: Coven, model: ScriptedModel
) -> None:
    model.on(PLAN, FORK_TWO, usage=Usage(4000, 20))
    sid = await coven.start(PLAN, model="claude-next-9")
    proposed = await coven.wait_kind(sid, "forkProposed")
    estimate = proposed["estimate"]
    assert estimate["model"] == "claude-next-9"
    assert (estimate["contextTokens"], estimate["tokens"]) == (4000, 8000)
    assert (estimate["window"], estimate["costUsd"], estimate["warning"]) == (None, None, None)
    await coven.request("coven/decideFork", {"forkId": proposed["forkId"], "approve": False})


async def test_the_gauge_survives_a_restart(coven_factory, model: ScriptedModel) -> None:
    model.on("Hello", "Hi.", usage=Usage(100, 10, cache_read_input_tokens=2900))
    first = await coven_factory(home="ws")
    sid = await first.start("Hello")
    await first.wait_status(sid, "idle")
    before = (await sessions(first))[sid]["contextUsage"]
    assert before == {"tokens": 3000, "window": 1_000_000, "model": "claude-opus-5-5"}
    await first.stop()
    second = await coven_factory(home="ws")
    assert (await sessions(second))[sid]["contextUsage"] == before
