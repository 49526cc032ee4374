"""What a fork would cost its children to read what they start from (coven/estimateFork, a
proposal's `estimate`, the clients' previews).

What fenced children add (issue #31), measured with Claude Code 2.1.332 on the scripted Messages
API (`python bench/cache.py --isolation worktree --context inherit --vary childSandbox=auto,off
--dump DIR` writes the parent's last request and each child's first, to compare):
- A fenced child's tools and system prompt are its parent's, byte for byte (the Bash tool's
  `dangerouslyDisableSandbox` parameter is in its schema fenced or not), and its first request
  repeats the parent's last one from the start: it reads the parent's whole prompt from the
  cache, up to the parent's last breakpoint (on its last message), as an unfenced child does.
- After the parent's messages, the child's first request holds the parent's last answer, the
  child's brief, and a system message the CLI adds to a worktree child's first request ("#
  Environment update": where it works now), which carries the request's last breakpoint. In a
  fenced child that message starts with a "## Bash command sandbox" section: about 3,150
  characters of prose, then the sandbox's configuration as JSON (the first 76 paths it denies
  or allows, under the CLI's config folder, HOME, the child's TMPDIR, worktree and the parent's
  checkout), so about 1,800 tokens for short paths and 2,250 for a test's long ones. It is
  written to the cache with the brief, at the cache-write price: a fenced fork of two children
  was charged $0.044 where the estimate without it said $0.019.
So the estimate counts, for worktree children, what their agent says it adds to such a child's
first request (`first_request_tokens_of`; Claude Code: agents/claude/notes.py, from the paths
the child will have), fenced or not as `fence.decide` would hold them (the fork's choices, what
their agent's sandbox can do here).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from ...protocol.types import AgentName, ForkContext, ForkEstimate
from ..models import estimate_fork
from ..session import Session
from ..store import default_state_dir
from ..workspace.git import GitError
from ..workspace.isolation import slug
from ..workspace.repository import NotARepo, inspect
from . import fence, transcript
from .choices import ForkSettings
from .tag import child_prompt

# A fork's id as long as the real ones, for a child's worktree path before the fork has an id.
ANY_FORK_ID = "f-" + "0" * 12


def fork_estimate(
    parent: Session,
    tasks: list[str],
    context: ForkContext = "inherit",
    agent: AgentName | None = None,
    note_tokens: int = 0,
) -> ForkEstimate | None:
    """What forking `parent` into `tasks` would cost its children to read what they start from
    (by default children of its own agent that inherit its conversation; see `estimate_fork`);
    None before its first model request. Every child also reads its brief (fresh and transcript
    children at the input price; children resuming the conversation write it to the prompt
    cache, with their copy of the parent's last answer), measured as `Children.run_child` writes
    it (the worktree's path, not known yet, as the parent's); worktree children also what their
    agent adds to their first request (`note_tokens`, all together: see `note_tokens`)."""
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
        note_tokens=note_tokens,
    )


class FirstRequestTelling(Protocol):
    def first_request_tokens(self, cwd: str, repository: str, fenced: bool) -> int:
        """About how many tokens the agent adds to the first request of a fork child working in
        `cwd`, a worktree of `repository`, fenced by its sandbox or not. Blocking."""
        ...


def first_request_tokens_of(backend: object, cwd: str, repository: str, fenced: bool) -> int:
    """What the agent adds to a worktree child's first request, in tokens; 0 for an agent that
    does not say (codex's is not measured)."""
    if not hasattr(backend, "first_request_tokens"):
        return 0
    telling: FirstRequestTelling = backend
    return telling.first_request_tokens(cwd, repository, fenced)


def note_tokens(
    parent: Session,
    tasks: list[str],
    settings: ForkSettings,
    backend: object,
    fork_id: str = ANY_FORK_ID,
) -> int:
    """What the children's agent adds to their first requests, all together, as worktree
    children held as they would be with these settings (`backend` is their agent's): where they
    work now, and their sandbox when fenced; 0 for children sharing the parent's folder (asked,
    or no git repository to make worktrees of). Blocking (the sandbox's probe, once a
    server)."""
    config = parent.config
    if settings.isolation == "shared":
        return 0
    repository = _repository(config.cwd)
    if repository is None:
        return 0
    try:
        fenced = fence.decide(
            settings.child_sandbox,
            settings.child_sandbox_network,
            "worktree",
            None,
            settings.agent,
            fence.support_of(backend),
            config.permission_mode,
        ).fenced
    except fence.FenceRequired:
        fenced = False  # such a fork does not start
    state = Path(config.state_dir).expanduser() if config.state_dir else default_state_dir()
    root = (state / "worktrees" / fork_id).absolute()
    inside = os.path.relpath(config.cwd, repository)
    return sum(
        first_request_tokens_of(
            backend,
            os.path.normpath(root / f"{n}-{slug(task)}" / inside),
            repository,
            fenced,
        )
        for n, task in enumerate(tasks, 1)
    )


def _repository(cwd: str) -> str | None:
    """The top folder of the git work tree `cwd` is in, as the fork would find it to make
    worktrees of (`isolation.plan`), or None: its children would share the parent's folder.
    Blocking (git)."""
    try:
        found = inspect(cwd)
    except GitError:
        return None  # the fork's own look says why; its children would share the folder
    return None if isinstance(found, NotARepo) else str(found.toplevel)
