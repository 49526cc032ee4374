"""The Claude agent: one Claude Code CLI process per running session, through
claude-agent-sdk. `ClaudeSDKClient` must be connected and disconnected from the same task, which
is why a session's runner task both opens and closes its agent. What the CLI says is read into
coven's agent events by events.py; how a conversation starts (`Start`) becomes the CLI's
`--resume`, `--fork-session`, `--session-id` and `--resume-session-at`."""

from __future__ import annotations

import collections
import logging
import os
import shutil
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import anyio

from ...core.agent import (
    STDERR_GRACE_SECONDS,
    Abilities,
    Agent,
    AgentEvent,
    AgentSpec,
    AgentStartError,
    Conversation,
    Copy,
    Entry,
    New,
    PermissionAsker,
    Resume,
    launcher_path,
)
from ...core.fork.fence import SandboxSupport
from ...protocol.types import PermissionMode
from .. import binary
from ..binary import BinarySource
from . import fence, notes
from .conversation import read_conversation
from .failure import ClaudeFailed, describe_failure

if TYPE_CHECKING:
    from claude_agent_sdk import (
        ClaudeSDKClient,
        PermissionResult,
        ToolPermissionContext,
    )
    from claude_agent_sdk.types import SystemPromptPreset

log = logging.getLogger(__name__)

# The variables a command reads for its temporary folder (mktemp, Python's tempfile, pip, npm).
TEMP_VARIABLES = ("TMPDIR", "TMP", "TEMP")

INSTALL_HINT = (
    "Install it with `pip install claude-agent-sdk` (its wheel bundles the CLI) or "
    "`npm install -g @anthropic-ai/claude-code`, or point initializationOptions.claudePath "
    "(or the COVEN_CLAUDE_PATH environment variable) at a working `claude` binary."
)

# --- locating the CLI ----------------------------------------------------------------------------


def bundled_claude() -> Path | None:
    try:
        import claude_agent_sdk
    except ImportError:
        return None
    path = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    return path if path.is_file() else None


CLAUDE = BinarySource(
    name="Claude Code CLI",
    command="claude",
    option="claudePath",
    variable="COVEN_CLAUDE_PATH",
    wheel="the claude-agent-sdk wheel",
    bundled=bundled_claude,
    missing="No Claude Code CLI found (none bundled with claude-agent-sdk, none on PATH).",
    install_hint=INSTALL_HINT,
)


def resolve_claude(explicit: str | None) -> tuple[str, str]:
    """Pick the CLI: (path, where the choice came from). Does not check that it runs."""
    return binary.resolve(CLAUDE, explicit)


def probe_claude(path: str, source: str) -> str:
    """Run `claude --version` and return what it printed, or raise a CovenError that says what to
    install. Blocking: call it from a worker thread."""
    return binary.probe(CLAUDE, path, source)


# --- the real backend ----------------------------------------------------------------------------


