"""The Claude agent's adapter: the one place that knows claude-agent-sdk and Claude Code.

- backend.py: `ClaudeBackend`/`ClaudeAgent` (one CLI process per running session), finding the
  CLI, and how a conversation starts as the CLI's options;
- events.py: what the CLI says (the SDK's messages, Anthropic's stream events) as coven's agent
  events (core/agent/events.py);
- failure.py: how a CLI process failed, in a sentence;
- conversation.py: a conversation read back from the CLI's transcript (a transcript fork child's).

Importing this package does not load the SDK: it loads when a session starts.
"""

from __future__ import annotations

from .backend import (
    CLAUDE,
    INSTALL_HINT,
    ClaudeAgent,
    ClaudeBackend,
    bundled_claude,
    probe_claude,
    resolve_claude,
)


def sdk_versions() -> tuple[str, str] | None:
    """claude-agent-sdk's version and the Claude Code version its wheel bundles; None for an SDK
    without the bundled CLI's version."""
    try:
        from claude_agent_sdk import __version__ as sdk
        from claude_agent_sdk._cli_version import __cli_version__ as cli
    except ImportError:
        return None
    return sdk, cli


__all__ = [
    "CLAUDE",
    "INSTALL_HINT",
    "ClaudeAgent",
    "ClaudeBackend",
    "bundled_claude",
    "probe_claude",
    "resolve_claude",
    "sdk_versions",
]
