"""Soak: many sessions, many turns and forks against one server; does it leak?

What is run
    ONE ``python -m coven_ls`` server on stdio, driven by the LSP client of bench/common.py, with
    the bundled ``claude`` CLI against a scripted model served by threads of this process; every
    model reply takes ``--latency`` seconds. initializationOptions: forkMode "auto" (the default
    maxParallel 4 and maxChildren 8). The workspace is not a git repository, so fork children
    share it (worktree isolation has its own bench, isolation.py).

    1. Warm-up: one session runs a plain turn and a fork turn, then is closed (coven/closeSession),
       so that what the server sets up once (its store, thread pools, the CLI launcher, imports
       done on first use) is in place before anything is measured. Then: "base".
    2. ``--sessions`` sessions start at once (coven/startSession: turn 1) and all go idle. Then:
       "start".
    3. A thread per session sends turns 2 .. ``--turns`` (coven/sendMessage), each once the
       previous one has ended (the session back to ``idle``). Every ``--fork-every``-th turn
       (staggered by session, so that the forks do not all come at once) asks for a fork: the
       model answers with a ``<fork>`` tag of 2 tasks, the children run (each in a CLI of its
       own that stops with its turn) and the parent gets its ``<fork-results>`` turn; that turn
       counts as ended when the parent is idle again. No new turn is sent once
       ``--max-seconds`` (from the bench's start) have gone by: the run then reports how far it
       got. When every session is idle again: "end".
    4. Every session is closed (coven/closeSession, which closes its fork children too and
       returns when its CLI is gone). Then: "closed". Then LSP shutdown/exit, and /proc is
       checked until no process carrying the run's config dir in its environment is left
       (stragglers are killed by pid and reported). The run's folders (workspace, config dir,
       XDG_STATE_HOME, TMPDIR) are removed.

    Each measuring point waits ``SETTLE`` seconds after the last event first, so that what a
    turn's end sets off (a child's CLI stopping, the store's group commit) is over.

What is measured (the server process itself, not its CLIs)
    RSS      VmRSS of /proc/<server>/status, MiB
    fds      entries in /proc/<server>/fd; when two points differ, the kinds that differ (pipe,
             socket, anon_inode, file) are printed under the table
    threads  Threads of /proc/<server>/status
    agents   live processes under the server (its CLIs: each is started through a small launcher
             that execs ``claude``, so one process per session or running child)
    zombies  processes in state Z under the server (ended, not yet waited for)
    events   coven/event notifications the client had read by then (all sessions, children's
             included)
    The table prints each at base, start, end and closed, and the differences end - start (the
    same sessions, idle, before and after the soak: what the turns left behind) and closed -
    base (no session open: what the sessions left behind). Also: peak server RSS and peak agent
    count (sampled every second), turns and forks completed, coven/event notifications.

How to read it
    The server keeps every session's events in memory (``Session.events``, what coven/getEvents
    answers from), closed sessions' too, so its RSS grows with the run's events by design: the
    line "RSS growth per 1000 events" says by how much, for extrapolating to longer use. Threads
    follow the agent count: on Python < 3.12 asyncio waits for each child process in a thread of
    its own. Zombies are sampled every second as well: a CLI is one from its exit until the
    server waits for it, which a sample may catch; one seen in two samples or more was not
    waited for. queuePosition events are many: every queued child is told its new place each
    time one ahead of it gets a slot.

Targets (issue #12), from the differences above, measured in the same run
    RSS growth (end - start) under 50 MiB; no fd growth (end - start and closed - base both 0);
    no zombie (at end and at closed, and none seen in two samples while it ran); and no agent
    process left once every session is closed. No figure is asserted: the bench reports.

Usage: python bench/soak.py [--sessions 20] [--turns 30] [--fork-every 5] [--max-seconds 600]
           [--latency 0.05] [--claude PATH]
"""

from __future__ import annotations

import argparse
import os
import queue
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from common import (
    EXIT_TIMEOUT,
    LspClient,
    busy_cores,
    daemon_thread,
    print_target,
    proc_value,
    reap,
    run_dirs,
    spawn_server,
    stderr_tail,
)

from coven_ls.agents.claude import resolve_claude
from coven_ls.testing.scripted_model import ModelRequest, Reply, ScriptedModel, Text

