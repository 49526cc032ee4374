"""Forking end to end: real LSP client -> coven-ls -> real `claude` CLIs -> scripted model.

The scripted model never prompts a syntax: the parent "decides" to fork by answering with a
`<fork>` tag, as the system prompt coven-ls appends teaches it to.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import pytest
from pygls.exceptions import JsonRpcException

from coven_ls.testing.scripted_model import HttpError, ModelRequest, Reply, ScriptedModel, reply

from ..harness import Coven, FaultRecord, wait_until

PLAN = "Plan the release"
FORK_TWO = 'I will split this.\n<fork>\n- Write the docs\n- Fix <bugs> & "tests"\n</fork>'


def assigned(label: str) -> str:
    return f"You were assigned '{label}'"


def results_turn(model: ScriptedModel) -> ModelRequest:
    [request] = [r for r in model.requests if "<fork-results>" in r.last_user_text]
    return request


def child_requests(model: ScriptedModel) -> list[ModelRequest]:
    return [r for r in model.requests if "You were assigned" in r.last_user_text]


async def fork_events(coven: Coven, sid: str, kind: str) -> list[dict[str, Any]]:
    return coven.of(sid, kind)


async def wait_reintegrated(coven: Coven, sid: str) -> dict[str, Any]:
    """The parent's turn that read the fork results."""
    prompt = await coven.wait_kind(sid, "prompt", origin="forkResults")
    return await coven.wait_for(
        lambda e: e["sessionId"] == sid and e["kind"] == "turnResult" and e["seq"] > prompt["seq"],
        what="the parent's turn after the fork",
    )


async def test_model_fork_runs_children_in_parallel_and_reintegrates(
    coven_factory, model: ScriptedModel
) -> None:
    coven = await coven_factory(init_options={"forkMode": "auto"})
    model.on(PLAN, FORK_TWO)
    model.on(assigned("Write the docs"), "Docs are written.", latency=1.5)
    model.on(assigned('Fix <bugs> & "tests"'), "Bugs are fixed.", latency=1.5)
    model.on("<fork-results>", "Both parts are done; release is ready.")

    sid = await coven.start(PLAN)
    after = await wait_reintegrated(coven, sid)

    assert after["text"] == "Both parts are done; release is ready."
    [started] = coven.of(sid, "forkStarted")
    assert started["source"] == "model"
    labels = [c["label"] for c in started["children"]]
    assert labels == ["Write the docs", 'Fix <bugs> & "tests"']
    [finished] = coven.of(sid, "forkFinished")
    assert finished["forkId"] == started["forkId"]
    assert [(r["label"], r["ok"]) for r in finished["results"]] == [
        (label, True) for label in labels
    ]

    # The children ran at the same time: each one's model call was under way while the other's was.
    first, second = child_requests(model)
    assert max(first.time, second.time) < min(first.finished, second.finished)
    # Each child resumed the parent's whole conversation, fork tag included.
    for request in (first, second):
        assert PLAN in request.all_text and "I will split this." in request.all_text
    # The parent got every child's final text, labels escaped, in one message.
    message = results_turn(model).last_user_text
    assert '<task label="Write the docs">\nDocs are written.\n</task>' in message
    assert '<task label="Fix &lt;bugs&gt; &amp; &quot;tests&quot;">\nBugs are fixed.\n</task>' in (
        message
    )
    # The parent's own conversation continued: it saw its earlier turn too.
    assert PLAN in results_turn(model).all_text

    sessions = (await coven.request("coven/listSessions", {}))["sessions"]
    children = [s for s in sessions if s["parentId"] == sid]
    assert [(c["label"], c["forkId"], c["status"]) for c in children] == [
        (label, started["forkId"], "idle") for label in labels
    ]
    assert len({c["agentSessionId"] for c in children} | {sessions[0]["agentSessionId"]}) == 3
    # The store sends events as it commits them: the idle after the result may come a burst later.
    await coven.wait_status(sid, "idle", after_seq=after["seq"])
    statuses = [e["status"] for e in coven.of(sid, "status")]
    assert "forking" in statuses and statuses[-1] == "idle"
    child_id = started["children"][0]["sessionId"]
    brief = coven.of(child_id, "prompt")[0]
    assert brief["origin"] == "fork"
    # The seeds' first line, then the sibling's task and the rule to keep to its own.
    first, *rest = brief["text"].split("\n")
    assert first == assigned("Write the docs")
    assert '- Fix <bugs> & "tests"' in rest and "Do only your own task" in "\n".join(rest)
    # And that is what the child's model was told.
    [request] = [r for r in child_requests(model) if first in r.last_user_text]
    assert '- Fix <bugs> & "tests"' in request.last_user_text


