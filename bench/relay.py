"""Relay latency: how long coven-ls takes to pass a CLI message on to its LSP client, and how
soon the model's first streamed token shows.

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

First visible token
    Each round also runs, side by side, a claude-agent-sdk client in this process and a fresh
    ``python -m coven_ls`` (each with its own CLI, config dir and workspace), and gives them
    ``--stream-turns`` prompts each, one on one path then one on the other (which goes first
    alternates), so that both see the machine alike. Every answer is one text block that the
    model streams in ``--chunks`` pieces of ``--chunk-chars`` characters, ``--chunk-delay``
    apart, after ``--stream-latency``. t0 = the model writing the reply's first
    ``text_delta`` (stamped just before the write, as ``finished`` is; the bench swaps in a
    request handler that takes the stamp); t1 = a reader getting that first piece:

    direct sdk the CLI's own stream events, read by ``ClaudeSDKClient`` with the options
               coven-ls gives it (include_partial_messages=True); t1 = when the SDK yields
               the first ``StreamEvent`` with a ``text_delta`` of the reply's message.
    via coven  t1 = when the first ``coven/delta`` of the reply's block has been read off the
               server's stdout (as above: the whole frame in, before decoding).

    So the direct figure is the model -> CLI -> SDK way that coven-ls also goes; the overhead
    is what coven-ls adds on top of it (its relay, the LSP frame, the pipe to the editor).
    Replies are matched by message / block: the whole text that ends it starts with a key
    naming run and turn. The first streamed reply of each process is left out (warm-up).

CPU per streamed delta
    Then each of the two gets one reply of ``--long-deltas`` pieces, ``--long-delay`` apart,
    one after the other. Its CPU from sending the prompt to the turn's result, minus an idle
    baseline (the same CPU over IDLE_SECONDS just before, scaled to the turn's length), divided
    by the pieces its reader got: for coven-ls the server process (utime + stime of
    /proc/<pid>/stat, all its threads, 10 ms ticks), for the direct path the thread running the
    SDK's event loop (``time.thread_time``; the model's threads in this process are not in it).
    The SDK's own work (reading and parsing the CLI's lines) is in both. The turn's fixed costs
    (prompt, status and result events, the store commit) are spread over the pieces: with a
    thousand of them they weigh little.

How to read the output
    p50/p99 per path in milliseconds; overhead = via-coven minus direct at the same percentile
    (distributions compared, not paired samples); "% of direct" = overhead / direct there.
    The issue's target: overhead p50 under 5 ms and under 10% of the direct p50, judged on all
    responses. The first response of each process carries CLI warm-up on both paths; the
    "steady" block leaves it out. With a few hundred samples p99 sits near the maximum and is
    sensitive to whatever else the machine runs: treat it as indicative.
    First visible token: the same columns, plus "ratio" = via coven / direct; the target is a
    first-token overhead p50 under 2 ms. CPU per delta: the median over the runs, in µs, and
    via coven / direct. ``--measure`` runs one part alone (the whole bench takes several
    minutes; ``--measure first-token --rounds 5`` about two and a half on two busy cores).

Usage: python bench/relay.py [--turns N] [--tools K] [--rounds R] [--warmup W]
           [--measure all|relay|first-token] [--stream-turns S] [--chunks C] [--chunk-chars X]
           [--chunk-delay D] [--stream-latency L] [--long-deltas N] [--long-delay D]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
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

import anyio
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

from coven_ls.agents.claude import resolve_claude
from coven_ls.testing import scripted_model
from coven_ls.testing.scripted_model import ModelRequest, Reply, ScriptedModel, Text, ToolUse

# What claude-agent-sdk passes the CLI for a coven-ls session (no model or permission mode set),
# so that both paths ask the same of the CLI: with --include-partial-messages it also writes a
# stream event per token, before the message they make up.
DIRECT_FLAGS = (
    "--output-format",
    "stream-json",
    "--verbose",
    "--permission-prompt-tool",
    "stdio",
    "--include-partial-messages",
    "--input-format",
    "stream-json",
)
DIRECT_ENV = {"CLAUDE_CODE_ENTRYPOINT": "sdk-py", "CLAUDE_CODE_SDK_READS_SESSION_STATE": "1"}
TURN_TIMEOUT = 90.0  # seconds for one turn (process start included)
TARGET_OVERHEAD_MS = 5.0
TARGET_OVERHEAD_RATIO = 0.10
TARGET_RELAY_MS = 0.5  # issue #12: what coven-ls adds to a message, against the same CLI flags
TARGET_FIRST_TOKEN_MS = 2.0
IDLE_SECONDS = 1.0  # the idle baseline's window before the long reply
SETTLE_SECONDS = 0.3  # after the turn before it, so that its aftermath is not taken for idle
TICK = os.sysconf("SC_CLK_TCK")

# turn: the relay turns; stream: a first-token reply; long: the reply the CPU is measured on.
PROMPT = re.compile(r"relay-bench run=(\d+) (turn|stream|long)=(\d+)")
WORDS = "the quick brown fox jumps over a lazy dog while streaming tokens one by one".split()


# --------------------------------------------------------------------------- the scripted model


@dataclass(frozen=True)
class Streaming:
    """How the model streams the first-token replies and the long reply (see the options)."""

    turns: int  # first-token replies per process, the uncounted first one included
    chunks: int
    chunk_chars: int
    chunk_delay: float
    latency: float
    long_deltas: int  # 0: no long reply
    long_delay: float


class Script:
    """Answers the bench's model calls: ``tools`` Read calls per turn, then a text; a streamed
    text for a first-token prompt, a long streamed text for the CPU prompt.

    Where a request stands is read from the conversation it carries: the last prompt names the
    run and turn, and the tool results after it count the steps taken. Every response gets a
    unique key (the tool-use id, or the text; a streamed text starts with its key) under which
    its request is recorded.
    """

    def __init__(self, tools: int, streaming: Streaming) -> None:
        self.tools = tools
        self.streaming = streaming
        self.workspaces: dict[int, Path] = {}
        self.requests: dict[str, ModelRequest] = {}
        self.repeated: set[str] = set()  # answered more than once (a CLI retry): not a sample
        self._lock = threading.Lock()

    @staticmethod
    def prompt(run: int, turn: int, kind: str = "turn") -> str:
        if kind == "turn":
            return f"relay-bench run={run} turn={turn}: read the step files one by one."
        return f"relay-bench run={run} {kind}={turn}: answer in prose."

    def key(self, run: int, turn: int, step: int) -> str:
        if step < self.tools:
            return f"toolu_relay_{run}_{turn}_{step}"
        return f"relay-bench done: run {run} turn {turn}."

    def keys(self, run: int, turns: int) -> list[str]:
        return [self.key(run, t, s) for t in range(turns) for s in range(self.tools + 1)]

    @staticmethod
    def stream_key(run: int, turn: int) -> str:
        return f"relay-bench-stream-r{run}-t{turn}"

    @staticmethod
    def long_key(run: int) -> str:
        return f"relay-bench-long-r{run}"

    def __call__(self, request: ModelRequest) -> Reply:
        position: tuple[int, str, int] | None = None
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
                    position, step = (int(found[1]), found[2], int(found[3])), 0
                elif kind == "tool_result":
                    step += 1
        if position is None or position[0] not in self.workspaces:
            return Reply((Text("relay-bench: a request nobody scripted"),))
        run, kind, turn = position
        streaming = self.streaming
        if kind == "stream":
            key, chunks, delay = self.stream_key(run, turn), streaming.chunks, streaming.chunk_delay
        elif kind == "long":
            key, chunks, delay = self.long_key(run), streaming.long_deltas, streaming.long_delay
        else:
            key = self.key(run, turn, step)
        with self._lock:
            if key in self.requests:
                self.repeated.add(key)
            self.requests[key] = request
        if kind != "turn":
            return Reply(
                (Text(prose(key, chunks * streaming.chunk_chars)),),
                latency=streaming.latency,
                chunk_chars=streaming.chunk_chars,
                chunk_delay=delay,
            )
        if step < self.tools:
            path = self.workspaces[run] / f"step-{step}.txt"
            return Reply((ToolUse("Read", {"file_path": str(path)}, key),))
        return Reply((Text(key),))


def prose(key: str, size: int) -> str:
    """`size` characters of text that start with `key` and a space (more if `key` needs it)."""
    text = key
    for word in itertools.cycle(WORDS):
        if len(text) >= size:
            break
        text += " " + word
    return text[: max(size, len(key) + 1)]


def key_of(text: str) -> str:
    """The key a streamed text starts with (see `prose`)."""
    return text.split(" ", 1)[0]


def stamp_first_deltas(model: ScriptedModel) -> dict[int, float]:
    """From now on, note when `model` writes the first ``text_delta`` of each streamed reply:
    ``id(request)`` -> time.monotonic() just before the write (as ``finished`` is stamped).

    The scripted model keeps no such stamp, so its request handler is swapped for a subclass
    that takes it; the responses it writes are the same."""
    sent: dict[int, float] = {}

    class Handler(scripted_model._Handler):
        _bench_request: ModelRequest | None = None

        def _stream(self, req: ModelRequest, rep: Reply) -> None:
            self._bench_request = req
            try:
                super()._stream(req, rep)
            finally:
                self._bench_request = None

        def _event(self, name: str, payload: dict[str, Any], last: bool = False) -> None:
            req = self._bench_request
            if (
                req is not None
                and name == "content_block_delta"
                and payload["delta"].get("type") == "text_delta"
                and id(req) not in sent
            ):
                sent[id(req)] = time.monotonic()
            super()._event(name, payload, last)

    assert model._server is not None, "the model must be started"
    model._server.RequestHandlerClass = Handler
    return sent


# --------------------------------------------------------------------------- shared plumbing


@dataclass
class Run:
    """One path's run: when each response's message arrived, keyed as in `Script`; when the
    first piece of each streamed reply did (by its key); the CPU per piece of the long reply."""

    path: str
    number: int
    arrivals: dict[str, float] = field(default_factory=dict)
    first_pieces: dict[str, float] = field(default_factory=dict)
    cpu_per_delta: float | None = None  # seconds
    long_deltas: int = 0


def _note(arrivals: dict[str, float], key: str, at: float) -> None:
    arrivals.setdefault(key, at)


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system, all threads) of process `pid` so far, from /proc/<pid>/stat
    (10 ms ticks)."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()  # from field 3 (state) on: the name may hold ")"
    return (int(fields[11]) + int(fields[12])) / TICK  # fields 14 and 15: utime, stime


def busy_cpu(used: float, wall: float, idle_used: float, idle_wall: float) -> float:
    """CPU `used` over `wall` seconds, less what the process burns idle at the same rate."""
    return used - idle_used * wall / idle_wall


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


class CovenSession:
    """A coven-ls server on `dirs`, driven by the bench's LSP client; one session in it, opened by
    the first `ask`. What its client reads goes into `record`."""

    def __init__(
        self,
        model: ScriptedModel,
        claude: str,
        run: int,
        dirs: RunDirs,
        stderr: IO[bytes],
    ) -> None:
        self.record = Run("via coven", run)
        self._workspace = dirs.workspace
        self._results: queue.Queue[dict[str, Any]] = queue.Queue()
        self._first_piece: dict[str, float] = {}  # block id -> its first coven/delta read
        self._deltas = 0  # coven/delta notifications read
        self._session: str | None = None
        self._proc = spawn_server(dirs.workspace, dirs.environ(model, own_state=True), stderr)
        self._client = LspClient(
            self._proc, timeout=TURN_TIMEOUT, on_notification=self._on_notification
        )
        try:
            self._client.initialize(dirs.workspace, {"claudePath": claude})
            self._client.notify("initialized", {})
        except BaseException:
            self.close()
            raise

    def _on_notification(self, method: str, params: Any, at: float) -> None:
        if not isinstance(params, dict):
            return
        if method == "coven/delta":
            self._deltas += 1
            self._first_piece.setdefault(params["blockId"], at)
            return
        if method != "coven/event":
            return
        record, kind = self.record, params.get("kind")
        if kind == "toolUse":
            _note(record.arrivals, params["toolUseId"], at)
        elif kind == "text":
            _note(record.arrivals, params["text"], at)
            if params.get("blockId") in self._first_piece:
                first = self._first_piece[params["blockId"]]
                _note(record.first_pieces, key_of(params["text"]), first)
        elif kind in ("turnResult", "error"):
            self._results.put(params)

    def ask(self, prompt: str) -> None:
        """One turn: the prompt sent, its turnResult read."""
        if self._session is None:
            started = self._client.request(
                "coven/startSession", {"prompt": prompt, "cwd": str(self._workspace)}
            )
            self._session = started["sessionId"]
        else:
            self._client.request("coven/sendMessage", {"sessionId": self._session, "text": prompt})
        result = self._results.get(timeout=TURN_TIMEOUT)
        if result.get("kind") != "turnResult" or result.get("isError"):
            raise RuntimeError(f"coven run {self.record.number}, {prompt[:40]!r} failed: {result}")

    def long_reply(self, prompt: str) -> None:
        """One turn, with the server's CPU per coven/delta read into `record`."""
        pid = self._proc.pid
        time.sleep(SETTLE_SECONDS)
        idle_cpu, idle_at = process_cpu(pid), time.monotonic()
        time.sleep(IDLE_SECONDS)
        cpu, at = process_cpu(pid), time.monotonic()
        idle_cpu, idle_wall = cpu - idle_cpu, at - idle_at
        self._deltas = 0
        self.ask(prompt)
        used, wall = process_cpu(pid) - cpu, time.monotonic() - at
        self.record.long_deltas = self._deltas
        if self._deltas:
            busy = busy_cpu(used, wall, idle_cpu, idle_wall)
            self.record.cpu_per_delta = busy / self._deltas

    def close(self) -> None:
        self._client.close(EXIT_TIMEOUT)


