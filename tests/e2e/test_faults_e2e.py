"""Faults around a running session, through the real CLI: the state dir's disk fills up or turns
read-only (a real tmpfs), the model's connection breaks mid-stream, the model stops sending.
Each test says what it measured (`fault`; bench/faults.py prints the table)."""

from __future__ import annotations

import subprocess
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from coven_ls.testing.scripted_model import HttpError, ScriptedModel

from ..harness import Coven, FaultRecord, wait_until


def mount(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *args], capture_output=True, text=True, check=False)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs of the test's own (root only: CI runs as root)."""
    folder = tmp_path / "small-disk"
    folder.mkdir()
    made = mount("-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(folder))
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({made.stderr.strip()}); CI runs as root")
    try:
        yield folder
    finally:
        mount("-o", "remount,rw", str(folder))
        subprocess.run(["umount", "-l", str(folder)], check=False)


def messages(coven: Coven) -> list[str]:
    return [m.message for m in coven.client.messages]


async def wait_message(coven: Coven, text: str) -> str:
    await wait_until(lambda: any(text in m for m in messages(coven)), 60, repr(text))
    return next(m for m in messages(coven) if text in m)


async def turn(coven: Coven, sid: str, text: str) -> dict[str, Any]:
    """Send `text` and wait for the answer to it."""
    before = len(coven.of(sid, "turnResult"))
    await coven.request("coven/sendMessage", {"sessionId": sid, "text": text})
    return await coven.wait_kind(sid, "turnResult", count=before + 1)


async def unsaved_then_saved(
    coven: Coven, model: ScriptedModel, fault: FaultRecord, break_it: Callable[[], None],
    mend_it: Callable[[], None], said: str,
) -> None:  # fmt: skip
    """A session that goes on while nothing can be saved, and is saved whole once it can be."""
    model.on("First", "One.")
    model.on("While broken", "Two, unsaved for now.")
    model.on("Mended", "Three, and saved.")
    sid = await coven.start("First")
    await coven.wait_kind(sid, "turnResult")

    break_it()
    fault.inject()
    answer = await turn(coven, sid, "While broken")
    assert answer["text"] == "Two, unsaved for now."  # the session kept running
    warning = await wait_message(coven, "cannot save its sessions")
    assert said in warning and "a restart now would lose it" in warning

    mend_it()
    answer = await turn(coven, sid, "Mended")
    assert answer["text"] == "Three, and saved."
    await wait_message(coven, "can save its sessions to")
    fault.recovered()
    seen = coven.of(sid)
    kept = (await coven.request("coven/getEvents", {"sessionId": sid}))["events"]
    assert fault.lost(seen, kept) == 0
    assert [e["seq"] for e in kept] == list(range(1, len(kept) + 1))


async def test_a_full_disk_is_said_and_nothing_is_lost_once_there_is_room(
    coven_factory: Callable[..., Awaitable[Coven]],
    model: ScriptedModel,
    small_disk: Path,
    fault: FaultRecord,
) -> None:
    coven = await coven_factory(init_options={"stateDir": str(small_disk)})
    ballast = small_disk / "ballast"

    def fill() -> None:
        # Whatever room is left, taken: dd stops at ENOSPC (and says so, which is expected).
        subprocess.run(
            ["dd", "if=/dev/zero", f"of={ballast}", "bs=64k"], capture_output=True, check=False
        )

    await unsaved_then_saved(coven, model, fault, fill, ballast.unlink, "full")


async def test_a_read_only_state_dir_is_said_and_sessions_run_unsaved(
    coven_factory: Callable[..., Awaitable[Coven]],
    model: ScriptedModel,
    small_disk: Path,
    fault: FaultRecord,
) -> None:
    """A state dir that is read-only from the start (a read-only home, a mount): the server
    starts, says that nothing will be saved and why, and sessions run. (A folder cannot be made
    read-only under a running server: remount refuses while its files are open for writing.)"""
    done = mount("-o", "remount,ro", str(small_disk))
    assert done.returncode == 0, done.stderr
    model.on("Hello", "Hi, unsaved.")
    fault.inject()
    coven = await coven_factory(init_options={"stateDir": str(small_disk)})
    sid = await coven.start("Hello")
    result = await coven.wait_kind(sid, "turnResult")
    fault.recovered()
    assert result["text"] == "Hi, unsaved."
    said = " ".join(messages(coven))
    assert str(small_disk) in said and "saved" in said, said


async def test_a_stream_broken_off_midway_is_retried_and_the_answer_whole(
    coven: Coven, model: ScriptedModel, fault: FaultRecord
) -> None:
    """The connection to the model reset mid-stream: the CLI retries, the user sees that it
    did, and the answer that ends the turn is the whole one."""
    model.on("Wobbly", "0123456789abcdef", chunk_chars=2, chunk_delay=0.05, drop_after=3, times=1)
    model.on("Wobbly", "The whole answer.")
    fault.inject()
    sid = await coven.start("Wobbly")
    retry = await coven.wait_kind(sid, "apiRetry")
    result = await coven.wait_kind(sid, "turnResult")
    fault.recovered()
    assert retry["seq"] < result["seq"]
    assert result["text"] == "The whole answer." and result["isError"] is False
    kept = (await coven.request("coven/getEvents", {"sessionId": sid}))["events"]
    assert fault.lost(coven.of(sid), kept) == 0


@pytest.mark.parametrize(
    "error",
    [HttpError(529, "Overloaded", "overloaded_error"), HttpError(500, "Internal", "api_error")],
    ids=["529", "500"],
)
async def test_an_error_mid_stream_is_asked_again_and_the_answer_whole(
    coven: Coven, model: ScriptedModel, fault: FaultRecord, error: HttpError
) -> None:
    """The model's stream ends in an `error` event after three pieces (an overload
    mid-answer): the CLI asks again without streaming; the pieces already shown are superseded
    (their block gets no event), the turn's answer is the whole one, and no error is reported."""
    model.on(
        "Shaky",
        "0123456789abcdef",
        chunk_chars=2,
        chunk_delay=0.05,
        error=error,
        error_after=3,
        times=1,
    )
    model.on("Shaky", "The whole answer.")
    fault.inject()
    sid = await coven.start("Shaky")
    result = await coven.wait_kind(sid, "turnResult")
    fault.recovered()
    assert result["text"] == "The whole answer." and result["isError"] is False
    cut = {d["blockId"] for d in coven.deltas if d["sessionId"] == sid}
    assert "".join(d["text"] for d in coven.deltas if d["blockId"] in cut).startswith("0123")
    [text] = coven.of(sid, "text")
    assert text["text"] == "The whole answer." and text.get("blockId") not in cut
    assert coven.of(sid, "error") == []
    kept = (await coven.request("coven/getEvents", {"sessionId": sid}))["events"]
    assert fault.lost(coven.of(sid), kept) == 0


async def test_a_model_that_stops_sending_can_be_cancelled_and_the_session_goes_on(
    coven: Coven, model: ScriptedModel, fault: FaultRecord
) -> None:
    """A model that stops mid-answer for minutes (the CLI waits that long itself): the user
    cancels, the process is not left hanging, and the next message is answered."""
    model.on("Stall", "Start of an answer that never", chunk_chars=10, chunk_delay=600, times=1)
    model.on("Again", "Answered this time.")
    sid = await coven.start("Stall")
    await wait_until(lambda: bool(coven.deltas), 90, "the first streamed piece")
    fault.inject()
    await coven.request("coven/cancel", {"sessionId": sid})
    cancelled = await coven.wait_kind(sid, "turnResult")
    assert cancelled["text"] != "Start of an answer that never ends."
    answer = await turn(coven, sid, "Again")
    fault.recovered()
    assert answer["text"] == "Answered this time."
    kept = (await coven.request("coven/getEvents", {"sessionId": sid}))["events"]
    assert fault.lost(coven.of(sid), kept) == 0
