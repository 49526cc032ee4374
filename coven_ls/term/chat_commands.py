"""What a line typed into `coven-ls chat` asks for: a follow-up, or one of the slash commands.

Parsing only (no I/O), so that every command's syntax is tested on its own; `chat.py` acts on the
result."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

# Every command, with what `/help` says of it, in the order `/help` lists them.
COMMANDS: dict[str, str] = {
    "/fork": '"prompt": a branch with the whole conversation, switch to it, send it the prompt; '
    "[--fresh|--transcript] [--claude|--codex|--agent NAME] [--local|--cluster|--auto] task one; "
    "task two: fork those tasks (stay here), the children starting afresh or from the "
    "conversation written out, or of that agent, or running on the server's cluster (--cluster; "
    "--auto: maxParallel here, the rest there)",
    "/switch": "N|ID|parent|root: go to another session of the tree (N from /tree)",
    "/tree": "the current session's tree, numbered",
    "/sessions": "this workspace's sessions, from the store",
    "/resume": "ID: go to a stored session",
    "/approve": "[--fresh|--transcript] [--claude|--codex|--agent NAME] "
    "[--local|--cluster|--auto] [task; …]: approve the proposed fork (with these tasks instead, "
    "the children starting so, as in /fork)",
    "/reject": "[reason]: reject the proposed fork (the model is told why)",
    "/cancel": "[N]: cancel the running turn or fork (of session N from /tree)",
    "/review": "apply or discard the current fork's children's changes",
    "/new": "leave this session (it goes on) for a new one, started by your next message",
    "/agent": "NAME: the agent of the sessions started from now on (alone: the server's agents, "
    "and which it is)",
    "/help": "this list",
    "/quit": "leave (Ctrl+D too); the sessions stay in the store",
}


class CommandError(ValueError):
    """A command typed wrong; the message says how to type it."""


@dataclass(frozen=True)
class Message:
    text: str


@dataclass(frozen=True)
class Branch:
    prompt: str


@dataclass(frozen=True)
class Start:
    """How a fork's children start (coven/fork's `context` and `agent`) and where they run
    (`placement`): None, the defaults."""

    context: str | None = None
    agent: str | None = None
    placement: str | None = None

    def params(self) -> dict[str, str]:
        given = (("context", self.context), ("agent", self.agent), ("placement", self.placement))
        return {k: v for k, v in given if v}


@dataclass(frozen=True)
class Fork:
    tasks: list[str]
    start: Start = Start()


@dataclass(frozen=True)
class Switch:
    target: str  # a number from /tree, a session id, "parent" or "root"


@dataclass(frozen=True)
class Resume:
    session_id: str


@dataclass(frozen=True)
class Approve:
    tasks: list[str] = field(default_factory=list)  # empty: the tasks as proposed
    start: Start = Start()


@dataclass(frozen=True)
class Reject:
    reason: str | None = None


@dataclass(frozen=True)
class Cancel:
    target: str | None = None


@dataclass(frozen=True)
class Agent:
    name: str | None = None  # None: say which agent new sessions get


@dataclass(frozen=True)
class Simple:
    name: str  # "/tree", "/sessions", "/review", "/new", "/help", "/quit"


Command = Message | Branch | Fork | Switch | Resume | Approve | Reject | Cancel | Agent | Simple

_SIMPLE = ("/tree", "/sessions", "/review", "/new", "/help", "/quit")


def tasks_of(text: str) -> list[str]:
    return [t.strip() for t in text.split(";") if t.strip()]


_CONTEXTS = {"--inherit": "inherit", "--fresh": "fresh", "--transcript": "transcript"}
_AGENTS = {"--claude": "claude", "--codex": "codex"}
_PLACEMENTS = {"--local": "local", "--cluster": "cluster", "--auto": "auto"}


def start_of(text: str) -> tuple[Start, str]:
    """The leading `--fresh`/`--transcript`/`--inherit` and `--claude`/`--codex`/`--agent NAME`
    options of a /fork or /approve, and the rest (the tasks)."""
    context: str | None = None
    agent: str | None = None
    placement: str | None = None
    rest = text
    while rest.startswith("--"):
        word, _, rest = rest.partition(" ")
        rest = rest.lstrip()
        named = None
        if word == "--agent":
            named, _, rest = rest.partition(" ")
            rest = rest.lstrip()
        elif word.startswith("--agent="):
            named = word.removeprefix("--agent=")
        if named is not None and (not named or named.startswith("-")):
            raise CommandError("--agent takes the agent's name: --agent NAME (/agent lists them).")
        if word in _CONTEXTS and context is None:
            context = _CONTEXTS[word]
        elif word in _AGENTS and agent is None:
            agent = _AGENTS[word]
        elif named is not None and agent is None:
            agent = named
        elif word in _PLACEMENTS and placement is None:
            placement = _PLACEMENTS[word]
        else:
            raise CommandError(
                f"{word}: not an option here; use one of --fresh, --transcript, --inherit, "
                "one of --claude, --codex, --agent NAME and one of --local, --cluster, --auto, "
                "before the tasks."
            )
    return Start(context, agent, placement), rest


def parse(line: str) -> Command | None:
    """What `line` asks for; None for a blank line. Text that does not start with `/` (or starts
    with `//`, a message that begins with a slash) is a message."""
    if not line.strip():
        return None
    stripped = line.strip()
    if not stripped.startswith("/") or stripped.startswith("//"):
        return Message(line[1:] if stripped.startswith("//") else line)
    name, _, rest = stripped.partition(" ")
    rest = rest.strip()
    if name not in COMMANDS:
        raise CommandError(f"{name}: no such command; /help lists them.")
    if name in _SIMPLE:
        if rest:
            raise CommandError(f"{name} takes nothing after it.")
        return Simple(name)
    if name == "/fork":
        return _fork(rest)
    if name in ("/switch", "/resume"):
        if not rest or len(rest.split()) != 1:
            raise CommandError(f"Usage: {name} {COMMANDS[name].split(':')[0]}")
        return Switch(rest) if name == "/switch" else Resume(rest)
    if name == "/approve":
        start, rest = start_of(rest)
        return Approve(tasks_of(rest), start)
    if name == "/reject":
        return Reject(rest or None)
    if name == "/cancel":
        return Cancel(rest or None)
    if name == "/agent":
        # Which names there are is the server's to say (chat.py checks them against its list).
        if len(rest.split()) > 1:
            raise CommandError(f"Usage: /agent NAME, one name (not {rest!r}); /agent lists them.")
        return Agent(rest or None)
    raise AssertionError(name)  # pragma: no cover: every command is handled above


def _fork(rest: str) -> Command:
    usage = 'Usage: /fork "prompt" (a branch), or /fork task one; task two (a fork).'
    if not rest:
        raise CommandError(usage)
    if rest[0] in "\"'":
        try:
            words = shlex.split(rest)
        except ValueError as exc:
            raise CommandError(f"{usage} ({exc})") from None
        if len(words) != 1 or not words[0].strip():
            raise CommandError(usage)
        return Branch(words[0])
    start, rest = start_of(rest)
    tasks = tasks_of(rest)
    if not tasks:
        raise CommandError(usage)
    return Fork(tasks, start)
