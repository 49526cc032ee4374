"""Text streams: pieces of the model's answer reach the client as the model writes them
(`coven/delta`), through the real CLI, and the whole block follows as one stored event."""

from __future__ import annotations

from coven_ls.testing.scripted_model import ScriptedModel

from ..harness import Coven, wait_until

ANSWER = (
    "Streaming works: this answer arrives in small pieces, one after the other, the way the "
    "model writes it, long before the whole message is done."
)


async def test_text_streams_before_the_message_ends(coven: Coven, model: ScriptedModel) -> None:
    # ~30 pieces of 5 characters, 50 ms apart: a 1.5 s answer.
    model.on("Tell me a story", ANSWER, chunk_chars=5, chunk_delay=0.05)
    sid = await coven.start("Tell me a story")
    text = await coven.wait_kind(sid, "text")

    pieces = [d for d in coven.deltas if d["sessionId"] == sid]
    assert len(pieces) >= 20, pieces
    # They came before the whole block, spread out, and add up to it exactly.
    assert all(d["eventsBefore"] < coven.events.index(text) + 1 for d in pieces)
    assert "".join(d["text"] for d in pieces) == text["text"] == ANSWER
    assert {d["blockId"] for d in pieces} == {text["blockId"]}
    assert {d["kind"] for d in pieces} == {"text"}
    assert all(d["afterSeq"] < text["seq"] for d in pieces)
    # Deltas are not events: the stored log keeps one text event, with no gap in seq.
    stored = (await coven.request("coven/getEvents", {"sessionId": sid}))["events"]
    assert [e["seq"] for e in stored] == list(range(1, len(stored) + 1))
    assert [e["text"] for e in stored if e["kind"] == "text"] == [ANSWER]


async def test_a_client_that_comes_in_mid_message_gets_the_text_so_far(
    coven: Coven, model: ScriptedModel
) -> None:
    model.on("Tell me a story", ANSWER, chunk_chars=4, chunk_delay=0.1)
    sid = await coven.start("Tell me a story")
    await wait_until(
        lambda: sum(1 for d in coven.deltas if d["sessionId"] == sid) >= 5, 60, "five pieces"
    )
    fetched = await coven.request("coven/getEvents", {"sessionId": sid})
    (block,) = fetched["partial"]
    assert block["kind"] == "text" and ANSWER.startswith(block["text"])
    assert len(block["text"]) >= 5 * 4
    # What it fetched, then the pieces that come after, make the whole answer.
    text = await coven.wait_kind(sid, "text")
    assert text["blockId"] == block["blockId"]
    assert (await coven.request("coven/getEvents", {"sessionId": sid}))["partial"] == []