def run_coven(
    model: ScriptedModel, script: Script, claude: str, run: int, turns: int, stderr: IO[bytes]
) -> Run:
    with script_dirs(script, run) as dirs:
        coven = CovenSession(model, claude, run, dirs, stderr)
        try:
            for turn in range(turns):
                coven.ask(script.prompt(run, turn))
        finally:
            coven.close()
    return coven.record


# --------------------------------------------------------------------------- first visible token


def run_first_token(
    model: ScriptedModel, script: Script, claude: str, run: int, stderr: IO[bytes]
) -> tuple[Run, Run]:
    """The streamed replies of `script.streaming` on both paths side by side: a claude-agent-sdk
    client in this process (run `run`) and a coven-ls server (run `run` + 1), both started
    first, then a reply on one and a reply on the other, in turn (which goes first alternates),
    so that both see the machine alike; then the long reply on each, one after the other."""
    with script_dirs(script, run) as sdk_dirs, script_dirs(script, run + 1) as coven_dirs:
        coven = CovenSession(model, claude, run + 1, coven_dirs, stderr)
        try:
            sdk = Run("direct sdk", run)
            env = sdk_dirs.environ(model)
            anyio.run(_first_token, sdk, coven, script, claude, sdk_dirs.workspace, env, stderr)
        finally:
            coven.close()
    return sdk, coven.record


