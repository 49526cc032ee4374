"""In-process fakes for unit tests: an agent backend that replays scripted claude-agent-sdk
messages, and a recording `Sink`. No CLI, no subprocess.

The fake is a scripted Claude Code: its SDK messages go through the Claude adapter's reader
(coven_ls/agents/claude/events.py), as the real agent's do, and reach the session as coven's agent
events; a step may also be an agent event itself (core/agent/events.py), passed on as it is.

A turn's reply is a list of steps. A step is either a message or one of the step classes below:

- `Gate`: the turn stops there until the test opens the gate (or the turn is interrupted);
  `gate.reached` tells the test the turn got that far.
- `Ask`: the agent asks for permission (through the `ask_permission` callback the session gave
  `open`), the way the SDK's `can_use_tool` does; the answer is recorded in `backend.answers`.
- `Die`: the message stream ends without a result (the process died).
- `Fail`: `messages()` raises the exception.

A reply with no `ResultMessage` in it also ends without a result. `interrupt()` ends the current
turn with `ResultMessage(subtype="error_during_execution", is_error=True)`, like the CLI does, and
cancels a pending `Gate` or `Ask` (the SDK cancels an in-flight `can_use_tool` callback when the CLI
sends `control_cancel_request`).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
from claude_agent_sdk import (
    AssistantMessage,
    Message,
    ProcessError,
    ResultMessage,
    StreamEvent,
    SystemMessage,
    TaskNotificationMessage,
    TaskProgressMessage,
    TaskStartedMessage,
    TaskUpdatedMessage,
    TaskUsage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)

from coven_ls.agents.claude.events import Reader
from coven_ls.agents.claude.failure import ClaudeFailed
from coven_ls.core.agent import (
    Abilities,
    AgentSpec,
    AgentStartError,
    Conversation,
    Copy,
    Entry,
    New,
    PermissionAsker,
)
from coven_ls.core.agent import events as agent_events

DEFAULT_TIMEOUT = 3.0
MODEL = "claude-test-1"

_uuids = itertools.count(1)


def _uuid(prefix: str = "m") -> str:
    return f"{prefix}-{next(_uuids)}"


# --- SDK message builders ------------------------------------------------------------------------


def init(agent_session_id: str = "agent-1", **data: Any) -> SystemMessage:
    """The CLI's `system/init` message, sent at the start of each turn."""
    return SystemMessage(
        subtype="init",
        data={
            "type": "system",
            "subtype": "init",
            "session_id": agent_session_id,
            "model": MODEL,
            "cwd": "/work",
            "permissionMode": "default",
            "claude_code_version": "9.9.9",
            "tools": ["Bash"],
            **data,
        },
    )


def assistant(
    *blocks: Any, uuid: str | None = None, parent: str | None = None, session_id: str = "agent-1"
) -> AssistantMessage:
    """An assistant message; str blocks become TextBlocks."""
    content = [TextBlock(b) if isinstance(b, str) else b for b in blocks]
    return AssistantMessage(
        content=content,
        model=MODEL,
        parent_tool_use_id=parent,
        session_id=session_id,
        uuid=uuid or _uuid("asst"),
    )


def tool_use(tool_use_id: str, name: str, tool_input: dict[str, Any]) -> ToolUseBlock:
    return ToolUseBlock(id=tool_use_id, name=name, input=tool_input)


def thinking(text: str) -> ThinkingBlock:
    return ThinkingBlock(thinking=text, signature="sig")


def tool_result(
    tool_use_id: str, content: Any, *, is_error: bool | None = None, parent: str | None = None
) -> UserMessage:
    return UserMessage(
        content=[ToolResultBlock(tool_use_id=tool_use_id, content=content, is_error=is_error)],
        uuid=_uuid("user"),
        parent_tool_use_id=parent,
    )


def result(
    text: str | None = "done",
    *,
    agent_session_id: str = "agent-1",
    cost: float | None = None,
    subtype: str = "success",
    is_error: bool = False,
    duration_ms: int = 1200,
    num_turns: int = 1,
    errors: list[str] | None = None,
) -> ResultMessage:
    """A turn's result. `cost` is the CLI's running total for its process (total_cost_usd)."""
    return ResultMessage(
        subtype=subtype,
        duration_ms=duration_ms,
        duration_api_ms=duration_ms // 2,
        is_error=is_error,
        num_turns=num_turns,
        session_id=agent_session_id,
        total_cost_usd=cost,
        result=text,
        errors=errors,
        uuid=_uuid("result"),
    )


def reply(text: str = "ok", *, agent_session_id: str = "agent-1", cost: float | None = None):
    """The usual shape of a turn: init, one assistant text, the result."""
    return [
        init(agent_session_id),
        assistant(text, session_id=agent_session_id),
        result(text, agent_session_id=agent_session_id, cost=cost),
    ]


