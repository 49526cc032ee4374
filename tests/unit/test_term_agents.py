"""Which agents the terminal front ends offer: the server's list (either shape) read, an unknown
name refused with that list, `/agent` listing and switching, its name completed."""

from __future__ import annotations

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from coven_ls.term.agents import Offer, offers_of, unknown_agent
from coven_ls.term.chat import Chat, ChatOptions
from coven_ls.term.chat_input import CommandCompleter

NEW_SHAPE = {
    "protocolVersion": 2,
    "agents": [
        {"name": "claude", "kind": "claude", "fork": "inherit", "cost": True},
        {"name": "codex-acp", "kind": "acp", "fork": "transcript", "cost": False},
        {"name": "opencode", "kind": "acp", "fork": None, "cost": None},
    ],
}


def test_the_servers_list_of_agents_is_read_in_either_shape() -> None:
    assert offers_of(NEW_SHAPE) == [
        Offer("claude", "claude", "inherit", True),
        Offer("codex-acp", "acp", "transcript", False),
        Offer("opencode", "acp"),
    ]
    # Protocol version 1 lists names: the two coven-ls hosts itself are still told apart.
    assert offers_of({"agents": ["claude", "codex", "mine"]}) == [
        Offer("claude", "claude"),
        Offer("codex", "codex"),
        Offer("mine"),
    ]
    assert offers_of({"protocolVersion": 1}) is None and offers_of(None) is None
    assert offers_of({"agents": [3, {"kind": "acp"}, "ok"]}) == [Offer("ok")]


def test_each_agent_is_listed_with_what_sets_it_apart() -> None:
    lines = [o.line() for o in offers_of(NEW_SHAPE) or []]
    assert lines == [
        "claude (Claude Code)",
        "codex-acp (ACP, no fork: transcript children, reports no cost)",
        "opencode (ACP)",
    ]
    assert Offer("mine").line() == "mine"


def test_an_unknown_agent_is_refused_with_the_servers_agents_and_what_to_do() -> None:
    offers = offers_of(NEW_SHAPE)
    assert unknown_agent("codex-acp", offers) is None
    assert unknown_agent("anything", None) is None  # an older server: it says at startSession
    problem = unknown_agent("gpt", offers)
    assert problem is not None
    assert problem.startswith("Unknown agent 'gpt': this server offers claude (Claude Code), ")
    assert "opencode (ACP)" in problem and "initializationOptions.agents" in problem
    # A known ACP agent that is not installed where the server runs: how to install it.
    gemini = unknown_agent("gemini", offers)
    assert gemini is not None and "npm install -g @google/gemini-cli" in gemini
    assert "this server offers none" in (unknown_agent("claude", []) or "")


@pytest.fixture
def chat() -> Chat:
    said: list[str] = []
    chat = Chat(ChatOptions(cwd="/tmp"))
    chat.client.server_coven = NEW_SHAPE
    chat.say = said.append  # type: ignore[method-assign]
    chat.said = said  # type: ignore[attr-defined]
    return chat


def test_agent_alone_lists_the_servers_agents_and_marks_the_one_chosen(chat: Chat) -> None:
    chat._set_agent("codex-acp")
    chat.said.clear()  # type: ignore[attr-defined]
    chat._set_agent(None)
    assert chat.said == [  # type: ignore[attr-defined]
        "New sessions run on codex-acp.",
        "This server's agents (/agent NAME picks one):",
        "  claude (Claude Code)",
        "▶ codex-acp (ACP, no fork: transcript children, reports no cost)",
        "  opencode (ACP)",
    ]


def test_agent_switches_to_an_agent_of_the_server_and_refuses_another(chat: Chat) -> None:
    chat._set_agent("opencode")
    assert chat._agent == "opencode"
    assert chat.said == ["New sessions run on opencode."]  # type: ignore[attr-defined]
    chat._set_agent("gpt")
    assert chat._agent == "opencode", "an unknown name leaves the agent as it was"
    assert chat.said[-1].startswith("Unknown agent 'gpt': this server offers claude")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("typed", "offered"),
    [
        ("/agent ", ["claude", "codex-acp", "opencode"]),
        ("/agent c", ["claude", "codex-acp"]),
        ("/agent codex-acp x", []),
        ("/ag", ["/agent"]),
    ],
)
def test_agents_name_completes_from_the_servers_list(typed: str, offered: list[str]) -> None:
    completer = CommandCompleter(lambda: offers_of(NEW_SHAPE))
    completions = list(completer.get_completions(Document(typed), CompleteEvent()))
    assert [c.text for c in completions] == offered
    if typed == "/agent c":
        assert (
            completions[1].display_meta_text == "ACP, no fork: transcript children, reports no cost"
        )
