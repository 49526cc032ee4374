"""Relay latency: how long coven-ls takes to pass a CLI message on to its LSP client.

What is measured
    For every model response, the time from the scripted model writing the response's last
    byte (``ModelRequest.finished``) to a reader receiving the message that carries it, on one
    clock (``time.monotonic`` of this process; the model runs in it as threads):

    direct     the bundled ``claude`` CLI run by this script with stream-json in and out (the
               flags the SDK uses); t1 = when its ``assistant`` stdout line has been read.
    via coven  ``python -m coven_ls`` driven by a minimal JSON-RPC client in this script;
               t1 = when the ``coven/event`` notification (``toolUse`` or ``text``) carrying
               that response has been read off the server's stdout.

    Both readers are a thread doing blocking reads on a pipe and take t1 once the whole line
    or LSP frame is in, before JSON decoding, so client-side costs do not count on either side.
    The model answers every turn with ``--tools`` Read calls (a file in the workspace: no
    permission prompt, and bypassPermissions is refused when running as root) and then a text,
    so one turn yields ``--tools`` + 1 samples; responses are matched by tool-use id or text.
    The scripted model sets TCP_NODELAY on its sockets. Each round runs both paths
    once, in alternating order, each with a fresh CLAUDE_CONFIG_DIR, workspace and processes;
    warm-up rounds are dropped.

How to read the output
    p50/p99 per path in milliseconds; overhead = via-coven minus direct at the same percentile
    (distributions compared, not paired samples); "% of direct" = overhead / direct there.
    The issue's target: overhead p50 under 5 ms and under 10% of the direct p50, judged on all
    responses. The first response of each process carries CLI warm-up on both paths; the
    "steady" block leaves it out. With a few hundred samples p99 sits near the maximum and is
    sensitive to whatever else the machine runs: treat it as indicative.

Usage: python bench/relay.py [--turns N] [--tools K] [--rounds R] [--warmup W]
"""

from __future__ import annotations

import argparse
import json
import queue
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from common import (
    EXIT_TIMEOUT,
    LspClient,
    RunDirs,
    daemon_thread,
    percentile,
    print_target,
    run_dirs,
    spawn,
    spawn_server,
    stderr_tail,
    stop_process,
)

from coven_ls.core.agent import resolve_claude
from coven_ls.testing.scripted_model import ModelRequest, Reply, ScriptedModel, Text, ToolUse

# What claude-agent-sdk passes the CLI for a coven-ls session (no model or permission mode set).
DIRECT_FLAGS = (
    "--output-format",
    "stream-json",
    "--verbose",
    "--permission-prompt-tool",
    "stdio",
    "--input-format",
    "stream-json",
)
DIRECT_ENV = {"CLAUDE_CODE_ENTRYPOINT": "sdk-py", "CLAUDE_CODE_SDK_READS_SESSION_STATE": "1"}
TURN_TIMEOUT = 90.0  # seconds for one turn (process start included)
TARGET_OVERHEAD_MS = 5.0
TARGET_OVERHEAD_RATIO = 0.10

PROMPT = re.compile(r"relay-bench run=(\d+) turn=(\d+)")


# --------------------------------------------------------------------------- the scripted model


class Script:
    """Answers the bench's model calls: ``tools`` Read calls per turn, then a text.

    Where a request stands is read from the conversation it carries: the last prompt names the
    run and turn, and the tool results after it count the steps taken. Every response gets a
    unique key (the tool-use id, or the text) under which its request is recorded.
    """

    def __init__(self, tools: int) -> None:
        self.tools = tools
        self.workspaces: dict[int, Path] = {}
        self.requests: dict[str, ModelRequest] = {}
        self.repeated: set[str] = set()  # answered more than once (a CLI retry): not a sample
        self._lock = threading.Lock()

    @staticmethod
    def prompt(run: int, turn: int) -> str:
        return f"relay-bench run={run} turn={turn}: read the step files one by one."

    def key(self, run: int, turn: int, step: int) -> str:
        if step < self.tools:
            return f"toolu_relay_{run}_{turn}_{step}"
        return f"relay-bench done: run {run} turn {turn}."

    def keys(self, run: int, turns: int) -> list[str]:
        return [self.key(run, t, s) for t in range(turns) for s in range(self.tools + 1)]

    def __call__(self, request: ModelRequest) -> Reply:
        position: tuple[int, int] | None = None
        step = 0
        for message in request.messages:
            if not isinstance(message, dict) or message.get("role") != "user":
                continue
            content = message.get("content")
            if isinstance(content, str):  # later prompts come as a plain string
                content = [{"type": "text", "text": content}]
            for block in content if isinstance(content, list) else []:
                kind = block.get("type") if isinstance(block, dict) else None
                if kind == "text" and (found := PROMPT.search(str(block.get("text", "")))):
                    position, step = (int(found[1]), int(found[2])), 0
                elif kind == "tool_result":
                    step += 1
        if position is None or position[0] not in self.workspaces:
            return Reply((Text("relay-bench: a request nobody scripted"),))
        run, turn = position
        key = self.key(run, turn, step)
        with self._lock:
            if key in self.requests:
                self.repeated.add(key)
            self.requests[key] = request
        if step < self.tools:
            path = self.workspaces[run] / f"step-{step}.txt"
            return Reply((ToolUse("Read", {"file_path": str(path)}, key),))
        return Reply((Text(key),))