# --- script steps --------------------------------------------------------------------------------


class Gate:
    """A point in a script (or in `open`) where the fake waits for the test."""

    def __init__(self) -> None:
        self.reached = anyio.Event()
        self._open = anyio.Event()

    def open(self) -> None:
        self._open.set()

    async def pass_through(self) -> None:
        self.reached.set()
        await self._open.wait()

    async def wait_reached(self, limit: float = DEFAULT_TIMEOUT) -> None:
        with anyio.fail_after(limit):
            await self.reached.wait()


@dataclass
class Ask:
    tool_name: str
    tool_input: dict[str, Any] = field(default_factory=dict)
    tool_use_id: str | None = None


@dataclass
class Die:
    """The stream ends here without a result."""


@dataclass
class Fail:
    exc: BaseException


Step = Any  # an SDK message, an agent event, Gate, Ask, Die or Fail

# The SDK's message classes (`Message` is their union), which the Claude adapter reads.
_SDK_MESSAGES = (*Message.__args__, StreamEvent)  # type: ignore[attr-defined]


def task_started(
    task_id: str = "t1", description: str = "Count files", tool_use_id: str | None = "toolu_1"
) -> TaskStartedMessage:
    """The CLI's news that a background task (a subagent) started."""
    return TaskStartedMessage(
        subtype="task_started",
        data={},
        task_id=task_id,
        description=description,
        uuid=_uuid("task"),
        session_id="agent-1",
        tool_use_id=tool_use_id,
    )


def task_progress(
    task_id: str = "t1",
    description: str = "Count files",
    *,
    last_tool_name: str | None = None,
    usage: TaskUsage | None = None,
    tool_use_id: str | None = "toolu_1",
) -> TaskProgressMessage:
    return TaskProgressMessage(
        subtype="task_progress",
        data={},
        task_id=task_id,
        description=description,
        usage=usage or {"total_tokens": 0, "tool_uses": 0, "duration_ms": 0},
        uuid=_uuid("task"),
        session_id="agent-1",
        tool_use_id=tool_use_id,
        last_tool_name=last_tool_name,
    )


def task_notification(
    task_id: str = "t1",
    status: Literal["completed", "failed", "stopped"] = "completed",
    summary: str = "42 files",
    *,
    tool_use_id: str | None = None,
    usage: TaskUsage | None = None,
) -> TaskNotificationMessage:
    """The CLI's fuller report of a task's end (summary, figures)."""
    return TaskNotificationMessage(
        subtype="task_notification",
        data={},
        task_id=task_id,
        status=status,
        output_file="/tmp/out",
        summary=summary,
        uuid=_uuid("task"),
        session_id="agent-1",
        tool_use_id=tool_use_id,
        usage=usage,
    )


def task_updated(
    task_id: str = "t1",
    status: Literal["pending", "running", "paused", "completed", "failed", "killed"] = "completed",
) -> TaskUpdatedMessage:
    """The CLI's bare notice of a task's new state (`killed` for a stopped one)."""
    return TaskUpdatedMessage(
        subtype="task_updated",
        data={},
        task_id=task_id,
        patch={"status": status},
        status=status,
    )


# --- the fake agent and backend ------------------------------------------------------------------


def _task_id() -> int:
    return anyio.get_current_task().id


