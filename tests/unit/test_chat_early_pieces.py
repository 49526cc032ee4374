"""`coven-ls chat`: the first streamed pieces of a new session can come before the chat knows
the session (startSession's and listSessions' answers are on their way): they wait with its
events, so the reply prints once, as it streamed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from coven_ls import protocol
from coven_ls.term.chat import Chat, ChatOptions

SID = "s-0a1b2c3d4e5f"
REPLY = "First line of the story.\nSecond line of the story.\nThe end."
TIME = "2026-11-27T22:00:00.000Z"


def piece(text: str) -> dict[str, Any]:
    return {"sessionId": SID, "afterSeq": 3, "blockId": "msg_1:0", "kind": "text", "text": text}


def test_pieces_before_the_session_is_known_print_once_with_the_rest(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def scenario() -> None:
        chat = Chat(ChatOptions(cwd="/tmp", agent="codex"))
        info = {
            "sessionId": SID,
            "parentId": None,
            "title": "hello codex",
            "status": "running",
            "branchedFrom": None,
            "createdAt": TIME,
        }

        async def request(method: str, params: dict[str, Any]) -> dict[str, Any]:
            if method == protocol.START_SESSION:
                chat._on_event(
                    {
                        "sessionId": SID,
                        "seq": 3,
                        "kind": "status",
                        "time": TIME,
                        "status": "running",
                    }
                )
                chat._on_delta(piece(REPLY[:9]))
                return {"sessionId": SID}
            assert method == protocol.LIST_SESSIONS
            chat._on_delta(piece(REPLY[9:30]))  # while listSessions' answer is on its way
            return {"sessions": [info]}

        chat.client.request = request  # type: ignore[method-assign]
        await chat._message("hello codex")
        assert chat.current == SID
        chat._on_delta(piece(REPLY[30:]))
        chat._on_event(
            {
                "sessionId": SID,
                "seq": 4,
                "kind": "text",
                "time": TIME,
                "text": REPLY,
                "messageId": "msg_1",
                "blockId": "msg_1:0",
            }
        )

    asyncio.run(scenario())
    printed = capsys.readouterr().out
    assert printed.count("First line of the story.") == 1, printed
    assert printed.count("Second line of the story.") == 1, printed
    assert "⏺ First line of the story.\n" in printed
    assert "▶ running" in printed  # the early event too, in order
    assert printed.index("▶ running") < printed.index("First line")
