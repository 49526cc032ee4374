"""Standard LSP for editors that know nothing of coven/*: executeCommand mirrors of every
request, work-done progress for turns and forks, and a readable log line per event.

An editor that only speaks plain LSP can still drive coven-ls:
- every `coven/<name>` request is also the command `coven.<name>` (`workspace/executeCommand`,
  the params object as `arguments[0]`, the same result and the same errors);
- each running turn and each running fork is a work-done progress (when the client declared
  `window.workDoneProgress`, and did not turn it off with `experimental.coven.progress: false`),
  and cancelling that progress cancels the turn or the fork exactly as `coven/cancel` would;
- each event is a `window/logMessage` line, unless the client declared `experimental.coven`: such a
  client renders `coven/event` itself and the log lines would only be noise in its log.

Everything here reacts to events on the hub's publish path, so nothing may wait: progress is
created with a request whose answer arrives later (`_Progress` buffers what happens meanwhile),
and notifications are written straight away.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from .. import protocol
from ..core.hub import Hub
from ..core.session import Session
from ..protocol import Kind
from ..protocol import events as ev
from ..protocol.describe import describe_payload, one_line
from ..protocol.tree import Event, SessionTree

log = logging.getLogger(__name__)

# A coven/* request handler: the connection's server and the raw params.
Handler = Callable[[Any, Any], Awaitable[Any]]

# Statuses after which a session runs no turn: its turn progress, if any, is over.
_TURN_OVER = protocol.SETTLED_STATUSES | {"awaitingApproval", "forking"}
_LOG_TYPES = {
    Kind.ERROR: types.MessageType.Error,
    Kind.FORK_ERROR: types.MessageType.Warning,
    Kind.FORK_PROPOSED: types.MessageType.Info,
    Kind.FORK_STARTED: types.MessageType.Info,
    Kind.FORK_FINISHED: types.MessageType.Info,
    Kind.FORK_REJECTED: types.MessageType.Info,
    Kind.PERMISSION_REQUEST: types.MessageType.Info,
    Kind.TURN_RESULT: types.MessageType.Info,
}


def command_name(method: str) -> str:
    """`coven/startSession` → `coven.startSession`: command ids cannot hold a slash in every
    editor's command palette, and a dot is what editors use for namespaces."""
    return method.replace("/", ".")


@dataclass
class _Progress:
    """One work-done progress, from `window/workDoneProgress/create` to `end`. Until the client
    has answered the create request, begin/report/end are only recorded here."""

    token: str
    title: str
    message: str | None = None
    percentage: int | None = None
    created: bool = False  # the client answered `create`
    begun: bool = False
    ended: bool = False
    end_message: str | None = None
    reported: int = 0  # a fork's: how many of its children were reported done
    cancel: Callable[[], None] = field(default=lambda: None, repr=False)