async def _first_token(
    record: Run,
    coven: CovenSession,
    script: Script,
    claude: str,
    cwd: Path,
    env: dict[str, str],
    stderr: IO[bytes],
) -> None:
    from claude_agent_sdk import (
        AssistantMessage,
        ClaudeAgentOptions,
        ClaudeSDKClient,
        PermissionResultAllow,
        ResultMessage,
        StreamEvent,
        TextBlock,
    )

    async def allow(tool: str, tool_input: dict[str, Any], context: Any) -> PermissionResultAllow:
        return PermissionResultAllow()

    def on_stderr(line: str) -> None:
        stderr.write(line.encode(errors="replace") + b"\n")

    # As coven-ls opens its sessions (core/agent.py), but the CLI itself rather than the launcher
    # that execs it; `env` is a whole environment (see `main` for what it leaves out).
    options = ClaudeAgentOptions(
        cwd=str(cwd),
        system_prompt={"type": "preset", "preset": "claude_code"},
        cli_path=claude,
        env=env,
        can_use_tool=allow,
        stderr=on_stderr,
        include_partial_messages=True,
        forward_subagent_text=True,
    )
    first_piece: dict[str, float] = {}  # message id -> when its first text_delta was yielded
    deltas = 0

    async def ask(client: ClaudeSDKClient, prompt: str) -> None:
        nonlocal deltas
        with anyio.fail_after(TURN_TIMEOUT):
            await client.query(prompt)
            message_id: str | None = None
            async for message in client.receive_response():
                at = time.monotonic()
                if isinstance(message, StreamEvent):
                    event = message.event
                    kind = event.get("type")
                    if kind == "message_start":
                        message_id = event["message"]["id"]
                    elif (
                        kind == "content_block_delta"
                        and event["delta"].get("type") == "text_delta"
                        and message_id is not None
                    ):
                        deltas += 1
                        first_piece.setdefault(message_id, at)
                elif isinstance(message, AssistantMessage):
                    for block in message.content:
                        if isinstance(block, TextBlock) and message.message_id in first_piece:
                            first = first_piece[message.message_id]
                            _note(record.first_pieces, key_of(block.text), first)
                elif isinstance(message, ResultMessage) and message.is_error:
                    raise RuntimeError(f"sdk run {record.number}, {prompt[:40]!r} failed")

    async def long_reply(client: ClaudeSDKClient, prompt: str) -> None:
        """As `CovenSession.long_reply`, with this thread's CPU: the SDK's event loop."""
        nonlocal deltas
        await anyio.sleep(SETTLE_SECONDS)
        idle_cpu, idle_at = time.thread_time(), time.monotonic()
        await anyio.sleep(IDLE_SECONDS)
        cpu, at = time.thread_time(), time.monotonic()
        idle_cpu, idle_wall = cpu - idle_cpu, at - idle_at
        deltas = 0
        await ask(client, prompt)
        used, wall = time.thread_time() - cpu, time.monotonic() - at
        record.long_deltas = deltas
        if deltas:
            record.cpu_per_delta = busy_cpu(used, wall, idle_cpu, idle_wall) / deltas

    streaming, runs = script.streaming, (record.number, coven.record.number)
    async with ClaudeSDKClient(options) as client:
        for turn in range(streaming.turns):
            for index in (0, 1) if turn % 2 == 0 else (1, 0):
                prompt = script.prompt(runs[index], turn, "stream")
                if index == 0:
                    await ask(client, prompt)
                else:
                    await anyio.to_thread.run_sync(coven.ask, prompt)
        if streaming.long_deltas:
            await long_reply(client, script.prompt(runs[0], 0, "long"))
            await anyio.to_thread.run_sync(coven.long_reply, script.prompt(runs[1], 0, "long"))


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


