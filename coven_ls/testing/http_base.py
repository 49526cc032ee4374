"""What every scripted API server shares (:class:`~coven_ls.testing.model.ScriptedModel` for the
Messages API, :class:`~coven_ls.testing.scripted_responses.ScriptedResponses` for the Responses
API): the rules and how one is chosen, a threading HTTP server on loopback, starting and
stopping it (idle keep-alive connections cut, a paused answer abandoned), the record of the
requests and waiting for them.

An API adds three things on top: its request record (a :class:`ScriptedRequest`), its handler
(a :class:`ScriptedHandler` that parses a request, asks :meth:`ScriptedServer._choose` for the
reply and writes it), and a subclass of :class:`ScriptedServer` naming them::

    class ScriptedChat(ScriptedServer[ChatRequest]):
        handler = _ChatHandler
        label = "scripted chat"
        default_text = "(scripted chat: no rule matched)"

Nothing here knows an API's wire format; the modules above it do."""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    # Self and Unpack are in `typing` from 3.11; only type checkers import them.
    from typing_extensions import Self, Unpack

from .replies import Block, HttpError, Reply, ReplyOptions, Text, Thinking, ToolUse, reply

_logger = logging.getLogger(__name__)


class ScriptedRequest(Protocol):
    """What the rules and the record need of a request, whatever its API."""

    rule_index: int | None

    @property
    def path(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def last_user_text(self) -> str: ...
    @property
    def is_subagent(self) -> bool: ...
    @property
    def finished(self) -> float | None: ...


Request = TypeVar("Request", bound=ScriptedRequest)

# A rule's match: text in the request's last user text, a pattern searched there, or a test.
Matcher = str | re.Pattern[str] | Callable[[Any], bool]


@dataclass
class Rule:
    match: Matcher
    reply: Reply | Callable[[Any], Reply]
    times: int | None = None
    # True: only requests of the CLI's subagents (ModelRequest.is_subagent); False: only the
    # main conversation's; None: both.
    subagent: bool | None = None
    fired: int = field(default=0, compare=False)

    @property
    def live(self) -> bool:
        return self.times is None or self.fired < self.times

    def matches(self, request: ScriptedRequest) -> bool:
        if self.subagent is not None and request.is_subagent != self.subagent:
            return False
        if isinstance(self.match, str):
            return self.match in request.last_user_text
        if isinstance(self.match, re.Pattern):
            return self.match.search(request.last_user_text) is not None
        return bool(self.match(request))


class ClientGone(Exception):
    """The answer is abandoned: the client hung up, or the server is stopping."""


def loopback_host(host: str, who: str = "a scripted server") -> str:
    """`host` if it is an IPv4 loopback address (``localhost``: 127.0.0.1); a scripted server
    answers anyone who reaches it, so it listens nowhere else."""
    if host == "localhost":
        return "127.0.0.1"
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"{who} binds loopback only, not {host!r}") from None
    if addr.version != 4 or not addr.is_loopback:
        raise ValueError(f"{who} binds IPv4 loopback (127.0.0.0/8) only, not {host!r}")
    return host


class LoopbackServer(ThreadingHTTPServer):
    """The HTTP server of a :class:`ScriptedServer`: a thread per connection, each connection
    known so that stopping can cut the idle keep-alive ones."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        model: ScriptedServer[Any],
    ) -> None:
        self.model = model
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, handler)

    def close_connections(self) -> None:
        # Idle keep-alive connections would otherwise keep handler threads (and stop()) waiting.
        with self.connections_lock:
            conns = list(self.connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class ScriptedHandler(BaseHTTPRequestHandler):
    """The handler every API's own builds on: HTTP/1.1 keep-alive, no Nagle delay, its
    connection known to the server, no logging to stderr, pauses the server's stop cuts short."""

    # Each SSE event is its own small write; with Nagle's algorithm the last ones wait for the
    # client's delayed ACK (~40 ms), which would show up as model latency nobody scripted.
    disable_nagle_algorithm = True
    protocol_version = "HTTP/1.1"
    timeout = 120  # idle keep-alive sockets eventually let their thread go
    server: LoopbackServer

    def setup(self) -> None:
        super().setup()
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        with self.server.connections_lock:
            self.server.connections.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the model keeps its own record; stderr noise would drown test output

    def _pause(self, seconds: float) -> None:
        """Wait `seconds` (a latency, a chunk delay), unless the server is stopping meanwhile:
        then the answer is abandoned (ClientGone)."""
        if seconds > 0 and self.server.model._stopping.wait(seconds):
            raise ClientGone


