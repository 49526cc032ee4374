"""Store cost: what the durable event log (sqlite, WAL, group commit) costs the relay, and how a
server restarted on a full store serves it.

What is measured
    1. Append throughput, in process, through the real code path: a ``Hub`` in an anyio task
       group, a fake LSP client whose ``send_frame`` counts frames, and ``--sessions`` sessions
       made by the hub itself (``Hub._new_session``, a backend that never starts an agent) whose
       events go out through ``Session.emit`` -> ``Hub.publish`` -> [with the store: outbox ->
       ``Journal._flush_once`` -> ``Store.write``, one statement and one transaction, on the
       loop for a small burst, in a worker thread for a big one] -> ``Hub._deliver`` ->
       ``send_frame``. Each session emits ``--events`` events shaped like a
       real turn: bursts of [text ~200 chars, toolUse with a small input] (one assistant
       message) and [toolResult ~1 KB] (one user message). "Saturated": every session is a task
       that emits a burst, yields to the loop, and emits the next at once. Once with the
       sessions in a store (``Hub.open_store`` on a temp stateDir, as a server opens it for a
       client: part 3 restarts on that database), once without. events/s = events / (first
       emit -> last frame); latency = one event's emit -> its send_frame (``perf_counter``).
       Saturated latency is queueing (a burst waits for the commit before it), not the cost
       of one commit; events/s is the capacity of each path on this machine.
    2. Relay cost, "paced": ``--rate`` events/s in all, Poisson bursts spread over the sessions,
       for ``--paced-seconds``: the store commits small bursts as they come, as with real agents
       (a few events/s each). events/s is then just the offered rate; the p50 emit -> frame with
       the store minus without is what the store adds to every event. "busier" does the same at
       ``--heavy-rate``. These runs append to a copy of part 1's full database (a commit into a
       large table costs more than into an empty one).
       Under load: part 1 (with ``--load-events`` each, fewer: it is slow) and part 2 again
       while a CPU-bound Python thread runs in the process, so that the event loop and the
       store's worker thread compete with it for the GIL, as they would with any busy thread.
       The no-store run is loaded the same way.
    3. Restart: ``python -m coven_ls`` on part 1's database (rootUri = the same workspace,
       initializationOptions.stateDir = the same folder), driven by a small raw JSON-RPC client
       (a reader thread timestamps each frame once fully read, before decoding it). startup =
       spawn -> initialize answered (the store is opened and loaded inside initialize);
       baseline: the same server on an empty stateDir. Then ``--repeat`` round trips of
       coven/listSessions and coven/getEvents (afterSeq 0: a whole session; the last 10
       events: a client catching up), the server's RSS right after initialize and after those
       reads (sessions are restored without their events, which are read from the store when
       asked for: the reads fill sqlite's page cache, 16 MiB at most), and the database's size
       on disk.

How to read the output
    p50/p99/max in milliseconds; "ratio" is with store / without, measured in the same run.
    CPU us/ev: CPU time of this process (every thread) per event (not shown under load: the
    busy thread's CPU would count). wrote/ev: bytes the process handed to write() per event
    (/proc/self/io wchar: the WAL frames, whole 4 KiB pages, and checkpoints). commits: store
    transactions; the "store:" line splits a commit into Store.write (the worker thread's
    part) and the whole flush as the loop sees it (building rows, thread hop, write, sending).
    The issue's target "the store costs the relay under 10%" is judged two ways: saturated
    events/s lost, and paced p50 latency added as a % of the no-store p50 (that p50 is only the
    in-process step of the relay, tens of microseconds, so the % is harsh; the added time is
    also set against bench/relay.py's 5 ms p50 budget for all of coven-ls' overhead).
    listSessions target: p50 under 50 ms. Restart targets (issue #12, a restart that does not
    grow with history): initialize on the full store within 1.3x of an empty store, and the
    server's RSS (after the reads) within 30 MiB of the empty store's. The loaded runs depend
    on how the OS schedules the threads and vary a lot from run to run; p99 is indicative.

Usage: python bench/store.py [--sessions 100] [--events 2000] [--load-events 200] [--rate 1000]
       [--heavy-rate 5000] [--paced-seconds 4] [--repeat 30]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import queue
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import anyio
import anyio.lowlevel
from common import LspClient, percentile, print_target, proc_value, spawn_server, stderr_tail

from coven_ls import protocol
from coven_ls.agents import REGISTRY
from coven_ls.core.agent import (
    Abilities,
    Agent,
    AgentSpec,
    Conversation,
    Decision,
    Entry,
    PermissionAsker,
)
from coven_ls.core.hub import ClientSettings, Hub
from coven_ls.core.journal import SWITCH_INTERVAL
from coven_ls.core.session import Session, SessionConfig
from coven_ls.core.store import Store, database_path
from coven_ls.protocol.events import Payload, Text, ToolResult, ToolUse
from coven_ls.protocol.types import PermissionOption

TARGET_RELAY_COST = 0.10  # the store may cost the relay under 10%
# An event path that does not starve (issue #12): beside a CPU-bound thread, paced events are
# delivered at >= 95% of the offered rate with p99 emit->frame under 50 ms; saturated, the
# store keeps >= 80% of the throughput without it.
TARGET_LOADED_DELIVERED = 0.95
TARGET_LOADED_P99_MS = 50.0
TARGET_SATURATED_KEPT = 0.80
TARGET_LIST_MS = 50.0  # listSessions under 50 ms
# A restart does not grow with history (issue #12): initialize on the full store within 1.3x of
# an empty one, and the server's RSS within 30 MiB of it.
TARGET_STARTUP_RATIO = 1.3
TARGET_RSS_ADDED_MIB = 30.0
RELAY_BUDGET_MS = 5.0  # bench/relay.py: coven-ls' whole overhead, p50
REQUEST_TIMEOUT = 120.0

Burst = list[Payload]
NOW = "2026-11-22T01:36:13.290Z"

# --------------------------------------------------------------------------- the workload

WORDS = (
    "the session reads the file and then edits the function so that the tests pass again "
    "while the fork children look at the parser the renderer and the store in parallel"
).split()


def _sentence(rng: random.Random, length: int) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < length:
        words.append(rng.choice(WORDS))
    return " ".join(words)[:length]


def _file_text(rng: random.Random, length: int) -> str:
    lines: list[str] = []
    size = 0
    number = 1
    while size < length:
        line = f"{number:>5}\t    {_sentence(rng, rng.randint(20, 70))}"
        lines.append(line)
        size += len(line) + 1
        number += 1
    return "\n".join(lines)[:length]


def make_template(events: int, variant: int) -> list[Burst]:
    """One session's events as bursts: [text, toolUse] (one assistant message), [toolResult]
    (one user message), repeated. Sizes: text ~200 chars, toolResult ~1 KB."""
    rng = random.Random(variant)
    bursts: list[Burst] = []
    count = 0
    for cycle in itertools.count():
        if count >= events:
            break
        message_id = f"asst-{variant}-{cycle}"
        tool_use_id = f"toolu_{variant:02d}{cycle:06d}"
        path = f"src/module_{rng.randint(0, 40)}.py"
        tools: list[tuple[str, dict[str, Any]]] = [
            ("Read", {"file_path": f"/work/project/{path}"}),
            ("Bash", {"command": f"pytest -q tests/test_{rng.randint(0, 40)}.py -x"}),
            ("Grep", {"pattern": rng.choice(WORDS), "path": "src", "-n": True}),
        ]
        tool, tool_input = rng.choice(tools)
        assistant: Burst = [
            Text(text=_sentence(rng, rng.randint(150, 250)), messageId=message_id),
            ToolUse(toolUseId=tool_use_id, name=tool, input=tool_input, messageId=message_id),
        ]
        user: Burst = [
            ToolResult(
                toolUseId=tool_use_id,
                content=_file_text(rng, rng.randint(800, 1250)),
                isError=False,
            )
        ]
        for burst in (assistant, user):
            burst = burst[: events - count]
            if burst:
                bursts.append(burst)
                count += len(burst)
    return bursts


# --------------------------------------------------------------------------- in-process hub


class NeverBackend:
    """A backend for sessions that never run a turn: the bench emits their events itself."""

    def abilities(self) -> Abilities:
        return Abilities("claude")

    async def find_abilities(self) -> Abilities:
        return self.abilities()

    def check(self) -> None:
        pass

    async def aclose(self) -> None:
        return None

    async def fork_point_problem(self, conversation: str, message_id: str) -> str | None:
        return None

    async def purge(self, conversations: list[Conversation]) -> None:
        return None

    async def open(self, spec: AgentSpec, ask_permission: PermissionAsker) -> Agent:
        raise RuntimeError("bench sessions do not start an agent")

    async def conversation(
        self, agent_session_id: str, cwd: str, up_to: str | None = None
    ) -> list[Entry]:
        raise RuntimeError("bench sessions have no conversation")


class BenchClient:
    """The hub's view of an editor: counts frames and times each event's arrival."""

    def __init__(self, settings: ClientSettings, emitted: dict[str, list[float]]) -> None:
        self.settings = settings
        self.store: Store | None = None
        self.frames = 0
        self.bytes = 0
        self.latencies: list[float] = []
        self.last_frame = 0.0
        self._emitted = emitted
        self._sent_at = 0.0

    def send_frame(self, frame: bytes) -> None:
        self._sent_at = time.perf_counter()
        self.frames += 1
        self.bytes += len(frame)

    def observe_delta(self, delta: Any) -> None:
        pass

    def observe(self, event: dict[str, Any]) -> None:
        # Called by the hub right after send_frame for the same event.
        self.latencies.append(self._sent_at - self._emitted[event["sessionId"]][event["seq"]])
        self.last_frame = self._sent_at

    async def ask_permission(
        self,
        session: Session,
        tool_name: str,
        tool_input: dict[str, Any],
        tool_use_id: str | None,
        options: Sequence[PermissionOption] = (),
    ) -> Decision:
        return Decision(False, "bench")

    async def ask_fork_approval(self, session: Session, tasks: list[str]) -> bool | None:
        return None

    async def ask_review(self, child: Session) -> bool | None:
        return None

    def show_message(self, message: str, warning: bool) -> None:
        pass


@dataclass
class Run:
    label: str
    events: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)  # seconds
    frames: int = 0
    loaded: bool = False
    cpu: float = 0.0  # process CPU seconds (every thread) from first emit to last frame
    written: int = 0  # bytes this process passed to write() meanwhile (/proc/self/io wchar)
    writes: list[float] = field(default_factory=list)  # Store.write durations, s
    flushes: list[float] = field(default_factory=list)  # Journal._flush_once durations, s
    checkpoints: list[float] = field(default_factory=list)  # Store.checkpoint durations, s
    events_written: int = 0
    files: dict[str, int] = field(default_factory=dict)  # database file sizes after the run

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds else float("nan")


def _wchar() -> int:
    """Bytes this process has handed to write() so far (0 where /proc/self/io is unreadable)."""
    return proc_value("/proc/self/io", "wchar") or 0


@contextmanager
def cpu_hog(enabled: bool) -> Iterator[None]:
    """A pure-Python busy thread in this process, competing for the GIL."""
    stop = threading.Event()

    def burn() -> None:
        x = 0
        while not stop.is_set():
            for i in range(2000):
                x ^= i

    thread = threading.Thread(target=burn, name="cpu-hog", daemon=True) if enabled else None
    if thread is not None:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        if thread is not None:
            thread.join()


async def run_hub(
    label: str,
    templates: list[list[Burst]],
    sessions: int,
    store_at: ClientSettings | Path | None,
    pace: float | None = None,
    loaded: bool = False,
) -> Run:
    """Emit every session's template through a real Hub. `store_at`: the sessions belong to a
    store, opened as a server would for a client with those settings (restoring whatever it
    holds) or, given a path, opened as is (an existing store, without restoring its sessions);
    None: no store. `pace`: total events/s in Poisson bursts; None: flat out."""
    emitted: dict[str, list[float]] = {}
    root = store_at.root if isinstance(store_at, ClientSettings) else os.getcwd()
    client = BenchClient(ClientSettings(root=root), emitted)
    run = Run(label)
    backend = NeverBackend()
    async with anyio.create_task_group() as tg:
        hub = Hub(tg, REGISTRY.with_backends(lambda *_: backend))
        store: Store | None = None
        if isinstance(store_at, ClientSettings):
            store, _warning = await hub.open_store(store_at)
            assert store is not None, _warning
        elif store_at is not None:
            opened, _warning = await anyio.to_thread.run_sync(Store.open, store_at)
            hub.stores[store_at] = store = opened
        if store is not None:
            client.store = store
            plain_write = store.write

            plain_flush = hub.journal._flush_once

            def timed_write(
                events: Iterable[tuple[dict[str, Any], bytes]],
                sessions: Iterable[dict[str, Any]] = (),
                forks: Iterable[dict[str, Any]] = (),
            ) -> None:
                batch = list(events)
                began = time.perf_counter()
                plain_write(batch, sessions, forks)
                run.writes.append(time.perf_counter() - began)
                run.events_written += len(batch)

            async def timed_flush() -> None:
                began = time.perf_counter()
                await plain_flush()
                run.flushes.append(time.perf_counter() - began)

            plain_checkpoint = store.checkpoint

            def timed_checkpoint() -> None:
                began = time.perf_counter()
                plain_checkpoint()
                run.checkpoints.append(time.perf_counter() - began)

            store.write = timed_write  # type: ignore[method-assign]
            store.checkpoint = timed_checkpoint  # type: ignore[method-assign]
            hub.journal._flush_once = timed_flush  # type: ignore[method-assign]
        hub.attach(client)
        made = [
            hub._new_session(
                backend,
                SessionConfig(cwd=root),
                status="idle",
                launch=False,
                store=store,
                title=f"bench session {n}",
            )
            for n in range(sessions)
        ]
        plan = [(s, templates[n % len(templates)]) for n, s in enumerate(made)]
        for session, bursts in plan:
            emitted[session.id] = [0.0] * (sum(len(b) for b in bursts) + 1)
        burst_rate = pace / sessions / 1.5 if pace else 0.0  # per session; 1.5 events a burst

        async def produce(session: Session, bursts: list[Burst], rng: random.Random) -> None:
            stamps = emitted[session.id]
            due = anyio.current_time()
            for burst in bursts:
                if pace:
                    due += rng.expovariate(burst_rate)
                    await anyio.sleep_until(due)
                for payload in burst:
                    stamps[session.last_seq + 1] = time.perf_counter()
                    session.emit(payload)
                if not pace:
                    # One burst per turn of the loop, as the SDK relay yields between messages.
                    await anyio.lowlevel.checkpoint()

        gc.collect()
        with cpu_hog(loaded):
            cpu, written = time.process_time(), _wchar()
            started = time.perf_counter()
            async with anyio.create_task_group() as producers:
                for n, (session, bursts) in enumerate(plan):
                    producers.start_soon(produce, session, bursts, random.Random(n))
            await hub.flushed()
            run.cpu, run.written = time.process_time() - cpu, _wchar() - written
        run.loaded = loaded
        run.events = sum(len(v) - 1 for v in emitted.values())
        run.seconds = client.last_frame - started
        run.latencies = client.latencies
        run.frames = client.frames
        if store is not None:
            run.files = db_files(store.path)
            await anyio.to_thread.run_sync(store.close)
            hub.stores.clear()
        tg.cancel_scope.cancel()  # the hub's store writer (and restored sessions' runners)
    return run


# --------------------------------------------------------------------------- a restarted server


@dataclass
class Served:
    startup: float = 0.0  # spawn -> initialize answered
    init_rss_mib: float = 0.0
    rss_mib: float = 0.0
    hwm_mib: float = 0.0
    sessions: int = 0
    list_ms: list[float] = field(default_factory=list)
    list_bytes: int = 0
    full_ms: list[float] = field(default_factory=list)
    full_bytes: int = 0
    full_events: int = 0
    tail_ms: list[float] = field(default_factory=list)
    shutdown: float = 0.0


def _proc_mib(pid: int, key: str) -> float:
    """A kB figure of /proc/<pid>/status (VmRSS, VmHWM) in MiB; nan for a process gone."""
    kib = proc_value(f"/proc/{pid}/status", key)
    return float("nan") if kib is None else kib / 1024


def serve(workspace: Path, state_dir: Path, repeat: int, stderr: IO[bytes]) -> Served:
    """Start a server on `workspace` + `state_dir`, time initialize and the read requests."""
    env = {k: v for k, v in os.environ.items() if k not in ("CLAUDECODE", "CLAUDE_CODE_SESSION_ID")}
    served = Served()
    spawned = time.perf_counter()
    proc = spawn_server(workspace, env, stderr)
    client = LspClient(proc, timeout=REQUEST_TIMEOUT, clock=time.perf_counter)
    try:
        client.initialize(workspace, {"stateDir": str(state_dir)}, forks=True)
        served.startup = time.perf_counter() - spawned
        served.init_rss_mib = _proc_mib(proc.pid, "VmRSS")
        client.notify("initialized", {})
        ids: list[str] = []
        for _ in range(repeat):
            listed, seconds, size = client.timed_request("coven/listSessions", {})
            served.list_ms.append(1000 * seconds)
            served.list_bytes = size
            ids = [s["sessionId"] for s in listed["sessions"]]
        served.sessions = len(ids)
        for n in range(repeat if ids else 0):
            session_id = ids[n * 7 % len(ids)]
            got, seconds, size = client.timed_request(
                "coven/getEvents", {"sessionId": session_id, "afterSeq": 0}
            )
            served.full_ms.append(1000 * seconds)
            served.full_bytes = size
            served.full_events = len(got["events"])
            last = got["events"][-1]["seq"] if got["events"] else 0
            _got, seconds, _size = client.timed_request(
                "coven/getEvents", {"sessionId": session_id, "afterSeq": max(last - 10, 0)}
            )
            served.tail_ms.append(1000 * seconds)
        served.rss_mib = _proc_mib(proc.pid, "VmRSS")
        served.hwm_mib = _proc_mib(proc.pid, "VmHWM")
    finally:
        served.shutdown = client.close()
    return served


# --------------------------------------------------------------------------- figures


def db_files(path: Path) -> dict[str, int]:
    sizes = {}
    for suffix in ("", "-wal", "-shm"):
        file = Path(f"{path}{suffix}")
        sizes[suffix or "db"] = file.stat().st_size if file.exists() else 0
    return sizes


def mib(n: float) -> float:
    return n / 2**20


def print_runs(title: str, plain: Run, stored: Run) -> None:
    print(title)
    print(
        f"  {'':<10}{'events':>8}{'events/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}"
        f"{'CPU us/ev':>11}{'wrote/ev':>10}{'commits':>9}"
    )
    for run in (plain, stored):
        cpu = "-" if run.loaded else f"{1e6 * run.cpu / run.events:.1f}"
        p50, p99, top = (percentile(run.latencies, q) for q in (0.5, 0.99, 1.0))
        print(
            f"  {run.label:<10}{run.events:>8}{run.rate:>10.0f}{p50:>10.3f}{p99:>10.3f}{top:>10.1f}"
            f"{cpu:>11}{_size(run.written / run.events):>10}{len(run.writes) or '-':>9}"
        )
    ratios = [stored.rate / plain.rate] + [
        percentile(stored.latencies, q) / percentile(plain.latencies, q) for q in (0.5, 0.99, 1.0)
    ]
    cpu_ratio = "-" if stored.loaded else _times(stored.cpu / plain.cpu)
    print(
        f"  {'ratio':<10}{'':>8}" + "".join(f"{_times(r):>10}" for r in ratios) + f"{cpu_ratio:>11}"
    )
    if stored.writes:
        w50, w99, wmax = (percentile(stored.writes, q) for q in (0.5, 0.99, 1.0))
        f50, f99 = (percentile(stored.flushes, q) for q in (0.5, 0.99))
        print(
            f"  store: {_count(stored.events_written / len(stored.writes))} events a commit; "
            f"Store.write p50 {w50:.2f} ms, p99 {w99:.1f}, max {wmax:.0f}; whole flush "
            f"(rows, thread hop, write, send) p50 {f50:.2f} ms, p99 {f99:.1f}"
        )
        if stored.checkpoints:
            print(
                f"  {len(stored.checkpoints)} WAL checkpoints in a worker thread, beside the "
                f"commits: p50 {percentile(stored.checkpoints, 0.5):.1f} ms, "
                f"max {percentile(stored.checkpoints, 1.0):.1f}"
            )
    for run in (plain, stored):
        if run.frames != run.events:
            print(f"  {run.label}: {run.frames} frames for {run.events} events")


def _count(n: float) -> str:
    return f"{n:.1f}" if n < 10 else f"{n:.0f}"


def _size(n: float) -> str:
    return f"{n:.0f} B" if n < 1024 else f"{n / 1024:.1f} KiB"


def _times(ratio: float) -> str:
    return f"{ratio:.0f}x" if ratio >= 100 else f"{ratio:.2f}x"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=100, help="sessions (default 100)")
    parser.add_argument("--events", type=int, default=2000, help="events each (default 2000)")
    parser.add_argument(
        "--load-events",
        type=int,
        default=200,
        help="events each in the saturated run under load (default 200)",
    )
    parser.add_argument(
        "--rate", type=float, default=1000.0, help="paced events/s in total (default 1000)"
    )
    parser.add_argument(
        "--heavy-rate", type=float, default=5000.0, help="the busier paced run (default 5000)"
    )
    parser.add_argument(
        "--paced-seconds", type=float, default=4.0, help="length of a paced run (default 4)"
    )
    parser.add_argument(
        "--repeat", type=int, default=30, help="round trips per request in part 3 (default 30)"
    )
    parser.add_argument(
        "--switch-interval",
        type=float,
        default=SWITCH_INTERVAL,
        help=f"the interpreter's switch interval, s (default {SWITCH_INTERVAL:g}: what a serving "
        "coven-ls sets; CPython's own is 0.005)",
    )
    args = parser.parse_args(argv)
    if args.switch_interval <= 0:
        parser.error("--switch-interval must be positive")
    sys.setswitchinterval(args.switch_interval)
    if min(args.sessions, args.events, args.load_events, args.repeat) < 1:
        parser.error("--sessions, --events, --load-events and --repeat must be at least 1")
    if min(args.rate, args.heavy_rate, args.paced_seconds) <= 0:
        parser.error("--rate, --heavy-rate and --paced-seconds must be positive")

    started = time.perf_counter()
    templates = [make_template(args.events, variant) for variant in range(8)]
    load_templates = [make_template(args.load_events, variant) for variant in range(8)]

    def paced(rate: float) -> list[list[Burst]]:
        each = max(round(rate * args.paced_seconds / args.sessions), 1)
        return [make_template(each, 100 + variant) for variant in range(8)]

    sample = [e for burst in templates[0] for e in burst]
    sizes = {
        kind: statistics.fmean(
            len(protocol.event_body(protocol.event_dict("s-0123456789ab", 1, NOW, p)))
            for p in sample
            if p.kind == kind
        )
        for kind in (protocol.Kind.TEXT, protocol.Kind.TOOL_USE, protocol.Kind.TOOL_RESULT)
        if any(p.kind == kind for p in sample)
    }
    print(
        f"{args.sessions} sessions x {args.events} events; mean event JSON bytes: "
        + ", ".join(f"{k} {v:.0f}" for k, v in sizes.items())
        + f"; switch interval {1000 * sys.getswitchinterval():g} ms"
    )

    with tempfile.TemporaryDirectory(prefix="store-bench-") as tmp:
        workspace = Path(tmp, "workspace")
        workspace.mkdir()
        state = Path(tmp, "state")
        settings = ClientSettings(
            str(workspace), protocol.InitializationOptions(stateDir=str(state))
        )
        path = database_path(settings.root, settings.options.stateDir)
        copy = Path(tmp, "copy", path.name)

        async def in_process() -> dict[str, Run]:
            runs: dict[str, Run] = {}
            warm = [make_template(60, 0)]
            await run_hub("warm-up", warm, 10, None)
            await run_hub("warm-up", warm, 10, Path(tmp, "warm", path.name))
            runs["plain"] = await run_hub("no store", templates, args.sessions, None)
            runs["stored"] = await run_hub("store", templates, args.sessions, settings)
            # Paced and loaded runs append to a copy of that full store: commits into a large
            # database cost more than into an empty one.
            copy.parent.mkdir()
            shutil.copyfile(path, copy)
            runs["plain-load"] = await run_hub(
                "no store", load_templates, args.sessions, None, loaded=True
            )
            runs["stored-load"] = await run_hub(
                "store", load_templates, args.sessions, copy, loaded=True
            )
            for name, rate, loaded in (
                ("paced", args.rate, False),
                ("heavy", args.heavy_rate, False),
                ("paced-load", args.rate, True),
            ):
                shape = paced(rate)
                runs[name + "-plain"] = await run_hub(
                    "no store", shape, args.sessions, None, rate, loaded
                )
                runs[name + "-stored"] = await run_hub(
                    "store", shape, args.sessions, copy, rate, loaded
                )
            return runs

        runs = anyio.run(in_process)
        shutil.rmtree(copy.parent)
        print()
        print_runs(
            "1. append, saturated (every session emits its bursts as fast as it can)",
            runs["plain"],
            runs["stored"],
        )
        print_runs(
            f"   under load (a CPU-bound thread in the process; {args.load_events} events each)",
            runs["plain-load"],
            runs["stored-load"],
        )
        print()
        for title, name in (
            (f"2. relay cost, paced: {args.rate:g} events/s in all", "paced"),
            (f"   busier: {args.heavy_rate:g} events/s in all", "heavy"),
            (f"   under load: {args.rate:g} events/s and a CPU-bound thread", "paced-load"),
        ):
            print_runs(title, runs[name + "-plain"], runs[name + "-stored"])

        with tempfile.TemporaryFile(prefix="store-bench-stderr-") as stderr:
            try:
                serve(workspace, Path(tmp, "warm-state"), 1, stderr)  # warm the page cache
                empty = serve(workspace, Path(tmp, "empty-state"), args.repeat, stderr)
                full = serve(workspace, state, args.repeat, stderr)
            except (RuntimeError, OSError, KeyError, queue.Empty) as exc:
                tail = stderr_tail(stderr, 3000)
                print(f"server failed: {exc or 'timed out'}\n{tail}", file=sys.stderr)
                return 1
        closed = db_files(path)

    print()
    print(
        f"3. a server restarted on that store: {full.sessions} sessions listed, "
        f"{full.full_events} events in a getEvents from 0"
    )
    print(f"  {'':<24}{'empty store':>13}{'full store':>13}{'ratio':>8}")

    def row(name: str, a: float, b: float, unit: str = "ms") -> None:
        print(f"  {name:<24}{a:>10.1f} {unit:<2}{b:>10.1f} {unit:<2}{b / a:>7.1f}x")

    row("startup: spawn -> init", 1000 * empty.startup, 1000 * full.startup)
    row("listSessions p50", percentile(empty.list_ms, 0.5, 1), percentile(full.list_ms, 0.5, 1))
    row("listSessions p99", percentile(empty.list_ms, 0.99, 1), percentile(full.list_ms, 0.99, 1))
    row("server RSS after init", empty.init_rss_mib, full.init_rss_mib, "Mi")
    row("server RSS at the end", empty.rss_mib, full.rss_mib, "Mi")
    row("server peak RSS", empty.hwm_mib, full.hwm_mib, "Mi")
    row("shutdown", 1000 * empty.shutdown, 1000 * full.shutdown)
    print(f"  listSessions answer: {full.list_bytes / 1024:.0f} KiB")
    print(
        f"  getEvents afterSeq 0 ({full.full_bytes / 2**20:.2f} MiB answer): "
        f"p50 {percentile(full.full_ms, 0.5, 1):.1f} ms, "
        f"p99 {percentile(full.full_ms, 0.99, 1):.1f} ms"
    )
    print(
        f"  getEvents last 10: p50 {percentile(full.tail_ms, 0.5, 1):.2f} ms, "
        f"p99 {percentile(full.tail_ms, 0.99, 1):.2f} ms"
    )
    live = runs["stored"].files
    json_mean = statistics.fmean(
        len(protocol.event_body(protocol.event_dict("s-0123456789ab", 1, NOW, p))) for p in sample
    )
    total = args.sessions * args.events
    print(
        f"  database: {mib(live['db'] + live['-wal']):.1f} MiB right after part 1's writes "
        f"(db {mib(live['db']):.1f} + wal {mib(live['-wal']):.1f}), "
        f"{mib(closed['db'] + closed['-wal']):.1f} MiB after the server's shutdown; "
        f"{closed['db'] / total:.0f} bytes per event (its JSON: {json_mean:.0f})"
    )

    plain, stored = runs["plain"], runs["stored"]
    lost = 1 - stored.rate / plain.rate
    base = percentile(runs["paced-plain"].latencies, 0.5)
    added = percentile(runs["paced-stored"].latencies, 0.5) - base
    listed = percentile(full.list_ms, 0.5, 1)
    print()
    print_target(
        f"saturated throughput with the store >= {TARGET_SATURATED_KEPT:.0%} of without "
        f"({stored.rate / plain.rate:.0%}; -{100 * lost:.1f}%)",
        stored.rate / plain.rate >= TARGET_SATURATED_KEPT,
    )
    loaded_plain, loaded = runs["paced-load-plain"], runs["paced-load-stored"]
    delivered = loaded.rate / loaded_plain.rate
    loaded_p99 = percentile(loaded.latencies, 0.99)
    print_target(
        f"beside a CPU-bound thread, {args.rate:g} events/s: >= {TARGET_LOADED_DELIVERED:.0%} "
        f"delivered ({delivered:.1%}), p99 emit->frame < {TARGET_LOADED_P99_MS:g} ms "
        f"({loaded_p99:.1f} ms)",
        delivered >= TARGET_LOADED_DELIVERED and loaded_p99 < TARGET_LOADED_P99_MS,
    )
    verdicts = [
        (
            f"store costs the relay < 10%, paced p50 emit->frame: +{added:.3f} ms "
            f"= +{100 * added / base:.0f}%",
            added / base,
        ),
    ]
    for what, share in verdicts:
        print_target(what, share < TARGET_RELAY_COST)
    print(
        f"  (for scale: +{added:.3f} ms is {100 * added / RELAY_BUDGET_MS:.0f}% of the "
        f"{RELAY_BUDGET_MS:g} ms p50 budget bench/relay.py allows coven-ls' whole overhead)"
    )
    print_target(
        f"listSessions p50 < {TARGET_LIST_MS:g} ms ({listed:.1f} ms)", listed < TARGET_LIST_MS
    )
    startup_ratio = full.startup / empty.startup
    print_target(
        f"restart: initialize within {TARGET_STARTUP_RATIO:g}x of an empty store "
        f"({startup_ratio:.2f}x)",
        startup_ratio <= TARGET_STARTUP_RATIO,
    )
    added = full.rss_mib - empty.rss_mib
    print_target(
        f"restart: server RSS within +{TARGET_RSS_ADDED_MIB:g} MiB of an empty store "
        f"(+{added:.1f} MiB after the reads; +{full.init_rss_mib - empty.init_rss_mib:.1f} MiB "
        "after initialize)",
        added <= TARGET_RSS_ADDED_MIB,
    )
    print(f"(took {time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
