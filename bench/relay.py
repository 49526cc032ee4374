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
import itertools
import json
import os
import queue
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from coven_ls.agent import resolve_claude
from coven_ls.scripted_model import ModelRequest, Reply, ScriptedModel, Text, ToolUse

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
EXIT_TIMEOUT = 30.0  # seconds for a process to end once asked to
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


def leftover_processes(marker: str) -> list[int]:
    """Live processes whose environment holds `marker` (the run's unique config dir)."""
    needle = marker.encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                if "\nState:\tZ" not in (entry / "status").read_text():
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def reap(marker: str) -> int:
    """Wait for every process of a run to end; kill (by pid) what is left after a while.
    Returns how many had to be killed."""
    deadline = time.monotonic() + EXIT_TIMEOUT
    while time.monotonic() < deadline:
        if not leftover_processes(marker):
            return 0
        time.sleep(0.05)
    stragglers = leftover_processes(marker)
    for pid in stragglers:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(stragglers)


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.wait(EXIT_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def run_dirs(model: ScriptedModel, script: Script, run: int) -> Iterator[tuple[Path, Path]]:
    """A fresh workspace (with the step files) and CLAUDE_CONFIG_DIR for one run."""
    with tempfile.TemporaryDirectory(prefix=f"relay-bench-{run}-") as tmp:
        workspace, config = Path(tmp, "workspace"), Path(tmp, "claude-config")
        workspace.mkdir()
        config.mkdir()
        for step in range(script.tools):
            (workspace / f"step-{step}.txt").write_text(f"step {step} of run {run}\n")
        script.workspaces[run] = workspace
        try:
            yield workspace, config
        finally:
            killed = reap(str(config))
            if killed:
                print(f"  warning: killed {killed} leftover process(es) of run {run}")
            del script.workspaces[run]


def _start_reader(target: Callable[[], None], name: str) -> threading.Thread:
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


# --------------------------------------------------------------------------- direct path


def run_direct(
    model: ScriptedModel, script: Script, claude: str, run: int, turns: int, stderr: IO[bytes]
) -> Run:
    record = Run("direct", run)
    results: queue.Queue[dict[str, Any] | None] = queue.Queue()
    with run_dirs(model, script, run) as (workspace, config):
        proc = subprocess.Popen(
            [claude, *DIRECT_FLAGS],
            cwd=workspace,
            env={**model.cli_environ(config), **DIRECT_ENV},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
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

        reader = _start_reader(read, f"direct-{run}")
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


class LspClient:
    """Just enough of an LSP client: framed JSON-RPC over a child's stdin/stdout, a reader
    thread that timestamps each frame as soon as it is read, and blocking requests."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        on_notification: Callable[[str, Any, float], None],
    ) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self._proc = proc
        self._stdin, self._stdout = proc.stdin, proc.stdout
        self._on_notification = on_notification
        self._ids = itertools.count(1)
        self._pending: dict[int, queue.Queue[dict[str, Any]]] = {}
        self._write_lock = threading.Lock()
        self._reader = _start_reader(self._read, "lsp-client")

    def _send(self, payload: dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", **payload}).encode()
        with self._write_lock:
            self._stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            self._stdin.flush()

    def _read(self) -> None:
        while True:
            length = None
            while True:
                header = self._stdout.readline()
                if not header:
                    return  # EOF
                if header in (b"\r\n", b"\n"):
                    break
                name, _, value = header.decode("ascii").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if length is None:
                continue
            body = self._stdout.read(length)
            at = time.monotonic()
            message = json.loads(body)
            if "method" in message and "id" in message:
                self._answer(message)
            elif "method" in message:
                self._on_notification(message["method"], message.get("params"), at)
            elif message.get("id") in self._pending:
                self._pending.pop(message["id"]).put(message)

    def _answer(self, request: dict[str, Any]) -> None:
        # Nothing in this bench should ask; should a tool need permission anyway, allow it.
        result = {"allow": True} if request["method"] == "coven/requestPermission" else None
        self._send({"id": request["id"], "result": result})

    def request(self, method: str, params: Any, timeout: float = TURN_TIMEOUT) -> Any:
        msg_id = next(self._ids)
        answer: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=1)
        self._pending[msg_id] = answer
        self._send({"id": msg_id, "method": method, "params": params})
        reply = answer.get(timeout=timeout)
        if "error" in reply:
            raise RuntimeError(f"{method} failed: {reply['error']}")
        return reply.get("result")

    def notify(self, method: str, params: Any) -> None:
        self._send({"method": method, "params": params})

    def close(self) -> None:
        """LSP shutdown and exit, then wait for the server to end."""
        try:
            if self._proc.poll() is None:
                self.request("shutdown", None, timeout=EXIT_TIMEOUT)
                self.notify("exit", None)
        except (OSError, RuntimeError, queue.Empty):
            pass
        finally:
            try:
                self._stdin.close()
            except OSError:
                pass
            stop_process(self._proc)
            self._reader.join(EXIT_TIMEOUT)


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

    with run_dirs(model, script, run) as (workspace, config):
        env = model.cli_environ(config)
        proc = subprocess.Popen(
            [sys.executable, "-m", "coven_ls", "--log-level", "WARNING"],
            cwd=workspace,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
        client = LspClient(proc, on_notification)
        try:
            client.request(
                "initialize",
                {
                    "processId": os.getpid(),
                    "rootUri": workspace.as_uri(),
                    "capabilities": {"experimental": {"coven": {"permissions": True}}},
                    "initializationOptions": {"claudePath": claude},
                },
            )
            client.notify("initialized", {})
            session = None
            for turn in range(turns):
                prompt = script.prompt(run, turn)
                if session is None:
                    started = client.request(
                        "coven/startSession", {"prompt": prompt, "cwd": str(workspace)}
                    )
                    session = started["sessionId"]
                else:
                    client.request("coven/sendMessage", {"sessionId": session, "text": prompt})
                result = results.get(timeout=TURN_TIMEOUT)
                if result.get("kind") != "turnResult" or result.get("isError"):
                    raise RuntimeError(f"coven run {run}, turn {turn} failed: {result}")
        finally:
            client.close()
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


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks, in milliseconds."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return 1000 * (ordered[low] + (ordered[high] - ordered[low]) * (position - low))


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
        print(f"target {what}: {'met' if met else 'NOT met'}")
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
            stderr.seek(0)
            tail = stderr.read().decode(errors="replace")[-3000:]
            print(f"run {run} failed: {exc or 'timed out'}\n{tail}", file=sys.stderr)
            return 1
    report(figures["direct"], figures["via coven"], args)
    print(f"(took {time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