class StandardLsp:
    """Per-connection state of the standard-LSP mirror."""

    def __init__(self, server: LanguageServer, hub: Hub) -> None:
        self._server = server
        self._hub = hub
        self._turns: dict[str, _Progress] = {}  # session id -> its running turn
        self._forks: dict[str, _Progress] = {}  # fork id -> its progress
        self._tree = SessionTree()  # forks, their children, which of them are done
        self._caps: tuple[bool, bool] | None = None

    # --- what the client declared ----------------------------------------------------------------

    def _capabilities(self) -> tuple[bool, bool]:
        """(supports work-done progress, renders coven/event itself); read once, after
        `initialize` (no event reaches a connection before it)."""
        if self._caps is None:
            caps = self._server.client_capabilities
            experimental = protocol.to_plain(caps.experimental)
            coven = experimental.get("coven") if isinstance(experimental, dict) else None
            custom = isinstance(coven, dict)
            # A client with its own progress display (a tree with spinners) can turn ours off.
            progress = bool(caps.window and caps.window.work_done_progress) and not (
                isinstance(coven, dict) and coven.get("progress") is False
            )
            self._caps = (progress, custom)
        return self._caps

    # --- events ----------------------------------------------------------------------------------

    def observe(self, event: dict[str, Any]) -> None:
        """Called for every coven/event this connection is sent."""
        progress, custom = self._capabilities()
        if custom and not progress:
            return  # neither log lines nor progress for this client
        typed = self._tree.apply(event)
        if typed is None:
            return  # a kind this server does not know
        if not custom:
            self._log(typed)
        if progress:
            self._track_turn(typed)
            self._track_fork(typed)

    def _title(self, session_id: str) -> str:
        session = self._hub.sessions.get(session_id)
        return session.title if session is not None else session_id

    def _log(self, event: Event) -> None:
        line = describe_payload(event.payload)
        if line is None:
            return
        self._server.protocol.notify(
            types.WINDOW_LOG_MESSAGE,
            types.LogMessageParams(
                type=_log_type(event.payload), message=f"[{self._title(event.session_id)}] {line}"
            ),
        )

    def _track_turn(self, event: Event) -> None:
        sid, payload = event.session_id, event.payload
        turn = self._turns.get(sid)
        match payload:
            case ev.Prompt(text=text):
                if turn is not None:  # a turn without an end we saw: close it before the next
                    self._end(turn, None)
                turn = _Progress(
                    token=f"coven:turn:{sid}:{event.seq}",
                    title=f"Claude: {one_line(self._title(sid), 60)}",
                    message=one_line(text, 80),
                    cancel=lambda: self._cancel_turn(sid),
                )
                self._turns[sid] = turn
                self._begin(turn)
            case _ if turn is None:
                return
            case (
                ev.Text()
                | ev.Thinking()
                | ev.ToolUse()
                | ev.ToolResult()
                | ev.PermissionRequest()
                | ev.PermissionDecision()
            ):
                # What the turn is doing now: the progress's message.
                self._report(turn, describe_payload(payload))
            case ev.TurnResult() | ev.Error():
                self._end(turn, describe_payload(payload))
                del self._turns[sid]
            case ev.StatusChanged(status=status) if status in _TURN_OVER:
                self._end(turn, None)
                del self._turns[sid]

    def _track_fork(self, event: Event) -> None:
        match event.payload:
            case ev.ForkStarted(forkId=fork_id, children=children):
                started = _Progress(
                    token=f"coven:fork:{fork_id}",
                    title=f"Fork: {one_line(self._title(event.session_id), 60)}",
                    message=f"Fork 0/{len(children)} done",
                    percentage=0,
                    cancel=lambda: self._cancel_fork(fork_id),
                )
                self._forks[fork_id] = started
                self._begin(started)
            case ev.StatusChanged():
                # A child that has just done its part (the tree counts each child once).
                forked = self._tree.fork_of(event.session_id)
                counted = self._forks.get(forked.fork_id) if forked is not None else None
                if forked is None or counted is None or len(forked.settled) <= counted.reported:
                    return
                counted.reported = done = len(forked.settled)
                total = len(forked.children)
                label = {c.sessionId: c.label for c in forked.children}[forked.settled[-1]]
                self._report(
                    counted,
                    f"Fork {done}/{total} done: {one_line(label, 40)}",
                    percentage=done * 100 // total,
                )
            case ev.ForkFinished(forkId=fork_id):
                finished = self._forks.pop(fork_id, None)
                if finished is not None:
                    self._end(finished, describe_payload(event.payload))

    # --- cancelling from the client (window/workDoneProgress/cancel) -----------------------------

    def _cancel_turn(self, session_id: str) -> None:
        session = self._hub.sessions.get(session_id)
        # Only a turn that still runs: cancelling an idle session would drop its queued messages.
        if session is not None and session.status in ("starting", "running"):
            self._spawn_cancel(session)

    def _cancel_fork(self, fork_id: str) -> None:
        fork = self._hub.forks.forks.get(fork_id)
        if fork is not None and self._hub.forks.active_fork(fork.parent) is fork:
            self._spawn_cancel(fork.parent)

    def _spawn_cancel(self, session: Session) -> None:
        # The same path as coven/cancel: a forking parent cancels its fork, a fork child ends
        # alone, anything else interrupts its turn.
        self._hub.spawn(self._hub.cancel(session), name=f"cancel {session.id}")

    # --- the progress protocol -------------------------------------------------------------------

    def _begin(self, progress: _Progress) -> None:
        tokens = self._server.work_done_progress.tokens
        cancelled: Future[None] = Future()
        # pygls cancels this future when the client sends window/workDoneProgress/cancel.
        cancelled.add_done_callback(lambda f: progress.cancel() if f.cancelled() else None)
        tokens[progress.token] = cancelled

        def on_created(answer: Future[Any]) -> None:
            if answer.cancelled() or answer.exception() is not None:
                log.info("the client refused progress %s: %s", progress.token, answer)
                tokens.pop(progress.token, None)
                return
            progress.created = True
            self._flush(progress)

        answer = self._server.protocol.send_request(
            types.WINDOW_WORK_DONE_PROGRESS_CREATE,
            types.WorkDoneProgressCreateParams(token=progress.token),
        )
        answer.add_done_callback(on_created)

    def _report(
        self, progress: _Progress, message: str | None, percentage: int | None = None
    ) -> None:
        if message is None or progress.ended:
            return
        progress.message = message
        if percentage is not None:
            progress.percentage = percentage
        if progress.begun:
            self._send(
                progress,
                types.WorkDoneProgressReport(message=message, percentage=progress.percentage),
            )

    def _end(self, progress: _Progress, message: str | None) -> None:
        if progress.ended:
            return
        progress.ended = True
        progress.end_message = message
        self._flush(progress)

    def _flush(self, progress: _Progress) -> None:
        """Send what the client has not seen yet, once it has created the token: a begin that
        carries the latest message, then the end if the work is over already."""
        if not progress.created:
            return
        if not progress.begun:
            progress.begun = True
            self._send(
                progress,
                types.WorkDoneProgressBegin(
                    title=progress.title,
                    cancellable=True,
                    message=progress.message,
                    percentage=progress.percentage,
                ),
            )
        if progress.ended:
            self._server.work_done_progress.tokens.pop(progress.token, None)
            self._send(progress, types.WorkDoneProgressEnd(message=progress.end_message))

    def _send(
        self,
        progress: _Progress,
        value: types.WorkDoneProgressBegin
        | types.WorkDoneProgressReport
        | types.WorkDoneProgressEnd,
    ) -> None:
        try:
            self._server.protocol.notify(
                types.PROGRESS, types.ProgressParams(token=progress.token, value=value)
            )
        except Exception:  # the connection is going away; the progress goes with it
            log.debug("could not send progress %s", progress.token, exc_info=True)


def _log_type(payload: ev.Payload) -> types.MessageType:
    if isinstance(payload, ev.TurnResult) and payload.isError and not payload.cancelled:
        return types.MessageType.Error
    return _LOG_TYPES.get(payload.kind, types.MessageType.Log)


def install_standard_lsp(
    server: LanguageServer, hub: Hub, handlers: dict[str, Handler]
) -> StandardLsp:
    """Register the standard-LSP features on a new connection's server: one executeCommand
    command per coven/* request (pygls advertises them in `executeCommandProvider`). Returns the
    connection's mirror, which the server feeds every event it sends."""
    for method, handler in handlers.items():
        server.command(command_name(method))(_command(handler))
    return StandardLsp(server, hub)


def _command(handler: Handler) -> Callable[..., Awaitable[Any]]:
    # pygls passes the server to a command whose first parameter is named `ls`.
    async def run(ls: LanguageServer, *arguments: Any) -> Any:
        # The request's params object is the first argument; no argument is an empty object.
        return await handler(ls, arguments[0] if arguments else None)

    run.__name__ = getattr(handler, "__name__", "command")
    return run
