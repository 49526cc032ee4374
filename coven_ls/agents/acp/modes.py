"""coven's permission modes (`permissionMode`: default, acceptEdits, plan, bypassPermissions,
dontAsk, auto) and an ACP agent's own session modes, which each agent names as it likes: the
agent's mode that means the same, where it has one."""

from __future__ import annotations

from ... import protocol

# Modes that ask before running a command, by the names agents give them, in order of
# preference: claude-agent-acp's and qwen-code's `default`, @zed-industries/codex-acp's
# `read-only`. An agent whose current mode is one of them keeps it.
ASKING_MODES = ("default", "read-only", "ask")
# coven's permission mode -> the agents' modes that mean the same, in order of preference:
# claude-agent-acp's own names (Claude Code's), qwen-code's `auto-edit` and `yolo`,
# codex-acp's `full-access`.
MATCHING_MODES: dict[str, tuple[str, ...]] = {
    "default": ASKING_MODES,
    "acceptEdits": ("acceptEdits", "accept-edits", "auto-edit", "autoEdit"),
    "plan": ("plan",),
    "bypassPermissions": ("bypassPermissions", "bypass", "yolo", "full-access"),
    "dontAsk": ("dontAsk",),
    "auto": ("auto",),
}


def matching_mode(permission_mode: str, ids: list[str], configured: str | None) -> str | None:
    """The agent's mode for coven's `permission_mode` (its mode ids `ids`), or None when it has
    none that matches. `default` is the mode that asks: the configured one where given."""
    if permission_mode == "default" and configured:
        return configured if configured in ids else None
    return next((mode for mode in MATCHING_MODES.get(permission_mode, ()) if mode in ids), None)


def refusal(name: str, permission_mode: str, ids: list[str]) -> protocol.CovenError:
    """The permission mode cannot be passed on: the agent has no mode that matches."""
    has = f"its modes are {', '.join(ids)}" if ids else "it lists no session modes"
    return protocol.CovenError(
        protocol.ErrorCode.InvalidParams,
        f"ACP agent '{name}' has no mode matching the permission mode '{permission_mode}' "
        f"({has}); the session stays in its mode. Choose another permission mode, or set the "
        f"agent's own mode in initializationOptions.agents.{name}.mode.",
        {"agent": name, "permissionMode": permission_mode, "agentModes": ids},
    )
