"""Fork limits (forkLimits, coven/fork's and coven/decideFork's `limits`): what is counted, when
a child is stopped, what the parent is told, and that the limits outlive a restart. Driven
through the hub against the in-process fake backend, as test_hub_unit.py."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import AssistantMessage, TextBlock, ToolUseBlock

from coven_ls import protocol
from coven_ls.core.fork import spend
from coven_ls.core.models import MODELS
from coven_ls.protocol import Kind
from coven_ls.protocol.types import ForkChoices, ForkLimits, Usage

from ..fakes import MODEL, Gate, Step, init, reply, result
from .test_hub_unit import (
    Rig,
    child_agents,
    fork_tag,
    results_turn,
    running_hub,
    settings,
    start,
    start_fork,
    task,
)


def call(text: str, message_id: str, tokens: int, block: Any = None) -> AssistantMessage:
    """One line of a model call: the CLI writes one per content block, each with the usage."""
    return AssistantMessage(
        content=[block or TextBlock(text)],
        model=MODEL,
        session_id="agent-x",
        message_id=message_id,
        uuid=f"u-{message_id}-{id(block)}",
        usage={
            "input_tokens": tokens // 4,
            "output_tokens": tokens // 4,
            "cache_read_input_tokens": tokens // 4,
            "cache_creation_input_tokens": tokens - 3 * (tokens // 4),
        },
    )


def scripted(rig: Rig, replies: dict[str, list[Step]]) -> None:
    """Children whose label is in `replies` answer with those steps; the rest as usual."""
    usual = rig.backend.default_reply

    def respond(text: str) -> list[Step]:
        assigned = re.match(r"You were assigned '(.*)'", text)
        if assigned is not None and assigned.group(1) in replies:
            return replies[assigned.group(1)]
        return usual(text)

    rig.backend.default_reply = respond


async def finished_and_text(rig: Rig, parent: Any) -> tuple[dict[str, Any], str]:
    finished = await rig.client.wait_for(Kind.FORK_FINISHED, parent)
    return finished, await results_turn(rig, parent)


def outcome(finished: dict[str, Any], label: str) -> dict[str, Any]:
    return next(r for r in finished["results"] if r["label"] == label)


# --- the pure half -------------------------------------------------------------------------------


def test_a_forks_limits_take_the_sessions_where_it_gives_none_and_0_lifts_one() -> None:
    base = ForkLimits(childTokens=1000, forkCostUsd=2.0)
    assert spend.merge_limits(base, None) == base
    assert spend.merge_limits(None, None) is None
    assert spend.merge_limits(base, ForkLimits(childTokens=0, childSeconds=30)) == ForkLimits(
        childSeconds=30, forkCostUsd=2.0
    )
    assert spend.merge_limits(ForkLimits(childTokens=0), None) is None
    assert spend.limits_from_row(spend.limits_row(base)) == base


def test_every_kind_of_token_counts_and_a_calls_repeated_lines_count_once() -> None:
    meter = spend.Meter()
    usage = Usage(inputTokens=10, outputTokens=20, cacheReadTokens=300, cacheCreationTokens=40)
    assert spend.total_tokens(usage) == 370
    assert meter.add("m1", usage, 0.01)
    assert not meter.add("m1", usage, 0.01)  # the same call's next content block
    assert meter.add("m2", usage, None)
    assert spend.total_tokens(meter.usage) == 740 and meter.cost_usd == pytest.approx(0.01)
    reached = spend.child_limit_reached(ForkLimits(childTokens=740), meter.usage, 0.0)
    assert reached == "childTokens"
    assert spend.child_limit_reached(ForkLimits(childTokens=741), meter.usage, 0.0) is None
    assert spend.child_limit_reached(ForkLimits(childCostUsd=0.01), meter.usage, 0.01) == (
        "childCostUsd"
    )


def test_a_call_is_priced_from_the_one_table_and_an_unknown_model_is_not_guessed() -> None:
    usage = Usage(inputTokens=1_000_000, outputTokens=1_000_000)
    sonnet = MODELS["claude-sonnet-4-5"]
    assert spend.claude_cost("claude-sonnet-4-5-20250929", usage) == pytest.approx(
        sonnet.input + sonnet.output
    )
    cached = Usage(cacheReadTokens=1_000_000, cacheCreationTokens=1_000_000)
    opus = MODELS["claude-opus-4-5"]
    assert spend.claude_cost("claude-opus-4-5", cached) == pytest.approx(
        opus.cache_read + opus.cache_write
    )
    # The scripted model's (newer than the meter's old table): priced as each call comes.
    newest = MODELS["claude-opus-5-5"]
    every = Usage(1_000_000, 1_000_000, 1_000_000, 1_000_000)
    assert spend.claude_cost("claude-opus-5-5", every) == pytest.approx(
        newest.input + newest.output + newest.cache_read + newest.cache_write
    )
    assert not hasattr(spend, "CLAUDE_PRICES")  # one table: models.py
    assert spend.claude_cost("claude-test-1", usage) is None
    assert spend.claude_cost(None, usage) is None


@pytest.mark.parametrize(
    ("limits", "problem"),
    [
        ({"childTokens": -5}, "'limits.childTokens' must be at least 0 (got -5)"),
        ({"childSeconds": "ten"}, "'limits.childSeconds' must be a number (got a string)"),
        ({"forkCostUsd": True}, "'limits.forkCostUsd' must be a number (got a boolean)"),
        ({"childTokens": 1.5}, "'limits.childTokens' must be an integer (got a number)"),
        ("cheap", "'limits' must be an object (got a string)"),
    ],
)
def test_bad_limits_are_invalid_params_that_say_what_is_wrong(limits: Any, problem: str) -> None:
    for method, cls, params in (
        (protocol.FORK, protocol.ForkParams, {"sessionId": "s", "tasks": ["a"]}),
        (protocol.DECIDE_FORK, protocol.DecideForkParams, {"forkId": "f", "approve": True}),
    ):
        with pytest.raises(protocol.CovenError) as caught:
            protocol.parse(method, cls, {**params, "limits": limits})
        assert caught.value.code == protocol.ErrorCode.InvalidParams
        assert problem in caught.value.message
    with pytest.raises(protocol.CovenError) as caught:
        protocol.parse(
            "initializationOptions", protocol.InitializationOptions, {"forkLimits": limits}
        )
    assert problem.replace("'limits", "'forkLimits") in caught.value.message


def test_good_limits_parse() -> None:
    parsed = protocol.parse(
        protocol.FORK,
        protocol.ForkParams,
        {"sessionId": "s", "tasks": ["a"], "limits": {"childTokens": 5, "forkCostUsd": 1}},
    )
    assert parsed.limits == ForkLimits(childTokens=5, forkCostUsd=1.0)


# --- stopping children ---------------------------------------------------------------------------


async def test_a_child_is_stopped_right_after_the_call_that_reached_its_token_limit(
    tmp_path: Path,
) -> None:
    never = Gate()
    cfg = settings(tmp_path, forkMode="auto", forkLimits=ForkLimits(childTokens=1000))
    async with running_hub(cfg) as rig:
        scripted(
            rig,
            {
                "alpha": [
                    init("agent-alpha"),
                    call("Looking at the code.", "m1", 500),
                    # The same call's tool block: the same usage, not counted twice.
                    call("", "m1", 500, ToolUseBlock(id="t1", name="Bash", input={})),
                    call("Found it, fixing.", "m2", 600),
                    call("never said", "m3", 10),
                    never,
                    result("never finished", agent_session_id="agent-alpha"),
                ]
            },
        )
        parent, children = await start_fork(rig)
        finished, text = await finished_and_text(rig, parent)
        alpha = children["alpha"]
        spends = [e for e in rig.client.of(alpha) if e["kind"] == Kind.SPEND]
        started = await rig.client.wait_for(Kind.FORK_STARTED, parent)

    assert started["limits"] == {"childTokens": 1000}
    # Stopped after m2 (1,100 tokens), before m3; its process ended with it.
    assert [spend.total_tokens(Usage(**e["usage"])) for e in spends] == [500, 1100]
    assert alpha.status == "cancelled" and child_agents(rig.backend)["alpha"].closed
    error = "stopped: it reached its limit of 1,000 tokens (forkLimits.childTokens)"
    assert outcome(finished, "alpha") == {
        "label": "alpha",
        "sessionId": alpha.id,
        "ok": False,
        "error": error,
        "stopped": "limit",
        "limit": "childTokens",
    }
    assert outcome(finished, "beta")["ok"] is True
    # Its completed blocks are kept for the parent; the parent goes on.
    assert (
        f'<task label="alpha" stopped="limit" limit="childTokens" error="{error}">\n'
        "Looking at the code.\n\nFound it, fixing.\n</task>"
    ) in text
    assert task("beta", "answer for beta") in text
    assert "never said" not in text
    assert parent.status == "idle"


async def test_a_child_is_stopped_at_its_time_limit_counted_from_its_start_not_its_queue(
    tmp_path: Path,
) -> None:
    gates = {"alpha": Gate()}
    cfg = settings(
        tmp_path, forkMode="auto", maxParallel=1, forkLimits=ForkLimits(childSeconds=0.3)
    )
    async with running_hub(cfg, gates=gates) as rig:
        parent, children = await start_fork(rig)
        finished, text = await finished_and_text(rig, parent)
        alpha, beta = children["alpha"], children["beta"]

    assert outcome(finished, "alpha")["limit"] == "childSeconds"
    assert alpha.status == "cancelled"
    # beta waited (queued) while alpha ran its 0.3 s, yet had all its time once it started.
    assert outcome(finished, "beta")["ok"] is True
    assert alpha.started_at is not None and beta.started_at is not None
    assert beta.started_at - alpha.started_at >= 0.3
    assert '<task label="alpha" stopped="limit" limit="childSeconds"' in text


async def test_reaching_the_forks_cost_limit_stops_every_child_still_at_work(
    tmp_path: Path,
) -> None:
    tasks = ["alpha", "beta", "gamma"]
    gates = {"beta": Gate(), "gamma": Gate()}
    cfg = settings(tmp_path, forkMode="auto", forkLimits=ForkLimits(forkCostUsd=0.4))
    async with running_hub(cfg, tasks=tasks, gates=gates) as rig:
        scripted(
            rig,
            {"alpha": [init("agent-alpha"), call("done", "a1", 10), result("done", cost=0.5)]},
        )
        parent, children = await start_fork(rig)
        await gates["beta"].wait_reached()
        await gates["gamma"].wait_reached()
        finished, text = await finished_and_text(rig, parent)

    # alpha had answered (its cost crossed the limit with its result): it keeps its answer.
    assert outcome(finished, "alpha")["ok"] is True
    assert [outcome(finished, t).get("limit") for t in tasks] == [
        None,
        "forkCostUsd",
        "forkCostUsd",
    ]
    assert (children["beta"].status, children["gamma"].status) == ("cancelled", "cancelled")
    assert all(a.closed for label, a in child_agents(rig.backend).items() if label != "alpha")
    assert "the fork's cost limit of $0.4" in text


async def test_approval_with_edits_changes_the_limits_for_that_fork(tmp_path: Path) -> None:
    gates = {"alpha": Gate(), "beta": Gate()}
    cfg = settings(tmp_path, forkMode="approve", forkLimits=ForkLimits(childTokens=1))
    async with running_hub(cfg, gates=gates) as rig:
        parent = await start(rig)
        proposed = await rig.client.wait_for(Kind.FORK_PROPOSED, parent)
        limits = ForkLimits(childTokens=0, childSeconds=60)
        rig.hub.forks.decide(proposed["forkId"], True, None, None, ForkChoices(limits=limits))
        started = await rig.client.wait_for(Kind.FORK_STARTED, parent)
        for gate in gates.values():
            await gate.wait_reached()
            gate.open()
        finished, _ = await finished_and_text(rig, parent)

    assert started["limits"] == {"childSeconds": 60.0}
    assert [r["ok"] for r in finished["results"]] == [True, True]


async def test_a_fork_without_limits_sends_no_spend_events(tmp_path: Path) -> None:
    async with running_hub(settings(tmp_path, forkMode="auto")) as rig:
        parent, _ = await start_fork(rig)
        await finished_and_text(rig, parent)
        started = await rig.client.wait_for(Kind.FORK_STARTED, parent)
    assert "limits" not in started
    assert not [e for e in rig.client.events if e["kind"] == Kind.SPEND]


async def test_limits_are_kept_with_the_session_and_the_fork_across_a_restart(
    tmp_path: Path,
) -> None:
    limits = ForkLimits(childTokens=5000, forkCostUsd=3.0)
    cfg = settings(tmp_path, forkMode="auto", stateDir=str(tmp_path / "state"), forkLimits=limits)
    gates = {"beta": Gate()}
    async with running_hub(cfg, gates=gates) as rig:
        parent, _ = await start_fork(rig)
        await gates["beta"].wait_reached()
        fork_id = rig.hub.forks.active_fork(parent)
        assert fork_id is not None
        await rig.hub.flushed()
        await rig.kill()
    for store in rig.hub.stores.values():
        store.close()

    # Restarted by a client with no limits of its own: the stored ones still hold.
    cfg_after = settings(tmp_path, forkMode="auto", stateDir=str(tmp_path / "state"))
    async with running_hub(cfg_after) as rig:
        restored = rig.hub.get(parent.id)
        fork = rig.hub.forks.get(fork_id.id)
        assert fork.state == "interrupted" and fork.settings.limits == limits
        assert restored.config.fork_limits == limits
        rig.hub.forks.resume(fork.id)
        finished = await rig.client.wait_for(Kind.FORK_FINISHED, restored)
        assert [r["ok"] for r in finished["results"]] == [True, True]
        # The resumed child is measured against them again.
        assert rig.client.of(rig.hub.get(finished["results"][1]["sessionId"]))[-1]
        await rig.client.until(lambda e: e["kind"] == Kind.SPEND)


async def test_a_models_fork_takes_the_limits_of_the_client_that_started_the_session(
    tmp_path: Path,
) -> None:
    cfg = settings(tmp_path, forkMode="approve", forkLimits=ForkLimits(childCostUsd=1.5))
    async with running_hub(cfg) as rig:
        parent = await start(rig)
        proposed = await rig.client.wait_for(Kind.FORK_PROPOSED, parent)
        assert rig.hub.forks.get(proposed["forkId"]).settings.limits == ForkLimits(childCostUsd=1.5)
        rig.hub.forks.decide(proposed["forkId"], False, None, "no")


async def test_the_forks_cost_limit_also_stops_a_childs_own_fork(tmp_path: Path) -> None:
    gates = {"deep": Gate(), "beta": Gate()}
    limits = ForkLimits(forkCostUsd=0.4)
    cfg = settings(tmp_path, forkMode="auto", maxDepth=2, forkLimits=limits)
    async with running_hub(cfg, gates=gates) as rig:
        # alpha forks in turn (its child hangs); beta's result then takes the fork over its limit.
        scripted(
            rig,
            {
                "alpha": reply(fork_tag(["deep"]), agent_session_id="agent-alpha"),
                "beta": [init("agent-beta"), gates["beta"], result("b", cost=0.5)],
            },
        )
        parent, children = await start_fork(rig)
        await gates["deep"].wait_reached()
        gates["beta"].open()
        finished, text = await finished_and_text(rig, parent)
        deep = next(s for s in rig.hub.sessions.values() if s.label == "deep")

    assert outcome(finished, "alpha")["limit"] == "forkCostUsd"
    assert outcome(finished, "beta")["ok"] is True
    assert (children["alpha"].status, deep.status) == ("cancelled", "cancelled")
    assert child_agents(rig.backend)["deep"].closed  # nothing of it left running
    assert '<task label="alpha" stopped="limit" limit="forkCostUsd"' in text


def test_a_cost_limit_needs_an_agent_that_reports_its_cost() -> None:
    limits = ForkLimits(childCostUsd=1.0)
    assert spend.cost_limit_problem(limits, "opencode", True) is None
    assert spend.cost_limit_problem(ForkLimits(childTokens=5), "codex-acp", False) is None
    assert spend.cost_limit_problem(ForkLimits(childCostUsd=0), "codex-acp", False) is None
    said = spend.cost_limit_problem(ForkLimits(forkCostUsd=2.0), "codex-acp", False)
    assert said is not None and "'codex-acp' reports no cost" in said
    said = spend.cost_limit_problem(limits, "my-agent", None)
    assert said is not None and "has not reported a cost in USD yet" in said


async def test_a_cost_limit_on_children_of_an_agent_without_a_cost_refuses_the_fork(
    tmp_path: Path,
) -> None:
    # An ACP agent may report no cost (Abilities.reports_cost): a cost limit on its children
    # could not be kept, so the fork is refused, by hand and when approved, with the reason.
    cfg = settings(tmp_path, forkMode="approve", forkLimits=ForkLimits(childCostUsd=1.5))
    async with running_hub(cfg) as rig:
        rig.backend.able = replace(rig.backend.able, reports_cost=False)
        parent = await start(rig)
        proposed = await rig.client.wait_for(Kind.FORK_PROPOSED, parent)
        with pytest.raises(protocol.CovenError) as refused:
            rig.hub.forks.decide(proposed["forkId"], True)
        assert refused.value.code == protocol.ErrorCode.InvalidParams
        assert "reports no cost" in refused.value.message
        assert refused.value.data == {"field": "limits"}
        assert rig.hub.forks.get(proposed["forkId"]).state == "proposed"
        # Without the cost limit (0: none) it is approved.
        rig.hub.forks.decide(
            proposed["forkId"], True, choices=ForkChoices(limits=ForkLimits(childCostUsd=0))
        )
        await rig.client.wait_for(Kind.FORK_STARTED, parent)
        await rig.client.wait_for(Kind.STATUS, parent, status="idle")
        with pytest.raises(protocol.CovenError) as by_hand:
            await rig.hub.forks.fork_by_hand(parent, ["alpha"], None)
        assert "reports no cost" in by_hand.value.message


async def test_a_models_auto_fork_with_a_cost_limit_it_cannot_keep_is_rejected_and_told(
    tmp_path: Path,
) -> None:
    cfg = settings(tmp_path, forkMode="auto", forkLimits=ForkLimits(forkCostUsd=2.0))
    async with running_hub(cfg) as rig:
        rig.backend.able = replace(rig.backend.able, reports_cost=None)
        parent = await start(rig)
        rejected = await rig.client.wait_for(Kind.FORK_REJECTED, parent)
        assert "has not reported a cost in USD yet" in rejected["reason"]
        assert rig.hub.children_of(parent) == []
        # The model is told why, and goes on without forking.
        told = await rig.client.wait_for(Kind.PROMPT, parent, origin="forkRejected")
        assert "could not start" in told["text"] and "cost limit" in told["text"]
        await rig.client.wait_for(Kind.STATUS, parent, after=told["seq"], status="idle")
