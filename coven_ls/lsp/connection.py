"""One LSP connection as the hub sees it: a `hub.Client` that sends the connection its frames
and asks its editor the three questions a session can have (a tool's permission, a fork's
approval, a fork child's review), with a standard dialog unless the client answers them itself.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import Any, Literal

import anyio
import msgspec
from lsprotocol import types
from pygls.lsp.server import LanguageServer

from .. import __version__, protocol
from ..core.agent import Abilities, Decision
from ..core.fork.estimate import fork_estimate
from ..core.hub import ClientSettings, Hub
from ..core.session import Session
from ..core.store import Store
from ..protocol.describe import fork_cost, summarize_input
from ..protocol.events import Delta
from ..protocol.types import AgentOffer, PermissionOption
from .jsonrpc import CovenProtocol
from .standard import StandardLsp

log = logging.getLogger(__name__)


class CovenServer(LanguageServer):
    """One LSP connection."""

    protocol: CovenProtocol

    def __init__(self, hub: Hub, on_exit: Callable[[int], None]) -> None:
        super().__init__(
            "coven-ls",
            __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.None_,
            protocol_cls=CovenProtocol,
        )
        self.hub = hub
        self.settings = ClientSettings(root=os.getcwd())
        self.custom_permissions = False
        self.custom_forks = False
        self.custom_review = False
        self.coven_aware = False  # it declared experimental.coven: it speaks coven/* itself
        self.store: Store | None = None
        self.store_warning: str | None = None
        # Standard-LSP mirrors of the coven/* features, for editors that know nothing of them.
        self.standard: StandardLsp | None = None
        self._on_exit = on_exit
        # session id -> the scopes of its fork-approval questions still waiting for the user
        self._approvals: dict[str, set[anyio.CancelScope]] = {}
        # fork child id -> the scope of the review question about its changes
        self._reviews: dict[str, anyio.CancelScope] = {}

    def request_exit(self, code: int) -> None:
        self._on_exit(code)

    def available_agents(self) -> list[AgentOffer]:
        """The agents this client may start sessions of, under its options, and what each can
        do as far as this server knows (an ACP agent not started yet: not known)."""
        options = self.settings.options
        return [
            offer(name, self.hub.backend(name, options).abilities())
            for name in self.hub.agents.available(options)
        ]

    def cluster_name(self) -> str | None:
        """The cluster this server may place fork children on, for the client to offer the
        `placement` choice (None: none configured or usable)."""
        return self.hub.placements.cluster_name

    def report_server_error(self, error: Exception, source: Any) -> None:
        # Failed requests already carry their error to the client; anything else is logged, not
        # shown: a language server that pops up dialogs for its own bugs is worse than useless.
        log.error("server error (%s): %s", getattr(source, "__name__", source), error)

    # --- hub.Client ------------------------------------------------------------------------------

    def send_frame(self, frame: bytes) -> None:
        # Both our writers (stdout, a TCP stream) write synchronously.
        if self.protocol.writer is not None:
            self.protocol.writer.write(frame)

    def show_message(self, message: str, warning: bool) -> None:
        kind = types.MessageType.Warning if warning else types.MessageType.Info
        self.window_show_message(types.ShowMessageParams(type=kind, message=message))

    def observe_delta(self, delta: Delta) -> None:
        pass  # the frame has it all

    def observe(self, event: dict[str, Any]) -> None:
        scopes = self._approvals.get(event["sessionId"])
        if scopes and _settles_proposal(event):
            for scope in list(scopes):
                scope.cancel()
        review = self._reviews.get(event["sessionId"])
        if review is not None and _settles_review(event):
            review.cancel()  # applied or discarded some other way: the question is moot
        if self.standard is not None:
            self.standard.observe(event)

    async def ask_permission(
        self,
        session: Session,
        tool_name: str,
        tool_input: dict[str, Any],
        tool_use_id: str | None,
        options: Sequence[PermissionOption] = (),
    ) -> Decision:
        if self.custom_permissions:
            params: dict[str, Any] = {
                "sessionId": session.id,
                "toolName": tool_name,
                "input": tool_input,
                "toolUseId": tool_use_id,
            }
            if options:
                params["options"] = msgspec.to_builtins(list(options))
            answer = protocol.to_plain(await self.protocol.ask(protocol.REQUEST_PERMISSION, params))
            if not isinstance(answer, dict) or not isinstance(answer.get("allow"), bool):
                return Decision(
                    False, "Denied: the editor's answer to the permission request was malformed."
                )
            message = answer.get("message")
            option_id = answer.get("optionId")
            option_id = option_id if isinstance(option_id, str) else None
            if answer["allow"]:
                return Decision(True, "", option_id)
            said = message if isinstance(message, str) and message else "Denied by the user."
            return Decision(False, said, option_id)
        if tool_name == protocol.WORKTREE_SETUP_TOOL:
            return Decision(*await self._ask_setup(tool_input))
        question = (
            f"{_asker(session.config.agent)} wants to use {tool_name} in session "
            f"'{session.title}': {summarize_input(tool_input, 300)}"
        )
        if options:  # the agent's own answers, as buttons
            title = await self._choose(
                types.MessageType.Warning, question, [o.name for o in options]
            )
            chosen = next((o for o in options if o.name == title), None)
            if chosen is None:
                return Decision(False, "Denied: the permission request was dismissed.")
            return Decision(chosen.kind.startswith("allow"), "", chosen.optionId)
        title = await self._choose(types.MessageType.Warning, question, ["Allow", "Deny"])
        if title == "Allow":
            return Decision(True, "")
        if title == "Deny":
            return Decision(False, "Denied by the user.")
        return Decision(False, "Denied: the permission request was dismissed.")

    async def _ask_setup(self, setup: dict[str, Any]) -> tuple[bool, str]:
        """A repository's worktree setup, shown whole (its script too) before anything runs it."""
        script = setup.get("script")
        title = await self._choose(
            types.MessageType.Warning,
            f"The worktree setup in {setup.get('file')} of {setup.get('repository')} runs before "
            f"each fork child starts: {setup.get('command')}"
            + (f"\n--- its script ---\n{script}" if script else "")
            + "\nAllow it? (Asked again when it changes.)",
            ["Allow Setup", "Don't Allow"],
        )
        if title == "Allow Setup":
            return True, ""
        if title == "Don't Allow":
            return False, "Refused by the user."
        return False, "Denied: the question was dismissed."

    async def ask_fork_approval(self, session: Session, tasks: list[str]) -> bool | None:
        if self.custom_forks:
            return None  # its own UI shows forkProposed and answers with coven/decideFork
        # The question is moot once the proposal is settled some other way (coven/decideFork,
        # coven/cancel, the session closed): `observe` then cancels this scope, which withdraws it.
        with anyio.CancelScope() as scope:
            self._approvals.setdefault(session.id, set()).add(scope)
            # The proposal's own (what its children's agent adds to their first requests
            # included), as forkProposed carried it; else as its children would start.
            fork = self.hub.forks.active_fork(session)
            estimate = fork.estimate if fork is not None else None
            if estimate is None:
                estimate = fork_estimate(session, tasks)
            try:
                title = await self._choose(
                    types.MessageType.Warning
                    if estimate is not None and estimate.warning
                    else types.MessageType.Info,
                    "\n".join(
                        [
                            f"Claude proposes to fork session '{session.title}' into "
                            f"{len(tasks)} parallel task{'s' if len(tasks) != 1 else ''}: "
                            f"{'; '.join(tasks)}",
                            *(fork_cost(estimate) if estimate is not None else []),
                        ]
                    ),
                    ["Approve fork", "Reject"],
                )
            finally:
                self._approvals[session.id].discard(scope)
                if not self._approvals[session.id]:
                    del self._approvals[session.id]
        if scope.cancelled_caught:
            return None
        return True if title == "Approve fork" else False if title == "Reject" else None

    async def ask_review(self, child: Session) -> bool | None:
        if self.custom_review or child.changes is None or child.worktree is None:
            return None  # its own UI shows forkReviewing and answers with coven/applyChanges
        changes = child.changes
        files = ", ".join(f.path for f in changes.files[:5])
        if len(changes.files) > 5:
            files += f" and {len(changes.files) - 5} more"
        count = len(changes.files)
        with anyio.CancelScope() as scope:
            self._reviews[child.id] = scope
            try:
                title = await self._choose(
                    types.MessageType.Info,
                    f"Fork child '{child.label}' changed {count} file{'s' if count != 1 else ''} "
                    f"(+{changes.linesAdded} −{changes.linesRemoved}): {files}. Apply the changes "
                    f"to {child.worktree.repository}?",
                    ["Apply", "Discard"],
                )
            finally:
                self._reviews.pop(child.id, None)
        if scope.cancelled_caught:
            return None
        return True if title == "Apply" else False if title == "Discard" else None

    async def _choose(
        self, kind: types.MessageType, message: str, actions: list[str]
    ) -> str | None:
        """Ask with the standard window/showMessageRequest; the title picked, or None."""
        choice = await self.protocol.ask(
            types.WINDOW_SHOW_MESSAGE_REQUEST,
            types.ShowMessageRequestParams(
                type=kind,
                message=message,
                actions=[types.MessageActionItem(title=a) for a in actions],
            ),
        )
        return getattr(choice, "title", None)


