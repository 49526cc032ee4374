"""`coven-ls chat`: a line entered for a question that was about to appear (its Enter beat the
question to the input line) is not sent as a message: it stays typed until Enter again."""

from __future__ import annotations

import asyncio

from coven_ls.term import chat as chat_module
from coven_ls.term.chat import Chat, ChatOptions


def test_a_y_entered_just_before_its_question_came_is_kept() -> None:
    async def scenario() -> tuple[bool, float]:
        chat = Chat(ChatOptions(cwd="/tmp"))
        loop = asyncio.get_running_loop()
        started = loop.time()
        # The question comes a moment after the Enter (the permission request was on its way).
        asking = loop.call_later(0.1, lambda: asyncio.ensure_future(chat.ask("Allow Bash?", "yn")))
        kept = await chat._meant_for_a_question("y")
        asking.cancel()
        chat._stop()  # the question goes unanswered
        return kept, loop.time() - started

    kept, waited = asyncio.run(scenario())
    assert kept
    assert waited < chat_module.ANSWER_GRACE_SECONDS  # kept as soon as the question came


def test_a_line_entered_while_a_question_waits_is_kept_whatever_it_says() -> None:
    async def scenario() -> bool:
        chat = Chat(ChatOptions(cwd="/tmp"))
        asked = asyncio.ensure_future(chat.ask("Approve the fork?", "yne"))
        await asyncio.sleep(0)  # the question is queued, not yet on the input line
        kept = await chat._meant_for_a_question("please go on")
        chat._stop()
        await asked
        return kept

    assert asyncio.run(scenario())


def test_messages_and_a_lone_y_with_no_question_coming_are_sent() -> None:
    async def scenario() -> tuple[bool, bool, float]:
        chat = Chat(ChatOptions(cwd="/tmp"))
        loop = asyncio.get_running_loop()
        message = await chat._meant_for_a_question("yes, do that")
        started = loop.time()
        lone = await chat._meant_for_a_question(" Y ")
        return message, lone, loop.time() - started

    message, lone, waited = asyncio.run(scenario())
    assert not message and not lone
    assert waited >= chat_module.ANSWER_GRACE_SECONDS * 0.9  # it waited for a question first
