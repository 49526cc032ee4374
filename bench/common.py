"""What the benchmarks in this folder share, so that each measures its subject the same way.

The benches run as scripts (``python bench/relay.py``): this folder is then ``sys.path[0]`` and
they import this module as ``common``. It is not a package and needs no ``python -m``.

Shared here, because each bench would otherwise carry its own copy that drifts:
    - a raw JSON-RPC/LSP client over a server subprocess's stdio that timestamps each frame as
      soon as it is read, so client-side decoding never counts in a figure (and one that keeps
      the ``coven/event`` notifications for a run to wait on);
    - starting and stopping processes, and the /proc scan that finds (and kills) whatever a run
      left behind, so that one run's stragglers cannot load the next;
    - the per-run temp folders and environment for the scripted model (CLAUDE_CONFIG_DIR, and
      XDG_STATE_HOME where a bench wants the server's store kept in the run's folder);
    - reading ``key: value`` lines and the machine's CPU ticks from /proc, percentiles, and the
      "target ...: met" lines.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coven_ls.testing.scripted_model import ScriptedModel

# The repository, for what the benches share with the tests: tests/gitrepo.py (git repositories)
# and tests/lspframe.py (LSP framing).
REPOSITORY = Path(__file__).resolve().parent.parent
if str(REPOSITORY) not in sys.path:
    sys.path.insert(1, str(REPOSITORY))  # after bench/ itself, before any installed `tests`

from tests.lspframe import frame_message, read_frame  # noqa: E402  (after the path above)

EXIT_TIMEOUT = 30.0  # seconds for a process (and what it started) to end once asked to
SERVER_COMMAND = (sys.executable, "-m", "coven_ls", "--log-level", "WARNING")

# A frame as the reader thread hands it to a waiting request: (message, read at, body bytes).
Frame = tuple[dict[str, Any], float, int]


# --------------------------------------------------------------------------- processes


def daemon_thread(target: Callable[[], None], name: str) -> threading.Thread:
    """Start `target` in a daemon thread: a reader blocked on a pipe must not keep a failed
    bench from exiting."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


def spawn(
    argv: Sequence[str], cwd: Path, env: Mapping[str, str], stderr: IO[bytes]
) -> subprocess.Popen[bytes]:
    """A child with piped stdin/stdout (the bench talks to it) and stderr into `stderr`, a file
    the bench prints the tail of when a run fails."""
    return subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
    )


def spawn_server(
    workspace: Path, env: Mapping[str, str], stderr: IO[bytes], log_file: Path | None = None
) -> subprocess.Popen[bytes]:
    """``python -m coven_ls`` on `workspace`, as an editor would start it (warnings only, so the
    server's logging costs what it costs in use); with `log_file`, its INFO log goes there (to
    see where a run's time goes)."""
    if log_file is None:
        return spawn(SERVER_COMMAND, workspace, env, stderr)
    verbose = (*SERVER_COMMAND[:3], "--log-level", "INFO", "--log-file", str(log_file))
    return spawn(verbose, workspace, env, stderr)