@dataclass
class FirstTokens:
    samples: list[float] = field(default_factory=list)  # seconds, first chunk written -> read
    cpu: list[float] = field(default_factory=list)  # seconds per delta, one per run
    deltas: list[int] = field(default_factory=list)  # the long reply's pieces, one per run
    missing: int = 0

    def add(self, run: Run, script: Script, sent: dict[int, float]) -> None:
        for turn in range(1, script.streaming.turns):  # the first is the reader's warm-up
            key = script.stream_key(run.number, turn)
            request = script.requests.get(key)
            written = sent.get(id(request)) if request is not None else None
            arrived = run.first_pieces.get(key)
            if written is None or arrived is None:
                self.missing += 1
                continue
            if key in script.repeated:
                continue
            self.samples.append(arrived - written)
        if run.cpu_per_delta is not None:
            self.cpu.append(run.cpu_per_delta)
            self.deltas.append(run.long_deltas)


def _row(name: str, values: list[float]) -> None:
    p50, p99 = percentile(values, 0.50), percentile(values, 0.99)
    mean = 1000 * statistics.fmean(values) if values else float("nan")
    print(f"  {name:<12}{len(values):>8}{p50:>9.2f}{p99:>9.2f}{mean:>9.2f}")


def _block(
    title: str, names: tuple[str, str], direct: list[float], coven: list[float], ratio: bool
) -> float:
    """p50/p99/mean of both paths, their difference and its share of direct (with `ratio`,
    coven / direct too); returns the p50 overhead in ms."""
    print(f"  {title:<12}{'samples':>8}{'p50':>9}{'p99':>9}{'mean':>9}")
    _row(names[0], direct)
    _row(names[1], coven)
    overhead = {q: percentile(coven, q) - percentile(direct, q) for q in (0.5, 0.99)}
    print(f"  {'overhead':<12}{'':>8}{overhead[0.5]:>9.2f}{overhead[0.99]:>9.2f}")
    shares = [100 * overhead[q] / percentile(direct, q) for q in (0.5, 0.99)]
    print(f"  {'% of direct':<12}{'':>8}{shares[0]:>8.1f}%{shares[1]:>8.1f}%")
    if ratio:
        times = [percentile(coven, q) / percentile(direct, q) for q in (0.5, 0.99)]
        print(f"  {'ratio':<12}{'':>8}{times[0]:>8.2f}x{times[1]:>8.2f}x")
    return overhead[0.5]