class FakeAgent:
    """One fake agent process (an `Agent`)."""

    reports_ended_tasks = True

    def __init__(self, backend: FakeBackend, spec: AgentSpec, ask: PermissionAsker) -> None:
        self.backend = backend
        self.spec = spec
        self._ask = ask
        self.opened_in_task = _task_id()
        self.closed_in_task: int | None = None
        self.closed = False
        self.killed = False
        self.killed_while_open = False
        self.sent: list[str] = []
        self.interrupts = 0
        self.stopped_tasks: list[str] = []
        self.stop_task_error: Exception | None = None
        self.modes: list[str] = []
        self._script: list[Step] | None = None
        self._spoken = False  # the script is the CLI's own words, not a reply to a message
        self._sent = anyio.Event()
        self._interrupted = anyio.Event()
        self.dead = False

    # --- the Agent protocol ---

    async def send(self, text: str) -> None:
        assert not self.closed, "send() on a closed agent"
        self.sent.append(text)
        self.backend.sent.append(text)
        self._interrupted = anyio.Event()
        self._script = list(self.backend.next_reply(text))
        self._sent.set()

    def speak(self, steps: Iterable[Step]) -> None:
        """The CLI says something by itself, between turns (a background task's news, a turn it
        starts to report one)."""
        self._script = list(steps)
        self._spoken = True
        self._sent.set()

    def messages(self) -> AsyncIterator[Any]:
        return self._messages()

    async def stop_task(self, task_id: str) -> None:
        if self.stop_task_error is not None:
            raise self.stop_task_error
        self.stopped_tasks.append(task_id)

    async def set_permission_mode(self, mode: str) -> None:
        self.modes.append(mode)

    async def interrupt(self) -> None:
        self.interrupts += 1
        if self.backend.interrupt_error is not None:
            raise self.backend.interrupt_error
        if self.backend.interrupt_gate is not None:
            await self.backend.interrupt_gate.pass_through()
        if not self.backend.ignore_interrupt:
            self._interrupted.set()

    async def close(self) -> None:
        self.closed = True
        self._sent.set()
        self.closed_in_task = _task_id()
        self.backend.closes.append(self)

    def kill(self) -> None:
        self.killed = True
        self.killed_while_open = not self.closed

    def stderr_tail(self) -> str:
        return self.backend.stderr

    # --- the script ---

    async def _messages(self) -> AsyncIterator[Any]:
        """Like the Claude agent's events: one stream for the process's whole life, each turn's
        reply in turn. A reply with no result in it ends the stream, as a process that dies
        does."""
        reader = Reader()
        try:
            async for message in self._sdk_messages():
                if isinstance(message, _SDK_MESSAGES):
                    for event in reader.read(message):
                        yield event
                else:
                    yield message
        except ProcessError as exc:
            raise ClaudeFailed(exc, self.stderr_tail) from exc

    async def _sdk_messages(self) -> AsyncIterator[Any]:
        while True:
            while self._script is None:
                if self.closed:
                    return
                await self._sent.wait()
                self._sent = anyio.Event()
            script, self._script = self._script, None
            spoken, self._spoken = self._spoken, False
            ended = False
            async for message in self._reply(script):
                yield message
                ended = ended or isinstance(message, (ResultMessage, agent_events.TurnEnded))
            if self.dead or not (ended or spoken):
                return

    async def _reply(self, script: list[Step]) -> AsyncIterator[Any]:
        for step in script:
            if self._interrupted.is_set():
                break
            if isinstance(step, Gate):
                if not await self._until_interrupted(step.pass_through):
                    break
            elif isinstance(step, Ask):
                answer: list[tuple[bool, str]] = []

                async def ask(step: Ask = step, answer: list[tuple[bool, str]] = answer) -> None:
                    said = await self._ask(step.tool_name, step.tool_input, step.tool_use_id)
                    answer.append((said[0], said[1]))  # allow, message: what Claude gets

                if not await self._until_interrupted(ask):
                    break
                self.backend.answers.append(answer[0])
            elif isinstance(step, Die):
                self.dead = True
                return
            elif isinstance(step, Fail):
                raise step.exc
            else:
                yield step
        if self._interrupted.is_set():
            yield result(
                None,
                subtype="error_during_execution",
                is_error=True,
                agent_session_id=self.backend.interrupt_session_id,
                cost=self.backend.interrupt_cost,
            )

    async def _until_interrupted(self, work: Callable[[], Awaitable[None]]) -> bool:
        """Run `work`; False (and `work` cancelled) if the turn is interrupted first."""
        finished = False
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                nonlocal finished
                await work()
                finished = True
                tg.cancel_scope.cancel()

            async def watch() -> None:
                await self._interrupted.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(run)
            tg.start_soon(watch)
        return finished


