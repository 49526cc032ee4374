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
from ..protocol.describe import describe, one_line

log = logging.getLogger(__name__)

# A coven/* request handler: the connection's server and the raw params.
Handler = Callable[[Any, Any], Awaitable[Any]]

# Statuses in which a fork child has done its part of the fork (for "Fork 2/3 done").
_CHILD_OVER = protocol.SETTLED_STATUSES
# Statuses after which a session runs no turn: its turn progress, if any, is over.
_TURN_OVER = protocol.SETTLED_STATUSES | {"awaitingApproval", "forking"}
# Event kinds whose line becomes the message of the session's turn progress.
_TURN_MESSAGES = frozenset(
    {
        Kind.TEXT,
        Kind.THINKING,
        Kind.TOOL_USE,
        Kind.TOOL_RESULT,
        Kind.PERMISSION_REQUEST,
        Kind.PERMISSION_DECISION,
    }
)
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
    cancel: Callable[[], None] = field(default=lambda: None, repr=False)


class StandardLsp:
    """Per-connection state of the standard-LSP mirror."""

    def __init__(self, server: LanguageServer, hub: Hub) -> None:
        self._server = server
        self._hub = hub
        self._turns: dict[str, _Progress] = {}  # session id -> its running turn
        self._forks: dict[str, _Progress] = {}  # fork id -> its progress
        self._fork_of_child: dict[str, str] = {}  # child session id -> fork id
        self._fork_children: dict[str, list[tuple[str, str]]] = {}  # fork id -> (sid, label)
        self._fork_done: dict[str, list[str]] = {}  # fork id -> child ids done, in order
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
        if not custom:
            self._log(event)
        if progress:
            self._track_turn(event)
            self._track_fork(event)

    def _title(self, session_id: str) -> str:
        session = self._hub.sessions.get(session_id)
        return session.title if session is not None else session_id

    def _log(self, event: dict[str, Any]) -> None:
        line = describe(event)
        if line is None:
            return
        self._server.protocol.notify(
            types.WINDOW_LOG_MESSAGE,
            types.LogMessageParams(
                type=_log_type(event), message=f"[{self._title(event['sessionId'])}] {line}"
            ),
        )

    def _track_turn(self, event: dict[str, Any]) -> None:
        sid, kind = event["sessionId"], event["kind"]
        turn = self._turns.get(sid)
        if kind == Kind.PROMPT:
            if turn is not None:  # a turn without an end we saw: close it before the next
                self._end(turn, None)
            turn = _Progress(
                token=f"coven:turn:{sid}:{event['seq']}",
                title=f"Claude: {one_line(self._title(sid), 60)}",
                message=one_line(event["text"], 80),
                cancel=lambda: self._cancel_turn(sid),
            )
            self._turns[sid] = turn
            self._begin(turn)
        elif turn is None:
            return
        elif kind in _TURN_MESSAGES:
            self._report(turn, describe(event))
        elif kind in (Kind.TURN_RESULT, Kind.ERROR):
            self._end(turn, describe(event))
            del self._turns[sid]
        elif kind == Kind.STATUS and event["status"] in _TURN_OVER:
            self._end(turn, None)
            del self._turns[sid]

    def _track_fork(self, event: dict[str, Any]) -> None:
        sid, kind = event["sessionId"], event["kind"]
        if kind == Kind.FORK_STARTED:
            fork_id = event["forkId"]
            children = [(c["sessionId"], c["label"]) for c in event["children"]]
            self._fork_children[fork_id] = children
            self._fork_done[fork_id] = []
            for child_id, _ in children:
                self._fork_of_child[child_id] = fork_id
            fork = _Progress(
                token=f"coven:fork:{fork_id}",
                title=f"Fork: {one_line(self._title(sid), 60)}",
                message=f"Fork 0/{len(children)} done",
                percentage=0,
                cancel=lambda: self._cancel_fork(fork_id),
            )
            self._forks[fork_id] = fork
            self._begin(fork)
        elif kind == Kind.STATUS and event["status"] in _CHILD_OVER:
            fork_id = self._fork_of_child.get(sid)
            progress = self._forks.get(fork_id or "")
            if progress is None or fork_id is None or sid in self._fork_done[fork_id]:
                return
            done = self._fork_done[fork_id]
            done.append(sid)
            children = self._fork_children[fork_id]
            label = next(label for child_id, label in children if child_id == sid)
            self._report(
                progress,
                f"Fork {len(done)}/{len(children)} done: {one_line(label, 40)}",
                percentage=len(done) * 100 // len(children),
            )
        elif kind == Kind.FORK_FINISHED:
            fork_id = event["forkId"]
            progress = self._forks.pop(fork_id, None)
            for child_id, _ in self._fork_children.pop(fork_id, []):
                self._fork_of_child.pop(child_id, None)
            self._fork_done.pop(fork_id, None)
            if progress is not None:
                self._end(progress, describe(event))

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


def _log_type(event: dict[str, Any]) -> types.MessageType:
    if event["kind"] == Kind.TURN_RESULT and event.get("isError") and not event.get("cancelled"):
        return types.MessageType.Error
    return _LOG_TYPES.get(event["kind"], types.MessageType.Log)


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
