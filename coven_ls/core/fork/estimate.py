"""What a fork would cost its children to read what they start from (coven/estimateFork, a
proposal's `estimate`, the clients' previews)."""

from __future__ import annotations

from ...protocol.types import AgentName, ForkContext, ForkEstimate
from ..models import estimate_fork
from ..session import Session
from . import transcript
from .tag import child_prompt


def fork_estimate(
    parent: Session,
    tasks: list[str],
    context: ForkContext = "inherit",
    agent: AgentName | None = None,
) -> ForkEstimate | None:
    """What forking `parent` into `tasks` would cost its children to read what they start from
    (by default children of its own agent that inherit its conversation; see `estimate_fork`);
    None before its first model request. Every child also reads its brief (fresh and transcript
    children at the input price; children resuming the conversation write it to the prompt
    cache, with their copy of the parent's last answer), measured as `Children.run_child` writes
    it (the worktree's path, not known yet, as the parent's)."""
    if parent.context is None:
        return None
    cwd = parent.config.cwd
    briefs = sum(
        transcript.estimate_tokens(child_prompt(t, tasks, cwd, cwd, fresh=context == "fresh"))
        for t in tasks
    )
    return estimate_fork(
        parent.context,
        len(tasks),
        context,
        agent,
        parent.config.agent,
        brief_tokens=briefs,
        answer_tokens=parent.answer_tokens,
    )
