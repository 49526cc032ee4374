"""A parent's conversation written out for a `"transcript"` fork child: the OpenCode plan's cuts
(thinking out, long tool results cut, oldest messages cut past the token limit) and the
preamble that says what was cut; and how each agent's conversation becomes entries."""

from __future__ import annotations

from coven_ls.agents.claude import conversation as claude_conversation
from coven_ls.agents.codex import conversation as codex_conversation
from coven_ls.core.agent import Entry
from coven_ls.core.fork import transcript
from coven_ls.core.fork.transcript import cut, estimate_tokens, render
from coven_ls.protocol import events
from coven_ls.protocol.describe import describe_payload

TASK = "You were assigned 'Write the docs'"


def test_a_long_tool_result_is_cut_to_1500_characters_and_marked() -> None:
    long = "x" * 5_000
    entries = [
        Entry("user", "run it"),
        Entry("toolCall", '{"command": "cat big"}', name="Bash"),
        Entry("toolResult", long),
        Entry("toolResult", "short"),
    ]
    kept, cuts = cut(entries)
    assert cuts.tool_results == 1 and cuts.oldest == 0
    [result] = [k for k in kept if "xxx" in k]
    assert result.count("x") == 1_500
    assert "[… cut: 3,500 more characters]" in result
    assert "<tool-result>\nshort\n</tool-result>" in kept
    assert '<tool-call name="Bash">' in kept[1]


def test_thinking_is_left_out_and_counted() -> None:
    text = render(
        [
            Entry("user", "plan it"),
            Entry("thinking", "SECRET-THOUGHT"),
            Entry("assistant", "the plan"),
        ],
        TASK,
    )
    assert "SECRET-THOUGHT" not in text
    assert "<user>\nplan it\n</user>" in text and "<assistant>\nthe plan\n</assistant>" in text
    assert "the assistant's thinking (1 blocks) is left out" in text


def test_the_oldest_messages_are_cut_past_the_token_limit() -> None:
    # 30 messages of about 5,000 tokens each: 150k tokens, so the oldest ones go.
    entries = [Entry("user", f"M{n:02d} " + "y" * 20_000) for n in range(30)]
    kept, cuts = cut(entries)
    assert cuts.oldest > 0 and cuts.tokens <= transcript.TOKEN_LIMIT
    assert len(kept) == 30 - cuts.oldest
    assert kept[-1].startswith("<user>\nM29 ")  # the newest stay
    assert all(f"M{n:02d} " not in "".join(kept) for n in range(cuts.oldest))
    text = render(entries, TASK)
    assert f"the oldest {cuts.oldest} of its messages are left out" in text
    assert estimate_tokens(text) < transcript.TOKEN_LIMIT + 1_000


def test_a_result_whose_call_was_cut_goes_with_it() -> None:
    entries = [
        Entry("toolCall", "z" * 8_000, name="Bash"),
        Entry("toolResult", "orphan"),
        Entry("user", "last"),
    ]
    kept, cuts = cut(entries, token_limit=100)
    assert kept == ["<user>\nlast\n</user>"] and cuts.oldest == 2


def test_the_preamble_says_nothing_was_cut_and_the_task_comes_last() -> None:
    text = render([Entry("user", "hello"), Entry("assistant", "hi")], TASK)
    assert text.startswith("You were forked from another session")
    assert "What was cut: nothing was cut." in text
    assert text.endswith("</conversation>\n\n" + TASK)


def test_claude_transcript_messages_become_entries() -> None:
    user = {
        "role": "user",
        "content": "hello<system-reminder>noise</system-reminder>",
    }
    assistant = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "hmm"},
            {"type": "text", "text": "let me look"},
            {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}},
        ],
    }
    result = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "t1",
                "content": [{"type": "text", "text": "a.txt"}],
                "is_error": True,
            }
        ],
    }
    entries = [
        *claude_conversation.entries_of("user", user),
        *claude_conversation.entries_of("assistant", assistant),
        *claude_conversation.entries_of("user", result),
    ]
    assert entries == [
        Entry("user", "hello"),
        Entry("thinking", "hmm"),
        Entry("assistant", "let me look"),
        Entry("toolCall", '{"command": "ls"}', name="Bash"),
        Entry("toolResult", "a.txt", error=True),
    ]


def test_codex_items_become_entries() -> None:
    items = [
        {"type": "userMessage", "id": "u", "content": [{"type": "text", "text": "hi"}]},
        {"type": "commandExecution", "command": "ls", "aggregatedOutput": "x\n", "exitCode": 2},
        {"type": "agentMessage", "id": "m", "text": "done"},
    ]
    entries = [e for item in items for e in codex_conversation.entries_of(item)]
    assert entries == [
        Entry("user", "hi"),
        Entry("toolCall", '{"command": "ls"}', name="Bash"),
        Entry("toolResult", "x\n", error=True),
        Entry("assistant", "done"),
    ]


def test_a_transcript_childs_prompt_is_described_by_its_assignment() -> None:
    text = render([Entry("user", "hello")], TASK + "\n\nYou are one of 2 forks")
    line = describe_payload(events.Prompt(text=text, origin="fork"))
    assert line == "› fork: You were assigned 'Write the docs'"


def test_one_message_over_the_limit_alone_is_cut_to_it() -> None:
    kept, cuts = cut([Entry("user", "old"), Entry("user", "w" * 2_000)], token_limit=100)
    assert cuts.oldest == 1 and cuts.tokens <= 110
    assert kept[0].startswith("<user>\nwww") and "more characters]" in kept[0]