ASSIGNED = "You were assigned '"
FORK_RESULTS = "<fork-results>"
FORK_ASK = "please split this one"
TASKS = ("Part A", "Part B")
TURN_TIMEOUT = 300.0  # seconds for one turn to end, fork included (2 cores, 20 sessions)
SETTLE = 3.0  # seconds without any event before a measuring point
SAMPLE_EVERY = 1.0  # seconds between peak samples
MIB = 1024 * 1024
RSS_TARGET_MIB = 50.0


# --------------------------------------------------------------------------- the model


def scripted_model(latency: float) -> ScriptedModel:
    """Plain turns get a short paragraph; a fork ask gets a ``<fork>`` tag of TASKS; a child
    its task done; the fork results a summary. Every reply takes `latency` seconds."""
    model = ScriptedModel()
    tag = "\n".join(f"- {task}" for task in TASKS)

    def answer(request: ModelRequest) -> Reply:
        text = request.last_user_text
        if ASSIGNED in text:
            label = text.split(ASSIGNED, 1)[1].split("'", 1)[0]
            body = f"{label} is done: three lines changed, tests pass."
        elif FORK_RESULTS in text:
            body = "Both parts are done; here is the merged result."
        elif FORK_ASK in text:
            body = f"I will split this into {len(TASKS)}.\n<fork>\n{tag}\n</fork>"
        else:
            # A few hundred characters, as a short answer is: the events carry some text.
            body = f"Noted ({text[:60]}). " + "Here is what I would do next. " * 10
        return Reply((Text(body),), latency=latency)

    model.on(lambda _request: True, answer)
    return model


# --------------------------------------------------------------------------- the client


@dataclass
class Track:
    """What the client has seen of one session, from its coven/event notifications."""

    status: str = ""
    idles: int = 0  # how many times it went idle: once per user turn, fork included
    turn_results: int = 0
    forks: list[dict[str, Any]] = field(default_factory=list)  # its forkFinished events
    problems: list[str] = field(default_factory=list)  # error events, failed turns


class SoakClient(LspClient):
    """Counts what each session went through, so that a driver thread waits on its own session's
    counters: the shared EventClient keeps every event and rescans them per wait, which over
    thousands of events would cost this 2-core machine the CPU the server is measured with."""

    def __init__(self, proc: Any, *, timeout: float) -> None:
        # Before the reader thread starts (in LspClient.__init__): it writes to these.
        self.tracks: dict[str, Track] = {}
        self.kinds: Counter[str] = Counter()
        self.deltas = 0
        self.last_event = time.monotonic()
        self._changed = threading.Condition()
        self._closed = False
        super().__init__(proc, timeout=timeout)

    def _notification(self, method: str, params: Any, at: float) -> None:
        if method == "coven/delta":
            self.deltas += 1
            return
        if method != "coven/event" or not isinstance(params, dict):
            return
        with self._changed:
            self.last_event = at
            kind = params.get("kind", "")
            self.kinds[kind] += 1
            track = self.tracks.setdefault(params["sessionId"], Track())
            if kind == "status":
                track.status = params["status"]
                track.idles += params["status"] == "idle"
                if params["status"] == "failed":
                    track.problems.append("status failed")
            elif kind == "turnResult":
                track.turn_results += 1
                if params.get("isError"):
                    track.problems.append(f"turn failed: {params.get('text', '')[:200]}")
            elif kind == "forkFinished":
                track.forks.append(params)
            elif kind in ("error", "forkError"):
                track.problems.append(f"{kind}: {params.get('message', '')[:200]}")
            self._changed.notify_all()

    def _eof(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def event_count(self) -> int:
        with self._changed:
            return sum(self.kinds.values())

    def track(self, sid: str) -> Track:
        with self._changed:
            return self.tracks.setdefault(sid, Track())

    def idles(self, sid: str) -> int:
        with self._changed:
            return self.track(sid).idles

    def wait_idle(self, sid: str, after: int, stop: threading.Event) -> None:
        """Until session `sid` has gone idle more than `after` times; raises on a problem event,
        the server gone, TURN_TIMEOUT, or `stop` (another session failed)."""
        deadline = time.monotonic() + TURN_TIMEOUT
        with self._changed:
            track = self.tracks.setdefault(sid, Track())
            while track.idles <= after:
                if track.problems:
                    raise RuntimeError(f"session {sid}: {track.problems[0]}")
                if self._closed:
                    raise RuntimeError("the server closed its output")
                if stop.is_set():
                    raise RuntimeError("stopped: another session failed")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"session {sid} not idle after {TURN_TIMEOUT:g} s")
                self._changed.wait(min(left, 1.0))

    def wait_quiet(self, seconds: float) -> None:
        """Until no coven/event has come for `seconds`."""
        while True:
            with self._changed:
                left = self.last_event + seconds - time.monotonic()
            if left <= 0:
                return
            time.sleep(left)