def _asker(agent: str) -> str:
    """Who asks, as the question names it: `Claude`, `Codex`, an ACP agent by its name."""
    return agent.capitalize() if agent in ("claude", "codex") else agent


def _settles_proposal(event: dict[str, Any]) -> bool:
    """Whether a session's event means its fork proposal waits for approval no more: it was
    decided (by whoever) or withdrawn, or the session has ended."""
    kind = event["kind"]
    if kind in (protocol.Kind.FORK_STARTED, protocol.Kind.FORK_REJECTED):
        return True
    return kind == protocol.Kind.STATUS and event.get("status") in _ENDED


_ENDED = protocol.FINAL_STATUSES | {"failed"}


def _settles_review(event: dict[str, Any]) -> bool:
    """Whether a child's event means its changes wait for review no more."""
    if event["kind"] == protocol.Kind.CHANGES:
        return bool(event["changes"]["merge"] != "pending")
    return event["kind"] == protocol.Kind.STATUS and event.get("status") in _ENDED


def offer(name: str, able: Abilities) -> protocol.AgentOffer:
    """An agent as `capabilities.experimental.coven.agents` lists it."""
    fork: Literal["inherit", "transcript"] | None = None
    if able.copies is not None:
        fork = "inherit" if able.copies else "transcript"
    return protocol.AgentOffer(name=name, kind=able.kind, fork=fork, cost=able.reports_cost)
