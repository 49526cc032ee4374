"""ACP agents coven-ls knows by name: the command and flags each needs to speak ACP on stdio, so
that one installed on PATH is offered without configuration. An entry of the same name in
`initializationOptions.agents` wins over this table.

Sources: ../shared/notes/acp-agents.md (measured: opencode, qwen-code, claude-agent-acp,
claude-code-acp, codex-acp) and each project's own documentation (gemini `--acp`, goose `acp`,
kimi `acp`). None overrides the user's own agent configuration.

Two agents need their environment adjusted, whether found here or configured under their name:
opencode gets `OPENCODE_DISABLE_AUTOUPDATE=1` (a hosted agent must not replace itself between
sessions; the user's own value wins), and claude-agent-acp is started without the server's
`IS_SANDBOX`: as root, any non-empty value makes the adapter ask its CLI to allow skipping
permissions, which the CLI refuses unless the value is exactly `1` (the session then fails to
start). An `IS_SANDBOX` in the agent's own `env` is kept: that is where `1` is meant."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass

from ...protocol.types import AcpAgentConfig


@dataclass(frozen=True)
class KnownAgent:
    name: str
    title: str
    command: tuple[str, ...]
    install: str
    """how a user installs it (said when its program is not found)"""
    env: tuple[tuple[str, str], ...] = ()
    """variables it is started with unless the server's environment has them"""
    drop_env: tuple[str, ...] = ()
    """variables of the server's environment it must not inherit"""
    reports_cost: bool | None = None
    """whether its `usage_update` carries a cost (measured; None: not known), until its
    sessions show it"""
    fork_keeps_parents_folder: bool = False
    """its `session/fork` makes the copy in the parent session's folder whatever `cwd` asks
    (measured), so coven-ls never uses it: a worktree child would work in the user's checkout"""

    # No mode: the adapter already picks one that asks (`default` for claude-agent-acp and
    # qwen, whose own defaults decide permissions themselves), and naming one an agent's version
    # does not list would fail its sessions.
    def config(self) -> AcpAgentConfig:
        return AcpAgentConfig(command=list(self.command))


KNOWN: dict[str, KnownAgent] = {
    k.name: k
    for k in (
        KnownAgent(
            "opencode",
            "opencode",
            ("opencode", "acp"),
            "npm install -g opencode-ai",
            env=(("OPENCODE_DISABLE_AUTOUPDATE", "1"),),
            reports_cost=True,
            # 1.18.33: the forked session's instance is the parent's directory, and a permission
            # answered in the child's process never reaches it (the child stalls).
            fork_keeps_parents_folder=True,
        ),
        KnownAgent(
            "claude-agent-acp",
            "Claude Code (ACP adapter)",
            ("claude-agent-acp",),
            "npm install -g @agentclientprotocol/claude-agent-acp",
            drop_env=("IS_SANDBOX",),
            reports_cost=True,
        ),
        KnownAgent(
            "claude-code-acp",
            "Claude Code (ACP adapter, older package)",
            ("claude-code-acp",),
            "npm install -g @zed-industries/claude-code-acp",
            reports_cost=False,
        ),
        KnownAgent(
            "codex-acp",
            "Codex (ACP adapter)",
            ("codex-acp",),
            "npm install -g @zed-industries/codex-acp",
            reports_cost=False,
        ),
        KnownAgent(
            "qwen",
            "Qwen Code",
            ("qwen", "--acp"),
            "npm install -g @qwen-code/qwen-code",
            reports_cost=False,
        ),
        KnownAgent(
            "gemini", "Gemini CLI", ("gemini", "--acp"), "npm install -g @google/gemini-cli"
        ),
        KnownAgent(
            "goose",
            "goose",
            ("goose", "acp"),
            "see https://block.github.io/goose/docs/getting-started/installation",
        ),
        KnownAgent(
            "kimi", "Kimi Code CLI", ("kimi", "acp"), "see https://github.com/MoonshotAI/kimi-cli"
        ),
    )
}


def on_path(path: str | None = None) -> dict[str, AcpAgentConfig]:
    """The known agents whose program is found on `path` (default: $PATH), as configurations."""
    path = os.environ.get("PATH") if path is None else path
    return {
        name: known.config()
        for name, known in KNOWN.items()
        if shutil.which(known.command[0], path=path) is not None
    }


def inherited_env(name: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The server's environment `environ` as the agent `name` inherits it: a known agent's
    defaults added where unset, the variables it must not see removed."""
    known = KNOWN.get(name)
    if known is None:
        return dict(environ)
    env = {**dict(known.env), **environ}
    for variable in known.drop_env:
        env.pop(variable, None)
    return env


def reports_cost(name: str) -> bool | None:
    """Whether the known agent `name` reports its cost in USD, as measured; None: unknown."""
    known = KNOWN.get(name)
    return None if known is None else known.reports_cost


def copy_problem(name: str) -> str | None:
    """Why coven-ls does not copy the known agent `name`'s sessions although it may advertise
    `session/fork`; None: nothing known against it."""
    known = KNOWN.get(name)
    if known is None or not known.fork_keeps_parents_folder:
        return None
    return (
        f"ACP agent '{name}' cannot copy a session into another folder (its session/fork keeps "
        "the parent's folder, so a worktree child would work in your checkout), so its children "
        "cannot inherit their parent's context."
    )


def install_hint(name: str) -> str | None:
    known = KNOWN.get(name)
    return None if known is None else known.install
