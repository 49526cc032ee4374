"""`coven-ls chat`: a fork child at work shows how long it has worked on its prompt and in
/tree, moving each second (the prompt is redrawn twice a second)."""

from __future__ import annotations

from typing import Any

import pytest

from coven_ls.term import chat_clock
from coven_ls.term.chat import Chat, ChatOptions

STARTED = "2026-11-27T22:00:00.000Z"
T0 = 1795816800.0  # STARTED in seconds since the epoch


def status(sid: str, value: str, time: str = STARTED) -> dict[str, Any]:
    return {"sessionId": sid, "seq": 2, "kind": "status", "time": time, "status": value}


def test_a_working_childs_clock_moves_each_second_and_stops_with_its_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chat = Chat(ChatOptions(cwd="/tmp"))
    base = {"parentId": "s-p", "title": "Loop", "branchedFrom": None, "createdAt": STARTED}
    chat.infos = {
        "s-p": {**base, "sessionId": "s-p", "parentId": None, "status": "forking"},
        "s-c": {**base, "sessionId": "s-c", "forkId": "f-1", "label": "Loop", "status": "queued"},
    }
    chat.current = "s-c"
    chat._take(status("s-c", "queued"))
    now = {"t": T0 + 30}
    monkeypatch.setattr(chat_clock.time, "time", lambda: now["t"])
    assert chat._prompt().startswith("(queued) ")  # no clock while it waits its turn
    chat._take(status("s-c", "running"))
    assert chat._prompt().startswith("(running 30s) ⑂ 1/1 Loop")
    now["t"] = T0 + 31
    assert chat._prompt().startswith("(running 31s) ")
    now["t"] = T0 + 65
    assert chat._prompt().startswith("(running 1m05s) ")
    chat._take(status("s-p", "running"))
    assert chat.clock.elapsed(chat.infos["s-p"]) == ""  # not a fork child
    chat._take(status("s-c", "idle", "2026-11-27T22:01:10.000Z"))
    assert chat._prompt().startswith("⑂ 1/1 Loop")
    assert chat.clock.elapsed(chat.infos["s-c"]) == ""