# --------------------------------------------------------------------------- shared plumbing


@dataclass
class Run:
    """One path's run: when each response's message arrived, keyed as in `Script`."""

    path: str
    number: int
    arrivals: dict[str, float] = field(default_factory=dict)


def _note(arrivals: dict[str, float], key: str, at: float) -> None:
    arrivals.setdefault(key, at)


@contextmanager
def script_dirs(script: Script, run: int) -> Iterator[RunDirs]:
    """The run's folders (see `run_dirs`), with the step files the script reads in the
    workspace; the script answers for the run until its processes are gone."""
    try:
        with run_dirs(f"relay-bench-{run}-", f"run {run}") as dirs:
            for step in range(script.tools):
                (dirs.workspace / f"step-{step}.txt").write_text(f"step {step} of run {run}\n")
            script.workspaces[run] = dirs.workspace
            yield dirs
    finally:
        script.workspaces.pop(run, None)


# --------------------------------------------------------------------------- direct path


def run_direct(
    model: ScriptedModel, script: Script, claude: str, run: int, turns: int, stderr: IO[bytes]
) -> Run:
    record = Run("direct", run)
    results: queue.Queue[dict[str, Any] | None] = queue.Queue()
    with script_dirs(script, run) as dirs:
        env = {**dirs.environ(model), **DIRECT_ENV}
        proc = spawn([claude, *DIRECT_FLAGS], dirs.workspace, env, stderr)
        assert proc.stdin is not None and proc.stdout is not None
        stdout, stdin = proc.stdout, proc.stdin

        def read() -> None:
            for line in stdout:
                at = time.monotonic()
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if message.get("type") == "assistant":
                    for block in message.get("message", {}).get("content", []):
                        if block.get("type") == "tool_use":
                            _note(record.arrivals, block["id"], at)
                        elif block.get("type") == "text":
                            _note(record.arrivals, block["text"], at)
                elif message.get("type") == "result":
                    results.put(message)
            results.put(None)

        reader = daemon_thread(read, f"direct-{run}")
        try:
            for turn in range(turns):
                message = {"role": "user", "content": script.prompt(run, turn)}
                stdin.write((json.dumps({"type": "user", "message": message}) + "\n").encode())
                stdin.flush()
                result = results.get(timeout=TURN_TIMEOUT)
                if result is None or result.get("is_error"):
                    raise RuntimeError(f"direct run {run}, turn {turn} failed: {result}")
        finally:
            stdin.close()
            stop_process(proc)
            reader.join(EXIT_TIMEOUT)
    return record


# --------------------------------------------------------------------------- via coven-ls


def run_coven(
    model: ScriptedModel, script: Script, claude: str, run: int, turns: int, stderr: IO[bytes]
) -> Run:
    record = Run("via coven", run)
    results: queue.Queue[dict[str, Any]] = queue.Queue()

    def on_notification(method: str, params: Any, at: float) -> None:
        if method != "coven/event" or not isinstance(params, dict):
            return
        kind = params.get("kind")
        if kind == "toolUse":
            _note(record.arrivals, params["toolUseId"], at)
        elif kind == "text":
            _note(record.arrivals, params["text"], at)
        elif kind in ("turnResult", "error"):
            results.put(params)

    with script_dirs(script, run) as dirs:
        proc = spawn_server(dirs.workspace, dirs.environ(model, own_state=True), stderr)
        client = LspClient(proc, timeout=TURN_TIMEOUT, on_notification=on_notification)
        try:
            client.initialize(dirs.workspace, {"claudePath": claude})
            client.notify("initialized", {})
            session = None
            for turn in range(turns):
                prompt = script.prompt(run, turn)
                if session is None:
                    started = client.request(
                        "coven/startSession", {"prompt": prompt, "cwd": str(dirs.workspace)}
                    )
                    session = started["sessionId"]
                else:
                    client.request("coven/sendMessage", {"sessionId": session, "text": prompt})
                result = results.get(timeout=TURN_TIMEOUT)
                if result.get("kind") != "turnResult" or result.get("isError"):
                    raise RuntimeError(f"coven run {run}, turn {turn} failed: {result}")
        finally:
            client.close(EXIT_TIMEOUT)
    return record


# --------------------------------------------------------------------------- figures