class ScriptedServer(Generic[Request]):
    """Rules answered over HTTP on loopback: see the module docstring. A subclass names its
    `handler`, its `label` (logs, thread names, errors) and its `default_text`."""

    handler: ClassVar[type[ScriptedHandler]]
    label: ClassVar[str]
    default_text: ClassVar[str]

    def __init__(
        self,
        rules: Iterable[Rule] = (),
        default: Reply | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self._host = loopback_host(host, type(self).__name__)
        self._requested_port = port
        self._rules: list[Rule] = list(rules)
        self.default = default if default is not None else reply(self.default_text)
        self._log = log
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._requests: list[Request] = []
        self._other: list[tuple[float, str, str]] = []
        self._ids = itertools.count(1)
        self._stopping = threading.Event()
        self._server: LoopbackServer | None = None
        self._thread: threading.Thread | None = None

    # --- script

    def add(self, rule: Rule) -> None:
        with self._lock:
            self._rules.append(rule)

    def on(
        self,
        match: Matcher,
        *blocks_or_reply: Block | str | Reply | Callable[[Request], Reply],
        times: int | None = None,
        subagent: bool | None = None,
        **reply_kw: Unpack[ReplyOptions],
    ) -> Rule:
        """``on("hello", "Hi", latency=0.5)``; also ``on(m, Reply(...))`` or ``on(m, fn)``.
        ``subagent=True`` (False) limits the rule to requests of the CLI's subagents (of the
        main conversation)."""
        answer: Reply | Callable[[Request], Reply]
        blocks: list[Block | str] = []
        for item in blocks_or_reply:
            if isinstance(item, (str, Text, Thinking, ToolUse)):
                blocks.append(item)
            elif len(blocks_or_reply) == 1 and (isinstance(item, Reply) or callable(item)):
                if reply_kw:
                    raise TypeError("reply options go into the Reply itself when one is given")
                answer = item
                break
            else:
                raise TypeError(f"not a reply block: {item!r}")  # what Reply itself would say
        else:  # no Reply or callable given: the blocks (maybe none) make one
            answer = reply(*blocks, **reply_kw)
        rule = Rule(match, answer, times, subagent)
        self.add(rule)
        return rule

    @property
    def rules(self) -> list[Rule]:
        with self._lock:
            return list(self._rules)

    def _choose(self, req: Request) -> Reply:
        """The reply of the first live rule that matches (spending one of its `times`), else
        the default; the request is recorded either way."""
        with self._lock:
            rules = list(enumerate(self._rules))
        rep = self.default
        try:
            for index, rule in rules:
                if not rule.live or not rule.matches(req):
                    continue
                with self._lock:
                    # Re-checked under the lock so concurrent requests cannot overspend `times`.
                    if not rule.live:
                        continue
                    rule.fired += 1
                req.rule_index = index
                rep = rule.reply(req) if callable(rule.reply) else rule.reply
                break
        except Exception as exc:
            _logger.exception("%s: a rule raised", self.label)
            # Answered as a non-retryable API error so the failure shows up in the client's
            # transcript (and in wait_for_requests' report) instead of as a hung turn.
            rep = Reply(
                error=HttpError(500, f"{self.label}: rule raised {exc!r}", should_retry=False)
            )
        with self._changed:
            self._requests.append(req)
            self._changed.notify_all()
        if self._log is not None:
            self._log(self._log_line(req))
        return rep

    def _log_line(self, req: Request) -> str:
        return (
            f"{req.path} model={req.model} rule={req.rule_index} "
            f"last_user={req.last_user_text[-80:]!r}"
        )

    def _note_other(self, method: str, path: str) -> None:
        with self._lock:
            self._other.append((time.monotonic(), method, path))
        if self._log is not None:
            self._log(f"{method} {path}")

    def _notify(self) -> None:
        """Wake the waiters: a recorded request changed (it finished, or was cut short)."""
        with self._changed:
            self._changed.notify_all()

    # --- lifecycle

    def start(self) -> str:
        if self._server is not None:
            return self.url
        self._stopping.clear()
        server = LoopbackServer((self._host, self._requested_port), self.handler, self)
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"{self.label.replace(' ', '-')}:{server.server_address[1]}",
            daemon=True,
        )
        self._server = server
        self._thread.start()
        return self.url

    def stop(self) -> None:
        """Stop listening, cut every connection and abandon paused answers. Handler threads
        still finishing (a request being marked aborted) are not waited for: wait on the
        record (wait_for_requests with a predicate) for that."""
        server, thread = self._server, self._thread
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.close_connections()
        server.server_close()
        if thread is not None:
            thread.join()
        self._server = self._thread = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    # --- what happened

    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    @property
    def other_requests(self) -> list[tuple[float, str, str]]:
        """(monotonic time, method, path) of everything that was not a request to the API."""
        with self._lock:
            return list(self._other)

    def clear(self) -> None:
        """Forget recorded requests (rules and their spent counts stay)."""
        with self._lock:
            self._requests.clear()
            self._other.clear()

    def wait_for_requests(
        self,
        n: int,
        timeout: float = 30.0,
        predicate: Callable[[Request], bool] | None = None,
    ) -> list[Request]:
        """Block until ``n`` recorded requests satisfy ``predicate``; return those requests."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                hits = [r for r in self._requests if predicate is None or predicate(r)]
                if len(hits) >= n:
                    return hits
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            seen = list(self._requests)
        lines = [f"  #{i} {self._describe(r)}" for i, r in enumerate(seen)]
        what = "requests" if predicate is None else "matching requests"
        raise TimeoutError(
            f"{self.label}: waited {timeout:g}s for {n} {what}, got {len(hits)}; "
            f"{len(seen)} arrived in all" + (":\n" + "\n".join(lines) if lines else "")
        )

    def _describe(self, req: Request) -> str:
        """A request in wait_for_requests' report."""
        return (
            f"{req.path} model={req.model!r} rule={req.rule_index} "
            f"finished={req.finished is not None} last_user={req.last_user_text[-120:]!r}"
        )
