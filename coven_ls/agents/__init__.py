"""The agents coven-ls hosts, each behind the core's `Backend`/`Agent` interface
(core/agent/interface.py) and each an adapter that makes coven's agent events
(core/agent/events.py) of what its program says: `claude` (Claude Code through claude-agent-sdk,
the only user of that SDK) and `codex` (`codex app-server`), and any agent that speaks the Agent
Client Protocol, configured by name in `initializationOptions.agents` (coven_ls/agents/acp). This
registry is the one place that knows them by name."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass

import msgspec
from anyio.abc import TaskGroup

from .. import protocol
from ..core.agent import Backend
from ..core.agent_registry import AgentRegistry
from ..protocol.types import AcpAgentConfig, AgentName, InitializationOptions
from . import binary
from .binary import BinarySource


@dataclass(frozen=True)
class AgentKind:
    name: AgentName
    title: str  # for people ("Claude Code", "Codex")
    # The binary the client named in initializationOptions (None: the agent's own search).
    path_option: Callable[[InitializationOptions], str | None]
    make: Callable[[str | None, TaskGroup], Backend]
    # Where its binary is looked for (imported late: an agent's SDK loads only when it is used).
    source: Callable[[], BinarySource]


def _claude(path: str | None, task_group: TaskGroup) -> Backend:
    from .claude import ClaudeBackend

    return ClaudeBackend(path)


def _codex(path: str | None, task_group: TaskGroup) -> Backend:
    from .codex import CodexBackend

    return CodexBackend(path, task_group)


def _claude_source() -> BinarySource:
    from .claude import CLAUDE

    return CLAUDE


def _codex_source() -> BinarySource:
    from .codex.backend import CODEX

    return CODEX


AGENTS: dict[str, AgentKind] = {
    "claude": AgentKind("claude", "Claude Code", lambda o: o.claudePath, _claude, _claude_source),
    "codex": AgentKind("codex", "Codex", lambda o: o.codexPath, _codex, _codex_source),
}


def acp_agents(options: InitializationOptions) -> dict[str, AcpAgentConfig]:
    """The ACP agents these options offer: the configured ones, then the known ones found on
    PATH (acp/known.py); a configured entry wins over a known one of the same name."""
    from .acp.known import on_path

    configured = options.agents or {}
    return {**configured, **{n: c for n, c in on_path().items() if n not in configured}}


def _acp_config(agent: str, options: InitializationOptions) -> AcpAgentConfig | None:
    """The configuration of `agent` when it is an ACP agent (configured, else known: a known one
    not installed fails to start saying how to install it); an unknown name is an error that
    says which names there are."""
    from .acp.known import KNOWN

    if agent in AGENTS:
        return None
    config = (options.agents or {}).get(agent)
    if config is None and agent in KNOWN:
        config = KNOWN[agent].config()
    if config is None:
        known = [*AGENTS, *acp_agents(options)]
        raise protocol.CovenError(
            protocol.ErrorCode.InvalidParams,
            f"Unknown agent '{agent}': the agents are {', '.join(repr(n) for n in known)}. An "
            "agent that speaks ACP is added in initializationOptions.agents "
            '({"NAME": {"command": [...]}}).',
            {"agent": agent},
        )
    return config


def available_agents(options: InitializationOptions) -> list[AgentName]:
    """The agents whose binary is found under these options (named, in the environment, bundled
    or on PATH), without running it: what a client may offer when it starts a session."""
    found: list[AgentName] = []
    for kind in AGENTS.values():
        try:
            path, _ = binary.resolve(kind.source(), kind.path_option(options))
        except protocol.CovenError:
            continue
        # A name or path that leads to no executable file offers nothing (starting it would fail).
        if shutil.which(path) is not None:
            found.append(kind.name)
    from .acp.process import command_problem

    for name, config in acp_agents(options).items():
        if command_problem(name, config) is None:
            found.append(name)
    return found


def backend_key(agent: str, options: InitializationOptions) -> tuple[str, str | None]:
    """Which backend a session of `agent` uses under these options: one per agent and binary
    (for an ACP agent: its whole configuration)."""
    config = _acp_config(agent, options)
    if config is not None:
        return agent, json.dumps(msgspec.to_builtins(config), sort_keys=True)
    return agent, AGENTS[agent].path_option(options)


def make_backend(agent: str, options: InitializationOptions, task_group: TaskGroup) -> Backend:
    config = _acp_config(agent, options)
    if config is not None:
        from .acp import AcpBackend

        return AcpBackend(agent, config, task_group)
    kind = AGENTS[agent]
    return kind.make(kind.path_option(options), task_group)


def agent_title(agent: str) -> str:
    """What people call `agent`: its own title, a known ACP agent's, else its name."""
    from .acp.known import KNOWN

    if agent in AGENTS:
        return AGENTS[agent].title
    return KNOWN[agent].title if agent in KNOWN else agent


def _known_names() -> list[str]:
    from .acp.known import KNOWN

    return list(KNOWN)


# What a front end hands the hub (`Hub(task_group, REGISTRY)`).
REGISTRY = AgentRegistry(
    # A stored session of a known ACP agent is restored on it even when it is not installed now
    # (it then fails to start, saying how to install it).
    names=frozenset([*AGENTS, *_known_names()]),
    make_backend=make_backend,
    backend_key=backend_key,
    available=available_agents,
    title=agent_title,
)