async def test_three_children_share_the_limit(coven_factory, model: ScriptedModel) -> None:
    coven = await coven_factory(init_options={"forkMode": "auto", "maxParallel": 2})
    model.on(PLAN, "Three parts.\n<fork>\n- Part one\n- Part two\n- Part three\n</fork>")
    # The first two children to reach the model are answered only once both are there: they
    # ran at once however slowly the machine starts their CLIs (a fixed latency was a race).
    # The wait gives up after a while, so that children run one at a time fail the overlap
    # check below instead of hanging.
    arrived: list[str] = []
    lock = threading.Lock()
    two_at_once = threading.Event()

    def part(n: str) -> Callable[[ModelRequest], Reply]:
        def answer(_request: ModelRequest) -> Reply:
            with lock:
                arrived.append(n)
                if len(arrived) == 2:
                    two_at_once.set()
            two_at_once.wait(120)
            return reply(f"Part {n} done.", latency=1.0)

        return answer

    for n in ("one", "two", "three"):
        model.on(assigned(f"Part {n}"), part(n))
    model.on("<fork-results>", "All three done.")

    sid = await coven.start(PLAN)
    await wait_reintegrated(coven, sid)

    requests = sorted(child_requests(model), key=lambda r: r.time)
    assert len(requests) == 3
    # Never more than two children talking to the model at once; the third waited, queued.
    for request in requests:
        in_flight = [r for r in requests if r.time <= request.time < r.finished]
        assert len(in_flight) <= 2
    assert requests[0].time < requests[1].finished and requests[1].time < requests[0].finished
    [started] = coven.of(sid, "forkStarted")
    queued = [
        c["sessionId"]
        for c in started["children"]
        if coven.of(c["sessionId"], "status")[0]["status"] == "queued"
    ]
    assert len(queued) == 3  # every child starts out queued until it has a slot
    message = results_turn(model).last_user_text
    assert all(f"Part {n} done." in message for n in ("one", "two", "three"))
    # A child that is done gives its slot back with its CLI process: memory stays bounded by
    # maxParallel, not by the number of tasks.
    for child in started["children"]:
        agent = (await coven.wait_kind(child["sessionId"], "agent"))["agentSessionId"]
        await wait_until(lambda a=agent: not coven.pids_running(a), 30, f"{agent} to stop")


async def test_two_forking_parents_share_one_limit(coven_factory, model: ScriptedModel) -> None:
    """maxParallel is the server's: two parents forking at once get two slots between them, and
    a child that waits is told its place in the line."""
    coven = await coven_factory(init_options={"forkMode": "auto", "maxParallel": 2})
    for plan, task in (("Plan A", "Alpha"), ("Plan B", "Beta")):
        model.on(plan, f"Two parts.\n<fork>\n- {task} one\n- {task} two\n</fork>")
        for part in ("one", "two"):
            model.on(assigned(f"{task} {part}"), f"{task} {part} done.", latency=1.0)
    model.on("<fork-results>", "Both parts done.")

    first = await coven.start("Plan A")
    second = await coven.start("Plan B")
    await wait_reintegrated(coven, first)
    await wait_reintegrated(coven, second)

    requests = sorted(child_requests(model), key=lambda r: r.time)
    assert len(requests) == 4
    for request in requests:  # never more than two children at the model, over both forks
        in_flight = [r for r in requests if r.time <= request.time < r.finished]
        assert len(in_flight) <= 2
    positions = [
        e
        for sid in (first, second)
        for started in coven.of(sid, "forkStarted")
        for child in started["children"]
        for e in coven.of(child["sessionId"], "queuePosition")
    ]
    assert positions and {e["position"] for e in positions} <= {1, 2}


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ("Forking.\n<fork>\n- [unclosed\n</fork>", "not valid YAML"),
        ("Forking.\n<fork>\nfix: the bug\n</fork>", "YAML mapping"),
        ("Forking.\n<fork>\n- 42\n- real task\n</fork>", "Task 1 is a number"),
        ("Forking.\n<fork>\n" + "".join(f"- task {i}\n" for i in range(9)) + "</fork>", "limit"),
    ],
)
async def test_a_bad_fork_tag_gets_a_follow_up_and_no_children(
    coven_factory, model: ScriptedModel, answer: str, problem: str
) -> None:
    coven = await coven_factory(init_options={"forkMode": "auto"})
    model.on(PLAN, answer, times=1)
    model.on("was not used", "Understood, no fork then.")

    sid = await coven.start(PLAN)
    follow_up = await coven.wait_kind(sid, "prompt", origin="forkError")
    await coven.wait_kind(sid, "turnResult", count=2)

    [error] = coven.of(sid, "forkError")
    assert problem in error["message"]
    assert problem in follow_up["text"] and "nothing was forked" in follow_up["text"]
    assert coven.of(sid, "forkStarted") == []
    assert child_requests(model) == []
    sessions = (await coven.request("coven/listSessions", {}))["sessions"]
    assert [s["sessionId"] for s in sessions] == [sid]


