"""`coven/branch` through a real LSP client and the real CLI against the scripted model: the
branch's first model request holds its parent's conversation, and the parent never hears of it."""

from __future__ import annotations

import pytest
from pygls.exceptions import JsonRpcException

from coven_ls.testing.scripted_model import ScriptedModel, reply

from ..harness import Coven


def saw(words: list[str]) -> object:
    """A reply naming which of `words` the request's whole conversation holds."""
    return lambda r: reply(" ".join(f"saw-{w}={w in r.all_text}" for w in words))


async def two_turns(coven: Coven, model: ScriptedModel) -> tuple[str, dict]:
    """A session that answered zebra, then quokka; its id and the first answer's text event."""
    model.on("first question", "The first answer is zebra.")
    model.on("second question", "The second answer is quokka.")
    sid = await coven.start("A first question")
    await coven.wait_kind(sid, "turnResult")
    await coven.request("coven/sendMessage", {"sessionId": sid, "text": "A second question"})
    second = await coven.wait_kind(sid, "turnResult", count=2)
    await coven.wait_status(sid, "idle", after_seq=second["seq"])  # its last event
    early = next(e for e in coven.of(sid, "text") if e["text"] == "The first answer is zebra.")
    return sid, early


async def test_a_branch_with_a_prompt_holds_the_whole_conversation(
    coven: Coven, model: ScriptedModel
) -> None:
    model.on("Branch question", saw(["zebra", "quokka"]))
    model.on("third question", saw(["Branch"]))
    sid, _early = await two_turns(coven, model)
    parent_events = len(coven.of(sid))

    branched = await coven.request("coven/branch", {"sessionId": sid, "prompt": "Branch question"})
    bid = branched["sessionId"]
    result = await coven.wait_kind(bid, "turnResult")
    assert result["isError"] is False
    [asked] = [r for r in model.requests if r.last_user_text == "Branch question"]
    assert "saw-zebra=True saw-quokka=True" in coven.of(bid, "text")[-1]["text"]
    assert "The second answer is quokka." in asked.all_text

    sessions = {
        s["sessionId"]: s for s in (await coven.request("coven/listSessions", {}))["sessions"]
    }
    branch, parent = sessions[bid], sessions[sid]
    assert (branch["parentId"], branch["forkId"], branch["label"]) == (sid, None, None)
    assert branch["branchedFrom"] == {"atMessageId": None} and parent["branchedFrom"] is None
    assert branch["cwd"] == parent["cwd"] and branch["worktree"] is None
    assert branch["title"] == "Branch question"
    assert branch["agentSessionId"] not in (None, parent["agentSessionId"])
    # The parent heard nothing: no event since, and its next turn knows nothing of the branch.
    assert len(coven.of(sid)) == parent_events and parent["status"] == "idle"
    await coven.request("coven/sendMessage", {"sessionId": sid, "text": "A third question"})
    await coven.wait_kind(sid, "turnResult", count=3)
    assert coven.of(sid, "text")[-1]["text"] == "saw-Branch=False"
    assert not [e for e in coven.of(sid) if e["kind"].startswith("fork")]


async def test_a_branch_at_an_earlier_message_waits_for_its_first_message(
    coven: Coven, model: ScriptedModel
) -> None:
    model.on("Early branch", saw(["zebra", "quokka"]))
    sid, early = await two_turns(coven, model)
    requests_before = len(model.requests)

    branched = await coven.request(
        "coven/branch", {"sessionId": sid, "atMessageId": early["messageId"]}
    )
    bid = branched["sessionId"]
    await coven.wait_status(bid, "idle")
    assert len(model.requests) == requests_before  # nothing runs until it is sent a message
    await coven.request("coven/sendMessage", {"sessionId": bid, "text": "Early branch"})
    await coven.wait_kind(bid, "turnResult")
    # Branched at the first answer: the branch knows zebra, not the second exchange.
    assert coven.of(bid, "text")[-1]["text"] == "saw-zebra=True saw-quokka=False"
    [info] = [
        s
        for s in (await coven.request("coven/listSessions", {}))["sessions"]
        if s["sessionId"] == bid
    ]
    assert info["branchedFrom"] == {"atMessageId": early["messageId"]}
    assert info["title"] == "A first question"


async def test_branch_errors(coven: Coven, model: ScriptedModel) -> None:
    model.on("hello", "hi")
    sid = await coven.start("hello")
    await coven.wait_status(sid, "idle")
    cases = [
        ({"sessionId": sid, "prompt": "  "}, -32602, "'prompt' must not be empty"),
        ({"sessionId": sid, "atMessageId": "nope"}, -32602, "not an assistant"),
        ({"sessionId": "s-missing"}, -32001, "s-missing"),
        ({"sessionId": sid, "prompt": 7}, -32602, "prompt"),
    ]
    for params, code, text in cases:
        with pytest.raises(JsonRpcException) as caught:
            await coven.request("coven/branch", params)
        assert caught.value.code == code and text in caught.value.message
