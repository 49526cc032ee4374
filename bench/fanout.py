"""Fan-out: how a fork's wall time, memory and CPU grow with its number of children.

What is measured
    For each N in ``--children``, one model-driven fork of N children, end to end: a minimal
    JSON-RPC/LSP client in this script -> ``python -m coven_ls`` -> the bundled ``claude`` CLI
    (one process per session) -> a scripted model served by threads of this process. The
    parent's first answer carries a ``<fork>`` tag with N labels; initializationOptions are
    forkMode "auto", maxParallel = N (so the concurrency limit is not what is measured) and
    maxChildren = max(N, 8). Every child's one model reply takes ``--latency`` seconds (default
    3). The parent's own replies (the fork tag, the answer to ``<fork-results>``) come back at
    once: they fall outside the measured window, so their latency would only lengthen the run.

    Each run has a fresh server, CLAUDE_CONFIG_DIR, XDG_STATE_HOME, workspace and scripted
    model, waits for the parent's turn on the fork results, and ends with LSP shutdown/exit;
    /proc is then checked until no process carrying the run's config dir in its environment is
    left (stragglers are killed by pid and reported). Runs go N = 1, 2, 4, 8, 1, 2, ...
    (``--repeat`` rounds) after ``--warmup`` uncounted N=1 runs. A run that fails stops the
    bench with the server's stderr.

How to read the output (per N, medians over the rounds; procs is the highest)
    wall      fork wall time: the parent's forkStarted event to its forkFinished event, both
              timed when this client reads them off the server's stdout.
    ratio     wall / wall at N=1. The issue's target: N=4 within 1.5x of N=1.
    1st/last  forkStarted -> the first / last child's model request reaching the scripted
              model: how long N CLIs took to start and resume the parent's conversation.
    tail      the last child's model reply written -> forkFinished read (relay of the result).
    peak MiB  peak RSS sum of the server and all its descendants, /proc sampled every ~100 ms
              over the whole run (shared pages count once per process: an upper bound).
    PSS MiB   the same peak as proportional set size (shared pages split between processes),
              from smaps_rollup every ~0.5 s: closer to what the processes really cost.
    procs     peak number of those processes (server + CLIs + whatever they start).
    cpu fork  CPU seconds (user + system) of those processes inside the fork window, from
              /proc/<pid>/stat samples (the last <100 ms of a process that ends is lost).
    busy      cores kept busy by those processes from forkStarted to the last child's model
              request; mach = the same for the whole machine (/proc/stat). mach near the core
              count with busy well below it means something else was competing for the CPU:
              the figures of that run are not clean.
    cpu run   CPU seconds of the whole run (server start to exit), from getrusage of reaped
              children around it.
    CLI MiB   median peak RSS of one child CLI; CLI cpu = child CLIs' CPU in the fork window / N.
              For Codex (app MiB, app cpu): its one app-server, which serves the parent and every
              child, and its CPU in the fork window (its commands' included) / N.
    agt MiB   peak RSS sum of the agents' processes: Claude's CLIs, or Codex's app-server with
              the sandboxes (codex-linux-sandbox, bwrap) and commands it starts, counted by
              descent from it; agts = their peak number.
    The lines under the table say when the parent's CLI stops, how many child CLIs are still
    alive at forkFinished, and the peak process count. The closing lines compare N=4 with the
    target and state, from these figures only, what limits the largest N: start-up time, CPU
    use and its growth per child, memory per child (least-squares slope over the N values).

With ``--agent codex`` the same forks run Codex sessions (the real ``codex app-server``, one
process for the parent and every child, against a scripted Responses API), and with
``--agent both`` Claude's and Codex's run in the same invocation, round by round, and a closing
comparison sets their N_max/N=1 ratios and peak memory side by side. Codex's target: N_max
within 1.2x of N=1.

With ``--agent NAME`` for an agent that speaks ACP (``--agent claude,codex,codex-acp`` sets it
beside Claude and Codex in the same run, round by round) the sessions run that agent: a known one
found on PATH, or the program ``--acp-command`` names, against the scripted API ``--acp-api``
says it speaks (``responses``: the Responses API through ``$CODEX_HOME``, as codex-acp;
``messages``: the Messages API through ``ANTHROPIC_BASE_URL``, as claude-agent-acp). Its fork is
asked for with ``coven/fork`` (``context: fresh``: each child a new session of the agent given
only its task) after the parent's first turn, instead of a ``<fork>`` tag that resumes the
parent's conversation: an agent without ``session/fork`` could not. The agent's processes (one
per running session, each with what it starts) are its ``acp`` columns: ACP MiB is the median
peak RSS of one of them, agt MiB the peak RSS sum of them all.

Usage: python bench/fanout.py [--children 1,2,4,8] [--repeat 2] [--latency 3] [--warmup 1]
                              [--agent claude|codex|both|NAME[,NAME...]]
                              [--acp-command "PROGRAM ARGS"] [--acp-api responses|messages]
"""