def report(direct: Figures, coven: Figures, args: argparse.Namespace) -> None:
    names = ("direct", "via coven")
    print()
    print(
        "relay latency in ms, model response written -> message read; "
        f"{args.rounds} rounds x {args.turns} turns x {args.tools + 1} responses per path"
    )
    overhead = _block("all", names, direct.samples, coven.samples, ratio=False)
    _block("steady", names, direct.steady, coven.steady, ratio=False)
    if direct.missing or coven.missing:
        print(f"  unmatched responses: direct {direct.missing}, via coven {coven.missing}")
    ratio = overhead / percentile(direct.samples, 0.5)
    verdicts = [
        (f"p50 overhead < {TARGET_OVERHEAD_MS:g} ms", overhead < TARGET_OVERHEAD_MS),
        (
            f"p50 overhead < {100 * TARGET_OVERHEAD_RATIO:g}% of direct p50",
            ratio < TARGET_OVERHEAD_RATIO,
        ),
        (f"p50 overhead < {TARGET_RELAY_MS:g} ms (issue #12)", overhead < TARGET_RELAY_MS),
    ]
    print()
    for what, met in verdicts:
        print_target(what, met)
    print(f"  (overhead p50 {overhead:.2f} ms = {100 * ratio:.1f}% of direct p50)")