class FakeBackend:
    """A `Backend` whose agents replay scripted replies, one per `send`, in order."""

    def __init__(self, *replies: Iterable[Step]) -> None:
        # What the core is told the agent can do (a test gives it another agent's).
        self.able = Abilities("claude")
        self.replies: deque[list[Step]] = deque(list(r) for r in replies)
        self.default_reply: Callable[[str], list[Step]] = lambda text: reply(f"echo: {text}")
        self.specs: list[AgentSpec] = []
        self.agents: list[FakeAgent] = []
        self.closes: list[FakeAgent] = []
        self.sent: list[str] = []
        self.answers: list[tuple[bool, str]] = []
        self.opens_started = 0
        # what the next `open` calls do, in order: None (succeed), a Gate (wait), an exception
        self.open_plan: deque[Gate | BaseException | None] = deque()
        self.open_task_ids: list[int] = []
        self.stderr = ""
        self.ignore_interrupt = False
        self.interrupt_error: BaseException | None = None
        self.interrupt_gate: Gate | None = None
        self.interrupt_session_id = "agent-1"
        self.interrupt_cost: float | None = None
        self.purged: list[Conversation] = []  # what `purge` was given, in order
        # What `conversation` gives back (a `"transcript"` fork child's parent's), by id.
        self.conversations: dict[str, list[Entry]] = {}

    def add(self, *replies: Iterable[Step]) -> None:
        self.replies.extend(list(r) for r in replies)

    def next_reply(self, text: str) -> list[Step]:
        return self.replies.popleft() if self.replies else self.default_reply(text)

    @property
    def agent(self) -> FakeAgent:
        """The most recently opened agent."""
        assert self.agents, "no agent was opened"
        return self.agents[-1]

    # --- the Backend protocol ---

    def abilities(self) -> Abilities:
        return self.able

    async def find_abilities(self) -> Abilities:
        return self.abilities()

    def check(self) -> None:
        pass

    async def aclose(self) -> None:
        return None

    async def fork_point_problem(self, conversation: str, message_id: str) -> str | None:
        return None

    async def purge(self, conversations: list[Conversation]) -> None:
        self.purged.extend(conversations)

    async def open(self, spec: AgentSpec, ask_permission: PermissionAsker) -> FakeAgent:
        self.opens_started += 1
        self.open_task_ids.append(_task_id())
        self.specs.append(spec)
        plan = self.open_plan.popleft() if self.open_plan else None
        if isinstance(plan, Gate):
            await plan.pass_through()
        elif isinstance(plan, BaseException):
            raise plan
        agent = FakeAgent(self, spec, ask_permission)
        self.agents.append(agent)
        return agent

    async def conversation(
        self, agent_session_id: str, cwd: str, up_to: str | None = None
    ) -> list[Entry]:
        if agent_session_id not in self.conversations:
            raise AgentStartError(f"no conversation {agent_session_id}")
        return self.conversations[agent_session_id]


# --- how an agent was started ---------------------------------------------------------------------


def started_from(spec: AgentSpec) -> str | None:
    """The conversation an agent resumed or copied (None: a new one)."""
    return None if isinstance(spec.start, New) else spec.start.conversation_id


def copies(spec: AgentSpec) -> bool:
    """Whether the agent started as a copy (a fork) of another conversation."""
    return isinstance(spec.start, Copy)


def copied_up_to(spec: AgentSpec) -> str | None:
    """The message a copy ends with (None: all of it, or no copy)."""
    return spec.start.up_to if isinstance(spec.start, Copy) else None


# --- the recording sink --------------------------------------------------------------------------


class RecordingSink:
    """A `Sink` that keeps every event and answers permission requests from a script."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.deltas: list[Any] = []
        self.permission_calls: list[tuple[Any, str, dict[str, Any], str | None]] = []
        self.permission_options: list[list[Any]] = []  # the options each question offered
        # answers, in order; the default when the list runs out. An exception is raised; a Gate
        # is waited on and then the default is given.
        self.answers: deque[tuple[bool, str] | BaseException | Gate] = deque()
        self.default_answer: tuple[bool, str] = (True, "")
        self._changed: anyio.Event | None = None

    def publish(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        if self._changed is not None:
            self._changed.set()

    def publish_delta(self, delta: Any) -> None:
        self.deltas.append(delta)
        if self._changed is not None:
            self._changed.set()

    async def ask_permission(
        self,
        session: Any,
        tool_name: str,
        tool_input: dict[str, Any],
        tool_use_id: str | None,
        options: Any = (),
    ) -> tuple[bool, str]:
        self.permission_calls.append((session, tool_name, tool_input, tool_use_id))
        self.permission_options.append(list(options))
        answer = self.answers.popleft() if self.answers else self.default_answer
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, Gate):
            await answer.pass_through()
            return self.default_answer
        return answer

    # --- for tests ---

    def of(self, kind: str, **match: Any) -> list[dict[str, Any]]:
        return [e for e in self.events if _matches(e, kind, match)]

    def statuses(self) -> list[str]:
        return [e["status"] for e in self.events if e["kind"] == "status"]

    def kinds(self) -> list[str]:
        return [e["kind"] for e in self.events]

    async def wait_for(
        self, kind: str, *, after: int = 0, limit: float = DEFAULT_TIMEOUT, **match: Any
    ) -> dict[str, Any]:
        """The first event of `kind` with seq > `after` whose fields equal `match`; fails after
        `limit` seconds."""
        with anyio.fail_after(limit):
            while True:
                for event in self.events:
                    if event["seq"] > after and _matches(event, kind, match):
                        return event
                if self._changed is None or self._changed.is_set():
                    self._changed = anyio.Event()
                await self._changed.wait()

    @property
    def last_seq(self) -> int:
        return self.events[-1]["seq"] if self.events else 0


def _matches(event: dict[str, Any], kind: str, match: dict[str, Any]) -> bool:
    return event["kind"] == kind and all(event.get(k) == v for k, v in match.items())