@dataclass
class Figures:
    samples: list[float] = field(default_factory=list)  # seconds
    steady: list[float] = field(default_factory=list)  # without each process's first response
    missing: int = 0

    def add(self, run: Run, script: Script, turns: int) -> None:
        for index, key in enumerate(script.keys(run.number, turns)):
            request = script.requests.get(key)
            arrived = run.arrivals.get(key)
            if request is None or request.finished is None or arrived is None:
                self.missing += 1
                continue
            if key in script.repeated:
                continue
            self.samples.append(arrived - request.finished)
            if index > 0:
                self.steady.append(arrived - request.finished)


def report(direct: Figures, coven: Figures, args: argparse.Namespace) -> None:
    def row(name: str, values: list[float]) -> None:
        p50, p99 = percentile(values, 0.50), percentile(values, 0.99)
        mean = 1000 * statistics.fmean(values) if values else float("nan")
        print(f"  {name:<12}{len(values):>8}{p50:>9.2f}{p99:>9.2f}{mean:>9.2f}")

    def block(title: str, direct_values: list[float], coven_values: list[float]) -> float:
        print(f"  {title:<12}{'samples':>8}{'p50':>9}{'p99':>9}{'mean':>9}")
        row("direct", direct_values)
        row("via coven", coven_values)
        overhead = {
            q: percentile(coven_values, q) - percentile(direct_values, q) for q in (0.5, 0.99)
        }
        print(f"  {'overhead':<12}{'':>8}{overhead[0.5]:>9.2f}{overhead[0.99]:>9.2f}")
        shares = [100 * overhead[q] / percentile(direct_values, q) for q in (0.5, 0.99)]
        print(f"  {'% of direct':<12}{'':>8}{shares[0]:>8.1f}%{shares[1]:>8.1f}%")
        return overhead[0.5]

    print()
    print(
        "relay latency in ms, model response written -> message read; "
        f"{args.rounds} rounds x {args.turns} turns x {args.tools + 1} responses per path"
    )
    overhead = block("all", direct.samples, coven.samples)
    block("steady", direct.steady, coven.steady)
    if direct.missing or coven.missing:
        print(f"  unmatched responses: direct {direct.missing}, via coven {coven.missing}")
    ratio = overhead / percentile(direct.samples, 0.5)
    verdicts = [
        (f"p50 overhead < {TARGET_OVERHEAD_MS:g} ms", overhead < TARGET_OVERHEAD_MS),
        (
            f"p50 overhead < {100 * TARGET_OVERHEAD_RATIO:g}% of direct p50",
            ratio < TARGET_OVERHEAD_RATIO,
        ),
    ]
    print()
    for what, met in verdicts:
        print_target(what, met)
    print(f"  (overhead p50 {overhead:.2f} ms = {100 * ratio:.1f}% of direct p50)")


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=5, help="turns per run (default 5)")
    parser.add_argument(
        "--tools", type=int, default=8, help="tool calls per turn before the text (default 8)"
    )
    parser.add_argument("--rounds", type=int, default=8, help="measured rounds (default 8)")
    parser.add_argument("--warmup", type=int, default=1, help="rounds not counted (default 1)")
    parser.add_argument("--claude", help="CLI to run (default: as coven-ls would pick it)")
    args = parser.parse_args(argv)
    if args.turns < 1 or args.tools < 0 or args.rounds < 1 or args.warmup < 0:
        parser.error("--turns and --rounds must be at least 1, --tools and --warmup at least 0")

    claude = args.claude or resolve_claude(None)[0]
    script = Script(args.tools)
    figures = {"direct": Figures(), "via coven": Figures()}
    runners = {"direct": run_direct, "via coven": run_coven}
    started = time.monotonic()
    with (
        ScriptedModel() as model,
        tempfile.TemporaryFile(prefix="relay-bench-stderr-") as stderr,
    ):
        model.on(lambda request: True, script)
        run = 0
        try:
            for round_number in range(args.warmup + args.rounds):
                warmup = round_number < args.warmup
                order = ["direct", "via coven"]
                if round_number % 2:
                    order.reverse()
                medians = []
                for path in order:
                    run += 1
                    record = runners[path](model, script, claude, run, args.turns, stderr)
                    if not warmup:
                        figures[path].add(record, script, args.turns)
                    one = Figures()
                    one.add(record, script, args.turns)
                    medians.append(f"{path} p50 {percentile(one.samples, 0.5):.2f} ms")
                label = "warm-up" if warmup else f"round {round_number - args.warmup + 1}"
                print(f"{label:<8} " + ", ".join(medians), flush=True)
        except (RuntimeError, queue.Empty) as exc:
            tail = stderr_tail(stderr, 3000)
            print(f"run {run} failed: {exc or 'timed out'}\n{tail}", file=sys.stderr)
            return 1
    report(figures["direct"], figures["via coven"], args)
    print(f"(took {time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