def report_first_token(direct: FirstTokens, coven: FirstTokens, args: argparse.Namespace) -> None:
    print()
    print(
        "first visible token in ms, model's first text chunk written -> first piece read; "
        f"{args.rounds} rounds x {args.stream_turns - 1} replies per path "
        f"({args.chunks} chunks of {args.chunk_chars} chars, {1000 * args.chunk_delay:g} ms apart)"
    )
    names = ("direct sdk", "via coven")
    overhead = _block("first token", names, direct.samples, coven.samples, ratio=True)
    if direct.missing or coven.missing:
        print(f"  unmatched replies: direct sdk {direct.missing}, via coven {coven.missing}")
    cpu = {}
    if args.long_deltas:
        print(
            f"CPU per streamed delta in µs, a reply of {args.long_deltas} deltas "
            f"{1000 * args.long_delay:g} ms apart, idle baseline subtracted; median of the runs"
        )
        print(f"  {'':<12}{'runs':>8}{'median':>9}{'min':>9}{'max':>9}")
        for name, figures in zip(names, (direct, coven), strict=True):
            values = [1e6 * v for v in figures.cpu]
            cpu[name] = statistics.median(values) if values else float("nan")
            low, high = (min(values), max(values)) if values else (float("nan"),) * 2
            print(f"  {name:<12}{len(values):>8}{cpu[name]:>9.1f}{low:>9.1f}{high:>9.1f}")
        short = [n for f in (direct, coven) for n in f.deltas if n != args.long_deltas]
        if short:
            print(f"  (some runs read fewer or more deltas: {sorted(short)})")
        print(f"  {'ratio':<12}{'':>8}{cpu[names[1]] / cpu[names[0]]:>8.2f}x")
    print()
    print_target(
        f"first-token p50 overhead < {TARGET_FIRST_TOKEN_MS:g} ms",
        overhead < TARGET_FIRST_TOKEN_MS,
    )
    share = 100 * overhead / percentile(direct.samples, 0.5)
    detail = f"  (first-token overhead p50 {overhead:.2f} ms = {share:.1f}% of direct p50"
    if cpu:
        detail += f"; server CPU {cpu[names[1]]:.1f} µs per delta"
    print(detail + ")")


# --------------------------------------------------------------------------- main


