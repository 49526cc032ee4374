"""Fork limits end to end: real LSP client -> coven-ls -> real `claude` CLIs -> scripted model.

A child that keeps calling tools never ends by itself: only a limit stops it. The parent must
then get its `<fork-results>` (the stopped child's task saying `stopped="limit"`) and go on, and
no CLI of a stopped child may be left running.
"""

from __future__ import annotations

import datetime
import math
from pathlib import Path
from typing import Any

import pytest
from pygls.exceptions import JsonRpcException

from coven_ls.core.models import MODELS
from coven_ls.testing.scripted_model import ModelRequest, ScriptedModel, ToolUse, Usage, reply

from ..harness import Coven, wait_until
from .test_isolation_e2e import user_repo

PLAN = "Plan the release"
LOOP = "Keep polishing"
QUICK = "Say hello"


def assigned(label: str) -> str:
    return f"You were assigned '{label}'"


def of_child(label: str) -> Any:
    """Every request of the child assigned `label` (its conversation holds its assignment)."""
    return lambda r: assigned(label) in r.all_text and "<fork-results>" not in r.all_text


def loop_forever(model: ScriptedModel, label: str, usage: Usage, latency: float = 0.0) -> None:
    """The child `label` answers every request with one more tool call: it never ends alone."""
    model.on(
        of_child(label),
        lambda _r: reply(
            "One more pass.",
            ToolUse("Bash", {"command": "echo pass >> polish.txt"}),
            usage=usage,
            latency=latency,
        ),
    )


def requests_of(model: ScriptedModel, label: str) -> list[ModelRequest]:
    return [r for r in model.requests if of_child(label)(r)]


async def fork_in(coven: Coven, tasks: list[str], cwd: Path | None = None, **params: Any) -> str:
    """A session that has had one turn, forked by hand into `tasks`; its id."""
    coven.model.on(PLAN, "Ready to split.", usage=Usage(10, 5))
    start: dict[str, Any] = {"cwd": str(cwd)} if cwd is not None else {}
    sid = await coven.start(PLAN, **start, **params.pop("session", {}))
    await coven.wait_status(sid, "idle")
    await coven.request("coven/fork", {"sessionId": sid, "tasks": tasks, **params})
    return sid


