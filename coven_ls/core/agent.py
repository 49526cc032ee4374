"""The agent backend: one Claude Code CLI process per running session, through claude-agent-sdk.

The session logic talks to the `Agent` protocol only, so tests can swap in a fake; `ClaudeBackend`
is the real thing. `ClaudeSDKClient` must be connected and disconnected from the same task, which
is why a session's runner task both opens and closes its agent.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import anyio

from .. import protocol

if TYPE_CHECKING:
    from claude_agent_sdk import (
        ClaudeSDKClient,
        Message,
        PermissionMode,
        PermissionResult,
        ToolPermissionContext,
    )
    from claude_agent_sdk.types import SystemPromptPreset

log = logging.getLogger(__name__)

# tool name, tool input, tool use id -> (allow, message for the model when denied)
PermissionAsker = Callable[[str, dict[str, Any], "str | None"], Awaitable[tuple[bool, str]]]

INSTALL_HINT = (
    "Install it with `pip install claude-agent-sdk` (its wheel bundles the CLI) or "
    "`npm install -g @anthropic-ai/claude-code`, or point initializationOptions.claudePath "
    "(or the COVEN_CLAUDE_PATH environment variable) at a working `claude` binary."
)

# Nesting markers that would make the CLI believe it runs inside another Claude Code session.
NESTING_VARIABLES = ("CLAUDECODE", "CLAUDE_CODE_SESSION_ID")


@dataclass(frozen=True)
class AgentSpec:
    """Everything needed to start (or resume) one agent process."""

    cwd: str
    model: str | None = None
    permission_mode: PermissionMode | None = None
    resume: str | None = None
    fork_session: bool = False
    session_id: str | None = None
    resume_at: str | None = None
    append_system_prompt: str | None = None
    env: dict[str, str] = field(default_factory=dict)


class Agent(Protocol):
    async def send(self, text: str) -> None: ...

    def messages(self) -> AsyncGenerator[Message, None]:
        """The agent's messages from now on; the caller closes the generator (`aclose`) when it
        stops reading."""
        ...

    async def interrupt(self) -> None: ...

    async def stop_task(self, task_id: str) -> None:
        """Stop one of the CLI's background tasks; its end arrives as a task message."""

    async def set_permission_mode(self, mode: PermissionMode) -> None:
        """Change the running CLI's permission mode, from its next tool call on."""

    async def close(self) -> None: ...

    def kill(self) -> None:
        """End the process at once, for one that no longer answers (frozen, hung): a graceful
        close waits on it (stdin closed, then SIGTERM) for seconds. close() still follows."""

    def stderr_tail(self) -> str: ...


class Backend(Protocol):
    def check(self) -> None:
        """Raise CovenError(CLAUDE_UNAVAILABLE) when no agent can be started at all."""

    async def open(self, spec: AgentSpec, ask_permission: PermissionAsker) -> Agent: ...


# --- locating the CLI ----------------------------------------------------------------------------


def bundled_claude() -> Path | None:
    try:
        import claude_agent_sdk
    except ImportError:
        return None
    path = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    return path if path.is_file() else None


def resolve_claude(explicit: str | None) -> tuple[str, str]:
    """Pick the CLI: (path, where the choice came from). Does not check that it runs."""
    if explicit:
        return explicit, "initializationOptions.claudePath"
    env = os.environ.get("COVEN_CLAUDE_PATH")
    if env:
        return env, "COVEN_CLAUDE_PATH"
    bundled = bundled_claude()
    if bundled is not None:
        return str(bundled), "the claude-agent-sdk wheel"
    found = shutil.which("claude")
    if found:
        return found, "PATH"
    raise protocol.CovenError(
        protocol.ErrorCode.ClaudeUnavailable,
        "No Claude Code CLI found (none bundled with claude-agent-sdk, none on PATH). "
        + INSTALL_HINT,
    )


