"""The parts of `coven-ls chat`'s input line: the output printed above it (with the line still
streaming kept apart), the completion of commands and agents' names, and the history file."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document

from ..protocol.tokens import default_state_dir
from . import chat_commands as cmd
from .agents import Offer

HISTORY_FILE = "chat-history"


class ChatOutput:
    """The tree's output. Whole lines go to whatever sys.stdout is when written to:
    prompt_toolkit's proxy while the input line shows, so that they print above it. The line
    still being streamed (`coven/delta`) is kept apart and shown just above the input line, as
    part of its prompt (the proxy would hold it back until its newline, and a partial line above
    a prompt is drawn over), until its newline sends it up with the others."""

    def __init__(self) -> None:
        self.partial = ""
        self.on_partial: Callable[[], None] = lambda: None

    def write(self, text: str) -> int:
        done, newline, self.partial = (self.partial + text).rpartition("\n")
        if newline:
            sys.stdout.write(done + "\n")
            sys.stdout.flush()
        self.on_partial()
        return len(text)

    def flush(self) -> None:
        pass  # whole lines are flushed as they are written; the partial one waits for its end

    def isatty(self) -> bool:
        return False


class CommandCompleter(Completer):
    """Completes a command's name at the start of the line, and `/agent`'s name from the
    server's agents."""

    def __init__(self, agents: Callable[[], list[Offer] | None] = lambda: None) -> None:
        self._agents = agents

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterable[Completion]:
        typed = document.text_before_cursor
        if typed.startswith("/agent ") and " " not in (name := typed.removeprefix("/agent ")):
            for offer in self._agents() or []:
                if offer.name.startswith(name):
                    hints = ", ".join(offer.hints())
                    yield Completion(offer.name, -len(name), display_meta=hints or None)
            return
        if not typed.startswith("/") or " " in typed:
            return
        for command in cmd.COMMANDS:
            if command.startswith(typed):
                yield Completion(command, start_position=-len(typed))


def history_path() -> Path:
    """The input history, kept across runs, readable by its owner only, in the server's default
    state folder (`$XDG_STATE_HOME/coven-ls`)."""
    path = default_state_dir() / HISTORY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    os.close(os.open(path, os.O_CREAT | os.O_APPEND | os.O_WRONLY, 0o600))
    os.chmod(path, 0o600)  # a file made by an older run, or under another umask
    return path
