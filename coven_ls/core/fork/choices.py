"""A fork's choices (`protocol.ForkChoices`: where its children work, how their changes come back,
what they start from, which agent runs them, what they may spend) and the one place they are
made whole: each choice the fork left out comes from its session's settings (the client's
options when the session started), and the defaults that follow from another choice (a child of
another agent starts from a transcript) are worked out here. Pure: no I/O.

A new choice is a field of `ForkChoices` (the wire's, and the store's: a fork's choices are one
column) and a line in `resolve`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from ... import protocol
from ...protocol.types import (
    AgentName,
    ChildSandbox,
    ForkChoices,
    ForkContext,
    ForkLimits,
    Isolation,
    MergeMode,
    Placement,
    SandboxNetwork,
)
from ..agent import Abilities
from ..session import SessionConfig
from .spend import merge_limits


@dataclass(frozen=True)
class ForkSettings:
    """What a fork's children run with: its choices, with the session's settings for the rest."""

    isolation: Isolation | None  # None: worktrees where the session's folder allows them
    merge_mode: MergeMode
    worktree_setup: str  # "auto", "" (none) or a command
    agent: AgentName
    context: ForkContext
    limits: ForkLimits | None  # None: no limit
    own_agent: bool  # the children run the parent's agent
    child_sandbox: ChildSandbox = "auto"  # whether the children run fenced (fork/fence.py)
    child_sandbox_network: SandboxNetwork = "full"
    placement: Placement = "local"  # where the children run (fork/placement.py)

    @property
    def native(self) -> bool:
        """The children resume the parent's conversation natively (so are bound by where its
        agent can copy it; a transcript is cut at any message)."""
        return self.context == "inherit" and self.own_agent


def resolve(
    choices: ForkChoices, config: SessionConfig, copies: bool | None = True
) -> ForkSettings:
    """A fork's settings from its choices and its parent's config. Native resume needs the
    parent's agent, able to copy its conversation (`copies`, from its backend's abilities; None:
    not known yet, taken as able until a fork's start finds out), so another agent's children,
    and those of an agent that cannot copy, get the conversation written out unless the fork
    said otherwise; each limit given replaces the
    session's (0: none)."""
    agent = choices.agent or config.agent
    own = agent == config.agent
    return ForkSettings(
        isolation=choices.isolation or config.fork_isolation,
        merge_mode=choices.mergeMode or config.merge_mode,
        worktree_setup=(
            config.worktree_setup if choices.worktreeSetup is None else choices.worktreeSetup
        ),
        agent=agent,
        context=choices.context or ("inherit" if own and copies is not False else "transcript"),
        limits=merge_limits(config.fork_limits, choices.limits),
        own_agent=own,
        child_sandbox=choices.childSandbox or config.child_sandbox,
        child_sandbox_network=choices.childSandboxNetwork or config.child_sandbox_network,
        placement=choices.placement or config.placement,
    )


def overlay(base: ForkChoices, given: ForkChoices) -> ForkChoices:
    """`base` with each choice `given` makes instead (a limit at a time)."""
    values: dict[str, Any] = {}
    for name in ForkChoices.__struct_fields__:
        mine, theirs = getattr(base, name), getattr(given, name)
        if isinstance(mine, ForkLimits) and isinstance(theirs, ForkLimits):
            theirs = overlay_limits(mine, theirs)
        values[name] = mine if theirs is None else theirs
    return ForkChoices(**values)


def overlay_limits(base: ForkLimits, given: ForkLimits) -> ForkLimits:
    """`base` with each limit `given` sets instead (0 kept: it means no limit)."""
    return ForkLimits(
        **{
            name: getattr(base, name) if getattr(given, name) is None else getattr(given, name)
            for name in ForkLimits.__struct_fields__
        }
    )


def to_row(choices: ForkChoices) -> dict[str, Any] | None:
    """The choices as the store keeps them (JSON, as the wire has them): only those made; None
    when the fork made none."""
    made = {k: v for k, v in msgspec.to_builtins(choices).items() if v is not None}
    return made or None


def from_row(row: object) -> ForkChoices:
    return msgspec.convert(row or {}, ForkChoices)


def check(
    method: str, choices: ForkChoices, parent_agent: AgentName, able: Abilities | None = None
) -> None:
    """InvalidParams for choices whose children could not start as asked (`able`: what the
    parent's agent can do)."""
    agent, context = choices.agent, choices.context
    own = agent is None or agent == parent_agent
    if own and context == "inherit" and able is not None and able.copies is False:
        raise protocol.invalid_params(
            method,
            f"{able.no_copy_reason or 'The parent agent cannot copy its conversation.'} Use "
            "'transcript' (the parent's conversation written into each child's first prompt, "
            "the default for it) or 'fresh'.",
            "context",
        )
    if agent is not None and agent != parent_agent and context == "inherit":
        raise protocol.invalid_params(
            method,
            f"'context': 'inherit' resumes the parent's {parent_agent} conversation natively, "
            f"which a {agent} child cannot do; use 'transcript' (the parent's conversation "
            "written into the child's first prompt, the default for another agent) or 'fresh'.",
            "context",
        )
