"""A fork: its tasks, its children, its choices (`choices`, made whole as `settings`), where its
children work (`trees`), its state (moved only by `move_to`, along state.py's table) and its row
in the store (`record`)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import anyio
import msgspec

from ...protocol.types import ForkChoices, ForkEstimate, ForkRef, ForkSource, ForkState
from ..agent import Entry
from ..session import Session
from ..workspace.isolation import ForkTrees, MadeAhead
from .choices import ForkSettings, resolve, to_row
from .results import TaskResult
from .state import check_move

log = logging.getLogger(__name__)


@dataclass
class Fork:
    id: str
    parent: Session
    tasks: list[str]
    source: ForkSource  # the model asked for it, or a user forked by hand
    at_message_id: str | None = None
    state: ForkState = "proposed"  # changed only by move_to
    proposed: list[str] = field(default_factory=list)  # the tasks as first asked for
    decision: str | None = None  # approved, rejected, cancelled (None: not asked, or pending)
    children: list[Session] = field(default_factory=list)
    results: list[TaskResult] | None = None
    # What coven/fork or coven/decideFork asked for it (each left out: the session's setting;
    # see `settings`).
    choices: ForkChoices = field(default_factory=ForkChoices)
    trees: ForkTrees | None = None  # decided when it starts
    # A proposal's worktrees, made while its approval is asked (isolation.MadeAhead).
    ahead: MadeAhead | None = None
    # Set once its children exist (worktrees take a moment): a cancel waits for it.
    prepared: anyio.Event = field(default_factory=anyio.Event)
    # The parent's conversation, read once for `transcript` children (all get the same).
    conversation: list[Entry] | None = None
    # What each child's worktree takes on disk, measured when the child ends (a walk of every
    # file: off the fork's last moments, but for its last child).
    disk: dict[str, int] = field(default_factory=dict)
    # A model's proposal: the parent's context and what the children would pay to read it.
    estimate: ForkEstimate | None = None

    def move_to(self, state: ForkState) -> None:
        """The one place a fork's state changes, checked against state.py's table."""
        problem = check_move(self.state, state)
        if problem is not None:  # a bug in coven-ls: say so, but keep the fork going
            log.error("fork %s: %s", self.id, problem)
        self.state = state

    @property
    def parent_id(self) -> str:
        return self.parent.id

    def ref(self) -> ForkRef:
        return ForkRef(forkId=self.id, state=self.state)

    @property
    def settings(self) -> ForkSettings:
        """What its children run with: its choices, the parent's settings for the rest."""
        return resolve(self.choices, self.parent.config, self.parent.backend.abilities().copies)

    def record(self) -> dict[str, Any]:
        """The fork's row in the store."""
        return {
            "fork_id": self.id,
            "parent_id": self.parent.id,
            "source": self.source,
            "state": self.state,
            "tasks_proposed": self.proposed or self.tasks,
            "tasks_approved": self.tasks if self.state != "proposed" else None,
            "decision": self.decision,
            "at_message_id": self.at_message_id,
            "children": [c.id for c in self.children],
            "results": None
            if self.results is None
            else [msgspec.to_builtins(r.wire()) for r in self.results],
            "reintegrated": self.state == "finished",
            "isolation": None if self.trees is None else self.trees.record(),
            # as the wire has them (a resumed fork goes on with them, not the session's setting)
            "choices": to_row(self.choices),
        }


def active_fork(forks: Iterable[Fork], session: Session) -> Fork | None:
    """The session's fork that is proposed or running, if any: while it is, the session forks
    no other."""
    for fork in forks:
        if fork.parent is session and fork.state in ("proposed", "running"):
            return fork
    return None