from __future__ import annotations

import argparse
import itertools
import os
import queue
import resource
import shlex
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from common import (
    EXIT_TIMEOUT,
    EventClient,
    busy_cores,
    daemon_thread,
    machine_ticks,
    print_target,
    proc_value,
    run_dirs,
    spawn_server,
    stderr_tail,
)

from coven_ls.agents.claude import resolve_claude
from coven_ls.testing.scripted_model import ModelRequest, Reply, ScriptedModel, Text
from coven_ls.testing.scripted_responses import ResponsesRequest, ScriptedResponses

PROMPT = "fanout-bench: plan the work and split it."
ASSIGNED = "You were assigned '"
STEP_TIMEOUT = 120.0  # seconds for one step of a run (a turn, a fork)
SAMPLE_EVERY = 0.1  # seconds between /proc samples
PSS_EVERY = 5  # read smaps_rollup every this many samples
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 1024 * 1024
TARGET_N, TARGET_RATIO = 4, 1.5
CODEX_TARGET_RATIO = 1.2  # Codex: the largest N within this of N=1


def labels(n: int) -> list[str]:
    return [f"Task {k}" for k in range(1, n + 1)]


# --------------------------------------------------------------------------- /proc sampling


@dataclass
class Proc:
    """One process seen under the server, keyed by (pid, start time) so reuse cannot mix."""

    pid: int
    kind: str  # "server", "parent cli", "child cli", "app-server", "command" or "other"
    first_seen: float
    last_seen: float = 0.0
    peak_rss: int = 0  # bytes
    # (time, cumulative cpu ticks): user + system of the process itself, plus those of its
    # reaped children for a direct child of the server (a CLI's short-lived git and shell
    # commands live well under one sampling period). The server's own reaped children are the
    # CLIs, sampled themselves, and deeper descendants count through their parent, once.
    cpu: list[tuple[float, int]] = field(default_factory=list)

    def ticks_at(self, at: float) -> int:
        """Cumulative CPU ticks at the last sample taken at or before `at`."""
        last = 0
        for when, ticks in self.cpu:
            if when > at:
                break
            last = ticks
        return last


