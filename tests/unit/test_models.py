"""The dated table of models (prices, windows), the context gauge and a fork's estimate."""

from __future__ import annotations

from types import SimpleNamespace

import msgspec
import pytest

from coven_ls.agents.codex.prices import cost_usd
from coven_ls.core.fork import transcript
from coven_ls.core.fork.estimate import fork_estimate
from coven_ls.core.fork.tag import child_prompt
from coven_ls.core.models import (
    MODELS,
    PRICES_AS_OF,
    WARN_FRACTION,
    context_usage,
    estimate_fork,
    model_info,
)
from coven_ls.protocol.describe import context_gauge, fork_cost, fork_cost_brief
from coven_ls.term.render import estimate_lines


def test_the_table_is_dated_and_knows_claudes_and_openais_models() -> None:
    assert PRICES_AS_OF == "2026-11-26"
    for name in ("claude-opus-4-5", "claude-sonnet-4-5", "claude-haiku-4-5", "gpt-5-codex"):
        assert name in MODELS
    # The scripted model's name (what the CLI reports in tests) is a model of the table, and
    # its prices are the ones the CLI computes its own cost with (docs/cli-facts.md, Usage:
    # 300 input, 50 output, 3000 cache read, 110 cache write cost $0.00335).
    opus = MODELS["claude-opus-5-5"]
    assert opus.window == 1_000_000
    cost = 300 * opus.input + 50 * opus.output + 3000 * opus.cache_read + 110 * opus.cache_write
    assert cost / 1_000_000 == pytest.approx(0.00335)
    for info in MODELS.values():
        assert 0 < info.cache_read < info.input <= info.cache_write < info.output or (
            info.cache_write == info.input  # OpenAI: no cache-write charge
        )


def test_dated_snapshots_and_the_1m_suffix_name_the_same_model() -> None:
    assert model_info("claude-sonnet-4-5-20250929") == MODELS["claude-sonnet-4-5"]
    long = model_info("claude-sonnet-4-5[1m]")
    assert long is not None and long.window == 1_000_000
    assert long.input == MODELS["claude-sonnet-4-5"].input
    assert model_info("claude-next-9") is None and model_info(None) is None


def test_codex_prices_come_from_the_same_table() -> None:
    gpt = MODELS["gpt-5"]
    assert cost_usd("gpt-5", 1_000_000, 0, 0) == pytest.approx(gpt.input)
    assert cost_usd("gpt-5", 1_000_000, 1_000_000, 0) == pytest.approx(gpt.cache_read)
    assert cost_usd("gpt-5.5", 1, 1, 1) is None


def test_a_children_that_resume_read_the_context_from_the_cache() -> None:
    usage = context_usage(100_000, "claude-sonnet-4-5")
    assert (usage.tokens, usage.window) == (100_000, 200_000)
    estimate = estimate_fork(usage, 3)
    assert estimate.tokens == 300_000 and estimate.pricedAs == "cacheRead"
    assert estimate.costUsd == pytest.approx(300_000 * 0.3 / 1_000_000)
    assert estimate.warning is None and estimate.pricesAsOf == PRICES_AS_OF


@pytest.mark.parametrize(
    ("context", "agent", "parent_agent", "cached"),
    [
        ("inherit", None, "claude", True),
        ("inherit", "claude", "claude", True),
        ("fresh", None, "claude", False),
        ("transcript", None, "claude", False),
        ("inherit", None, "codex", False),  # Codex children pay full price
        ("transcript", "codex", "claude", False),  # another agent's children too
    ],
)
def test_every_other_child_pays_the_full_input_price(
    context: str, agent: str | None, parent_agent: str, cached: bool
) -> None:
    model = "gpt-5" if parent_agent == "codex" else "claude-opus-4-5"
    usage = context_usage(50_000, model)
    estimate = estimate_fork(
        usage,
        2,
        context,  # type: ignore[arg-type]
        agent,  # type: ignore[arg-type]
        parent_agent,  # type: ignore[arg-type]
        child_model="gpt-5" if agent == "codex" else None,
        brief_tokens=600,
    )
    assert estimate.pricedAs == ("cacheRead" if cached else "input")
    assert estimate.context == context
    priced = MODELS["gpt-5" if "codex" in (agent, parent_agent) else model]
    per_token = priced.cache_read if cached else priced.input
    read = {"inherit": 100_000, "fresh": 600, "transcript": 100_000 + 600}[context]
    assert estimate.tokens == read
    # Children reading the cache write their briefs to it.
    written = 600 if cached else 0
    assert estimate.writeTokens == written
    assert estimate.costUsd == pytest.approx(
        (read * per_token + written * priced.cache_write) / 1_000_000
    )


def test_a_fresh_child_reads_only_its_brief_and_a_transcript_child_the_cut_conversation() -> None:
    # A big parent: fresh children do not pay for its context at all.
    usage = context_usage(300_000, "claude-sonnet-4-5[1m]")
    fresh = estimate_fork(usage, 3, "fresh", brief_tokens=900)
    assert (fresh.tokens, fresh.pricedAs, fresh.contextTokens) == (900, "input", 300_000)
    sonnet = MODELS["claude-sonnet-4-5"]
    assert fresh.costUsd == pytest.approx(900 * sonnet.input / 1_000_000)
    # The transcript is cut past its token limit: each child reads at most that, and its brief.
    written = estimate_fork(usage, 3, "transcript", brief_tokens=900)
    assert written.tokens == 3 * transcript.TOKEN_LIMIT + 900
    assert written.costUsd == pytest.approx(written.tokens * sonnet.input / 1_000_000)
    lines = fork_cost(fresh)
    assert lines[1] == (
        f"Fork cost: 3 fresh children = 900 tokens at the full input price "
        f"≈ $0.0027 (prices of {PRICES_AS_OF})"  # under a cent: not "$0.00"
    )
    assert fresh.costUsd == pytest.approx(0.0027)
    assert fork_cost(written)[1].startswith("Fork cost: 3 transcript children = 300.9k tokens")