async def after_results(coven: Coven, sid: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fork's `forkFinished` and the parent's turn that read the results (it went on)."""
    prompt = await coven.wait_kind(sid, "prompt", origin="forkResults")
    turn = await coven.wait_for(
        lambda e: e["sessionId"] == sid and e["kind"] == "turnResult" and e["seq"] > prompt["seq"],
        what="the parent's turn after the fork",
    )
    [finished] = coven.of(sid, "forkFinished")
    return finished, turn


def result_of(finished: dict[str, Any], label: str) -> dict[str, Any]:
    return next(r for r in finished["results"] if r["label"] == label)


async def no_cli_left(coven: Coven, child: str) -> None:
    agent = (await coven.wait_kind(child, "agent"))["agentSessionId"]
    await wait_until(lambda: not coven.pids_running(agent), 30, f"{agent} to stop")


@pytest.mark.usefixtures("no_user_git_config")
async def test_a_child_that_keeps_calling_tools_is_stopped_by_its_token_limit(
    coven_factory, model: ScriptedModel, tmp_path: Path
) -> None:
    repo = user_repo(tmp_path / "repo")
    coven = await coven_factory(init_options={"forkLimits": {"childTokens": 4000}})
    loop_forever(model, LOOP, Usage(input_tokens=1000, output_tokens=500))
    model.on(assigned(QUICK), "Hello.", usage=Usage(10, 5))
    model.on("<fork-results>", "Going on without more polish.", usage=Usage(10, 5))

    sid = await fork_in(coven, [LOOP, QUICK], cwd=repo)
    finished, turn = await after_results(coven, sid)

    [started] = coven.of(sid, "forkStarted")
    assert started["limits"] == {"childTokens": 4000}
    loop = started["children"][0]["sessionId"]
    stopped = result_of(finished, LOOP)
    assert (stopped["ok"], stopped["stopped"], stopped["limit"]) == (False, "limit", "childTokens")
    # Its changes stay on its branch, not merged into the user's folder.
    assert stopped["merge"] == "kept" and stopped["branch"].startswith("coven/")
    assert not (repo / "polish.txt").exists()
    assert result_of(finished, QUICK)["ok"] is True
    # The tree saw its spend grow call by call (every kind of token: 1,500 a call); it was
    # stopped in the call that reached 4,000 (the third), and its model was asked nothing more.
    spends = [sum(e["usage"].values()) for e in coven.of(loop, "spend")]
    assert spends == sorted(spends) and 1500 in spends and 3000 in spends
    assert spends[-1] >= 4000 and [s for s in spends if s >= 4000] == [spends[-1]]
    assert len(requests_of(model, LOOP)) == 3
    assert coven.of(loop, "status")[-1]["status"] == "cancelled"
    # The parent was told, and went on.
    message = next(r for r in model.requests if "<fork-results>" in r.last_user_text)
    assert 'stopped="limit" limit="childTokens"' in message.last_user_text
    assert "One more pass." in message.last_user_text  # its completed blocks
    assert turn["text"] == "Going on without more polish."
    await coven.wait_status(sid, "idle", after_seq=turn["seq"])
    await no_cli_left(coven, loop)


async def test_a_child_is_stopped_by_its_time_limit_within_a_second(
    coven_factory, model: ScriptedModel
) -> None:
    coven = await coven_factory()
    loop_forever(model, LOOP, Usage(10, 5), latency=0.3)
    model.on(assigned(QUICK), "Hello.", usage=Usage(10, 5))
    model.on("<fork-results>", "Going on.", usage=Usage(10, 5))

    sid = await fork_in(coven, [LOOP, QUICK], limits={"childSeconds": 4})
    finished, _ = await after_results(coven, sid)

    [started] = coven.of(sid, "forkStarted")
    loop = started["children"][0]["sessionId"]
    assert result_of(finished, LOOP)["limit"] == "childSeconds"
    assert result_of(finished, QUICK)["ok"] is True
    # From its start (status `starting`, once it had a slot) to its stop: the limit, within a
    # second (events carry the server's clock).
    began = next(e for e in coven.of(loop, "status") if e["status"] == "starting")
    ended = coven.of(loop, "status")[-1]
    assert ended["status"] == "cancelled"
    took = _seconds(ended["time"]) - _seconds(began["time"])
    assert 4.0 <= took < 5.0, took
    assert requests_of(model, LOOP)  # it did work until then (how much depends on the load)
    await no_cli_left(coven, loop)


async def test_a_fork_is_stopped_by_its_cost_limit(coven_factory, model: ScriptedModel) -> None:
    coven = await coven_factory()
    # A model coven-ls prices: each call's cost counts as soon as it is made.
    heavy = Usage(input_tokens=100_000, output_tokens=0)
    per_call = 100_000 * MODELS["claude-sonnet-4-5"].input / 1_000_000
    needed = math.ceil(1.0 / per_call)  # the calls of both children that reach $1
    loop_forever(model, LOOP, heavy)
    loop_forever(model, "Keep testing", heavy)
    model.on("<fork-results>", "Over budget; going on.", usage=Usage(10, 5))

    sid = await fork_in(
        coven,
        [LOOP, "Keep testing"],
        limits={"forkCostUsd": 1.0},
        session={"model": "claude-sonnet-4-5"},
    )
    finished, turn = await after_results(coven, sid)

    assert [(r["stopped"], r["limit"]) for r in finished["results"]] == [
        ("limit", "forkCostUsd"),
        ("limit", "forkCostUsd"),
    ]
    # Stopped once the two children together had spent $1, not much later (the other child's
    # call under way at that moment may still be made).
    calls = len(requests_of(model, LOOP)) + len(requests_of(model, "Keep testing"))
    assert needed <= calls <= needed + 2, calls
    assert turn["text"] == "Over budget; going on."
    for child in coven.of(sid, "forkStarted")[0]["children"]:
        assert coven.of(child["sessionId"], "status")[-1]["status"] == "cancelled"
        await no_cli_left(coven, child["sessionId"])


async def test_a_cancelled_child_that_keeps_calling_tools_stops_at_once(
    coven: Coven, model: ScriptedModel
) -> None:
    # A user's cancel ends the child's CLI as a limit does: at once. Closed normally, the CLI
    # goes on calling the model for seconds (once 170 more calls). Each call takes a while, so
    # the cancel comes while one is under way, and no other can have been sent meanwhile.
    loop_forever(model, LOOP, Usage(10, 5), latency=1.5)
    model.on(assigned(QUICK), "Hello.", usage=Usage(10, 5))
    model.on("<fork-results>", "Going on without the polish.", usage=Usage(10, 5))

    sid = await fork_in(coven, [LOOP, QUICK])
    started = await coven.wait_kind(sid, "forkStarted")
    loop = started["children"][0]["sessionId"]
    await wait_until(lambda: len(requests_of(model, LOOP)) >= 2, 60, "the looper's second call")
    asked = len(requests_of(model, LOOP))  # its call under way: answered only in 1.5 s
    await coven.request("coven/cancel", {"sessionId": loop})

    finished, turn = await after_results(coven, sid)
    cancelled = result_of(finished, LOOP)
    assert (cancelled["ok"], cancelled["error"]) == (False, "cancelled by the user")
    assert result_of(finished, QUICK)["ok"] is True
    assert turn["text"] == "Going on without the polish."
    await no_cli_left(coven, loop)
    # The parent's whole next turn has passed since: time enough for a CLI left running.
    assert len(requests_of(model, LOOP)) == asked
    assert coven.of(loop, "status")[-1]["status"] == "cancelled"


async def test_bad_limits_are_refused(coven: Coven, model: ScriptedModel) -> None:
    model.on(PLAN, "Ready.", usage=Usage(10, 5))
    sid = await coven.start(PLAN)
    await coven.wait_status(sid, "idle")
    cases = [
        ({"childTokens": -1}, "'limits.childTokens' must be at least 0 (got -1)"),
        ({"forkCostUsd": "lots"}, "'limits.forkCostUsd' must be a number (got a string)"),
    ]
    for limits, text in cases:
        with pytest.raises(JsonRpcException) as caught:
            await coven.request("coven/fork", {"sessionId": sid, "tasks": ["a"], "limits": limits})
        assert caught.value.code == -32602 and text in caught.value.message
    assert not coven.of(sid, "forkStarted")


def _seconds(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


async def test_a_forks_limits_survive_a_restart_and_hold_when_it_is_resumed(
    coven_factory, model: ScriptedModel
) -> None:
    # The first run of each child hangs until the server stops; once resumed, the looper loops.
    model.on(assigned(LOOP), "(never)", latency=300, times=1)
    model.on(assigned(QUICK), "(never)", latency=300, times=1)
    loop_forever(model, LOOP, Usage(input_tokens=1000, output_tokens=500))
    model.on(assigned(QUICK), "Hello.", usage=Usage(10, 5))
    model.on("<fork-results>", "Going on after the restart.", usage=Usage(10, 5))
    first = await coven_factory(home="ws", init_options={"forkLimits": {"childTokens": 4000}})
    sid = await fork_in(first, [LOOP, QUICK])
    started = await first.wait_kind(sid, "forkStarted")
    for child in started["children"]:
        await first.wait_status(child["sessionId"], "running")
    await first.stop()

    # Restarted by a client that sets no limits: the fork's own were stored with it.
    second = await coven_factory(home="ws")
    interrupted = await second.wait_kind(sid, "forkInterrupted")
    await second.request("coven/resumeFork", {"forkId": interrupted["forkId"]})
    finished, turn = await after_results(second, sid)

    stopped = result_of(finished, LOOP)
    assert (stopped["stopped"], stopped["limit"]) == ("limit", "childTokens")
    assert result_of(finished, QUICK)["ok"] is True
    assert turn["text"] == "Going on after the restart."
    await no_cli_left(second, started["children"][0]["sessionId"])