async def test_a_tag_in_a_code_block_is_not_a_fork(coven_factory, model: ScriptedModel) -> None:
    coven = await coven_factory(init_options={"forkMode": "auto"})
    model.on(PLAN, "Here is the syntax:\n```\n<fork>\n- a\n- b\n</fork>\n```\nThat is all.")
    sid = await coven.start(PLAN)
    await coven.wait_status(sid, "idle")
    assert coven.of(sid, "forkStarted") == [] and coven.of(sid, "forkError") == []


async def test_approve_with_edits(coven: Coven, model: ScriptedModel) -> None:
    model.on(PLAN, FORK_TWO)
    model.on(assigned("Only the docs"), "Docs only, done.")
    model.on("<fork-results>", "Merged the docs.")

    sid = await coven.start(PLAN)
    proposed = await coven.wait_kind(sid, "forkProposed")
    assert proposed["tasks"] == ["Write the docs", 'Fix <bugs> & "tests"']
    await coven.wait_status(sid, "awaitingApproval")
    assert child_requests(model) == []
    await coven.request(
        "coven/decideFork",
        {"forkId": proposed["forkId"], "approve": True, "tasks": ["Only the docs"]},
    )
    await wait_reintegrated(coven, sid)

    [started] = coven.of(sid, "forkStarted")
    assert started["forkId"] == proposed["forkId"]
    assert [c["label"] for c in started["children"]] == ["Only the docs"]
    assert "Docs only, done." in results_turn(model).last_user_text
    with pytest.raises(JsonRpcException) as decided_twice:
        await coven.request("coven/decideFork", {"forkId": proposed["forkId"], "approve": False})
    assert decided_twice.value.code == -32003


async def test_reject_tells_the_model(coven: Coven, model: ScriptedModel) -> None:
    model.on(PLAN, FORK_TWO)
    model.on("declined your proposed fork", "Fine, I will do it alone.")

    sid = await coven.start(PLAN)
    proposed = await coven.wait_kind(sid, "forkProposed")
    await coven.request(
        "coven/decideFork",
        {"forkId": proposed["forkId"], "approve": False, "reason": "Too risky today."},
    )
    follow_up = await coven.wait_kind(sid, "prompt", origin="forkRejected")
    result = await coven.wait_kind(sid, "turnResult", count=2)

    assert "Too risky today." in follow_up["text"]
    assert result["text"] == "Fine, I will do it alone."
    [rejected] = coven.of(sid, "forkRejected")
    assert rejected == {**rejected, "forkId": proposed["forkId"], "reason": "Too risky today."}
    assert coven.of(sid, "forkStarted") == [] and child_requests(model) == []


async def test_approval_falls_back_to_show_message_request(
    coven_factory, model: ScriptedModel
) -> None:
    coven = await coven_factory(custom_forks=False)
    coven.message_answer = lambda request: "Approve fork"
    model.on(PLAN, FORK_TWO)
    model.on(assigned("Write the docs"), "Docs are written.")
    model.on(assigned('Fix <bugs> & "tests"'), "Bugs are fixed.")
    model.on("<fork-results>", "Done.")

    sid = await coven.start(PLAN)
    await wait_reintegrated(coven, sid)

    [asked] = coven.message_requests
    assert asked["actions"] == ["Approve fork", "Reject"]
    assert "Write the docs" in asked["message"] and "2 parallel tasks" in asked["message"]