def stop_process(proc: subprocess.Popen[Any]) -> None:
    """Give `proc` EXIT_TIMEOUT to end on its own (it has been asked to), then terminate and
    finally kill it: a bench must not leave a process behind, even after a failed run."""
    try:
        proc.wait(EXIT_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def leftover_processes(marker: str) -> list[int]:
    """Live processes whose environment holds `marker` (the run's unique config dir).

    The environment is what every process of a run inherits, CLIs and whatever they start
    included, even once reparented away from the server; zombies are left out (they are gone
    but for their parent's wait)."""
    needle = marker.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if needle in Path(f"/proc/{entry}/environ").read_bytes():
                if "\nState:\tZ" not in Path(f"/proc/{entry}/status").read_text():
                    found.append(int(entry))
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


def stderr_tail(stderr: IO[bytes], chars: int) -> str:
    """The last `chars` characters the children wrote to `stderr`: what a failed run shows."""
    stderr.seek(0)
    return stderr.read().decode(errors="replace")[-chars:]


# --------------------------------------------------------------------------- run folders


@dataclass(frozen=True)
class RunDirs:
    """One run's folders under a fresh temp dir: nothing a run writes can reach the next."""

    root: Path
    workspace: Path
    config: Path  # CLAUDE_CONFIG_DIR; its path also marks the run's processes (see `reap`)

    @property
    def state(self) -> Path:
        """An XDG_STATE_HOME inside the run, for a server that keeps a session store."""
        return self.root / "state"

    def environ(self, model: ScriptedModel, *, own_state: bool = False) -> dict[str, str]:
        """The environment for the run's CLIs (and a server that starts them): the scripted
        model's endpoint and the run's config dir; with `own_state`, XDG_STATE_HOME too."""
        env = model.cli_environ(self.config)
        if own_state:
            env["XDG_STATE_HOME"] = str(self.state)
        return env


@contextmanager
def run_dirs(prefix: str, what: str) -> Iterator[RunDirs]:
    """A fresh workspace and CLAUDE_CONFIG_DIR for one run. On the way out, waits for every
    process carrying that config dir to end, killing stragglers and saying so (`what` names the
    run in the warning), before the folders go."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        dirs = RunDirs(Path(tmp), Path(tmp, "workspace"), Path(tmp, "claude-config"))
        dirs.workspace.mkdir()
        dirs.config.mkdir()
        try:
            yield dirs
        finally:
            killed = reap(str(dirs.config))
            if killed:
                print(f"  warning: killed {killed} leftover process(es) of {what}")


# --------------------------------------------------------------------------- /proc


def machine_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole machine so far, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


def busy_cores(seconds: float = 1.0) -> float:
    """Cores busy machine-wide over the next `seconds` (any process): what a bench prints before
    its runs, since other work on a small machine shows in every figure."""
    before = machine_ticks()
    time.sleep(seconds)
    after = machine_ticks()
    return (os.cpu_count() or 1) * (after[0] - before[0]) / max(after[1] - before[1], 1)


def proc_value(path: str | Path, key: str) -> int | None:
    """The first number on the ``key:`` line of a /proc file such as ``status``, ``io`` or
    ``meminfo`` (in that file's unit); None if the file cannot be read or has no such line."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


# --------------------------------------------------------------------------- the LSP client


class LspClient:
    """Just enough of an LSP client: framed JSON-RPC over the server's stdin/stdout, blocking
    requests, and a reader thread that timestamps each frame once it is fully read, before
    decoding it, so that the client's own JSON work never counts in a figure.

    `clock` is the clock frames are timestamped with: it must be the one the bench compares them
    against (``time.monotonic`` for the scripted model's stamps, ``time.perf_counter`` for round
    trips). `timeout` bounds every request. Notifications go to `on_notification` (method,
    params, read at), or to a subclass's `_notification`.
    """

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        *,
        timeout: float,
        clock: Callable[[], float] = time.monotonic,
        on_notification: Callable[[str, Any, float], None] | None = None,
    ) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self._proc = proc
        self._stdin, self._stdout = proc.stdin, proc.stdout
        self._timeout = timeout
        self._clock = clock
        self._on_notification = on_notification
        self._ids = itertools.count(1)
        self._pending: dict[int, queue.Queue[Frame]] = {}
        self._write_lock = threading.Lock()
        self._reader = daemon_thread(self._read, "lsp-client")

    def _send(self, payload: dict[str, Any]) -> None:
        data = frame_message({"jsonrpc": "2.0", **payload})
        with self._write_lock:
            self._stdin.write(data)
            self._stdin.flush()

    def _read(self) -> None:
        while True:
            body = read_frame(self._stdout.readline, self._stdout.read)
            if body is None:
                self._eof()
                return
            at = self._clock()
            length = len(body)
            message = json.loads(body)
            if "method" in message and "id" in message:
                self._answer(message)
            elif "method" in message:
                self._notification(message["method"], message.get("params"), at)
            elif message.get("id") in self._pending:
                self._pending.pop(message["id"]).put((message, at, length))

    def _answer(self, request: dict[str, Any]) -> None:
        # No bench should be asked anything; should a tool need permission anyway, allow it
        # rather than stall the run.
        result = {"allow": True} if request["method"] == "coven/requestPermission" else None
        self._send({"id": request["id"], "result": result})

    def _notification(self, method: str, params: Any, at: float) -> None:
        if self._on_notification is not None:
            self._on_notification(method, params, at)

    def _eof(self) -> None:
        """The server closed its stdout; a subclass with waiters wakes them here."""

    def timed_request(
        self, method: str, params: Any, timeout: float | None = None
    ) -> tuple[Any, float, int]:
        """The result, the round trip in seconds (sent -> response read, on `clock`) and the
        response body's size in bytes."""
        msg_id = next(self._ids)
        answer: queue.Queue[Frame] = queue.Queue(maxsize=1)
        self._pending[msg_id] = answer
        sent = self._clock()
        self._send({"id": msg_id, "method": method, "params": params})
        reply, at, size = answer.get(timeout=self._timeout if timeout is None else timeout)
        if "error" in reply:
            raise RuntimeError(f"{method} failed: {reply['error']}")
        return reply.get("result"), at - sent, size

    def request(self, method: str, params: Any, timeout: float | None = None) -> Any:
        return self.timed_request(method, params, timeout)[0]

    def notify(self, method: str, params: Any) -> None:
        self._send({"method": method, "params": params})

    def initialize(self, workspace: Path, options: dict[str, Any], *, forks: bool = False) -> Any:
        """The ``initialize`` request as the coven clients send it (custom permission requests,
        and with `forks` the fork capability). The caller sends ``initialized`` itself, so that
        a bench timing initialize stops its clock on the answer alone."""
        coven = {"permissions": True, "forks": True} if forks else {"permissions": True}
        return self.request(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": workspace.as_uri(),
                "capabilities": {"experimental": {"coven": coven}},
                "initializationOptions": options,
            },
        )

    def close(self, shutdown_timeout: float | None = None) -> float:
        """LSP shutdown and exit, then wait for the server to end (see `stop_process`).
        Returns how long that took, on `clock`."""
        started = self._clock()
        try:
            if self._proc.poll() is None:
                self.request("shutdown", None, timeout=shutdown_timeout)
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
        return self._clock() - started


