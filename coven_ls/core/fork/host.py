"""What the fork room needs from outside it, as protocols: the hub (`ForkHost`: its sessions,
children to create and launch, the user to ask), the journal (`ForkJournal`: a fork's row stored
with the next burst of events) and a way to run background work (`Spawn`). The hub and the
journal satisfy them without importing this room's manager, nor it them."""

from __future__ import annotations

from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, Protocol

from ...protocol.types import AgentName, PermissionOption
from ..agent import AgentSpec, Backend, Decision
from ..session import Session
from .fork import Fork
from .placement import Placements, Where


class ForkHost(Protocol):
    """What forking needs of the hub: its sessions to find, children to create and launch, and
    the user to ask. Storing fork rows (the journal) and running background work come in as
    dependencies of their own."""

    @property
    def sessions(self) -> Mapping[str, Session]: ...

    @property
    def placements(self) -> Placements:
        """Where fork children may run: here, or on the server's cluster."""

    def child_backend(self, parent: Session, agent: AgentName) -> Backend:
        """The backend `parent`'s fork children of `agent` run on."""

    def new_child(
        self,
        parent: Session,
        fork_id: str,
        label: str,
        start: AgentSpec,
        agent: AgentName,
        where: Where = ...,
    ) -> Session:
        """A fork child session of `agent`, created but not launched, to run `where` it was
        placed (here by default)."""

    def launch(self, session: Session) -> None:
        """Announce a session and start its runner."""

    def ask_fork_approval(self, session: Session, fork: Fork) -> None:
        """Ask the user about a proposed fork; the answer comes back through `decide`."""

    def ask_review(self, fork: Fork, children: list[Session]) -> None:
        """Ask the user to apply or discard each of these children's changes; the answers come
        back through `apply_changes` / `discard_changes`."""

    async def ask_permission(
        self,
        session: Session,
        tool_name: str,
        tool_input: dict[str, Any],
        tool_use_id: str | None,
        options: Sequence[PermissionOption] = (),
    ) -> Decision:
        """Ask the user a yes/no question as a tool permission (a worktree setup from the
        repository); a message starting with "Denied:" means nobody answered."""


class Spawn(Protocol):
    """Runs background work; a failure is logged, never swallowed."""

    def __call__(self, coro: Coroutine[Any, Any, None], name: str) -> None: ...


class ForkJournal(Protocol):
    """Where fork rows are stored: with the next burst of events (`journal.Journal`)."""

    def fork_changed(self, fork: Fork) -> None:
        """The fork's row must be written (with the next burst of events)."""

    async def flushed(self) -> None:
        """Wait until everything published so far (fork rows included) is stored and sent."""