# --------------------------------------------------------------------------- /proc


@dataclass(frozen=True)
class Point:
    """The server at one measuring point."""

    name: str
    rss: float  # MiB
    fds: int
    threads: int
    agents: int
    zombies: int
    fd_kinds: Counter[str]
    events: int  # coven/event notifications the client had read by then


def _stat(pid: str) -> tuple[int, str] | None:
    """(ppid, state) from /proc/<pid>/stat."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[1]), fields[0]


def descendants(server: int) -> list[tuple[int, int, str]]:
    """(pid, ppid, state) of every process under `server`, zombies included."""
    children: dict[int, list[tuple[int, int, str]]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(entry)) is not None:
            children.setdefault(stat[0], []).append((int(entry), stat[0], stat[1]))
    found, todo = [], [server]
    while todo:
        for pid, ppid, state in children.get(todo.pop(), ()):
            found.append((pid, ppid, state))
            todo.append(pid)
    return found


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def fd_kinds(pid: int) -> Counter[str]:
    """The server's open fds by kind: pipe, socket, anon_inode:[eventpoll], or a file's path."""
    kinds: Counter[str] = Counter()
    folder = Path(f"/proc/{pid}/fd")
    try:
        entries = list(folder.iterdir())
    except OSError:
        return kinds
    for entry in entries:
        try:
            target = os.readlink(entry)
        except OSError:
            continue  # closed meanwhile (the listing itself opens one)
        kinds[target.split(":[", 1)[0] if ":[" in target and "anon" not in target else target] += 1
    return kinds


def measure(name: str, server: int, client: SoakClient) -> Point:
    tree = descendants(server)
    kinds = fd_kinds(server)
    return Point(
        name=name,
        rss=(proc_value(f"/proc/{server}/status", "VmRSS") or 0) / 1024,
        fds=sum(kinds.values()),
        threads=proc_value(f"/proc/{server}/status", "Threads") or 0,
        agents=sum(state != "Z" for _, _, state in tree),
        zombies=sum(state == "Z" for _, _, state in tree),
        fd_kinds=kinds,
        events=client.event_count(),
    )


@dataclass
class Zombie:
    """A zombie seen under the server: whose child it is, and for how long it stayed one."""

    comm: str
    parent: str  # "server", or the parent's comm
    first: float
    last: float


class Peaks:
    """The server's peak RSS and agent count, and every zombie under it, sampled every
    SAMPLE_EVERY seconds in a thread. A process is a zombie from its exit until its parent
    waits for it: seen in one sample, that may be the moment in between; seen in several, it
    was not waited for."""

    def __init__(self, server: int) -> None:
        self.server = server
        self.rss = 0.0
        self.agents = 0
        self.zombies: dict[int, Zombie] = {}
        self._stop = threading.Event()
        self._thread = daemon_thread(self._loop, "peaks")

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_EVERY):
            kib = proc_value(f"/proc/{self.server}/status", "VmRSS")
            if kib is None:
                return
            at = time.monotonic()
            tree = descendants(self.server)
            self.rss = max(self.rss, kib / 1024)
            self.agents = max(self.agents, sum(state != "Z" for _, _, state in tree))
            for pid, ppid, state in tree:
                if state != "Z":
                    continue
                seen = self.zombies.get(pid)
                if seen is None:
                    parent = "server" if ppid == self.server else _comm(ppid)
                    self.zombies[pid] = Zombie(_comm(pid), parent, at, at)
                else:
                    seen.last = at

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(EXIT_TIMEOUT)


# --------------------------------------------------------------------------- the run


@dataclass
class Run:
    points: dict[str, Point] = field(default_factory=dict)
    turns_done: int = 0
    turns_planned: int = 0
    fork_turns: int = 0
    children_ok: int = 0
    children_failed: int = 0
    events: int = 0
    deltas: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    hit_deadline: bool = False
    soak_seconds: float = 0.0
    peak_rss: float = 0.0
    peak_agents: int = 0
    zombies: list[Zombie] = field(default_factory=list)  # seen while it ran
    left_behind: int = 0  # processes of the run killed after the server exited
    problems: list[str] = field(default_factory=list)


def fork_turn(turn: int, index: int, every: int) -> bool:
    """Whether `turn` (from 1) of session `index` asks for a fork; turn 1 never does."""
    return every > 0 and turn > 1 and (turn + index) % every == 0


def drive(
    client: SoakClient,
    sid: str,
    index: int,
    args: argparse.Namespace,
    deadline: float,
    run: Run,
    lock: threading.Lock,
    stop: threading.Event,
) -> None:
    """Turns 2 .. args.turns of one session, each sent once the one before has ended."""
    for turn in range(2, args.turns + 1):
        if time.monotonic() >= deadline:
            with lock:
                run.hit_deadline = True
            return
        if stop.is_set():
            return
        forks = fork_turn(turn, index, args.fork_every)
        text = f"soak session {index} turn {turn}: " + (
            f"{FORK_ASK}, in two parts." if forks else "carry on with the next step."
        )
        idles = client.idles(sid)
        forks_before = len(client.track(sid).forks)
        client.request("coven/sendMessage", {"sessionId": sid, "text": text})
        client.wait_idle(sid, idles, stop)
        if forks:
            finished = client.track(sid).forks[forks_before:]
            if not finished:
                raise RuntimeError(f"session {sid} turn {turn}: idle without a fork")
            results = [r for f in finished for r in f["results"]]
            with lock:
                run.fork_turns += 1
                run.children_ok += sum(r["ok"] for r in results)
                run.children_failed += sum(not r["ok"] for r in results)
        with lock:
            run.turns_done += 1


def soak(args: argparse.Namespace, claude: str, stderr: IO[bytes], began: float) -> Run:
    run = Run(turns_planned=args.sessions * args.turns)
    deadline = began + args.max_seconds
    with scripted_model(args.latency) as model, run_dirs("soak-bench-", "the soak") as dirs:
        env = dirs.environ(model, own_state=True)
        # The CLIs' own temp files (and coven-ls's CLI launcher) go with the run's folder.
        tmp = dirs.root / "tmp"
        tmp.mkdir()
        env["TMPDIR"] = str(tmp)
        proc = spawn_server(dirs.workspace, env, stderr)
        client = SoakClient(proc, timeout=TURN_TIMEOUT)
        peaks = Peaks(proc.pid)
        stop = threading.Event()
        try:
            client.initialize(dirs.workspace, {"claudePath": claude, "forkMode": "auto"})
            client.notify("initialized", {})

            # 1. warm-up
            warm = client.request("coven/startSession", {"prompt": "soak warm-up: hello."})
            wid = warm["sessionId"]
            client.wait_idle(wid, 0, stop)
            client.request("coven/sendMessage", {"sessionId": wid, "text": f"warm-up: {FORK_ASK}"})
            client.wait_idle(wid, 1, stop)
            if not client.track(wid).forks:
                raise RuntimeError("the warm-up fork did not happen")
            client.request("coven/closeSession", {"sessionId": wid})
            client.wait_quiet(SETTLE)
            run.points["base"] = measure("base", proc.pid, client)
            print(f"  warm-up done at {time.monotonic() - began:.0f} s", flush=True)

            # 2. every session's first turn
            sids = [
                client.request(
                    "coven/startSession", {"prompt": f"soak session {i} turn 1: let us start."}
                )["sessionId"]
                for i in range(args.sessions)
            ]
            for sid in sids:
                client.wait_idle(sid, 0, stop)
            run.turns_done = len(sids)
            client.wait_quiet(SETTLE)
            run.points["start"] = measure("start", proc.pid, client)
            print(f"  {len(sids)} sessions started at {time.monotonic() - began:.0f} s", flush=True)

            # 3. the soak
            soak_began = time.monotonic()
            lock = threading.Lock()
            errors: queue.Queue[BaseException] = queue.Queue()

            def driver(sid: str, index: int) -> None:
                try:
                    drive(client, sid, index, args, deadline, run, lock, stop)
                except BaseException as exc:  # handed to the main thread, which stops the run
                    errors.put(exc)
                    stop.set()

            threads = [
                threading.Thread(target=driver, args=(sid, i), name=f"session-{i}", daemon=True)
                for i, sid in enumerate(sids)
            ]
            for thread in threads:
                thread.start()
            reported = soak_began
            while any(t.is_alive() for t in threads):
                for thread in threads:
                    thread.join(1.0)
                if time.monotonic() - reported >= 60:
                    reported = time.monotonic()
                    print(
                        f"  {run.turns_done}/{run.turns_planned} turns, {run.fork_turns} forks "
                        f"at {reported - began:.0f} s",
                        flush=True,
                    )
            if not errors.empty():
                raise errors.get()
            run.soak_seconds = time.monotonic() - soak_began
            client.wait_quiet(SETTLE)
            run.points["end"] = measure("end", proc.pid, client)

            # 4. every session closed
            for sid in sids:
                client.request("coven/closeSession", {"sessionId": sid})
            client.wait_quiet(SETTLE)
            run.points["closed"] = measure("closed", proc.pid, client)
        finally:
            stop.set()
            peaks.stop()
            client.close(EXIT_TIMEOUT + 30)
            # Counted here rather than left to run_dirs, which would only warn.
            run.left_behind = reap(str(dirs.config))
        run.peak_rss, run.peak_agents = peaks.rss, peaks.agents
        run.zombies = list(peaks.zombies.values())
        run.kinds = client.kinds
        run.events = sum(client.kinds.values())
        run.deltas = client.deltas
        run.problems = [p for t in client.tracks.values() for p in t.problems]
    return run


# --------------------------------------------------------------------------- figures


def report(run: Run, args: argparse.Namespace) -> None:
    p = run.points
    print()
    print(
        f"soak: {args.sessions} sessions x {args.turns} turns, a fork of {len(TASKS)} every "
        f"{args.fork_every} turns, model latency {args.latency:g} s, {os.cpu_count()} CPUs"
    )
    print(
        f"{'server':<10}" + "".join(f"{n:>9}" for n in p) + f"{'end-start':>11}{'closed-base':>13}"
    )
    rows: list[tuple[str, str, str]] = [
        ("RSS MiB", "rss", "{:.1f}"),
        ("fds", "fds", "{}"),
        ("threads", "threads", "{}"),
        ("agents", "agents", "{}"),
        ("zombies", "zombies", "{}"),
        ("events", "events", "{}"),
    ]
    for label, attr, fmt in rows:
        values = {name: getattr(point, attr) for name, point in p.items()}
        line = f"{label:<10}" + "".join(f"{fmt.format(v):>9}" for v in values.values())
        for a, b, width in (("end", "start", 11), ("closed", "base", 13)):
            if a in values and b in values:
                diff = values[a] - values[b]
                line += f"{('{:+.1f}' if attr == 'rss' else '{:+d}').format(diff):>{width}}"
        print(line)
    for a, b in (("end", "start"), ("closed", "base")):
        if a in p and b in p and p[a].fd_kinds != p[b].fd_kinds:
            more = p[a].fd_kinds - p[b].fd_kinds
            fewer = p[b].fd_kinds - p[a].fd_kinds
            print(f"  fds {a} vs {b}: +{dict(more)} -{dict(fewer)}")
    if "end" in p and "start" in p and p["end"].events > p["start"].events:
        per = 1000 * (p["end"].rss - p["start"].rss) / (p["end"].events - p["start"].events)
        print(f"  RSS growth end - start per 1000 events in between: {per:.2f} MiB")
    print(
        f"  turns {run.turns_done}/{run.turns_planned} "
        f"({100 * run.turns_done / run.turns_planned:.0f}%) in {run.soak_seconds:.0f} s of soak"
        + (f", stopped at --max-seconds {args.max_seconds:g}" if run.hit_deadline else "")
        + f"; {run.fork_turns} forks, {run.children_ok} children ok, {run.children_failed} failed"
    )
    top = ", ".join(f"{k} {n}" for k, n in run.kinds.most_common(6))
    print(f"  {run.events} coven/event ({top}), {run.deltas} coven/delta")
    print(
        f"  peak (1 s samples): server RSS {run.peak_rss:.1f} MiB, {run.peak_agents} agent "
        f"processes; processes left after exit: {run.left_behind}"
    )
    if run.zombies:
        kinds = Counter(f"{z.comm} (child of {z.parent})" for z in run.zombies)
        print(
            f"  zombies seen while it ran: {len(run.zombies)}, "
            + ", ".join(f"{n} x {k}" for k, n in kinds.most_common())
            + f"; the longest was one for {longest_zombie(run):.0f}-"
            f"{longest_zombie(run) + SAMPLE_EVERY:.0f} s"
        )
    if run.problems:
        print(f"  problems: {len(run.problems)}, first: {run.problems[0]}")
    print()
    if "end" in p and "start" in p:
        growth = p["end"].rss - p["start"].rss
        print_target(
            f"RSS growth under {RSS_TARGET_MIB:g} MiB",
            growth < RSS_TARGET_MIB,
            f" ({growth:+.1f} MiB end - start; {p['end'].rss / p['start'].rss:.2f}x; "
            f"closed - base {p['closed'].rss - p['base'].rss:+.1f} MiB)",
        )
        fd_end = p["end"].fds - p["start"].fds
        fd_closed = p["closed"].fds - p["base"].fds
        print_target(
            "no fd growth",
            fd_end == 0 and fd_closed == 0,
            f" ({fd_end:+d} end - start, {fd_closed:+d} closed - base)",
        )
        lasting = [z for z in run.zombies if z.last > z.first]
        print_target(
            "no zombies",
            p["end"].zombies == 0 and p["closed"].zombies == 0 and not lasting,
            f" ({p['end'].zombies} at end, {p['closed'].zombies} closed; {len(run.zombies)} "
            f"seen while it ran, {len(lasting)} of them in more than one sample)",
        )
        print_target(
            "no agent process once every session is closed",
            p["closed"].agents == 0 and run.left_behind == 0,
            f" ({p['closed'].agents} alive, {run.left_behind} left after exit)",
        )


def longest_zombie(run: Run) -> float:
    """Seconds between the first and the last sample that saw the same zombie (0: one)."""
    return max((z.last - z.first for z in run.zombies), default=0.0)


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=20, help="sessions (default 20)")
    parser.add_argument("--turns", type=int, default=30, help="turns per session (default 30)")
    parser.add_argument(
        "--fork-every",
        type=int,
        default=5,
        help="every this many turns a session forks, 0: never (default 5)",
    )
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=600.0,
        help="no new turn is sent after this many seconds (default 600)",
    )
    parser.add_argument(
        "--latency", type=float, default=0.05, help="seconds per model reply (default 0.05)"
    )
    parser.add_argument("--claude", help="CLI to run (default: as coven-ls would pick it)")
    args = parser.parse_args(argv)
    if args.sessions < 1 or args.turns < 1 or args.fork_every < 0:
        parser.error("--sessions and --turns must be at least 1, --fork-every at least 0")
    if args.max_seconds <= 0 or args.latency < 0:
        parser.error("--max-seconds must be positive, --latency at least 0")

    claude = args.claude or resolve_claude(None)[0]
    idle_busy = busy_cores(1.0)
    print(f"before the run: {idle_busy:.2f} cores busy machine-wide (1 s)", end="")
    print(": the machine is not quiet" if idle_busy > 0.25 else "")
    began = time.monotonic()
    with tempfile.TemporaryFile(prefix="soak-bench-stderr-") as stderr:
        try:
            run = soak(args, claude, stderr, began)
        except (RuntimeError, queue.Empty) as exc:
            problem = str(exc).splitlines()[0][:500] if str(exc) else "timed out"
            tail = stderr_tail(stderr, 2000)
            print(f"soak failed: {problem}\nserver stderr:\n{tail}", file=sys.stderr)
            return 1
    report(run, args)
    print(f"(took {time.monotonic() - began:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