async def test_manual_fork_and_fork_at_an_earlier_message(
    coven: Coven, model: ScriptedModel
) -> None:
    model.on("first question", "The first answer is zebra.")
    model.on("second question", "The second answer is quokka.")
    model.on(assigned("Check it"), lambda r: Reply((f"saw-quokka={'quokka' in r.all_text}",)))
    model.on(assigned("Check early"), lambda r: Reply((f"saw-quokka={'quokka' in r.all_text}",)))
    model.on("<fork-results>", "Noted the checks.")

    sid = await coven.start("A first question")
    first = await coven.wait_kind(sid, "turnResult")
    await coven.request("coven/sendMessage", {"sessionId": sid, "text": "A second question"})
    await coven.wait_kind(sid, "turnResult", count=2)
    early = next(e for e in coven.of(sid, "text") if e["text"] == "The first answer is zebra.")
    assert early["seq"] < first["seq"]

    forked = await coven.request("coven/fork", {"sessionId": sid, "tasks": ["Check it"]})
    await wait_reintegrated(coven, sid)
    [started] = coven.of(sid, "forkStarted")
    assert started["forkId"] == forked["forkId"] and started["source"] == "user"
    assert "saw-quokka=True" in results_turn(model).last_user_text

    await coven.request(
        "coven/fork",
        {"sessionId": sid, "tasks": ["Check early"], "atMessageId": early["messageId"]},
    )
    await coven.wait_for(
        lambda e: (
            e["sessionId"] == sid
            and e["kind"] == "forkFinished"
            and e["forkId"] != forked["forkId"]
        ),
        what="the second fork to finish",
    )
    # Forked from the first answer, the child never saw the second exchange.
    [early_child] = [r for r in child_requests(model) if "Check early" in r.last_user_text]
    assert "The first answer is zebra." in early_child.all_text
    assert "quokka" not in early_child.all_text


async def test_manual_fork_errors(coven: Coven, model: ScriptedModel) -> None:
    model.on("hello", "hi")
    sid = await coven.start("hello")
    await coven.wait_status(sid, "idle")
    cases = [
        ({"sessionId": sid, "tasks": []}, -32602, "empty"),
        ({"sessionId": sid, "tasks": [7]}, -32602, "'tasks[0]' must be a string"),
        ({"sessionId": sid, "tasks": ["x"], "atMessageId": "nope"}, -32602, "not an assistant"),
        ({"sessionId": "s-missing", "tasks": ["x"]}, -32001, "s-missing"),
    ]
    for params, code, text in cases:
        with pytest.raises(JsonRpcException) as caught:
            await coven.request("coven/fork", params)
        assert caught.value.code == code and text in caught.value.message
    with pytest.raises(JsonRpcException) as caught:
        await coven.request("coven/decideFork", {"forkId": "f-missing", "approve": True})
    assert caught.value.code == -32004


async def test_failed_children_are_reported(coven_factory, model: ScriptedModel) -> None:
    coven = await coven_factory(init_options={"forkMode": "auto"})
    model.on(PLAN, FORK_TWO, times=1)
    model.on(assigned("Write the docs"), "Docs are written.")
    model.on(
        assigned('Fix <bugs> & "tests"'),
        Reply(error=HttpError(500, "model overloaded", should_retry=False)),
    )
    model.on("<fork-results>", "One part failed; retrying it.", times=1)

    sid = await coven.start(PLAN)
    await wait_reintegrated(coven, sid)

    [finished] = coven.of(sid, "forkFinished")
    assert [r["ok"] for r in finished["results"]] == [True, False]
    assert "model overloaded" in finished["results"][1]["error"]
    message = results_turn(model).last_user_text
    assert "Docs are written." in message
    assert 'label="Fix &lt;bugs&gt; &amp; &quot;tests&quot;" error="' in message
    assert "model overloaded" in message and "All 2 forks failed" not in message