def probe_claude(path: str, source: str) -> str:
    """Run `claude --version` and return what it printed, or raise a CovenError that says what to
    install. Blocking: call it from a worker thread."""
    resolved = shutil.which(path) if os.sep not in path else path
    # os.path, not pathlib: its checks are False for any path the OS refuses (too long, a NUL
    # in it), where pathlib's raise.
    if not resolved or not os.path.exists(resolved):
        raise protocol.CovenError(
            protocol.ErrorCode.ClaudeUnavailable,
            f"Claude Code CLI not found at '{path}' (from {source}). {INSTALL_HINT}",
            {"claudePath": path, "source": source},
        )
    if not os.access(resolved, os.X_OK) or os.path.isdir(resolved):
        raise protocol.CovenError(
            protocol.ErrorCode.ClaudeUnavailable,
            f"'{resolved}' (from {source}) is not an executable file. {INSTALL_HINT}",
            {"claudePath": path, "source": source},
        )
    try:
        done = subprocess.run(
            [resolved, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise protocol.CovenError(
            protocol.ErrorCode.ClaudeUnavailable,
            f"'{resolved}' (from {source}) could not be run: {exc}. {INSTALL_HINT}",
            {"claudePath": path, "source": source},
        ) from exc
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise protocol.CovenError(
            protocol.ErrorCode.ClaudeUnavailable,
            f"'{resolved} --version' (from {source}) failed with exit code {done.returncode}: "
            f"{detail[0]}. {INSTALL_HINT}",
            {"claudePath": path, "source": source},
        )
    return done.stdout.strip()


# --- tying the CLI's life to ours ---------------------------------------------------------------

_LAUNCHER = """#!{python}
# Written by coven-ls: runs Claude Code so that it dies with the server that started it, even
# when that server is killed with SIGKILL and cannot clean up.
import ctypes, os, signal, sys
PR_SET_PDEATHSIG = 1
ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
if str(os.getppid()) != os.environ.get("COVEN_PARENT_PID"):
    sys.exit(1)  # the server died before the line above took effect
real = os.environ["COVEN_REAL_CLAUDE"]
os.execv(real, [real, *sys.argv[1:]])
"""


def launcher_path() -> str | None:
    """An executable that starts the CLI tied to this process (Linux only), or None."""
    if not sys.platform.startswith("linux"):
        return None
    text = _LAUNCHER.format(python=sys.executable)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"coven-ls-{os.getuid()}" / f"claude-{digest}"
    if not path.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(text)
        partial.chmod(0o700)
        partial.replace(path)  # atomic: another server may be writing the same file
    return str(path)


# --- the real backend ----------------------------------------------------------------------------


class ClaudeAgent:
    """One connected `ClaudeSDKClient`."""

    def __init__(self, client: ClaudeSDKClient, stderr_lines: collections.deque[str]) -> None:
        self._client = client
        self._stderr = stderr_lines

    async def send(self, text: str) -> None:
        await self._client.query(text)

    def messages(self) -> AsyncGenerator[Message, None]:
        # `receive_messages` is an async generator function (its body yields), so what it returns
        # has `aclose`; the SDK only annotates it as an AsyncIterator.
        return cast("AsyncGenerator[Message, None]", self._client.receive_messages())

    async def interrupt(self) -> None:
        await self._client.interrupt()

    async def stop_task(self, task_id: str) -> None:
        await self._client.stop_task(task_id)

    async def set_permission_mode(self, mode: PermissionMode) -> None:
        await self._client.set_permission_mode(mode)

    async def close(self) -> None:
        await self._client.disconnect()

    def kill(self) -> None:
        # The SDK has no public handle on its process, and its disconnect() gives a process 5 s
        # to end after stdin is closed, then 5 s after SIGTERM, which a stopped one never
        # handles: a frozen child held its fork 10 s past its idle limit. Without the handle
        # (another SDK), close() still ends the process, only later.
        process = getattr(getattr(self._client, "_transport", None), "_process", None)
        if process is None or getattr(process, "returncode", 0) is not None:
            return
        try:
            process.kill()
        except ProcessLookupError:
            pass

    def stderr_tail(self) -> str:
        return "\n".join(self._stderr)


class ClaudeBackend:
    def __init__(self, claude_path: str | None = None) -> None:
        self._explicit = claude_path
        self._checked: str | None = None

    @property
    def cli_path(self) -> str:
        return resolve_claude(self._explicit)[0]

    def check(self) -> None:
        path, source = resolve_claude(self._explicit)
        if self._checked != path:
            version = probe_claude(path, source)
            log.info("using Claude Code %s at %s (from %s)", version, path, source)
            self._checked = path

    async def open(self, spec: AgentSpec, ask_permission: PermissionAsker) -> Agent:
        from claude_agent_sdk import (
            ClaudeAgentOptions,
            ClaudeSDKClient,
            PermissionResultAllow,
            PermissionResultDeny,
        )

        await anyio.to_thread.run_sync(self.check)
        stderr_lines: collections.deque[str] = collections.deque(maxlen=40)

        async def can_use_tool(
            name: str, tool_input: dict[str, Any], context: ToolPermissionContext
        ) -> PermissionResult:
            allow, message = await ask_permission(name, tool_input, context.tool_use_id)
            if allow:
                return PermissionResultAllow()
            return PermissionResultDeny(message=message)

        said = anyio.Event()

        def on_stderr(line: str) -> None:
            stderr_lines.append(line.rstrip())
            said.set()
            log.debug("claude stderr: %s", line.rstrip())

        system_prompt: SystemPromptPreset
        if spec.append_system_prompt:
            system_prompt = {
                "type": "preset",
                "preset": "claude_code",
                "append": spec.append_system_prompt,
            }
        else:
            # system_prompt=None would mean an EMPTY system prompt, not Claude Code's own.
            system_prompt = {"type": "preset", "preset": "claude_code"}
        cli_path, env = shutil.which(self.cli_path) or self.cli_path, dict(spec.env)
        launcher = await anyio.to_thread.run_sync(launcher_path)
        if launcher is not None:
            env.update(COVEN_REAL_CLAUDE=cli_path, COVEN_PARENT_PID=str(os.getpid()))
            cli_path = launcher
        options = ClaudeAgentOptions(
            cwd=spec.cwd,
            model=spec.model,
            permission_mode=spec.permission_mode,
            resume=spec.resume,
            fork_session=spec.fork_session,
            session_id=spec.session_id,
            resume_session_at=spec.resume_at,
            system_prompt=system_prompt,
            cli_path=cli_path,
            env=env,
            can_use_tool=can_use_tool,
            stderr=on_stderr,
            # Token by token, as the CLI itself shows it; and a subagent's own words too.
            include_partial_messages=True,
            forward_subagent_text=True,
        )
        client = ClaudeSDKClient(options)
        try:
            await client.connect()
        except Exception as exc:
            # The reason is on stderr, which is read apart from the exit: give it a moment.
            with anyio.move_on_after(STDERR_GRACE_SECONDS):
                await said.wait()
            raise AgentStartError(describe_failure(exc, "\n".join(stderr_lines))) from exc
        return ClaudeAgent(client, stderr_lines)


class AgentStartError(Exception):
    """The CLI could not start; the message says how it ended and why, in its own words."""


# How long a failed start waits for the CLI's stderr to say why.
STDERR_GRACE_SECONDS = 1.0

# What the SDK puts in ProcessError.stderr when it did not capture the stream (we do, through
# the `stderr` callback): a pointer, not a reason.
_NO_STDERR = "Check stderr output for details"


def meaningful_lines(stderr: str, keep: int = 3) -> str:
    """The last few non-blank lines of the CLI's stderr, joined: its reason, as it said it."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and _NO_STDERR not in ln]
    return " ".join(lines[-keep:])


def describe_failure(exc: BaseException, stderr: str) -> str:
    """A sentence for a failed CLI: how it ended (its exit code, or the signal that killed it)
    and why, in its own words from stderr, rather than the SDK's "Command failed with exit code 1
    ... Check stderr output for details"."""
    from claude_agent_sdk import ProcessError

    reason = meaningful_lines(stderr)
    if isinstance(exc, ProcessError) and exc.exit_code is not None:
        code = exc.exit_code
        signum = -code if code < 0 else code - 128 if code > 128 else None
        try:
            how = f"was killed by {signal.Signals(signum).name}" if signum else None
        except ValueError:
            how = None
        how = how or f"exited with code {code}"
        return f"Claude Code {how}" + (f": {reason}" if reason else ".")
    return f"The Claude Code process failed: {exc}" + (
        f" Its last output: {reason}" if reason else ""
    )
