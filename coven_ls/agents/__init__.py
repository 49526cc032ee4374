"""The agents coven-ls hosts, each behind the core's `Backend`/`Agent` interface
(core/agent.py): `claude` (Claude Code through claude-agent-sdk) and `codex` (`codex
app-server`). This registry is the one place that knows them by name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from anyio.abc import TaskGroup

from ..core.agent import Backend
from ..protocol.types import AgentName, InitializationOptions


@dataclass(frozen=True)
class AgentKind:
    name: AgentName
    title: str  # for people ("Claude Code", "Codex")
    # The binary the client named in initializationOptions (None: the agent's own search).
    path_option: Callable[[InitializationOptions], str | None]
    make: Callable[[str | None, TaskGroup], Backend]


def _claude(path: str | None, task_group: TaskGroup) -> Backend:
    from .claude import ClaudeBackend

    return ClaudeBackend(path)


def _codex(path: str | None, task_group: TaskGroup) -> Backend:
    from .codex import CodexBackend

    return CodexBackend(path, task_group)


AGENTS: dict[str, AgentKind] = {
    "claude": AgentKind("claude", "Claude Code", lambda o: o.claudePath, _claude),
    "codex": AgentKind("codex", "Codex", lambda o: o.codexPath, _codex),
}


def backend_key(agent: str, options: InitializationOptions) -> tuple[str, str | None]:
    """Which backend a session of `agent` uses under these options: one per agent and binary."""
    return agent, AGENTS[agent].path_option(options)


def make_backend(agent: str, options: InitializationOptions, task_group: TaskGroup) -> Backend:
    kind = AGENTS[agent]
    return kind.make(kind.path_option(options), task_group)