async def test_all_children_failing_says_so(coven_factory, model: ScriptedModel) -> None:
    coven = await coven_factory(init_options={"forkMode": "auto"})
    model.on(PLAN, FORK_TWO, times=1)
    model.on("You were assigned", Reply(error=HttpError(500, "no capacity", should_retry=False)))
    model.on("<fork-results>", "Everything failed; I will take another approach.")

    sid = await coven.start(PLAN)
    after = await wait_reintegrated(coven, sid)

    assert after["text"] == "Everything failed; I will take another approach."
    message = results_turn(model).last_user_text
    assert message.startswith("All 2 forks failed")
    assert message.count('error="') == 2


async def test_cancel_one_child(coven_factory, model: ScriptedModel) -> None:
    coven = await coven_factory(init_options={"forkMode": "auto"})
    model.on(PLAN, FORK_TWO)
    model.on(assigned("Write the docs"), "Docs are written.", latency=2.0)
    model.on(assigned('Fix <bugs> & "tests"'), "Never finishes.", latency=300)
    model.on("<fork-results>", "Docs in, bugs left.")

    sid = await coven.start(PLAN)
    started = await coven.wait_kind(sid, "forkStarted")
    slow = started["children"][1]["sessionId"]
    model.wait_for_requests(1, timeout=60, predicate=lambda r: "Fix <bugs>" in r.last_user_text)
    await coven.request("coven/cancel", {"sessionId": slow})
    await coven.wait_status(slow, "cancelled")
    await wait_reintegrated(coven, sid)

    [finished] = coven.of(sid, "forkFinished")
    assert [(r["ok"], r.get("error")) for r in finished["results"]] == [
        (True, None),
        (False, "cancelled by the user"),
    ]
    message = results_turn(model).last_user_text
    assert "Docs are written." in message and 'error="cancelled by the user"' in message


async def test_cancel_the_whole_fork(coven_factory, model: ScriptedModel) -> None:
    # One slot: Fast runs, then Slow takes the slot and keeps it, and Queued waits behind Slow
    # until the cancel. (With two slots, Fast's slot went to Queued as soon as Fast was done,
    # and Queued reached the model whenever its CLI started before the cancel came.)
    coven = await coven_factory(init_options={"forkMode": "auto", "maxParallel": 1})
    model.on(PLAN, "Three.\n<fork>\n- Fast\n- Slow\n- Queued\n</fork>")
    model.on(assigned("Fast"), "Fast is done.")
    model.on(assigned("Slow"), "Never finishes.", latency=300)
    model.on(assigned("Queued"), "Never starts.")
    model.on("<fork-results>", "Stopped; only the fast part is in.")

    sid = await coven.start(PLAN)
    started = await coven.wait_kind(sid, "forkStarted")
    fast, slow, queued = (c["sessionId"] for c in started["children"])
    await coven.wait_status(fast, "idle")
    await asyncio.to_thread(
        model.wait_for_requests, 1, 60, lambda r: assigned("Slow") in r.last_user_text
    )
    slow_agent = (await coven.wait_kind(slow, "agent"))["agentSessionId"]
    assert coven.pids_running(slow_agent), "the slow child's CLI runs"
    assert coven.of(queued, "status")[-1]["status"] == "queued", "Queued waits for the slot"
    await coven.request("coven/cancel", {"sessionId": sid})
    after = await wait_reintegrated(coven, sid)

    assert after["text"] == "Stopped; only the fast part is in."
    [finished] = coven.of(sid, "forkFinished")
    assert [r["ok"] for r in finished["results"]] == [True, False, False]
    assert {r.get("error") for r in finished["results"][1:]} == {"cancelled by the user"}
    for child in (slow, queued):
        await coven.wait_status(child, "cancelled")
        assert coven.of(child, "status")[-1]["status"] == "cancelled"
    assert not any(assigned("Queued") in r.last_user_text for r in model.requests)
    assert not coven.pids_running(slow_agent), "the slow child's CLI is gone"


