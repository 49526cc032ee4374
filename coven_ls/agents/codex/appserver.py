"""One `codex app-server` process (JSON-RPC, one JSON object a line over stdio) shared by all of
a server's Codex threads.

Requests are matched to their answers by id; notifications and the server's own requests
(approvals) go to the thread they name. The process runs in a session of its own (its sandboxed
commands with it, so that closing it ends them all) and, on Linux, through the launcher that
ties its life to ours with PR_SET_PDEATHSIG: it dies with the server even on SIGKILL.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import itertools
import json
import logging
import os
import shlex
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import anyio
from anyio.abc import Process, TaskGroup

from ...core.agent import launcher_path

log = logging.getLogger(__name__)

# Off for every process coven-ls starts: with shell snapshots on, a command that fails on a
# sandbox violation reports no item at all (verified with 0.163.0), so no tool call would show.
CONFIG_OVERRIDES = ("features.shell_snapshot=false",)
START_SECONDS = 30.0
# The names codex answers to when started under them (its "arg0 trick"): with bubblewrap on PATH
# it runs each sandboxed command as `bwrap … codex-linux-sandbox …`, found on PATH.
HELPER_NAMES = ("codex-linux-sandbox", "apply_patch", "applypatch")


class CodexRpcError(Exception):
    def __init__(self, method: str, error: dict[str, Any]) -> None:
        self.code = error.get("code")
        self.detail = str(error.get("message") or error)
        super().__init__(f"codex {method} failed: {self.detail}")


class AppServerGone(Exception):
    """The app-server process ended; the message says how and why."""


class ThreadListener(Protocol):
    def notify(self, method: str, params: dict[str, Any]) -> None: ...

    async def server_request(self, method: str, params: dict[str, Any]) -> dict[str, Any]: ...

    def gone(self, error: AppServerGone) -> None: ...


class AppServer:
    def __init__(
        self,
        path: str,
        task_group: TaskGroup,
        env: dict[str, str] | None = None,
        on_gone: Callable[[AppServerGone, list[str]], None] | None = None,
    ) -> None:
        """`on_gone`: the process ended by itself (killed, crashed; not `aclose`), with the
        threads that were held then."""
        self.path = path
        self._on_gone = on_gone
        self._tg = task_group
        self._env = env
        self._process: Process | None = None
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[anyio.Event, list[dict[str, Any]]]] = {}
        self._listeners: dict[str, ThreadListener] = {}
        self.loaded: dict[str, str | None] = {}  # threads this process holds -> their model
        self._start_lock = anyio.Lock()
        self._write_lock = anyio.Lock()
        self.stderr: collections.deque[str] = collections.deque(maxlen=40)
        self._gone: AppServerGone | None = None
        self.version: str | None = None

    @property
    def task_group(self) -> TaskGroup:
        """Where the app-server's readers and the answers to its requests run (the hub's)."""
        return self._tg

    @property
    def running(self) -> bool:
        return self._process is not None and self._gone is None

    def stderr_tail(self) -> str:
        return "\n".join(self.stderr)

    async def ensure_started(self) -> None:
        async with self._start_lock:
            if self.running:
                return
            await self._start()

    async def _start(self) -> None:
        self._gone = None
        self.loaded.clear()
        env = dict(os.environ if self._env is None else self._env)
        helpers = await anyio.to_thread.run_sync(make_helper_aliases, self.path)
        if helpers is not None:
            env["PATH"] = os.pathsep.join(filter(None, [str(helpers), env.get("PATH")]))
        program = self.path
        launcher = await anyio.to_thread.run_sync(launcher_path)
        if launcher is not None:
            env.update(COVEN_REAL_CLAUDE=self.path, COVEN_PARENT_PID=str(os.getpid()))
            program = launcher
        args = [program]
        for override in CONFIG_OVERRIDES:
            args += ["-c", override]
        args += ["app-server", "--listen", "stdio://"]
        try:
            process = await anyio.open_process(args, env=env, start_new_session=True)
        except OSError as exc:
            raise AppServerGone(
                f"codex app-server could not be started ({self.path}): {exc}"
            ) from exc
        self._process = process
        self._tg.start_soon(self._read_stdout, process, name="codex app-server stdout")
        self._tg.start_soon(self._read_stderr, process, name="codex app-server stderr")
        with anyio.fail_after(START_SECONDS):
            reply = await self.request(
                "initialize",
                {
                    "clientInfo": {"name": "coven-ls", "title": "coven-ls", "version": _version()},
                    "capabilities": {"experimentalApi": True},
                },
            )
        agent = str(reply.get("userAgent") or "")
        self.version = agent.split("/", 1)[1].split(" ", 1)[0] if "/" in agent else None
        await self._send({"method": "initialized"})
        log.info("codex app-server %s started (pid %s)", self.version, process.pid)

    async def _send(self, message: dict[str, Any]) -> None:
        process = self._process
        if process is None or process.stdin is None or self._gone is not None:
            raise self._gone or AppServerGone("the codex app-server is not running")
        data = (json.dumps(message) + "\n").encode()
        async with self._write_lock:
            try:
                await process.stdin.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                raise self._gone or AppServerGone(f"codex app-server stdin closed: {exc}") from exc

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id = next(self._ids)
        done = anyio.Event()
        box: list[dict[str, Any]] = []
        self._waiting[request_id] = (done, box)
        try:
            await self._send({"id": request_id, "method": method, "params": params})
            await done.wait()
        finally:
            self._waiting.pop(request_id, None)
        if not box:
            raise self._gone or AppServerGone("the codex app-server ended")
        answer = box[0]
        if "error" in answer:
            raise CodexRpcError(method, answer["error"] or {})
        result = answer.get("result")
        return result if isinstance(result, dict) else {}

    def listen(self, thread_id: str, listener: ThreadListener) -> None:
        self._listeners[thread_id] = listener

    def forget(self, thread_id: str, listener: ThreadListener) -> None:
        if self._listeners.get(thread_id) is listener:
            del self._listeners[thread_id]

    async def _read_stdout(self, process: Process) -> None:
        assert process.stdout is not None
        buffer = b""
        try:
            async for chunk in process.stdout:
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        self._dispatch(line)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        finally:
            with anyio.CancelScope(shield=True):
                code = await _wait_exit(process)
            self._ended(process, code)

    async def _read_stderr(self, process: Process) -> None:
        assert process.stderr is not None
        buffer = b""
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            async for chunk in process.stderr:
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    text = line.decode(errors="replace").rstrip()
                    if text:
                        self.stderr.append(text)
                        log.debug("codex stderr: %s", text)

    def _dispatch(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            log.warning("codex app-server sent a line that is not JSON: %r", line[:200])
            return
        if not isinstance(message, dict):
            return
        method, request_id = message.get("method"), message.get("id")
        if method is None:
            waiting = self._waiting.get(request_id) if isinstance(request_id, int) else None
            if waiting is not None:
                waiting[1].append(message)
                waiting[0].set()
            return
        raw = message.get("params")
        params: dict[str, Any] = raw if isinstance(raw, dict) else {}
        listener = self._listeners.get(str(params.get("threadId") or ""))
        if request_id is not None:
            self._tg.start_soon(self._answer, request_id, str(method), params, listener)
        elif listener is not None:
            listener.notify(str(method), params)

    async def _answer(
        self, request_id: Any, method: str, params: dict[str, Any], listener: ThreadListener | None
    ) -> None:
        if listener is None:
            # Nobody holds the thread any more: refuse rather than leave codex waiting.
            reply: dict[str, Any] = {"id": request_id, "result": {"decision": "decline"}}
        else:
            try:
                reply = {"id": request_id, "result": await listener.server_request(method, params)}
            except Exception as exc:
                log.warning("codex request %s failed: %s", method, exc, exc_info=True)
                reply = {"id": request_id, "error": {"code": -32603, "message": str(exc)}}
        with contextlib.suppress(AppServerGone):
            await self._send(reply)

    def _ended(self, process: Process, code: int | None) -> None:
        if self._process is not process:
            return
        how = (
            f"was killed by {signal.Signals(-code).name}"
            if code is not None and code < 0 and -code in signal.valid_signals()
            else f"exited with code {code}"
        )
        last = " ".join(ln.strip() for ln in list(self.stderr)[-3:] if ln.strip())
        gone = AppServerGone(f"The codex app-server {how}" + (f": {last}" if last else "."))
        self._gone = gone
        self.loaded.clear()
        for done, _box in list(self._waiting.values()):
            done.set()
        held = list(self._listeners)
        for listener in list(self._listeners.values()):
            listener.gone(gone)
        self._listeners.clear()
        if self._on_gone is not None:
            self._on_gone(gone, held)

    def kill_command(self, command: str) -> int:
        """End a command this app-server runs (and what it started): codex leaves a command
        running when its turn is interrupted (verified with 0.163.0), and nothing in its protocol
        stops it. Matched by its argv among the app-server's descendants; returns how many
        processes got SIGKILL. Linux only (/proc); elsewhere 0."""
        process = self._process
        if process is None or not Path("/proc").is_dir():
            return 0
        try:
            argv = shlex.split(command)
        except ValueError:
            return 0
        children: dict[int, list[int]] = {}
        cmdlines: dict[int, list[str]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
            cmdlines[int(entry.name)] = cmdline.decode(errors="replace").split("\0")[:-1]

        def tree(pid: int) -> list[int]:
            found = [pid]
            for child in children.get(pid, []):
                found += tree(child)
            return found

        def runs_it(pid: int) -> bool:
            # The command itself, or the sandbox that runs it (`codex-linux-sandbox … --
            # /bin/bash -lc …`, with bubblewrap under it when the machine has it): its argv
            # ends with the command's.
            line = cmdlines.get(pid, [])
            return bool(argv) and len(line) >= len(argv) and line[len(line) - len(argv) :] == argv

        doomed: set[int] = set()
        for target in tree(process.pid)[1:]:
            if target not in doomed and runs_it(target):
                doomed.update(tree(target))  # the outermost match: everything under it goes
        killed = 0
        for pid in doomed:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
        return killed

    async def aclose(self) -> None:
        """End the process and every command it runs (its process group)."""
        process, self._process = self._process, None
        if process is None:
            return
        self._gone = self._gone or AppServerGone("the codex app-server was stopped")
        with anyio.CancelScope(shield=True):
            if process.stdin is not None:
                with contextlib.suppress(Exception):
                    await process.stdin.aclose()
            with anyio.move_on_after(3):
                await process.wait()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                process.kill()
            with anyio.move_on_after(5):
                await process.wait()


def make_helper_aliases(codex: str) -> Path | None:
    """A folder of links to the codex binary under the names of its helpers, for the
    app-server's PATH: `$XDG_CACHE_HOME/coven-ls/codex-helpers/<binary's hash>` (made once, mode
    0700, reused by every app-server of that binary); None off Linux, when `codex` is not the
    binary itself (npm's node wrapper: codex's own links must do) or when it cannot be made.
    Codex makes these itself under `$CODEX_HOME/tmp`, but refuses when CODEX_HOME lies in the
    temporary folder ("Refusing to create helper binaries under temporary dir"), as every
    test's and the demo's does; then, with bubblewrap on PATH, every sandboxed command fails
    with `bwrap: execvp codex-linux-sandbox: No such file or directory`. Where codex did make
    its own, they come first on PATH and these are unused."""
    if not sys.platform.startswith("linux"):
        return None
    binary = Path(codex).resolve()
    try:
        with binary.open("rb") as file:
            if file.read(4) != b"\x7fELF":
                return None
    except OSError:
        return None
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    digest = hashlib.sha256(str(binary).encode()).hexdigest()[:16]
    folder = cache / "coven-ls" / "codex-helpers" / digest
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        for name in HELPER_NAMES:
            link = folder / name
            if link.is_symlink() and os.readlink(link) == str(binary):
                continue
            # Made aside and renamed over: another server may be doing the same right now.
            fresh = folder / f".{name}.{os.getpid()}"
            fresh.unlink(missing_ok=True)
            fresh.symlink_to(binary)
            fresh.replace(link)
    except OSError as exc:
        # Codex still starts; its sandboxed commands fail only if it made no helper either.
        log.warning("no codex helper folder in %s (%s): codex's own must do", folder, exc)
        return None
    return folder


async def _wait_exit(process: Process) -> int | None:
    with anyio.move_on_after(5):
        return await process.wait()
    return process.returncode


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("coven-ls")
    except Exception:
        return "0"
