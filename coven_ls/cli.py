"""The `coven-ls` command: serve LSP on stdio (the default) or TCP, or run the offline demo."""

from __future__ import annotations

import argparse
import logging
import sys

import anyio

from . import __version__


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host or "127.0.0.1", int(port)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="coven-ls",
        description="A language server that hosts Claude Code sessions and forks them.",
    )
    parser.add_argument("--version", action="version", version=f"coven-ls {__version__}")
    parser.add_argument(
        "--tcp", type=_host_port, metavar="HOST:PORT", help="serve on a socket instead of stdio"
    )
    parser.add_argument("--log-file", help="write the server log here (default: stderr)")
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    sub = parser.add_subparsers(dest="command")
    demo = sub.add_parser(
        "demo", help="run a scripted session through the real CLI, no API key needed"
    )
    demo.add_argument("--json", action="store_true", help="print raw events, one per line")
    return parser


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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo

        return run_demo(json_output=args.json)
    _setup_logging(args)
    from .server import serve_stdio, serve_tcp

    try:
        if args.tcp:
            host, port = args.tcp
            anyio.run(serve_tcp, host, port)
            return 0
        return anyio.run(serve_stdio)
    except KeyboardInterrupt:
        return 130