@pytest.mark.parametrize("max_depth", [1, 2])
async def test_a_childs_fork_obeys_max_depth(
    coven_factory, model: ScriptedModel, max_depth: int
) -> None:
    coven = await coven_factory(init_options={"forkMode": "auto", "maxDepth": max_depth})
    model.on(PLAN, "One part.\n<fork>\n- Outer\n</fork>")
    model.on(assigned("Outer"), "Outer splits.\n<fork>\n- Inner\n</fork>")
    model.on(assigned("Inner"), "Inner done.")
    model.on(
        lambda r: "<fork-results>" in r.last_user_text and "Inner done." in r.last_user_text,
        "Outer done with inner.",
    )
    model.on("<fork-results>", "All done.")

    sid = await coven.start(PLAN)
    await wait_reintegrated(coven, sid)

    outer = coven.of(sid, "forkStarted")[0]["children"][0]["sessionId"]
    message = results_turn_for_parent(model)
    if max_depth == 1:
        assert coven.of(outer, "forkStarted") == []
        assert "<fork>\n- Inner\n</fork>" in message  # left in the child's answer as written
        assert not any(assigned("Inner") in r.last_user_text for r in model.requests)
    else:
        [inner] = coven.of(outer, "forkStarted")
        inner_id = inner["children"][0]["sessionId"]
        sessions = {
            s["sessionId"]: s for s in (await coven.request("coven/listSessions", {}))["sessions"]
        }
        assert sessions[inner_id]["parentId"] == outer and sessions[outer]["parentId"] == sid
        assert "Outer done with inner." in message


def results_turn_for_parent(model: ScriptedModel) -> str:
    """The <fork-results> message the top-level parent got (the last one sent)."""
    return [r for r in model.requests if "<fork-results>" in r.last_user_text][-1].last_user_text


async def test_a_forks_tokens_add_up_to_its_tree(coven_factory, model: ScriptedModel) -> None:
    coven = await coven_factory(init_options={"forkMode": "auto"})
    model.on(PLAN, FORK_TWO)
    model.on(assigned("Write the docs"), "Docs are written.")
    model.on(assigned('Fix <bugs> & "tests"'), "Bugs are fixed.")
    model.on("<fork-results>", "Both done.")
    sid = await coven.start(PLAN)
    await wait_reintegrated(coven, sid)
    [finished] = coven.of(sid, "forkFinished")
    sessions = {
        s["sessionId"]: s for s in (await coven.request("coven/listSessions", {}))["sessions"]
    }
    children = [sessions[r["sessionId"]] for r in finished["results"]]
    keys = ("inputTokens", "outputTokens", "cacheReadTokens", "cacheCreationTokens")
    assert finished["usage"] == {k: sum(c["treeUsage"][k] for c in children) for k in keys}
    assert finished["usage"]["outputTokens"] > 0
    parent = sessions[sid]
    assert parent["treeUsage"] == {k: parent["usage"][k] + finished["usage"][k] for k in keys}


async def test_a_frozen_child_is_stopped_after_the_idle_limit_and_its_fork_ends(
    coven_factory, model: ScriptedModel, fault: FaultRecord
) -> None:
    """A child's CLI frozen with SIGSTOP mid-fork: after childIdleTimeoutSeconds it is stopped
    (no process is left), its task fails saying why, and the parent gets the others' results."""
    coven = await coven_factory(init_options={"forkMode": "auto", "childIdleTimeoutSeconds": 3})
    model.on(PLAN, FORK_TWO)
    model.on(assigned("Write the docs"), "Docs are written.")
    model.on(assigned('Fix <bugs> & "tests"'), "Bugs are fixed.", latency=60)
    model.on("<fork-results>", "One of two.")

    sid = await coven.start(PLAN)
    started = await coven.wait_kind(sid, "forkStarted")
    frozen_child = started["children"][1]["sessionId"]
    agent = await coven.wait_kind(frozen_child, "agent")
    [pid] = coven.pids_running(agent["agentSessionId"])
    os.kill(pid, signal.SIGSTOP)
    fault.inject()
    after = await wait_reintegrated(coven, sid)
    fault.recovered()
    kept = (await coven.request("coven/getEvents", {"sessionId": sid}))["events"]
    assert fault.lost(coven.of(sid), kept) == 0

    [finished] = coven.of(sid, "forkFinished")
    assert [r["ok"] for r in finished["results"]] == [True, False]
    assert "said nothing for 3 seconds" in finished["results"][1]["error"]
    assert after["text"] == "One of two."
    await wait_until(lambda: not coven.pids_running(agent["agentSessionId"]), 30, "the frozen CLI")
