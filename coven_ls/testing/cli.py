"""``python -m coven_ls.testing``: the scripted model as a process of its own, serving a script
until SIGTERM or SIGINT (see ``--help`` and docs/testing.md)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from .model import DEFAULT_TEXT, ScriptedModel
from .script import load_script

PROG = "python -m coven_ls.testing"

_DESCRIPTION = """\
Serve a scripted stand-in for the Anthropic Messages API on loopback, so that the real
`claude` CLI, and coven-ls which runs it, can be tested offline. Every POST /v1/messages
is answered by the first rule of the script whose match fits the last user message
(rules are tried in order; a rule with `times` stops after that many answers), else by
the script's default."""

_EPILOG = """\
output:
  stdout  exactly one line, once the server accepts connections, then nothing:
              listening on http://127.0.0.1:PORT
          (--port-file, if given, is written before it)
  stderr  unless --quiet: the environment to export, then one line per request
          (for people, not a stable format); a reader that pipes stderr must drain it
  exit    runs until SIGTERM or SIGINT (Ctrl+C), then exits 0; a bad option, a bad
          script or a port that cannot be bound exits 2 with the reason on stderr

environment for `claude` or `coven-ls`:
  ANTHROPIC_BASE_URL=http://127.0.0.1:PORT   (the URL printed on stdout)
  ANTHROPIC_API_KEY=anything                 (must be set; it is not checked)
  CLAUDE_CONFIG_DIR=<a fresh empty directory>
  CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1

script (YAML or JSON):
  default: "text"                 # answer when no rule matches (or a list of blocks)
  rules:
    - match: "substring"          # or  regex: "python regex"; searched in the last user
                                  # message: prompt text or tool results, reminders removed
      times: 1                    # optional: answer at most this often (all clients count)
      latency: 0.5                # optional: seconds before the answer starts
      chunk_chars: 40             # optional: characters per streamed delta
      chunk_delay: 0.02           # optional: seconds between deltas
      drop_after: 3               # optional: break the connection off after 3 deltas
      error_after: 2              # optional, with error: an `error` event after 2 deltas
      subagent: true              # optional: only the CLI's subagents (false: only the main
                                  # conversation)
      usage: {input_tokens: 100, output_tokens: 20, cache_read_input_tokens: 1000,
              cache_creation_input_tokens: 50}   # optional: the usage reported
      reply:                      # blocks, streamed in order; a plain string is text
        - thinking: "..."
        - "Some text"             # or  text: "..."
        - tool_use: {name: Bash, input: {command: "ls"}}
    - match: "fail now"           # an HTTP error instead of a reply
      error: {status: 529, type: overloaded_error, message: "busy", should_retry: false}
                                  # also retry_after: SECONDS, retry_after_ms: MS (headers)

The full reference and a worked example are docs/testing.md and
docs/examples/fork-script.yaml in the coven-ls repository."""


def _env_hint(url: str) -> str:
    return (
        "point claude or coven-ls at it with:\n"
        f"  export ANTHROPIC_BASE_URL={url} ANTHROPIC_API_KEY=scripted-model-key\n"
        '  export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 CLAUDE_CONFIG_DIR="$(mktemp -d)"'
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m coven_ls.testing``: serve a script until SIGTERM/SIGINT (see ``--help``)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--script",
        metavar="FILE",
        help=f"YAML or JSON script of rules (without one, every request gets {DEFAULT_TEXT!r})",
    )
    parser.add_argument(
        "--port",
        metavar="N",
        type=int,
        default=0,
        help="TCP port to listen on (default: 0, a free port chosen by the OS)",
    )
    parser.add_argument(
        "--host",
        metavar="ADDR",
        default="127.0.0.1",
        help="IPv4 loopback address to bind (default: 127.0.0.1; others are refused)",
    )
    parser.add_argument(
        "--port-file",
        metavar="PATH",
        help="once listening, write the port number and a newline to PATH (atomically)",
    )
    parser.add_argument("--quiet", action="store_true", help="write nothing to stderr but errors")
    args = parser.parse_args(argv)

    try:
        script = load_script(args.script) if args.script else ScriptedModel()
    except Exception as exc:  # a bad file is the user's to fix: say why, no traceback
        print(f"{PROG}: cannot use script {args.script}: {exc}", file=sys.stderr)
        return 2
    say = None if args.quiet else lambda line: print(line, file=sys.stderr, flush=True)
    try:
        # Rebuilt with the chosen address and logging; rules and default come from the script.
        model = ScriptedModel(script.rules, script.default, host=args.host, port=args.port, log=say)
    except ValueError as exc:
        parser.error(str(exc))
    done = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        url = model.start()
    except (OSError, OverflowError) as exc:
        print(f"{PROG}: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    try:
        if args.port_file:
            # Written whole then renamed, so a poller never reads a half-written number.
            tmp = Path(args.port_file + ".tmp")
            tmp.write_text(f"{model.port}\n", encoding="utf-8")
            tmp.replace(args.port_file)
        print(f"listening on {url}", flush=True)
        if say is not None:
            source = f"from {args.script}" if args.script else "(no script)"
            say(f"scripted model: {len(model.rules)} rules {source}; {_env_hint(url)}")
        while not done.wait(1.0):
            pass
    finally:
        model.stop()
    return 0
