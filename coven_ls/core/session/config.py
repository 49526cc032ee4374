"""What a session runs with (`SessionConfig`), fixed when it is created: built from the client's
`InitializationOptions` in one place (`from_options`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ... import protocol
from ...protocol import ForkMode, InitializationOptions, PermissionMode
from ...protocol.types import (
    ChildSandbox,
    ForkLimits,
    Isolation,
    MergeMode,
    Placement,
    SandboxNetwork,
)
from ..fork.spend import merge_limits

_DEFAULTS = InitializationOptions()  # the options' defaults, for sessions built without options


@dataclass
class SessionConfig:
    """What a session runs with; fixed when it is created."""

    cwd: str
    model: str | None = None
    permission_mode: PermissionMode | None = None
    fork_mode: ForkMode = _DEFAULTS.forkMode
    max_children: int = _DEFAULTS.maxChildren
    max_parallel: int = _DEFAULTS.maxParallel
    max_depth: int = _DEFAULTS.maxDepth
    append_system_prompt: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    fork_isolation: Isolation | None = _DEFAULTS.forkIsolation  # None: worktree in a git repo
    merge_mode: MergeMode = _DEFAULTS.mergeMode
    child_sandbox: ChildSandbox = _DEFAULTS.childSandbox
    child_sandbox_network: SandboxNetwork = _DEFAULTS.childSandboxNetwork
    placement: Placement = _DEFAULTS.placement  # where its forks' children run
    state_dir: str | None = None  # where forks' worktrees go (None: the default state folder)
    worktree_pool: int = _DEFAULTS.worktreePool  # spare worktrees per repository that forked
    child_idle_timeout: float = _DEFAULTS.childIdleTimeoutSeconds  # for its fork children; 0: off
    worktree_setup: str = (
        _DEFAULTS.worktreeSetup
    )  # for its forks' worktrees ("auto", "", a command)
    worktree_setup_timeout: float = _DEFAULTS.worktreeSetupTimeoutSeconds
    agent: protocol.AgentName = "claude"  # which agent runs it (coven_ls/agents)
    # What its forks' children may spend (the client's forkLimits); a fork may say otherwise.
    fork_limits: ForkLimits | None = None

    @classmethod
    def from_options(
        cls,
        options: InitializationOptions,
        cwd: str,
        agent: protocol.AgentName | None = None,
        model: str | None = None,
        permission_mode: PermissionMode | None = None,
        fork_mode: ForkMode | None = None,
    ) -> SessionConfig:
        """What a session started by a client with these options runs with, but for what its
        start named (`coven/startSession`'s params). The one place options become a config: a
        restored session takes what it stored over this (dataclasses.replace)."""
        return cls(
            cwd=cwd,
            agent=agent or options.agent,
            model=model or options.model,
            permission_mode=permission_mode or options.permissionMode,
            fork_mode=fork_mode or options.forkMode,
            max_children=options.maxChildren,
            max_parallel=options.maxParallel,
            max_depth=options.maxDepth,
            fork_limits=merge_limits(None, options.forkLimits),
            fork_isolation=options.forkIsolation,
            merge_mode=options.mergeMode,
            child_sandbox=options.childSandbox,
            child_sandbox_network=options.childSandboxNetwork,
            placement=options.placement,
            state_dir=options.stateDir,
            worktree_pool=options.worktreePool,
            child_idle_timeout=options.childIdleTimeoutSeconds,
            worktree_setup=options.worktreeSetup,
            worktree_setup_timeout=options.worktreeSetupTimeoutSeconds,
        )
