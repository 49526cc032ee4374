""":class:`ScriptedModel`: the rules (:class:`Rule`), the server they answer on, the record of
the requests it got, and the environment that points a CLI at it."""

from __future__ import annotations

import ipaddress
import itertools
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # Self and Unpack are in `typing` from 3.11; only type checkers import them.
    from typing_extensions import Self, Unpack

from .replies import Block, HttpError, Reply, ReplyOptions, Text, Thinking, ToolUse, reply
from .request import ModelRequest
from .server import _Server

DEFAULT_TEXT = "(scripted model: no rule matched)"

_logger = logging.getLogger(__name__)

# Variables that would make a child CLI believe it is nested in another Claude Code session,
# or send it to another provider / credential than the scripted model.
_ENV_TO_DROP = (
    "CLAUDECODE",
    "CLAUDE_CODE_SESSION_ID",
    "CLAUDE_CODE_ENTRYPOINT",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "ANTHROPIC_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
)


Matcher = str | re.Pattern[str] | Callable[[ModelRequest], bool]


@dataclass
class Rule:
    match: Matcher
    reply: Reply | Callable[[ModelRequest], Reply]
    times: int | None = None
    # True: only requests of the CLI's subagents (ModelRequest.is_subagent); False: only the
    # main conversation's; None: both.
    subagent: bool | None = None
    fired: int = field(default=0, compare=False)

    @property
    def live(self) -> bool:
        return self.times is None or self.fired < self.times

    def matches(self, request: ModelRequest) -> bool:
        if self.subagent is not None and request.is_subagent != self.subagent:
            return False
        if isinstance(self.match, str):
            return self.match in request.last_user_text
        if isinstance(self.match, re.Pattern):
            return self.match.search(request.last_user_text) is not None
        return bool(self.match(request))


def _validate_host(host: str) -> str:
    if host == "localhost":
        return "127.0.0.1"
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"ScriptedModel binds loopback only, not {host!r}") from None
    if addr.version != 4 or not addr.is_loopback:
        raise ValueError(f"ScriptedModel binds IPv4 loopback (127.0.0.0/8) only, not {host!r}")
    return host


class ScriptedModel:
    """An Anthropic Messages API server that answers from rules; see the module docstring."""

    def __init__(
        self,
        rules: Iterable[Rule] = (),
        default: Reply | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self._host = _validate_host(host)
        self._requested_port = port
        self._rules: list[Rule] = list(rules)
        self.default = default if default is not None else reply(DEFAULT_TEXT)
        self._log = log
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._requests: list[ModelRequest] = []
        self._other: list[tuple[float, str, str]] = []
        self._ids = itertools.count(1)
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- script

    def add(self, rule: Rule) -> None:
        with self._lock:
            self._rules.append(rule)

    def on(
        self,
        match: Matcher,
        *blocks_or_reply: Block | str | Reply | Callable[[ModelRequest], Reply],
        times: int | None = None,
        subagent: bool | None = None,
        **reply_kw: Unpack[ReplyOptions],
    ) -> Rule:
        """``on("hello", "Hi", latency=0.5)``; also ``on(m, Reply(...))`` or ``on(m, fn)``.
        ``subagent=True`` (False) limits the rule to requests of the CLI's subagents (of the
        main conversation)."""
        answer: Reply | Callable[[ModelRequest], Reply]
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

    def _choose(self, req: ModelRequest) -> Reply:
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
            _logger.exception("scripted model: a rule raised")
            # Answered as a non-retryable API error so the failure shows up in the client's
            # transcript (and in wait_for_requests' report) instead of as a hung turn.
            rep = Reply(
                error=HttpError(500, f"scripted model: rule raised {exc!r}", should_retry=False)
            )
        with self._changed:
            self._requests.append(req)
            self._changed.notify_all()
        if self._log is not None:
            self._log(
                f"{req.path} model={req.model} main={req.is_main_turn} rule={req.rule_index} "
                f"last_user={req.last_user_text[-80:]!r}"
            )
        return rep

    def _note_other(self, method: str, path: str) -> None:
        with self._lock:
            self._other.append((time.monotonic(), method, path))
        if self._log is not None:
            self._log(f"{method} {path}")

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    # --- lifecycle

    def start(self) -> str:
        if self._server is not None:
            return self.url
        self._stopping.clear()
        server = _Server((self._host, self._requested_port), self)
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"scripted-model:{server.server_address[1]}",
            daemon=True,
        )
        self._server = server
        self._thread.start()
        return self.url

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.close_connections()
        server.server_close()  # joins handler threads, which the shutdowns above released
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
            raise RuntimeError("ScriptedModel is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    # --- what happened

    @property
    def requests(self) -> list[ModelRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def other_requests(self) -> list[tuple[float, str, str]]:
        """(monotonic time, method, path) of everything that was not POST /v1/messages."""
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
        predicate: Callable[[ModelRequest], bool] | None = None,
    ) -> list[ModelRequest]:
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
        lines = [
            f"  #{i} {r.path} model={r.model!r} main={r.is_main_turn} rule={r.rule_index} "
            f"finished={r.finished is not None} last_user={r.last_user_text[-120:]!r}"
            for i, r in enumerate(seen)
        ]
        what = "requests" if predicate is None else "matching requests"
        raise TimeoutError(
            f"waited {timeout:g}s for {n} {what}, got {len(hits)}; "
            f"{len(seen)} arrived in all" + (":\n" + "\n".join(lines) if lines else "")
        )

    # --- pointing a CLI here

    def cli_env(self, config_dir: str | os.PathLike[str]) -> dict[str, str]:
        """Variables to merge into a CLI's environment (also drop :meth:`cli_environ`'s)."""
        return {
            "ANTHROPIC_BASE_URL": self.url,
            "ANTHROPIC_API_KEY": "scripted-model-key",
            "CLAUDE_CONFIG_DIR": os.fspath(config_dir),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }

    def cli_environ(
        self, config_dir: str | os.PathLike[str], base: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """A whole environment for a CLI child: ``base`` (os.environ) + :meth:`cli_env`,
        without nesting markers or credentials meant for other endpoints."""
        env = {k: v for k, v in (os.environ if base is None else base).items()}
        for name in _ENV_TO_DROP:
            env.pop(name, None)
        env.update(self.cli_env(config_dir))
        return env
