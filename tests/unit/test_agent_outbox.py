"""The outbox between an in-process agent (Codex's threads, ACP connections) and its session."""

from __future__ import annotations

import logging

import anyio
import pytest

from coven_ls.core.agent import outbox
from coven_ls.core.agent.outbox import Outbox


async def test_events_come_out_in_order_and_the_reader_ends_when_it_is_closed() -> None:
    box = Outbox("test agent")
    for n in range(3):
        box.put(n)
    box.close()
    with anyio.fail_after(5):
        assert [item async for item in box] == [0, 1, 2]


async def test_an_event_after_close_is_dropped_quietly() -> None:
    box = Outbox("test agent")
    box.put("before")
    box.close()
    box.put("after")  # a killed session: nothing reads, nothing raises
    with anyio.fail_after(5):
        assert [item async for item in box] == ["before"]


async def test_a_session_that_stopped_reading_loses_events_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(outbox, "CAPACITY", 2)
    box = Outbox("codex thread T")
    with caplog.at_level(logging.WARNING, logger=outbox.__name__):
        for n in range(3):
            box.put(n)
    assert "codex thread T: the session is not reading; dropped 2" in caplog.text
    box.close()
    with anyio.fail_after(5):
        assert [item async for item in box] == [0, 1]


async def test_drained_waits_until_the_reader_took_what_was_queued() -> None:
    box = Outbox("test agent")
    taken: list[int] = []

    async def read() -> None:
        async for item in box:
            taken.append(item)

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        box.put(1)
        box.put(2)
        with anyio.fail_after(5):
            await box.drained()
        assert taken == [1, 2]
        box.close()