class EventClient(LspClient):
    """The shared client, keeping every ``coven/event`` notification with the time its frame was
    read, so that a run can wait for an event that may already have come. `timeout` bounds
    every request and every wait."""

    def __init__(self, proc: subprocess.Popen[bytes], *, timeout: float) -> None:
        # Before the reader thread starts (in LspClient.__init__): it appends to these.
        self.events: list[tuple[float, dict[str, Any]]] = []  # (read at, coven/event params)
        self._changed = threading.Condition()
        super().__init__(proc, timeout=timeout)

    def _notification(self, method: str, params: Any, at: float) -> None:
        if method == "coven/event":
            with self._changed:
                self.events.append((at, params))
                self._changed.notify_all()

    def _eof(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def wait_answer_to_fork(self, session_id: str) -> dict[str, Any]:
        """The turn in which a parent answers its fork's `<fork-results>`; raises if it failed."""

        def of_parent(kind: str) -> Callable[[dict[str, Any]], bool]:
            return lambda e: e["sessionId"] == session_id and e["kind"] == kind

        _, prompt = self.wait_event(
            lambda e: of_parent("prompt")(e) and e.get("origin") == "forkResults",
            "the <fork-results> prompt",
        )
        _, after = self.wait_event(
            lambda e: of_parent("turnResult")(e) and e["seq"] > prompt["seq"],
            "the parent's turn after the fork",
        )
        if after.get("isError"):
            raise RuntimeError(f"the parent's turn after the fork failed: {after}")
        return after

    def wait_event(
        self, predicate: Callable[[dict[str, Any]], bool], what: str
    ) -> tuple[float, dict[str, Any]]:
        """The first event (already read or still to come) that matches, with its read time."""
        deadline = time.monotonic() + self._timeout
        seen = 0
        with self._changed:
            while True:
                for at, event in self.events[seen:]:
                    if predicate(event):
                        return at, event
                    if event.get("kind") == "error":
                        raise RuntimeError(f"error event while waiting for {what}: {event}")
                seen = len(self.events)
                left = deadline - time.monotonic()
                if left <= 0 or self._proc.poll() is not None:
                    raise RuntimeError(f"no {what} after {self._timeout:g} s")
                self._changed.wait(min(left, 1.0))


# --------------------------------------------------------------------------- figures


def percentile(values: Sequence[float], q: float, scale: float = 1000.0) -> float:
    """Linear interpolation between closest ranks, times `scale` (seconds in, milliseconds out
    by default); nan for no values, so an empty run shows as such instead of failing."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return scale * (ordered[low] + (ordered[high] - ordered[low]) * (position - low))


def print_target(what: str, met: bool, detail: str = "") -> None:
    """One verdict line, ``target <what>: met|NOT met<detail>``, worded alike in every bench so
    that their results can be found and compared together."""
    print(f"target {what}: {'met' if met else 'NOT met'}{detail}")
