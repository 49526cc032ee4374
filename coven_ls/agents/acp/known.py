"""ACP agents coven-ls knows by name: the command and flags each needs to speak ACP on stdio, so
that one installed on PATH is offered without configuration. An entry of the same name in
`initializationOptions.agents` wins over this table.

Sources: ../shared/notes/acp-agents.md (measured: opencode, qwen-code, claude-agent-acp,
claude-code-acp, codex-acp) and each project's own documentation (gemini `--acp`, goose `acp`,
kimi `acp`). No entry sets `IS_SANDBOX` (an `IS_SANDBOX` other than `1` makes claude-agent-acp
fail as root) and none overrides the user's own agent configuration."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from ...protocol.types import AcpAgentConfig


@dataclass(frozen=True)
class KnownAgent:
    name: str
    title: str
    command: tuple[str, ...]
    install: str
    """how a user installs it (said when its program is not found)"""

    # No mode: the adapter already picks one that asks (`default` for claude-agent-acp and
    # qwen, whose own defaults decide permissions themselves), and naming one an agent's version
    # does not list would fail its sessions.
    def config(self) -> AcpAgentConfig:
        return AcpAgentConfig(command=list(self.command))


KNOWN: dict[str, KnownAgent] = {
    k.name: k
    for k in (
        KnownAgent("opencode", "opencode", ("opencode", "acp"), "npm install -g opencode-ai"),
        KnownAgent(
            "claude-agent-acp",
            "Claude Code (ACP adapter)",
            ("claude-agent-acp",),
            "npm install -g @agentclientprotocol/claude-agent-acp",
        ),
        KnownAgent(
            "claude-code-acp",
            "Claude Code (ACP adapter, older package)",
            ("claude-code-acp",),
            "npm install -g @zed-industries/claude-code-acp",
        ),
        KnownAgent(
            "codex-acp",
            "Codex (ACP adapter)",
            ("codex-acp",),
            "npm install -g @zed-industries/codex-acp",
        ),
        KnownAgent(
            "qwen",
            "Qwen Code",
            ("qwen", "--acp"),
            "npm install -g @qwen-code/qwen-code",
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


def install_hint(name: str) -> str | None:
    known = KNOWN.get(name)
    return None if known is None else known.install