class ClaudeAgent:
    """One connected `ClaudeSDKClient`."""

    reports_ended_tasks = True

    def __init__(
        self,
        client: ClaudeSDKClient,
        stderr_lines: collections.deque[str],
        temp: str | None = None,
    ) -> None:
        self._client = client
        self._stderr = stderr_lines
        self._temp = temp  # a fenced child's temporary folder

    async def send(self, text: str) -> None:
        await self._client.query(text)

    async def messages(self) -> AsyncGenerator[AgentEvent, None]:
        from claude_agent_sdk import Message, ProcessError

        from .events import Reader

        reader = Reader()
        # `receive_messages` is an async generator function (its body yields), so what it returns
        # has `aclose`; the SDK only annotates it as an AsyncIterator.
        stream = cast("AsyncGenerator[Message, None]", self._client.receive_messages())
        try:
            async for message in stream:
                for event in reader.read(message):
                    yield event
        except ProcessError as exc:
            raise ClaudeFailed(exc, self.stderr_tail) from exc
        finally:
            await stream.aclose()

    async def interrupt(self) -> None:
        await self._client.interrupt()

    async def stop_task(self, task_id: str) -> None:
        await self._client.stop_task(task_id)

    async def set_permission_mode(self, mode: PermissionMode) -> None:
        await self._client.set_permission_mode(mode)

    async def close(self) -> None:
        try:
            await self._client.disconnect()
        finally:
            if self._temp is not None:
                temp, self._temp = self._temp, None
                await anyio.to_thread.run_sync(lambda: shutil.rmtree(temp, ignore_errors=True))

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
    name = "claude"

    def __init__(self, claude_path: str | None = None) -> None:
        self._explicit = claude_path
        self._checked: str | None = None

    @property
    def cli_path(self) -> str:
        return resolve_claude(self._explicit)[0]

    def abilities(self) -> Abilities:
        return Abilities("claude")

    async def find_abilities(self) -> Abilities:
        return self.abilities()

    def check(self) -> None:
        path, source = resolve_claude(self._explicit)
        if self._checked != path:
            version = probe_claude(path, source)
            log.info("using Claude Code %s at %s (from %s)", version, path, source)
            self._checked = path

    async def aclose(self) -> None:
        return None  # nothing shared: each session's process ends with its agent

    def sandbox_support(self) -> SandboxSupport:
        return fence.support()

    def first_request_tokens(self, cwd: str, repository: str, fenced: bool) -> int:
        return notes.first_request_tokens(cwd, repository, fenced)

    async def fork_point_problem(self, conversation: str, message_id: str) -> str | None:
        return None  # the CLI copies a conversation up to any of its messages

    async def purge(self, conversations: list[Conversation]) -> None:
        """Delete the CLI's transcripts (`<config>/projects/<cwd>/<id>.jsonl`)."""
        config_dir = os.environ.get("CLAUDE_CONFIG_DIR") or os.path.expanduser("~/.claude")
        for conversation in conversations:
            project = "".join(c if c.isalnum() else "-" for c in conversation.cwd)
            name = f"{conversation.agent_session_id}.jsonl"
            transcript = Path(config_dir) / "projects" / project / name
            try:
                transcript.unlink(missing_ok=True)
            except OSError:
                log.warning("could not delete %s", transcript, exc_info=True)

    async def conversation(
        self, agent_session_id: str, cwd: str, up_to: str | None = None
    ) -> list[Entry]:
        entries = await anyio.to_thread.run_sync(read_conversation, agent_session_id, cwd, up_to)
        if not entries:
            raise AgentStartError(
                f"Claude Code's transcript of conversation {agent_session_id} (a session in "
                f"{cwd}) could not be found or holds no messages, so it cannot be written out."
            )
        return entries

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
            allow, message, _ = await ask_permission(name, tool_input, context.tool_use_id)
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
        fenced: dict[str, Any] = {}
        temp: str | None = None
        if spec.fence is not None:
            # A temporary folder of its own (the sandbox's is $TMPDIR/claude-<uid>, shared by
            # every child otherwise); removed when the agent closes.
            temp = await anyio.to_thread.run_sync(fence.make_temp)
            fenced = fence.options(spec, spec.fence, temp)
            env.update(dict.fromkeys(TEMP_VARIABLES, temp))
            env.update(fence.environment(spec.fence))
            wrapper = await anyio.to_thread.run_sync(fence.command_wrappers)
            if wrapper is not None:
                path = env.get("PATH") or os.environ.get("PATH", "")
                env["PATH"] = os.pathsep.join(filter(None, [wrapper, path]))
        launcher = await anyio.to_thread.run_sync(launcher_path)
        if launcher is not None:
            env.update(COVEN_REAL_CLAUDE=cli_path, COVEN_PARENT_PID=str(os.getpid()))
            cli_path = launcher
        options = ClaudeAgentOptions(
            cwd=spec.cwd,
            model=spec.model,
            permission_mode=spec.permission_mode,
            **start_options(spec),
            system_prompt=system_prompt,
            cli_path=cli_path,
            env=env,
            can_use_tool=can_use_tool,
            stderr=on_stderr,
            # Token by token, as the CLI itself shows it; and a subagent's own words too.
            include_partial_messages=True,
            forward_subagent_text=True,
            **fenced,
        )
        client = ClaudeSDKClient(options)
        try:
            await client.connect()
        except Exception as exc:
            # The reason is on stderr, which is read apart from the exit: give it a moment.
            with anyio.move_on_after(STDERR_GRACE_SECONDS):
                await said.wait()
            if temp is not None:
                shutil.rmtree(temp, ignore_errors=True)
            raise AgentStartError(describe_failure(exc, "\n".join(stderr_lines))) from exc
        return ClaudeAgent(client, stderr_lines, temp)


def start_options(spec: AgentSpec) -> dict[str, Any]:
    """How the conversation starts, as the CLI's options."""
    match spec.start:
        case New(conversation_id=new_id):
            return {"session_id": new_id}
        case Resume(conversation_id=conversation):
            return {"resume": conversation}
        case Copy(conversation_id=conversation, up_to=up_to, new_id=new_id):
            return {
                "resume": conversation,
                "fork_session": True,
                "session_id": new_id,
                "resume_session_at": up_to,
            }
    raise AssertionError(f"unknown start {spec.start!r}")
