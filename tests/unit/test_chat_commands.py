"""The syntax of `coven-ls chat`'s lines: a follow-up, or a slash command."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from coven_ls.term.chat_commands import (
    COMMANDS,
    Agent,
    Approve,
    Branch,
    Cancel,
    CommandError,
    Fork,
    Message,
    Reject,
    Resume,
    Simple,
    Start,
    Switch,
    parse,
)
from coven_ls.term.chat_input import CommandCompleter, history_path


@pytest.mark.parametrize(
    ("line", "command"),
    [
        ("Fix the tests", Message("Fix the tests")),
        ("two\nlines pasted", Message("two\nlines pasted")),
        ("//etc/hosts is odd", Message("/etc/hosts is odd")),
        ('/fork "Try it with a generator"', Branch("Try it with a generator")),
        ("/fork 'single quotes'", Branch("single quotes")),
        ("/fork task one; task two", Fork(["task one", "task two"])),
        ("/fork just one task", Fork(["just one task"])),
        ("/switch 2", Switch("2")),
        ("/switch parent", Switch("parent")),
        ("/resume s-0123456789ab", Resume("s-0123456789ab")),
        ("/approve", Approve([])),
        ("/approve a; b", Approve(["a", "b"])),
        ("/approve --codex", Approve([], Start(agent="codex"))),
        ("/fork --fresh a; b", Fork(["a", "b"], Start(context="fresh"))),
        (
            "/fork --transcript --codex a",
            Fork(["a"], Start(context="transcript", agent="codex")),
        ),
        ("/reject", Reject(None)),
        ("/reject not now", Reject("not now")),
        ("/cancel", Cancel(None)),
        ("/cancel 3", Cancel("3")),
        ("/tree", Simple("/tree")),
        ("/new", Simple("/new")),
        ("/agent codex", Agent("codex")),
        ("/agent opencode", Agent("opencode")),
        ("/agent", Agent(None)),
        ("/fork --agent opencode a; b", Fork(["a", "b"], Start(agent="opencode"))),
        ("/approve --fresh --agent=codex-acp", Approve([], Start("fresh", "codex-acp"))),
        ("/fork --cluster a; b", Fork(["a", "b"], Start(placement="cluster"))),
        ("/approve --auto --codex", Approve([], Start(agent="codex", placement="auto"))),
        ("/quit", Simple("/quit")),
        ("   ", None),
    ],
)
def test_a_line_parses_to_its_command(line: str, command: object) -> None:
    assert parse(line) == command


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("/frok x", "no such command"),
        ("/fork", "Usage: /fork"),
        ('/fork "unclosed', "Usage: /fork"),
        ('/fork "a" "b"', "Usage: /fork"),
        ("/switch", "Usage: /switch"),
        ("/resume a b", "Usage: /resume"),
        ("/tree now", "takes nothing"),
        ("/agent gpt two", "Usage: /agent NAME, one name"),
        ("/fork --agent", "--agent takes the agent's name"),
        ("/fork --agent --fresh a", "--agent takes the agent's name"),
        ("/approve --codex --agent opencode", "--agent: not an option here"),
        ("/fork --fresh", "Usage: /fork"),
        ("/fork --fast a", "--fast: not an option here"),
        ("/approve --fresh --transcript", "--transcript: not an option here"),
        ("/fork --cluster --local a", "--local: not an option here"),
    ],
)
def test_a_command_typed_wrong_says_how_to_type_it(line: str, says: str) -> None:
    with pytest.raises(CommandError) as caught:
        parse(line)
    assert says in str(caught.value)


def test_help_lists_every_command() -> None:
    assert set(COMMANDS) == {
        "/fork", "/switch", "/tree", "/sessions", "/resume", "/approve", "/reject", "/cancel",
        "/review", "/new", "/agent", "/help", "/quit",
    }  # fmt: skip


def test_the_history_file_is_its_owners_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    old = tmp_path / "coven-ls" / "chat-history"
    old.parent.mkdir()
    old.write_text("from an older run\n")
    old.chmod(0o644)
    path = history_path()
    assert path == old and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == "from an older run\n"


@pytest.mark.parametrize(
    ("typed", "offered"),
    [("/s", ["/switch", "/sessions"]), ("/fork x", []), ("hello /s", []), ("/", list(COMMANDS))],
)
def test_commands_complete_at_the_start_of_the_line(typed: str, offered: list[str]) -> None:
    completions = CommandCompleter().get_completions(Document(typed), CompleteEvent())
    assert [c.text for c in completions] == offered


def test_a_forks_placement_goes_into_its_params() -> None:
    """`--cluster` (or `--auto`, `--local`) is coven/fork's `placement`; left out, the server's
    setting decides."""
    assert Start("fresh", None, "cluster").params() == {"context": "fresh", "placement": "cluster"}
    assert Start().params() == {}
