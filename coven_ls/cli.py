"""The `coven-ls` command: serve LSP on stdio (the default) or TCP, or run the offline demo."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from typing import Any

import anyio

from . import __version__


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host or "127.0.0.1", int(port)


def version_line() -> str:
    """coven-ls's version and what it runs: the SDK, and the Claude Code CLI its wheel bundles
    (the one used unless another is configured)."""
    from .agents.claude import sdk_versions

    versions = sdk_versions()
    if versions is None:
        return f"coven-ls {__version__}"
    sdk, cli = versions
    return f"coven-ls {__version__} (claude-agent-sdk {sdk}, bundled Claude Code {cli})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="coven-ls",
        description=(
            "A language server that hosts coding-agent sessions (Claude Code, Codex) and forks "
            "them."
        ),
    )
    parser.add_argument("--version", action="version", version=version_line())
    parser.add_argument(
        "--tcp", type=_host_port, metavar="HOST:PORT", help="serve on a socket instead of stdio"
    )
    parser.add_argument(
        "--token-file",
        metavar="PATH",
        help=(
            "with --tcp: the token clients must send (initializationOptions.token), read from "
            "PATH (mode 0600). Default: $COVEN_TOKEN, else a new one, printed and written to a "
            "file of mode 0600"
        ),
    )
    # Language clients (vscode-languageclient's stdio transport, for one) append --stdio.
    parser.add_argument("--stdio", action="store_true", help="serve on stdio (the default)")
    parser.add_argument("--log-file", help="write the server log here (default: stderr)")
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    sub = parser.add_subparsers(dest="command")
    demo = sub.add_parser(
        "demo", help="run a scripted session through the real CLI, no API key needed"
    )
    demo.add_argument("--json", action="store_true", help="print raw events, one per line")
    demo.add_argument(
        "--agent",
        choices=["claude", "codex"],
        default="claude",
        help="the agent to run: claude (the default) or codex (pip install coven-ls[codex])",
    )
    doctor = sub.add_parser(
        "doctor",
        help="check what a session needs (Python, the claude CLI, its login, ACP agents, git, "
        "the state dir)",
        description=(
            "Check what a session needs without starting one (no model request is made): "
            "Python and packages, which claude CLI would be used and whether it can "
            "authenticate, each ACP agent (configured with --agents, or known and on PATH): "
            "whether it starts and what its initialize says, git for worktrees, the state "
            "folder and this workspace's database, and with --cluster the Ray cluster. "
            "Each finding says how to fix it. Exit code 0 when nothing is an error."
        ),
    )
    doctor.add_argument("--json", action="store_true", help="print a DoctorReport (docs/doctor.md)")
    doctor.add_argument("--root", default=".", help="the workspace (default: this folder)")
    doctor.add_argument("--state-dir", help="as initializationOptions.stateDir")
    doctor.add_argument("--claude", help="as initializationOptions.claudePath")
    doctor.add_argument("--codex", help="as initializationOptions.codexPath")
    doctor.add_argument(
        "--agents",
        metavar="JSON",
        help="as initializationOptions.agents: the ACP agents to check besides the known ones "
        "on PATH",
    )
    doctor.add_argument(
        "--cluster",
        metavar="JSON",
        help='as initializationOptions.cluster (\'{"ray": {"address": "head:6379"}}\'): is Ray '
        "installed, does the address answer, which nodes and resources it has",
    )
    prune = sub.add_parser(
        "prune",
        help="remove the fork worktrees and branches no session needs",
        description=(
            "Remove the git worktrees and `coven/` branches of fork children that no stored "
            "session needs (deleted sessions, a server killed mid-fork, leftover prepared "
            "worktrees), in every repository the state folder's stores know and in this "
            "folder's. Branches holding work never applied (a deleted session's conflict, a "
            "failed child's work, changes never reviewed) are kept unless --discard-work. "
            "Exit code 0 when everything meant to go went, 1 otherwise."
        ),
    )
    prune.add_argument("--dry-run", action="store_true", help="list, change nothing")
    prune.add_argument(
        "--discard-work",
        action="store_true",
        help="also delete branches that hold work never applied",
    )
    prune.add_argument("--json", action="store_true", help="print the result as one JSON object")
    prune.add_argument("--state-dir", help="as initializationOptions.stateDir")
    sub.add_parser(
        "acp",
        help="serve the Agent Client Protocol on stdio (Zed, JetBrains, CodeCompanion, ...)",
        description=(
            "Be an ACP agent on stdio: an editor's agent panel starts `coven-ls acp` and talks "
            "ACP to it (docs/acp.md). Sessions are the same as the language server's, in "
            "the same per-workspace store. --log-file and --log-level apply; nothing but ACP "
            "is written to stdout."
        ),
    )
    run = sub.add_parser(
        "run",
        help="run one session in the terminal with your own Claude setup",
        description=(
            "Run one agent session through coven-ls and stream its tree. Forks and tools "
            "that need permission, and with --merge review each fork child's changes, are asked "
            "about on the terminal; without one (stdin not a terminal) forks are rejected, tools "
            "denied and changes discarded unless --yes. Ctrl+C cancels the running turn or fork; "
            "a second Ctrl+C quits."
        ),
    )
    run.add_argument("prompt", nargs="+", help="the first message (several words are joined)")
    run.add_argument("--cwd", default=".", help="working directory of the session (default: .)")
    run.add_argument("--model", help="model for the session (default: the CLI's)")
    run.add_argument(
        "--agent",
        metavar="NAME",
        help="the agent that runs the session: claude (Claude Code, the default), codex, or an "
        "ACP agent the server offers (configured in initializationOptions.agents, or known and "
        "on PATH: docs/agents.md)",
    )
    run.add_argument(
        "--fork-mode",
        choices=["auto", "approve", "off"],
        default="approve",
        help="auto: forks start at once; approve: ask first (default); off: no forks",
    )
    run.add_argument(
        "--permission-mode",
        choices=["default", "acceptEdits", "plan", "bypassPermissions", "dontAsk", "auto"],
        help="the permission mode (default: the agent's own)",
    )
    run.add_argument(
        "--merge",
        choices=["auto", "review"],
        help=(
            "how the changes of fork children that worked in git worktrees come back: auto: "
            "merged into the working tree when the fork ends (the server's default); review: "
            "ask, for each child, whether to apply or discard them"
        ),
    )
    run.add_argument(
        "--isolation",
        choices=["worktree", "shared"],
        help=(
            "where fork children work: worktree: a git worktree each (the server's default in "
            "a git repository with a commit); shared: the session's own folder"
        ),
    )
    run.add_argument(
        "--worktree-setup",
        metavar="COMMAND",
        help=(
            "a shell command run in each fork child's new worktree before it starts (install "
            "dependencies...); auto (the default): the repository's .cursor/worktrees.json or "
            "conductor.json setup, once you allowed it; '': none"
        ),
    )
    for flag, limit, kind, what in _LIMIT_FLAGS:
        run.add_argument(
            flag,
            type=_limit(kind, flag),
            metavar="N",
            dest=limit,
            help=f"forkLimits.{limit}: {what} (0: no limit)",
        )
    run.add_argument(
        "--fork-context",
        choices=["inherit", "fresh", "transcript"],
        help=(
            "what the children of a fork you approve start from: inherit: the session's "
            "conversation, resumed (the default with the same agent); fresh: only their task; "
            "transcript: the conversation written into their first prompt, cut to size (the "
            "default with --fork-agent another agent). Not with --fork-mode auto"
        ),
    )
    run.add_argument(
        "--agents",
        metavar="JSON",
        help="as initializationOptions.agents: ACP agents by name, "
        '\'{"opencode": {"command": ["opencode", "acp"]}}\' (docs/agents.md)',
    )
    run.add_argument(
        "--fork-agent",
        metavar="NAME",
        help="the agent that runs the children of a fork you approve, any --agent takes "
        "(default: the session's)",
    )
    run.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help=(
            "approve every fork, allow every tool and apply every reviewed change (not a "
            "repository's worktree setup: that is always asked)"
        ),
    )
    run.add_argument(
        "--json",
        action="store_true",
        help=(
            "print raw events, one per line (the usage line and the fork's merge summary go "
            "to stderr)"
        ),
    )
    run.add_argument(
        "--deltas",
        action="store_true",
        help='with --json: also print the streamed pieces of text, as {"delta": ...} lines',
    )
    chat = sub.add_parser(
        "chat",
        help="talk to Claude Code in the terminal: follow-ups, forks, branches, sessions",
        description=(
            "An interactive session through coven-ls: type follow-ups, fork (/fork), move "
            "between the sessions of the tree (/switch) and back to stored ones (/resume); "
            "/help lists the commands. Ctrl+C clears the line or cancels the running turn; "
            "Ctrl+D or /quit leaves (the sessions stay in the store)."
        ),
    )
    chat.add_argument("prompt", nargs="*", help="the first message (several words are joined)")
    chat.add_argument("--resume", metavar="SESSION_ID", help="go on with a stored session")
    chat.add_argument(
        "--tcp",
        dest="attach",
        type=_host_port,
        metavar="HOST:PORT",
        help=(
            "attach to a running `coven-ls --tcp HOST:PORT` server (the one your editor uses) "
            "instead of starting one; quitting then only disconnects"
        ),
    )
    chat.add_argument(
        "--token-file",
        dest="attach_token_file",
        metavar="PATH",
        help=(
            "with --tcp: read the server's token from PATH (mode 0600). Default: $COVEN_TOKEN, "
            "else the token file the server wrote when it made one"
        ),
    )
    chat.add_argument("--cwd", default=".", help="the workspace folder (default: .)")
    chat.add_argument("--model", help="model for new sessions (default: the CLI's)")
    chat.add_argument(
        "--merge",
        choices=["auto", "review"],
        help=(
            "how worktree children's changes come back (the chat's own server): auto: merged "
            "when the fork ends (the default); review: you apply or discard each (/review)"
        ),
    )
    chat.add_argument(
        "--isolation",
        choices=["worktree", "shared"],
        help="where fork children work (the chat's own server): a git worktree each, or here",
    )
    chat.add_argument(
        "--agent",
        metavar="NAME",
        help="the agent of new sessions: claude (Claude Code, the default), codex, or an ACP "
        "agent the server offers (/agent lists them and switches)",
    )
    chat.add_argument(
        "--agents",
        metavar="JSON",
        help="the chat's own server: as initializationOptions.agents, ACP agents by name "
        "(docs/agents.md)",
    )
    chat.add_argument(
        "--fork-mode",
        choices=["auto", "approve", "off"],
        default="approve",
        help="auto: forks start at once; approve: ask first (default); off: no forks",
    )
    chat.add_argument(
        "--permission-mode",
        choices=["default", "acceptEdits", "plan", "bypassPermissions", "dontAsk", "auto"],
        help="the permission mode for new sessions (default: the agent's own)",
    )
    return parser


def _chat(args: argparse.Namespace) -> int:
    import os

    from .term.chat import ChatOptions, chat

    cwd = os.path.abspath(os.path.expanduser(args.cwd))
    if not os.path.isdir(cwd):
        print(f"coven-ls chat: --cwd {cwd} is not a directory", file=sys.stderr)
        return 2
    if args.attach_token_file and not args.attach:
        print("coven-ls chat: --token-file goes with --tcp", file=sys.stderr)
        return 2
    if args.attach and (args.merge or args.isolation or args.agents):
        print(
            "coven-ls chat: --merge, --isolation and --agents are settings of the chat's own "
            "server; attached (--tcp), the server's own apply",
            file=sys.stderr,
        )
        return 2
    agents = _agents(args.agents, "chat")
    if agents is _BAD:
        return 2
    if not sys.stdin.isatty() or not sys.stdout.isatty():
        print(
            "coven-ls chat: needs a terminal (stdin and stdout); for scripts, use coven-ls run.",
            file=sys.stderr,
        )
        return 2
    token = None
    if args.attach:
        from .term.attach import AttachError, token_for

        try:
            token = token_for(args.attach[1], args.attach_token_file)
        except AttachError as exc:
            print(f"coven-ls chat: {exc}", file=sys.stderr)
            return 2
    return chat(
        ChatOptions(
            cwd=cwd,
            attach=args.attach,
            token=token,
            prompt=" ".join(args.prompt) or None,
            resume=args.resume,
            fork_mode=args.fork_mode,
            model=args.model,
            permission_mode=args.permission_mode,
            agent=args.agent,
            merge_mode=args.merge,
            isolation=args.isolation,
            agents=agents,
        )
    )


_BAD: dict[str, Any] = {}  # `_agents`' answer to a bad --agents (said on stderr)


def _agents(text: str | None, command: str) -> dict[str, Any] | None:
    """`--agents`: the JSON given, checked as initializationOptions.agents; `_BAD` (said why)
    when it is not."""
    if text is None:
        return None
    from .doctor.checks import parse_agents
    from .protocol import CovenError

    try:
        parse_agents(text)
    except CovenError as exc:
        print(f"coven-ls {command}: --agents: {exc.message}", file=sys.stderr)
        return _BAD
    value: dict[str, Any] = json.loads(text)
    return value


def _setup_logging(args: argparse.Namespace) -> None:
    # stdout is the LSP channel: logs go to stderr or a file, never stdout.
    handler: logging.Handler = (
        logging.FileHandler(args.log_file) if args.log_file else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(args.log_level)
    if args.log_level != "DEBUG":
        logging.getLogger("pygls").setLevel(logging.WARNING)


def _run(args: argparse.Namespace) -> int:
    import os

    from .term.run import RunOptions, run_session

    if args.deltas and not args.json:
        print("coven-ls run: --deltas goes with --json", file=sys.stderr)
        return 2
    cwd = os.path.abspath(os.path.expanduser(args.cwd))
    if not os.path.isdir(cwd):
        print(f"coven-ls run: --cwd {cwd} is not a directory", file=sys.stderr)
        return 2
    agents = _agents(args.agents, "run")
    if agents is _BAD:
        return 2
    return run_session(
        RunOptions(
            prompt=" ".join(args.prompt),
            cwd=cwd,
            fork_mode=args.fork_mode,
            model=args.model,
            permission_mode=args.permission_mode,
            as_json=args.json,
            json_deltas=args.deltas,
            yes=args.yes,
            merge_mode=args.merge,
            isolation=args.isolation,
            agent=args.agent,
            agents=agents,
            worktree_setup=args.worktree_setup,
            fork_context=args.fork_context,
            fork_agent=args.fork_agent,
            fork_limits={
                limit: getattr(args, limit)
                for _flag, limit, _kind, _what in _LIMIT_FLAGS
                if getattr(args, limit) is not None
            },
        )
    )


# `coven-ls run`'s flags for a fork's limits (initializationOptions.forkLimits).
_LIMIT_FLAGS: tuple[tuple[str, str, type, str], ...] = (
    ("--child-tokens", "childTokens", int, "tokens one fork child may use, every kind added up"),
    ("--child-cost-usd", "childCostUsd", float, "what one fork child may cost, in USD"),
    ("--child-seconds", "childSeconds", float, "how long one fork child may run, from its start"),
    ("--fork-cost-usd", "forkCostUsd", float, "what a whole fork may cost, in USD"),
)


def _limit(kind: type, flag: str) -> Callable[[str], float | int]:
    """An argparse type for a limit: a number of `kind`, 0 or more, or a clear error."""

    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            noun = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{flag} takes {noun}, not {text!r}") from None
        if value < 0 or value != value or value == float("inf"):
            raise argparse.ArgumentTypeError(f"{flag} must be 0 (no limit) or more, not {text}")
        return value

    return parse


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from .term.demo import run_demo

        return run_demo(json_output=args.json, agent=args.agent)
    if args.command == "run":
        return _run(args)
    if args.command == "chat":
        return _chat(args)
    if args.command == "prune":
        from .doctor.prune import main as prune_main

        return prune_main(args.state_dir, args.dry_run, args.discard_work, args.json)
    if args.command == "doctor":
        from .doctor.checks import main as doctor_main

        return doctor_main(
            args.root,
            args.state_dir,
            args.claude,
            args.json,
            codex=args.codex,
            agents=args.agents,
            cluster=args.cluster,
        )
    from .core.journal import tune_interpreter

    if args.command == "acp":
        _setup_logging(args)
        tune_interpreter()
        from .acp.serve import serve_acp
        from .agents import REGISTRY

        try:
            return anyio.run(serve_acp, REGISTRY)
        except KeyboardInterrupt:
            return 130
    if args.token_file and not args.tcp:
        print("coven-ls: --token-file goes with --tcp", file=sys.stderr)
        return 2
    _setup_logging(args)
    tune_interpreter()
    from .agents import REGISTRY
    from .lsp.auth import resolve_token
    from .lsp.transports import serve_stdio, serve_tcp
    from .protocol.tokens import TokenError

    try:
        if args.tcp:
            host, port = args.tcp
            try:
                auth = resolve_token(args.token_file)
            except TokenError as exc:
                print(f"coven-ls: {exc}", file=sys.stderr)
                return 2
            anyio.run(serve_tcp, host, port, auth, REGISTRY)
            return 0
        return anyio.run(serve_stdio, REGISTRY)
    except KeyboardInterrupt:
        return 130
