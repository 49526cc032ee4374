"""Whether a fork's children run fenced by the operating system (`childSandbox`), decided once per
fork from its choices, where its children work and what their agent can do; each child keeps
the answer (`SessionState.sandbox`, stored with it), so a resumed child is held as it was.

A worktree child is fenced by its agent's own sandbox: Claude Code's (bubblewrap on Linux,
Seatbelt on macOS; coven-ls turns it on per child, agents/claude/fence.py), codex's (always on
unless the permission mode is `bypassPermissions`). An ACP agent has none coven-ls can turn on.
A child sharing the parent's folder has nothing to be fenced from. `required` fails the fork
where the children could not be fenced; `auto` runs them unfenced and says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ...protocol.types import ChildSandbox, Isolation, PermissionMode, Sandbox, SandboxNetwork


@dataclass(frozen=True)
class SandboxSupport:
    """What an agent can fence its commands with on this machine."""

    by: str  # the sandbox's name, as `Sandbox.by` says it: "claude", "codex"
    problem: str | None = None  # why it cannot be used here now (how to fix it); None: it can
    always_on: bool = False  # the agent fences its commands whatever coven-ls asks (codex)
    unfenced_modes: tuple[PermissionMode, ...] = ()  # permission modes that run without it


class Fenceable(Protocol):
    def sandbox_support(self) -> SandboxSupport:
        """What the agent's sandbox is here (blocking: call it from a worker thread)."""
        ...


class FenceRequired(Exception):
    """`childSandbox: required` and the children could not be fenced: the fork cannot start."""


def support_of(backend: object) -> SandboxSupport | None:
    """The agent's sandbox, or None for an agent with none coven-ls can turn on (an ACP agent).
    Blocking."""
    if not hasattr(backend, "sandbox_support"):
        return None
    fenceable: Fenceable = backend
    return fenceable.sandbox_support()


def decide(
    choice: ChildSandbox,
    network: SandboxNetwork,
    isolation: Isolation,
    isolation_reason: str | None,
    agent: str,
    support: SandboxSupport | None,
    permission_mode: PermissionMode | None,
) -> Sandbox:
    """How the fork's children are held; raises FenceRequired when `required` cannot be met."""
    reason = _unfenced_because(choice, isolation, isolation_reason, agent, support, permission_mode)
    if reason is None:
        assert support is not None
        # codex's sandbox decides its own network (its sandbox policy); Claude's is ours to set.
        return Sandbox(
            fenced=True,
            by=support.by,
            reason=None,
            network=None if support.always_on else network,
        )
    if choice == "required":
        raise FenceRequired(
            f"childSandbox is required, but the children cannot be fenced: {reason}."
        )
    return Sandbox(fenced=False, by=None, reason=reason)


def _unfenced_because(
    choice: ChildSandbox,
    isolation: Isolation,
    isolation_reason: str | None,
    agent: str,
    support: SandboxSupport | None,
    permission_mode: PermissionMode | None,
) -> str | None:
    if isolation == "shared":
        why = f" ({isolation_reason})" if isolation_reason else ""
        return (
            f"they share the parent's folder{why}, so no sandbox can keep them out of it; "
            "worktree children can be fenced"
        )
    if support is None:
        return (
            f"the agent '{agent}' has no sandbox coven-ls can turn on; its children are held "
            "only by coven-ls's checks of the commands and paths it asks permission for"
        )
    if permission_mode is not None and permission_mode in support.unfenced_modes:
        return f"{support.by} runs its commands without its sandbox in {permission_mode} mode"
    if support.always_on:
        return None  # its own sandbox holds it, whatever childSandbox says
    if choice == "off":
        return "childSandbox is off"
    return support.problem