def test_a_fresh_childs_brief_is_measured_as_it_will_be_written() -> None:
    tasks = ["Write the docs", "Fix the bugs"]
    parent = SimpleNamespace(
        context=context_usage(80_000, "claude-sonnet-4-5"),
        config=SimpleNamespace(cwd="/work/project", agent="claude"),
        answer_tokens=1_000,
    )
    estimate = fork_estimate(parent, tasks, "fresh")  # type: ignore[arg-type]
    assert estimate is not None
    briefs = [child_prompt(t, tasks, "/work/project", "/work/project", fresh=True) for t in tasks]
    assert "You start afresh" in briefs[0] and tasks[1] in briefs[0]
    assert estimate.tokens == sum((len(b) + 3) // 4 for b in briefs)
    assert estimate.writeTokens == 0
    inherit = fork_estimate(parent, tasks)  # type: ignore[arg-type]
    assert inherit is not None and inherit.tokens == 2 * 80_000
    # Resuming children write their copy of the parent's last answer and their briefs.
    own = [child_prompt(t, tasks, "/work/project", "/work/project") for t in tasks]
    assert inherit.writeTokens == 2 * 1_000 + sum((len(b) + 3) // 4 for b in own)


def test_children_reading_the_cache_write_the_parents_last_answer_and_their_briefs() -> None:
    """What the scripted API charged a fork child (tests/e2e/test_fork_cost_e2e.py): the
    parent's last prompt read from the cache, its last answer and the child's brief written."""
    usage = context_usage(100_000, "claude-sonnet-4-5")
    sonnet = MODELS["claude-sonnet-4-5"]
    estimate = estimate_fork(usage, 3, brief_tokens=300, answer_tokens=2_000)
    assert (estimate.tokens, estimate.writeTokens) == (300_000, 3 * 2_000 + 300)
    assert estimate.costUsd == pytest.approx(
        (300_000 * sonnet.cache_read + 6_300 * sonnet.cache_write) / 1_000_000
    )
    # Children at the full input price write nothing to a cache they do not read.
    for context in ("fresh", "transcript"):
        assert estimate_fork(usage, 3, context, answer_tokens=2_000).writeTokens == 0
    assert estimate_fork(usage, 3, agent="codex", answer_tokens=2_000).writeTokens == 0


def test_another_agents_children_of_unknown_model_have_no_cost() -> None:
    estimate = estimate_fork(context_usage(50_000, "claude-opus-4-5"), 2, "transcript", "codex")
    assert estimate.costUsd is None and estimate.tokens == 100_000


def test_past_80_percent_of_the_window_the_estimate_warns() -> None:
    assert WARN_FRACTION == 0.8
    at = estimate_fork(context_usage(160_000, "claude-sonnet-4-5"), 2)
    assert at.warning is None  # 80% exactly is not past it
    past = estimate_fork(context_usage(170_000, "claude-sonnet-4-5"), 2)
    assert past.warning == "the parent's context is 85% full (170,000 of 200,000 tokens)"
    lines = fork_cost(past)
    assert lines == [
        "Context: 170k / 200k tokens (85%)",
        "Fork cost: 2 × 170k = 340k tokens read from the cache ≈ $0.10 (prices of 2026-11-26)",
        "⚠ Warning: the parent's context is 85% full (170,000 of 200,000 tokens)",
    ]
    assert fork_cost_brief(past).endswith("⚠ context nearly full")


def test_a_model_the_table_does_not_know_shows_tokens_only_and_says_so() -> None:
    usage = context_usage(12_345, "claude-next-9")
    assert usage.window is None
    assert context_gauge(usage) == (
        "12.3k tokens (window unknown: claude-next-9 is not in the table)"
    )
    estimate = estimate_fork(usage, 3)
    assert (estimate.costUsd, estimate.window, estimate.warning) == (None, None, None)
    assert estimate.tokens == 37_035
    assert "cost unknown: claude-next-9 is not in coven-ls's price table" in fork_cost(estimate)[1]


def test_runs_question_scales_an_edited_task_lists_estimate_per_child() -> None:
    fresh = estimate_fork(context_usage(80_000, "claude-sonnet-4-5"), 2, "fresh", brief_tokens=600)
    proposed = {"estimate": msgspec.to_builtins(fresh)}
    assert (
        estimate_lines(proposed, 3)
        .splitlines()[1]
        .startswith("Fork cost: 3 fresh children = 900 tokens at the full input price")
    )
    inherit = estimate_fork(context_usage(80_000, "claude-sonnet-4-5"), 2)
    lines = estimate_lines({"estimate": msgspec.to_builtins(inherit)}, 3).splitlines()
    assert lines[1].startswith("Fork cost: 3 × 80k = 240k tokens read from the cache")
