"""An ACP agent's process: started through the launcher that ties it to the server (its own
process group, dead with the server even on SIGKILL), spoken to over stdio with the ACP SDK's
client side, and ended gracefully (stdin closed, then SIGTERM after a grace period, then SIGKILL:
some agents do not exit when their stdin closes)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import shutil
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from acp import PROTOCOL_VERSION, connect_to_agent
from acp.interfaces import Client
from acp.schema import (
    ClientCapabilities,
    FileSystemCapabilities,
    Implementation,
    InitializeResponse,
)

from ... import __version__, protocol
from ...core.agent import AgentStartError, launcher_path
from ...protocol.types import AcpAgentConfig
from .known import inherited_env

log = logging.getLogger(__name__)

# How long a closing agent has to exit once its stdin is closed, then once sent SIGTERM.
EXIT_GRACE_SECONDS = 2.0
TERM_GRACE_SECONDS = 3.0
# ACP messages are one JSON object a line; a tool's output or a file can make a long one.
LINE_LIMIT = 64 * 1024 * 1024


@dataclass
class Link:
    """A connection to one agent: the SDK's client side of it, and its process when it has one
    (a test's in-process agent has none)."""

    conn: Any  # acp.ClientSideConnection: the agent's methods
    process: asyncio.subprocess.Process | None = None
    stderr: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=40))
    closing: bool = False

    def stderr_tail(self) -> str:
        return "\n".join(self.stderr)

    def kill(self) -> None:
        process = self.process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)

    async def aclose(self) -> None:
        self.closing = True
        with contextlib.suppress(Exception):
            await self.conn.close()
        process = self.process
        if process is None:
            return
        if process.stdin is not None:
            with contextlib.suppress(Exception):
                process.stdin.close()
        for sig, grace in ((None, EXIT_GRACE_SECONDS), (signal.SIGTERM, TERM_GRACE_SECONDS)):
            if sig is not None and process.returncode is None:
                log.info("ACP agent process %d did not exit with its stdin: %s", process.pid, sig)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, sig)
            with anyio.move_on_after(grace):
                await process.wait()
            if process.returncode is not None:
                return
        self.kill()
        with anyio.move_on_after(TERM_GRACE_SECONDS):
            await process.wait()


# (the client the agent talks to, what to call when the process ends by itself) -> a link
Connect = Callable[[Client, Callable[[str], None]], Awaitable[Link]]


def command_problem(name: str, config: AcpAgentConfig) -> protocol.CovenError | None:
    """Why the agent's program cannot be started (not found, not executable), or None."""
    program = config.command[0]
    path = os.environ.get("PATH")
    if config.env and "PATH" in config.env:
        path = config.env["PATH"]
    if shutil.which(program, path=path) is None:
        from .known import install_hint

        hint = install_hint(name)
        return protocol.CovenError(
            protocol.ErrorCode.ClaudeUnavailable,
            f"ACP agent '{name}': its command '{program}' was not found "
            f"({'not an executable file' if os.sep in program else 'not on PATH'}). Install it"
            f"{f' ({hint})' if hint else ''}, or fix initializationOptions.agents.{name}.command.",
            {"agent": name, "command": program},
        )
    return None


def process_connector(
    name: str, config: AcpAgentConfig, cwd: str, task_group: Any, env: dict[str, str]
) -> Connect:
    """How to start the agent `name` for a session in `cwd`."""

    async def connect(client: Client, on_exit: Callable[[str], None]) -> Link:
        problem = command_problem(name, config)
        if problem is not None:
            raise AgentStartError(problem.message)
        merged = {**inherited_env(name, os.environ), **(config.env or {}), **env}
        program = shutil.which(config.command[0], path=merged.get("PATH")) or config.command[0]
        args = [program, *config.command[1:]]
        launcher = await anyio.to_thread.run_sync(launcher_path)
        if launcher is not None:
            merged.update(COVEN_REAL_CLAUDE=program, COVEN_PARENT_PID=str(os.getpid()))
            args = [launcher, *config.command[1:]]
        try:
            process = await asyncio.create_subprocess_exec(
                *args,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=merged,
                cwd=cwd,
                start_new_session=True,
                limit=LINE_LIMIT,
            )
        except OSError as exc:
            raise AgentStartError(
                f"ACP agent '{name}' could not be started ({' '.join(config.command)}): {exc}"
            ) from exc
        assert process.stdin is not None and process.stdout is not None
        conn = connect_to_agent(client, process.stdin, process.stdout, use_unstable_protocol=True)
        link = Link(conn, process)
        task_group.start_soon(_read_stderr, name, link, name=f"ACP agent {name} stderr")
        task_group.start_soon(_watch, name, link, on_exit, name=f"ACP agent {name} exit")
        return link

    return connect


async def _read_stderr(name: str, link: Link) -> None:
    assert link.process is not None and link.process.stderr is not None
    while True:
        line = await link.process.stderr.readline()
        if not line:
            return
        text = line.decode(errors="replace").rstrip()
        if text:
            link.stderr.append(text)
            log.debug("ACP agent %s: %s", name, text)


async def _watch(name: str, link: Link, on_exit: Callable[[str], None]) -> None:
    assert link.process is not None
    code = await link.process.wait()
    if link.closing:
        return
    how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
    tail = " ".join(line.strip() for line in list(link.stderr)[-3:])
    on_exit(f"The ACP agent '{name}' {how}." + (f" Its last output: {tail}" if tail else ""))


async def initialize(conn: Any) -> InitializeResponse:
    """`initialize` as coven-ls asks it of every agent (a session's, purge's, the doctor's): no
    `fs` and no `terminal` client capability, since the agent reads, writes and runs commands
    itself, as Claude Code and codex do (a worktree child's own environment is its process's)."""
    return await conn.initialize(  # type: ignore[no-any-return]
        protocol_version=PROTOCOL_VERSION,
        client_capabilities=ClientCapabilities(
            fs=FileSystemCapabilities(read_text_file=False, write_text_file=False),
            terminal=False,
        ),
        client_info=Implementation(name="coven-ls", version=__version__),
    )