def summary(record: Run, script: Script, turns: int, sent: dict[int, float] | None) -> str:
    """What one run gave, for its round's line: relay figures, or with `sent` first-token ones."""
    if sent is None:
        one = Figures()
        one.add(record, script, turns)
        return f"{record.path} p50 {percentile(one.samples, 0.5):.2f} ms"
    first = FirstTokens()
    first.add(record, script, sent)
    line = f"{record.path} first token p50 {percentile(first.samples, 0.5):.2f} ms"
    if record.cpu_per_delta is not None:
        line += f" {1e6 * record.cpu_per_delta:.0f} µs/delta"
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=5, help="turns per run (default 5)")
    parser.add_argument(
        "--tools", type=int, default=8, help="tool calls per turn before the text (default 8)"
    )
    parser.add_argument("--rounds", type=int, default=8, help="measured rounds (default 8)")
    parser.add_argument("--warmup", type=int, default=1, help="rounds not counted (default 1)")
    parser.add_argument("--claude", help="CLI to run (default: as coven-ls would pick it)")
    parser.add_argument(
        "--measure",
        choices=("all", "relay", "first-token"),
        default="all",
        help="what to measure (default all)",
    )
    parser.add_argument(
        "--stream-turns",
        type=int,
        default=11,
        help="streamed replies per process, the uncounted first included (default 11)",
    )
    parser.add_argument("--chunks", type=int, default=10, help="pieces per reply (default 10)")
    parser.add_argument(
        "--chunk-chars", type=int, default=4, help="characters per piece (default 4)"
    )
    parser.add_argument(
        "--chunk-delay", type=float, default=0.02, help="seconds between pieces (default 0.02)"
    )
    parser.add_argument(
        "--stream-latency",
        type=float,
        default=0.1,
        help="seconds before a streamed reply starts (default 0.1)",
    )
    parser.add_argument(
        "--long-deltas",
        type=int,
        default=1000,
        help="pieces of the reply CPU is measured on; 0: none (default 1000)",
    )
    parser.add_argument(
        "--long-delay", type=float, default=0.001, help="seconds between its pieces (default 0.001)"
    )
    args = parser.parse_args(argv)
    if args.turns < 1 or args.tools < 0 or args.rounds < 1 or args.warmup < 0:
        parser.error("--turns and --rounds must be at least 1, --tools and --warmup at least 0")
    relay, streamed = args.measure != "first-token", args.measure != "relay"
    if streamed and (args.stream_turns < 2 or args.chunks < 1 or args.chunk_chars < 1):
        parser.error("--stream-turns must be at least 2, --chunks and --chunk-chars at least 1")
    if args.long_deltas < 0 or min(args.chunk_delay, args.stream_latency, args.long_delay) < 0:
        parser.error("--long-deltas and the delays cannot be negative")

    claude = args.claude or resolve_claude(None)[0]
    streaming = Streaming(
        turns=args.stream_turns,
        chunks=args.chunks,
        chunk_chars=args.chunk_chars,
        chunk_delay=args.chunk_delay,
        latency=args.stream_latency,
        long_deltas=args.long_deltas,
        long_delay=args.long_delay,
    )
    script = Script(args.tools, streaming)
    figures = {"direct": Figures(), "via coven": Figures()}
    first_tokens = {"direct sdk": FirstTokens(), "via coven": FirstTokens()}
    runners = {"direct": run_direct, "via coven": run_coven}
    started = time.monotonic()
    with (
        ScriptedModel() as model,
        tempfile.TemporaryFile(prefix="relay-bench-stderr-") as stderr,
    ):
        model.on(lambda request: True, script)
        sent = stamp_first_deltas(model)
        # The SDK starts its CLI with this process's environment under the one it is given:
        # leave out what the model's environment leaves out (nesting markers, credentials).
        for name in set(os.environ) - set(model.cli_environ(tempfile.gettempdir())):
            del os.environ[name]
        run = 0
        try:
            for round_number in range(args.warmup + args.rounds):
                warmup = round_number < args.warmup
                order = ["direct", "via coven"] if relay else []
                if round_number % 2:
                    order.reverse()
                summaries = []
                for path in order:
                    run += 1
                    record = runners[path](model, script, claude, run, args.turns, stderr)
                    if not warmup:
                        figures[path].add(record, script, args.turns)
                    summaries.append(summary(record, script, args.turns, None))
                if streamed:
                    pair = run_first_token(model, script, claude, run + 1, stderr)
                    run += 2
                    for record in pair:
                        if not warmup:
                            first_tokens[record.path].add(record, script, sent)
                        summaries.append(summary(record, script, args.turns, sent))
                label = "warm-up" if warmup else f"round {round_number - args.warmup + 1}"
                print(f"{label:<8} " + ", ".join(summaries), flush=True)
        except (RuntimeError, queue.Empty, TimeoutError) as exc:
            tail = stderr_tail(stderr, 3000)
            print(f"run {run} failed: {exc or 'timed out'}\n{tail}", file=sys.stderr)
            return 1
    if relay:
        report(figures["direct"], figures["via coven"], args)
    if streamed:
        report_first_token(first_tokens["direct sdk"], first_tokens["via coven"], args)
    print(f"(took {time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