def _read_stat(pid: str) -> tuple[int, str, int, int, int, int] | None:
    """(ppid, state, own cpu ticks, reaped children's cpu ticks, start time, rss pages) from
    /proc/<pid>/stat."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    own = int(fields[11]) + int(fields[12])
    reaped = int(fields[13]) + int(fields[14])
    return int(fields[1]), fields[0], own, reaped, int(fields[19]), int(fields[21])


# The processes that are the agents: Claude's CLIs (one per session), or Codex's one app-server
# with the sandboxes and commands it runs for every session.
# Any other name is an ACP agent: its processes (one per running session) and what they start.
AGENT_KINDS = {
    "claude": ("parent cli", "child cli"),
    "codex": ("app-server", "command"),
}
ACP_KINDS = ("acp", "acp tool")


def agent_kinds(agent: str) -> tuple[str, ...]:
    return AGENT_KINDS.get(agent, ACP_KINDS)


def kind_of(argv: list[bytes], parent: str | None, acp_program: str | None = None) -> str:
    """What a process under the server is, from its argv and its parent's kind: a Claude CLI
    (a child resumes with --fork-session), Codex's app-server, or a process the app-server
    started (codex-linux-sandbox, bwrap, the shell and what it runs: Codex's commands, for all
    its threads); with `acp_program` (the ACP agent's program name), a process of that agent
    (its program, or an interpreter running it: node, bun) or one it started."""
    if parent in ("app-server", "command"):
        return "command"
    if parent in ACP_KINDS:
        return "acp tool"
    words = [Path(w.decode(errors="replace")).name for w in argv[:2] if w]
    name = words[0] if words else ""
    if acp_program is not None and acp_program in words:
        return "acp"
    if name == "claude":
        return "child cli" if b"--fork-session" in argv else "parent cli"
    if name == "codex" and b"app-server" in argv:
        return "app-server"
    return "other"


def _classify(pid: int, server: int, parent: str | None, acp_program: str | None) -> str:
    if pid == server:
        return "server"
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "other"
    return kind_of(argv, parent, acp_program)


def _pss(pid: int) -> int:
    """Proportional set size in bytes; 0 for a process gone meanwhile."""
    kib = proc_value(f"/proc/{pid}/smaps_rollup", "Pss")
    return 0 if kib is None else kib * 1024


class Sampler:
    """Samples the server's process tree every SAMPLE_EVERY seconds in a thread."""

    def __init__(
        self, server_pid: int, agent: str = "claude", acp_program: str | None = None
    ) -> None:
        self.server = server_pid
        self.agent_kinds = agent_kinds(agent)
        self.acp_program = acp_program
        self.procs: dict[tuple[int, int], Proc] = {}
        self.peak_rss = 0
        self.peak_pss = 0
        self.peak_count = 0
        self.peak_agent_rss = 0  # the agents' processes only (see AGENT_KINDS)
        self.peak_agent_count = 0
        self.machine: list[tuple[float, int, int]] = []  # (time, busy ticks, total ticks)
        self.own_cpu = 0.0  # CPU seconds the sampling thread itself used
        self._stop = threading.Event()
        self._thread = daemon_thread(self._loop, "sampler")

    def _loop(self) -> None:
        started = time.thread_time()
        for n in itertools.count():
            self.sample(with_pss=n % PSS_EVERY == 0)
            if self._stop.wait(SAMPLE_EVERY):
                break
        self.sample(with_pss=False)
        self.own_cpu = time.thread_time() - started

    def sample(self, with_pss: bool) -> None:
        at = time.monotonic()
        self.machine.append((at, *machine_ticks()))
        stats = {}
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit() and (stat := _read_stat(entry)) is not None:
                stats[int(entry)] = stat
                children.setdefault(stat[0], []).append(int(entry))
        tree, todo = [], [self.server] if self.server in stats else []
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo.extend(children.get(pid, ()))
        rss = pss = count = agent_rss = agent_count = 0
        kinds: dict[int, str] = {}  # this sample's; `tree` has each parent before its children
        for pid in tree:
            ppid, state, own, reaped, start, pages = stats[pid]
            if state == "Z":
                continue  # a zombie holds no memory and uses no CPU
            key = (pid, start)
            proc = self.procs.get(key)
            if proc is None:
                kind = _classify(pid, self.server, kinds.get(ppid), self.acp_program)
                proc = self.procs[key] = Proc(pid, kind, at)
            elif proc.kind == "other":  # it may have exec'd the agent since (a launcher does)
                proc.kind = _classify(pid, self.server, kinds.get(ppid), self.acp_program)
            kinds[pid] = proc.kind
            proc.last_seen = at
            if proc.kind in self.agent_kinds:
                agent_rss += pages * PAGE
                agent_count += 1
            proc.peak_rss = max(proc.peak_rss, pages * PAGE)
            if pid == self.server or ppid == self.server:
                proc.cpu.append((at, own + (reaped if ppid == self.server else 0)))
            rss += pages * PAGE
            pss += _pss(pid) if with_pss else 0
            count += 1
        self.peak_rss = max(self.peak_rss, rss)
        self.peak_pss = max(self.peak_pss, pss)
        self.peak_count = max(self.peak_count, count)
        self.peak_agent_rss = max(self.peak_agent_rss, agent_rss)
        self.peak_agent_count = max(self.peak_agent_count, agent_count)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(EXIT_TIMEOUT)

    def cpu_between(self, start: float, end: float, *kinds: str) -> float:
        """CPU seconds used between two instants by the sampled processes (of these kinds). Only
        the server and its direct children are timed, each with its reaped children (Codex's
        app-server with the commands it ran)."""
        ticks = sum(
            p.ticks_at(end) - p.ticks_at(start)
            for p in self.procs.values()
            if not kinds or p.kind in kinds
        )
        return ticks / TICK

    def machine_busy(self, start: float, end: float) -> float:
        """Cores busy on the whole machine (any process, this script included) between two
        instants, from the /proc/stat samples nearest inside them."""
        inside = [m for m in self.machine if start <= m[0] <= end]
        if len(inside) < 2:
            return float("nan")
        (_, busy0, total0), (_, busy1, total1) = inside[0], inside[-1]
        cores = os.cpu_count() or 1
        return cores * (busy1 - busy0) / max(total1 - total0, 1)


# --------------------------------------------------------------------------- one run


@dataclass
class Result:
    n: int
    wall: float  # forkStarted -> forkFinished
    first_request: float  # forkStarted -> first child's model request
    last_request: float  # forkStarted -> last child's model request
    tail: float  # last child's reply written -> forkFinished
    peak_rss: float  # MiB
    peak_pss: float  # MiB
    peak_procs: int
    cpu_fork: float  # CPU seconds in the fork window
    busy: float  # cores the server's tree kept busy from forkStarted to the last model call
    machine: float  # cores busy machine-wide over the same span
    cpu_run: float  # CPU seconds of the whole run
    cli_rss: float  # median peak RSS of a child CLI, MiB (Codex: of its app-server)
    cli_cpu: float  # child CLIs' CPU in the fork window / N (Codex: the app-server's, commands in)
    agent_rss: float  # peak RSS sum of the agents' processes (AGENT_KINDS), MiB
    agent_procs: int  # peak number of them
    parent_gone: float | None  # forkStarted -> the parent's CLI last seen alive
    children_alive: int  # child CLIs still alive when forkFinished was read
    close: float  # shutdown request -> server exited
    run_time: float
    sampler_cpu: float


def first_answer(n: int, tag: bool) -> str:
    """The parent's answer to PROMPT: a `<fork>` tag of N labels, or (for an ACP agent, whose
    fork the bench asks for itself) a plain one."""
    if not tag:
        return f"I will split this into {n}."
    labelled = "\n".join(f"- {label}" for label in labels(n))
    return f"I will split this into {n}.\n<fork>\n{labelled}\n</fork>"


def scripted_model(n: int, latency: float, tag: bool = True) -> ScriptedModel:
    model = ScriptedModel()
    model.on("<fork-results>", "All tasks are done; here is the merged result.")

    def child(request: ModelRequest) -> Reply:
        label = request.last_user_text.split(ASSIGNED, 1)[1].split("'", 1)[0]
        return Reply((Text(f"{label} is done."),), latency=latency)

    model.on(ASSIGNED, child)
    model.on(PROMPT, first_answer(n, tag))
    return model


def scripted_responses(n: int, latency: float, tag: bool = True) -> ScriptedResponses:
    """The same model for Codex: the Responses API, scripted alike."""
    model = ScriptedResponses()
    model.on("<fork-results>", "All tasks are done; here is the merged result.")

    def child(request: ResponsesRequest) -> Reply:
        label = request.last_user_text.split(ASSIGNED, 1)[1].split("'", 1)[0]
        return Reply((Text(f"{label} is done."),), latency=latency)

    model.on(ASSIGNED, child)
    model.on(PROMPT, first_answer(n, tag))
    return model


@dataclass(frozen=True)
class AcpAgent:
    """How the bench runs an ACP agent: its name, the command (None: the known agent of that
    name on PATH) and the scripted API it speaks."""

    name: str
    command: tuple[str, ...] | None
    api: str  # "responses" or "messages"

    @property
    def program(self) -> str:
        """The name its processes go by (known.py's command for a known agent)."""
        if self.command is not None:
            return Path(self.command[0]).name
        from coven_ls.agents.acp.known import KNOWN

        known = KNOWN.get(self.name)
        return Path(known.command[0]).name if known is not None else self.name

    def init_options(self) -> dict[str, Any]:
        agents = {} if self.command is None else {self.name: {"command": list(self.command)}}
        return {"agents": agents} if agents else {}


def run_once(
    n: int,
    latency: float,
    claude: str,
    stderr: IO[bytes],
    agent: str,
    acp: AcpAgent | None = None,
) -> Result:
    """One fork of N children of `agent` (an ACP one when `acp` says how to run it)."""
    began = time.monotonic()
    usage_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    responses = agent == "codex" or (acp is not None and acp.api == "responses")
    tag = acp is None  # an ACP agent's fork is asked for with coven/fork
    scripted = scripted_responses(n, latency, tag) if responses else scripted_model(n, latency, tag)
    # Leaving run_dirs waits for (or kills) whatever the run left, after the sampler stopped.
    with (
        scripted as model,
        run_dirs(f"fanout-bench-{agent}-{n}-", f"the {agent} N={n} run") as dirs,
    ):
        # own_state: a server that keeps a session store keeps it in the run's folder.
        if isinstance(model, ScriptedResponses):
            # CODEX_HOME inside the config dir: run_dirs reaps by that path.
            env = {
                **model.codex_env(dirs.config / "codex-home"),
                "CLAUDE_CONFIG_DIR": str(dirs.config),
                "XDG_STATE_HOME": str(dirs.state),
            }
        else:
            env = dirs.environ(model, own_state=True)
        proc = spawn_server(dirs.workspace, env, stderr)
        sampler = Sampler(proc.pid, agent, acp.program if acp is not None else None)
        client = EventClient(proc, timeout=STEP_TIMEOUT)
        close_started = close_ended = 0.0
        try:
            client.initialize(
                dirs.workspace,
                {
                    "claudePath": claude,
                    "agent": agent,
                    "forkMode": "auto",
                    "maxParallel": n,
                    "maxChildren": max(n, 8),
                    **(acp.init_options() if acp is not None else {}),
                },
            )
            client.notify("initialized", {})
            sid = client.request("coven/startSession", {"prompt": PROMPT})["sessionId"]

            def on_parent(kind: str) -> Callable[[dict[str, Any]], bool]:
                return lambda e: e["sessionId"] == sid and e["kind"] == kind

            if acp is not None:
                _, opening = client.wait_event(on_parent("turnResult"), "the parent's first turn")
                if opening.get("isError"):
                    raise RuntimeError(f"the parent's first turn failed: {opening}")
                params = {"sessionId": sid, "tasks": labels(n), "context": "fresh"}
                client.request("coven/fork", params)

            started_at, _ = client.wait_event(on_parent("forkStarted"), "forkStarted")
            finished_at, finished = client.wait_event(on_parent("forkFinished"), "forkFinished")
            failed = [r for r in finished["results"] if not r["ok"]]
            if len(finished["results"]) != n or failed:
                raise RuntimeError(f"fork of {n} did not succeed: {finished['results']}")
            client.wait_answer_to_fork(sid)
            asked = [r for r in model.requests if ASSIGNED in r.last_user_text]
            if len(asked) != n or any(r.finished is None for r in asked):
                raise RuntimeError(f"expected {n} child model calls, got {len(asked)}")
        finally:
            close_started = time.monotonic()
            client.close(EXIT_TIMEOUT + 30)
            close_ended = time.monotonic()
            sampler.stop()
    usage_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_run = (usage_after.ru_utime + usage_after.ru_stime) - (
        usage_before.ru_utime + usage_before.ru_stime
    )
    first = min(r.time for r in asked)
    last = max(r.time for r in asked)
    replied = max(r.finished for r in asked if r.finished is not None)
    startup = max(last - started_at, SAMPLE_EVERY)
    child_clis = [p for p in sampler.procs.values() if p.kind == "child cli"]
    # Codex runs no process per child: its one app-server stands for them. An ACP agent runs one
    # per session, the parent's included.
    per_child = child_clis or [p for p in sampler.procs.values() if p.kind in ("app-server", "acp")]
    parents = [
        p for p in sampler.procs.values() if p.kind == "parent cli" and p.first_seen < started_at
    ]
    return Result(
        n=n,
        wall=finished_at - started_at,
        first_request=first - started_at,
        last_request=last - started_at,
        tail=finished_at - replied,
        peak_rss=sampler.peak_rss / MIB,
        peak_pss=sampler.peak_pss / MIB,
        peak_procs=sampler.peak_count,
        cpu_fork=sampler.cpu_between(started_at, finished_at),
        busy=sampler.cpu_between(started_at, last) / startup,
        machine=sampler.machine_busy(started_at, last),
        cpu_run=cpu_run,
        cli_rss=statistics.median(p.peak_rss for p in per_child) / MIB if per_child else 0.0,
        cli_cpu=sampler.cpu_between(started_at, finished_at, "child cli", "app-server", "acp") / n,
        agent_rss=sampler.peak_agent_rss / MIB,
        agent_procs=sampler.peak_agent_count,
        parent_gone=max(p.last_seen for p in parents) - started_at if parents else None,
        children_alive=sum(
            p.first_seen <= finished_at <= p.last_seen + SAMPLE_EVERY for p in child_clis
        ),
        close=close_ended - close_started,
        run_time=time.monotonic() - began,
        sampler_cpu=sampler.own_cpu,
    )


# --------------------------------------------------------------------------- figures


def median_of(results: list[Result]) -> Result:
    """Field-wise medians (peak process count: the highest)."""
    values: dict[str, Any] = {"n": results[0].n}
    for name in Result.__dataclass_fields__:
        if name == "n":
            continue
        column = [getattr(r, name) for r in results if getattr(r, name) is not None]
        if name in ("peak_procs", "agent_procs"):
            values[name] = max(column)
        else:
            values[name] = statistics.median(column) if column else None
    return Result(**values)


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x (nan with fewer than two distinct x)."""
    if len({x for x, _ in points}) < 2:
        return float("nan")
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


def report(by_n: dict[int, list[Result]], args: argparse.Namespace, agent: str) -> None:
    medians = {n: median_of(rs) for n, rs in by_n.items() if rs}
    if not medians:
        return
    cores = os.cpu_count() or 1
    base = medians.get(1) or medians[min(medians)]
    print()
    print(
        f"{agent}: fork fan-out, child model latency {args.latency:g} s (parent replies 0 s), "
        f"{cores} CPUs, median of {args.repeat} run(s) per N"
    )
    codex = agent == "codex"
    acp = agent not in AGENT_KINDS
    one = "app" if codex else "ACP" if acp else "CLI"
    print(
        f"{'N':>3}{'wall s':>8}{'ratio':>7}{'1st s':>7}{'last s':>7}{'tail s':>7}"
        f"{'peak MiB':>9}{'PSS MiB':>8}{'procs':>6}{'cpu fork':>9}{'busy':>6}{'mach':>6}"
        f"{'cpu run':>8}{one + ' MiB':>8}{one + ' cpu':>8}{'agt MiB':>8}{'agts':>5}"
    )
    for n, m in sorted(medians.items()):
        print(
            f"{n:>3}{m.wall:>8.2f}{m.wall / base.wall:>6.2f}x{m.first_request:>7.2f}"
            f"{m.last_request:>7.2f}{m.tail:>7.2f}{m.peak_rss:>9.0f}{m.peak_pss:>8.0f}"
            f"{m.peak_procs:>6}{m.cpu_fork:>9.2f}{m.busy:>6.2f}{m.machine:>6.2f}"
            f"{m.cpu_run:>8.2f}{m.cli_rss:>8.0f}{m.cli_cpu:>8.2f}{m.agent_rss:>8.0f}"
            f"{m.agent_procs:>5}"
        )
    if codex:
        print(
            "  app MiB / app cpu = the one codex app-server (peak RSS; its CPU and its commands' "
            "in the fork / N); agt = it and the sandboxes and commands it runs"
        )
    elif acp:
        print(
            f"  ACP MiB / ACP cpu = one {agent} process (median peak RSS; their CPU in the fork / "
            f"N); agt = all of {agent}'s processes (one per running session) and what they start. "
            "Children fresh, asked for with coven/fork"
        )
    else:
        print("  agt MiB / agts = peak RSS sum and number of the claude CLIs")
    print(
        "  busy / mach = cores busy (server's process tree / whole machine) from forkStarted to "
        "the last child's model call"
    )
    runs = [r for rs in by_n.values() for r in rs]
    parent = [r.parent_gone for r in runs if r.parent_gone is not None]
    if parent:
        print(
            f"  parent's CLI last seen {statistics.median(parent):+.2f} s from forkStarted "
            f"(median, {SAMPLE_EVERY:g} s sampling): it is stopped as the children start"
        )
    if codex or acp:
        # Codex: one app-server for the parent and every child; ACP: a process per session.
        what = "the app-server with its sandboxes and commands" if codex else f"{agent}'s"
        print(
            f"  peak processes (all / {what}): "
            + ", ".join(f"N={n} {m.peak_procs}/{m.agent_procs}" for n, m in sorted(medians.items()))
        )
    else:
        alive = [(r.n, r.children_alive) for r in runs]
        print(
            "  child CLIs still alive at forkFinished: "
            + ", ".join(f"{a}/{n}" for n, a in sorted(set(alive)))
            + "; peak processes = N + "
            + "/".join(str(d) for d in sorted({r.peak_procs - r.n for r in runs}))
        )
    print(
        f"  shutdown (LSP shutdown -> server gone) {min(r.close for r in runs):.1f}-"
        f"{max(r.close for r in runs):.1f} s; the sampler used "
        f"{100 * sum(r.sampler_cpu for r in runs) / sum(r.run_time for r in runs):.1f}% of a core"
    )
    print()
    if TARGET_N in medians and 1 in medians:
        ratio = medians[TARGET_N].wall / medians[1].wall
        print_target(
            f"N={TARGET_N} within {TARGET_RATIO:g}x of N=1",
            ratio <= TARGET_RATIO,
            f" ({ratio:.2f}x: {medians[TARGET_N].wall:.2f} s vs {medians[1].wall:.2f} s)",
        )
    analyse(medians, base, cores, args.latency, agent)


def analyse(
    medians: dict[int, Result], base: Result, cores: int, latency: float, agent: str = "claude"
) -> None:
    """What limits the largest N, from the measured figures only."""
    top = medians[max(medians)]
    n = top.n
    points = sorted(medians.items())
    per_child_rss = slope([(k, m.peak_rss) for k, m in points])
    per_child_pss = slope([(k, m.peak_pss) for k, m in points])
    per_child_start = slope([(k, m.last_request) for k, m in points])
    print(
        f"N={n}: {top.wall:.2f} s = {top.last_request:.2f} s until the last child's model call "
        f"(N=1: {base.last_request:.2f} s) + {latency:g} s model latency + {top.tail:.2f} s "
        "to forkFinished"
    )
    codex = agent == "codex"
    acp = agent not in AGENT_KINDS
    used = (
        "the app-server used"
        if codex
        else f"{agent}'s processes used"
        if acp
        else "a child CLI used"
    )
    per = " per child" if codex or acp else ""
    print(
        f"  start-up: {top.machine:.2f} of {cores} cores busy machine-wide ({top.busy:.2f} by "
        f"coven-ls's processes) until the last child's model call; {used} "
        f"{top.cli_cpu:.2f} CPU-s{per} in the fork, {n} x {top.cli_cpu:.2f} / {cores} cores = "
        f"{n * top.cli_cpu / cores:.2f} s; start-up grows {per_child_start:.2f} s per child"
    )
    memory_total = _mem_total() / MIB
    peaks = (
        f"the app-server peaks at {top.cli_rss:.0f} MiB RSS, {top.agent_procs} codex processes"
        if codex
        else f"one {agent} process peaks at {top.cli_rss:.0f} MiB RSS, all of them at "
        f"{top.agent_rss:.0f} MiB over {top.agent_procs} processes"
        if acp
        else f"a child CLI peaks at {top.cli_rss:.0f} MiB RSS"
    )
    print(
        f"  memory: peak {top.peak_rss:.0f} MiB RSS / {top.peak_pss:.0f} MiB PSS over "
        f"{top.peak_procs} processes; each child adds {per_child_rss:.0f} MiB RSS / "
        f"{per_child_pss:.0f} MiB PSS ({peaks}); "
        f"{100 * top.peak_pss / memory_total:.1f}% of this machine's {memory_total:.0f} MiB"
    )
    saturated = top.machine >= 0.9 * cores
    if saturated and top.busy >= 0.75 * top.machine:
        starting = (
            f"the app-server's {n} threads"
            if codex
            else f"{n} {agent} processes"
            if acp
            else f"the {n} CLIs"
        )
        limit = f"CPU-bound start-up: {starting} starting at once saturate the {cores} cores"
    elif saturated:
        limit = (
            f"CPU, but other processes took {top.machine - top.busy:.2f} of the {cores} busy "
            "cores: rerun on a quiet machine"
        )
    else:
        limit = f"not CPU saturation ({top.machine:.2f} of {cores} cores busy during start-up)"
    memory = "not" if top.peak_pss < 0.5 * memory_total else "also"
    print(f"  => what limits N={n}: {limit}; memory is {memory} the limit on this machine")


def compare(by_agent: dict[str, dict[int, list[Result]]]) -> None:
    """The agents side by side: the largest N's wall time against N=1's, and peak memory of the
    whole process tree."""
    print()
    for agent, by_n in by_agent.items():
        medians = {n: median_of(rs) for n, rs in by_n.items() if rs}
        if 1 not in medians or len(medians) < 2:
            continue
        top, one = medians[max(medians)], medians[1]
        ratio = top.wall / one.wall
        line = (
            f"{agent}: N={top.n} {top.wall:.2f} s vs N=1 {one.wall:.2f} s = {ratio:.2f}x; "
            f"peak {top.peak_rss:.0f} MiB RSS / {top.peak_pss:.0f} MiB PSS "
            f"(N=1: {one.peak_rss:.0f} / {one.peak_pss:.0f}) over {top.peak_procs} processes; "
            f"the agent's processes {top.agent_rss:.0f} MiB RSS (N=1: {one.agent_rss:.0f}) over "
            f"{top.agent_procs}"
        )
        if agent == "codex":
            print_target(
                f"Codex: N={top.n} within {CODEX_TARGET_RATIO:g}x of N=1",
                ratio <= CODEX_TARGET_RATIO,
                f" ({line})",
            )
        else:
            print(line)


def _mem_total() -> int:
    """The machine's memory in bytes (1 if unknown: only a share of it is printed)."""
    kib = proc_value("/proc/meminfo", "MemTotal")
    return 1 if kib is None else kib * 1024


# --------------------------------------------------------------------------- main


def agents_of(spec: str, command: str | None, api: str) -> tuple[list[str], dict[str, AcpAgent]]:
    """`--agent`'s agents in order (both: claude and codex), and how to run the ACP ones."""
    agents: list[str] = []
    for word in (w.strip() for w in spec.split(",")):
        for name in ("claude", "codex") if word == "both" else (word,):
            if name and name not in agents:
                agents.append(name)
    argv = tuple(shlex.split(command)) if command else None
    acp = {a: AcpAgent(a, argv, api) for a in agents if a not in AGENT_KINDS}
    return agents, acp


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--children",
        default="1,2,4,8",
        help="comma-separated child counts (default 1,2,4,8)",
    )
    parser.add_argument("--repeat", type=int, default=2, help="runs per N (default 2)")
    parser.add_argument(
        "--latency", type=float, default=3.0, help="seconds per child model reply (default 3)"
    )
    parser.add_argument(
        "--warmup", type=int, default=1, help="uncounted N=1 runs first (default 1)"
    )
    parser.add_argument("--claude", help="CLI to run (default: as coven-ls would pick it)")
    parser.add_argument(
        "--agent",
        default="claude",
        help="the agents the sessions run, comma-separated, each in turn per round: claude, "
        "codex, both (= claude,codex), or the name of an ACP agent (default claude)",
    )
    parser.add_argument(
        "--acp-command",
        help="the program and arguments that start the ACP agent (default: the known agent of "
        "that name on PATH)",
    )
    parser.add_argument(
        "--acp-api",
        choices=("responses", "messages"),
        default="responses",
        help="the scripted model API the ACP agent speaks (default responses, as codex-acp)",
    )
    args = parser.parse_args(argv)
    try:
        counts = [int(part) for part in args.children.split(",") if part.strip()]
    except ValueError:
        parser.error("--children takes comma-separated integers, e.g. 1,2,4,8")
    if not counts or min(counts) < 1 or args.repeat < 1 or args.warmup < 0 or args.latency < 0:
        parser.error("child counts and --repeat must be at least 1, --warmup and --latency >= 0")

    claude = args.claude or resolve_claude(None)[0]
    idle_busy = busy_cores(1.0)
    print(f"before the runs: {idle_busy:.2f} cores busy machine-wide (1 s)", end="")
    print(": the machine is not quiet, figures will suffer" if idle_busy > 0.25 else "")
    agents, acp = agents_of(args.agent, args.acp_command, args.acp_api)
    if len([a for a in agents if a not in AGENT_KINDS]) > 1:
        parser.error("--agent takes one ACP agent at a time (beside claude and codex)")
    by_agent: dict[str, dict[int, list[Result]]] = {a: {n: [] for n in counts} for a in agents}
    started = time.monotonic()
    # Round by round, each agent in turn: both meet the same machine load.
    plan = [(None, a, 1) for a in agents for _ in range(args.warmup)] + [
        (r, a, n) for r in range(args.repeat) for n in counts for a in agents
    ]
    for round_number, agent, n in plan:
        label = "warm-up" if round_number is None else f"round {round_number + 1}"
        with tempfile.TemporaryFile(prefix="fanout-bench-stderr-") as stderr:
            try:
                result = run_once(n, args.latency, claude, stderr, agent, acp.get(agent))
            except (RuntimeError, queue.Empty) as exc:
                tail = stderr_tail(stderr, 2000)
                problem = str(exc).splitlines()[0][:500] if str(exc) else "timed out"
                print(
                    f"{label} {agent} N={n} failed: {problem}\nserver stderr:\n{tail}",
                    file=sys.stderr,
                )
                return 1
        if round_number is not None:
            by_agent[agent][n].append(result)
        print(
            f"{label:<8} {agent:<9} N={n}: wall {result.wall:.2f} s, last child call at "
            f"{result.last_request:.2f} s, peak {result.peak_rss:.0f} MiB RSS / "
            f"{result.peak_procs} procs, cpu fork {result.cpu_fork:.2f} s, busy "
            f"{result.busy:.2f} (machine {result.machine:.2f}) cores, "
            f"run {result.run_time:.1f} s",
            flush=True,
        )
    for agent in agents:
        report(by_agent[agent], args, agent)
    compare(by_agent)
    print(f"(took {time.monotonic() - started:.0f} s; load {os.getloadavg()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
