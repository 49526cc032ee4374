"""A scripted stand-in for the Anthropic Messages API, for tests and the no-API-key demo.

Point the real ``claude`` CLI at it and every model call is answered from a script::

    with ScriptedModel() as model:
        model.on("hello", "Hi there", latency=0.5)
        model.on(re.compile(r"^fix "), ToolUse("Bash", {"command": "make"}), times=1)
        env = {**os.environ, **model.cli_env(tmp_path)}      # or model.cli_environ(tmp_path)
        subprocess.run([claude, "-p", "hello"], env=env)
        model.wait_for_requests(1)

As its own process: ``python -m coven_ls.testing --script demo.yaml [--port N]
[--port-file PATH]`` prints ``listening on http://127.0.0.1:PORT`` and serves until
SIGTERM/SIGINT; see :func:`main`, :func:`load_script` for the YAML format, and docs/testing.md.

Rules are tried in order and the first live one whose ``match`` fits answers; a plain string
matches a substring of the text of the last user message (tool results included,
``<system-reminder>`` spans removed but for the ``<task-notification>`` elements in them).
Nothing matching gets :data:`DEFAULT_TEXT`, so the CLI never hangs on a request nobody
scripted.

What the real CLI (Claude Code 2.1.330, bundled with claude-agent-sdk 0.2.187) sent, logged
offline with :meth:`ScriptedModel.cli_env` in ``-p`` mode, stream-json in and out, and through
the SDK's ``ClaudeSDKClient``:

- Only ``POST /v1/messages?beta=true`` with ``"stream": true``, one per model turn, all to the
  main model (``claude-opus-5-5`` unless ``--model``), all carrying ``tools`` (none under
  ``--tools ""``), ``thinking``, ``metadata`` and the system prompt as a list of blocks (a
  billing-header line, "You are a Claude agent, built on Anthropic's Claude Agent SDK.",
  then the long prompt). No
  ``count_tokens``, no quota probe, no title/topic or other small-model side call. Without
  ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC`` it also sends ``HEAD /api/hello`` first.
- The first user message is ``[<system-reminder> text block, the prompt]``; later prompts
  are plain text blocks; after a tool call the last user message holds only the
  ``tool_result`` block(s). The CLI also inserts a ``"role": "system"`` message (the
  environment description) after the first user message, which ``last_user_text`` skips.
- Errors: a 5xx is retried 10 times with exponential backoff (0.5 s, 1 s, 2 s, … plus
  jitter, ~3 minutes in all; a ``retry-after`` header can lengthen a wait, not shorten it
  below the backoff, and ``retry-after-ms`` is ignored) unless the response says
  ``x-should-retry: false`` (``HttpError.should_retry``) or ``CLAUDE_CODE_MAX_RETRIES`` is
  low; the turn then ends with ``is_error: true`` and "API Error: 500 <message>". A 400 is
  sent six times within a fraction of a second, with features dropped in turn (thinking
  display, deferred tools): expect several requests. A stream broken off mid-reply
  (``Reply.drop_after``) is retried the same way, then tried once without streaming.
- Subagents (the Agent tool) make their own requests, recognisable by
  :attr:`ModelRequest.is_subagent`; a background agent's end reaches the main conversation
  as a ``<task-notification>`` (:attr:`ModelRequest.task_notifications`).
  docs/cli-facts.md has what the CLI tells the SDK about all of this.
- Rules are plain matches: nothing distinguishes a side call from a turn. Should a version
  make such calls again, :attr:`ModelRequest.is_main_turn` tells them apart for callables.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import ipaddress
import itertools
import json
import logging
import os
import re
import signal
import socket
import struct
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict
from urllib.parse import urlsplit

if TYPE_CHECKING:
    # Self and Unpack are in `typing` from 3.11; only type checkers import them.
    from typing_extensions import Self, Unpack

__all__ = [
    "DEFAULT_TEXT",
    "HttpError",
    "ModelRequest",
    "Reply",
    "ReplyOptions",
    "Rule",
    "ScriptedModel",
    "Text",
    "Thinking",
    "ToolUse",
    "Usage",
    "load_script",
    "main",
    "reply",
]

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

_SYSTEM_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)
# What the CLI sends when a background agent (Agent tool) ends: inside a <system-reminder>, but
# the whole content of the turn it starts, so last_user_text keeps it.
_TASK_NOTIFICATION = re.compile(r"<task-notification>.*?</task-notification>", re.DOTALL)
_TASK_NOTIFICATION_INNER = re.compile(r"<task-notification>(.*?)</task-notification>", re.DOTALL)
_XML_CHILD = re.compile(r"<([A-Za-z][\w-]*)>(.*?)</\1>", re.DOTALL)
# The billing line the CLI puts first in a subagent's system prompt (general-purpose or fork).
_SUBAGENT_MARK = "cc_is_subagent=true"


# --------------------------------------------------------------------------- script vocabulary


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Thinking:
    text: str


@dataclass(frozen=True)
class ToolUse:
    name: str
    input: dict[str, Any]
    id: str | None = None  # None: a fresh "toolu_..." per response, as ids must not repeat


Block = Text | Thinking | ToolUse


@dataclass(frozen=True)
class HttpError:
    status: int = 500
    message: str = "scripted failure"
    error_type: str = "api_error"
    # Sent as ``x-should-retry`` when set. The CLI obeys it, whereas it retries a bare 5xx ten
    # times with exponential backoff (about three minutes).
    should_retry: bool | None = None
    # Sent as ``retry-after`` (seconds) and ``retry-after-ms`` when set. Claude Code 2.1.330
    # waits the longer of retry-after and its own backoff (0.5 s, 1 s, 2 s, ...) and ignores
    # retry-after-ms (docs/cli-facts.md, retries).
    retry_after: float | None = None
    retry_after_ms: float | None = None

    def __post_init__(self) -> None:
        for name in ("retry_after", "retry_after_ms"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must not be negative")

    def headers(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.should_retry is not None:
            out["x-should-retry"] = "true" if self.should_retry else "false"
        if self.retry_after is not None:
            out["retry-after"] = _number(self.retry_after)
        if self.retry_after_ms is not None:
            out["retry-after-ms"] = _number(self.retry_after_ms)
        return out


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


@dataclass(frozen=True)
class Usage:
    """Token counts a reply reports, instead of the estimate (about four characters a token).

    ``message_start`` carries the input side (and ``output_tokens: 1``); ``message_delta``
    carries all four, ``output_tokens`` being the final count, as the real API sends them.
    """

    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    def __post_init__(self) -> None:
        for name, value in self.as_dict().items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a whole number >= 0, not {value!r}")

    def as_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
        }


@dataclass(frozen=True)
class Reply:
    blocks: tuple[Block, ...] | list[Block] = ()
    latency: float = 0.0
    chunk_chars: int = 40
    chunk_delay: float = 0.0
    error: HttpError | None = None
    usage: Usage | None = None
    # Break the connection off after this many content_block_delta events (and one more
    # chunk_delay): no message_delta or message_stop, the connection closed then reset. 0 cuts
    # it right after message_start; a non-streaming answer breaks off halfway through.
    drop_after: int | None = None
    # With `error`: the error comes as an `error` event in the middle of the stream, after this
    # many content_block_delta events (and one more chunk_delay), as the API sends an overload
    # that happens mid-answer; 0: right after message_start. None: an HTTP status before any
    # stream. A non-streaming request gets the HTTP status either way.
    error_after: int | None = None

    def __post_init__(self) -> None:
        if self.chunk_chars < 1:
            raise ValueError("chunk_chars must be at least 1")
        if self.drop_after is not None and self.drop_after < 0:
            raise ValueError("drop_after must not be negative")
        if self.error_after is not None:
            if self.error is None:
                raise ValueError("error_after needs an error to send")
            if self.error_after < 0:
                raise ValueError("error_after must not be negative")
            if self.drop_after is not None:
                raise ValueError("give drop_after or error_after, not both")
        for block in self.blocks:
            if not isinstance(block, (Text, Thinking, ToolUse)):
                raise TypeError(f"not a reply block: {block!r}")

    @property
    def has_tool_use(self) -> bool:
        return any(isinstance(b, ToolUse) for b in self.blocks)


class ReplyOptions(TypedDict, total=False):
    """The keyword arguments of :func:`reply` (and :meth:`ScriptedModel.on`): a Reply's fields
    other than its blocks."""

    latency: float
    chunk_chars: int
    chunk_delay: float
    error: HttpError | None
    usage: Usage | None
    drop_after: int | None
    error_after: int | None


def _as_block(item: Block | str) -> Block:
    return Text(item) if isinstance(item, str) else item


def reply(*blocks_or_strings: Block | str, **kw: Unpack[ReplyOptions]) -> Reply:
    """``reply("text", ToolUse(...), latency=0.2)``: plain strings become :class:`Text`."""
    return Reply(blocks=tuple(_as_block(b) for b in blocks_or_strings), **kw)


@dataclass
class ModelRequest:
    time: float
    path: str
    body: dict[str, Any]
    model: str
    system_text: str
    messages: list[dict[str, Any]]
    last_user_text: str
    all_text: str
    rule_index: int | None = None
    finished: float | None = None
    last_user_raw: str = ""  # the last user message's text with its <system-reminder> spans
    aborted: bool = False  # the response was cut short: the client hung up or the model stopped
    dropped: bool = False  # the model reset the connection on purpose (Reply.drop_after)
    stream_error: bool = False  # the model ended its stream with an error (Reply.error_after)

    @property
    def has_tools(self) -> bool:
        return bool(self.body.get("tools"))

    @property
    def is_main_turn(self) -> bool:
        """Heuristic: a conversation turn rather than a CLI side call.

        Claude Code's side calls (titles, summaries, command checks) traditionally go to the
        small fast model without tools; the conversation carries the tool list. None were
        seen with version 2.1.330, so this errs towards "main": a turn run with every tool
        disabled still counts unless it also runs on a haiku model.
        """
        return self.has_tools or "haiku" not in self.model.lower()

    @property
    def is_subagent(self) -> bool:
        """The request comes from a subagent the CLI runs for its Agent tool (a fresh agent or
        a ``"fork"``): its system prompt starts with a billing line holding
        ``cc_is_subagent=true``. A subagent's last user message is its prompt (a fork's: the
        fork boilerplate then ``Your directive: <prompt>``)."""
        return _SUBAGENT_MARK in self.system_text

    @property
    def task_notifications(self) -> list[dict[str, str]]:
        """The ``<task-notification>`` elements of the last user message, one dict per element
        from its child elements: ``task-id``, ``tool-use-id``, ``output-file``, ``status``
        (``completed``, ``killed``, …), ``summary``, ``result`` (the subagent's final text),
        ``usage`` …. The CLI sends one when a background agent ends, to start a turn."""
        return [
            {name: value.strip() for name, value in _XML_CHILD.findall(inner)}
            for inner in _TASK_NOTIFICATION_INNER.findall(self.last_user_raw)
        ]


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


# --------------------------------------------------------------------------- request parsing


def _content_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def _block_texts(block: dict[str, Any], *, with_tool_use: bool) -> Iterator[str]:
    kind = block.get("type")
    if kind == "text":
        yield str(block.get("text", ""))
    elif kind == "tool_result":
        for inner in _content_blocks(block.get("content", "")):
            yield from _block_texts(inner, with_tool_use=with_tool_use)
    elif kind == "thinking" and with_tool_use:
        yield str(block.get("thinking", ""))
    elif kind == "tool_use" and with_tool_use:
        yield json.dumps(block.get("input", {}), ensure_ascii=False)


def _strip_reminders(text: str) -> str:
    def keep_notifications(found: re.Match[str]) -> str:
        return "\n".join(_TASK_NOTIFICATION.findall(found.group(0)))

    return _SYSTEM_REMINDER.sub(keep_notifications, text).strip()


def _flatten_system(system: Any) -> str:
    return "\n".join(b.get("text", "") for b in _content_blocks(system) if b.get("type") == "text")


def parse_request(path: str, body: dict[str, Any], arrived: float) -> ModelRequest:
    messages = body.get("messages")
    if not isinstance(messages, list):
        messages = []
    last_user = next(
        (m for m in reversed(messages) if isinstance(m, dict) and m.get("role") == "user"), None
    )
    last_parts: list[str] = []
    raw_parts: list[str] = []
    if last_user is not None:
        for block in _content_blocks(last_user.get("content")):
            for text in _block_texts(block, with_tool_use=False):
                raw_parts.append(text)
                stripped = _strip_reminders(text)
                if stripped:
                    last_parts.append(stripped)
    all_parts = [
        text
        for m in messages
        if isinstance(m, dict)
        for block in _content_blocks(m.get("content"))
        for text in _block_texts(block, with_tool_use=True)
    ]
    return ModelRequest(
        time=arrived,
        path=path,
        body=body,
        model=str(body.get("model", "")),
        system_text=_flatten_system(body.get("system", "")),
        messages=messages,
        last_user_text="\n".join(last_parts),
        all_text="\n".join(all_parts),
        rule_index=None,
        finished=None,
        last_user_raw="\n".join(raw_parts),
    )


def _estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


# --------------------------------------------------------------------------- response shaping


class _ClientGone(Exception):
    pass


def _mark_finished(req: ModelRequest) -> None:
    # Stamped just before the last write, not after it: a client that has read the whole
    # response must find `finished` set. A failing last write resets it.
    req.finished = time.monotonic()


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _signature(text: str) -> str:
    # Opaque to the client; derived from the text so the same thinking gets the same value.
    return "scripted-sig-" + uuid.uuid5(uuid.NAMESPACE_OID, text).hex


def _resolve_blocks(rep: Reply) -> list[Block]:
    return [
        ToolUse(b.name, b.input, "toolu_" + uuid.uuid4().hex[:24])
        if isinstance(b, ToolUse) and b.id is None
        else b
        for b in rep.blocks
    ]


def _full_block(block: Block) -> dict[str, Any]:
    if isinstance(block, Text):
        return {"type": "text", "text": block.text}
    if isinstance(block, Thinking):
        return {"type": "thinking", "thinking": block.text, "signature": _signature(block.text)}
    return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}


def _output_tokens(blocks: Sequence[Block]) -> int:
    size = sum(
        len(b.text) if isinstance(b, (Text, Thinking)) else len(json.dumps(b.input)) for b in blocks
    )
    return max(1, size // 4)


def _reply_usage(req: ModelRequest, rep: Reply, blocks: Sequence[Block]) -> Usage:
    if rep.usage is not None:
        return rep.usage
    return Usage(_estimate_tokens(req.system_text + req.all_text), _output_tokens(blocks))


def _error_body(error_type: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}}


# --------------------------------------------------------------------------- HTTP plumbing


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    model: ScriptedModel

    def __init__(self, address: tuple[str, int], model: ScriptedModel) -> None:
        self.model = model
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def close_connections(self) -> None:
        # Idle keep-alive connections would otherwise keep handler threads (and stop()) waiting.
        with self.connections_lock:
            conns = list(self.connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    # Each SSE event is its own small write; with Nagle's algorithm the last ones wait for the
    # CLI's delayed ACK (~40 ms), which would show up as model latency nobody scripted.
    disable_nagle_algorithm = True
    protocol_version = "HTTP/1.1"
    server_version = "ScriptedModel/1"
    timeout = 120  # idle keep-alive sockets eventually let their thread go
    server: _Server

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

    @property
    def model(self) -> ScriptedModel:
        return self.server.model

    # --- low-level writers

    def _send_json(
        self,
        status: int,
        payload: Any,
        headers: Mapping[str, str] | None = None,
        req: ModelRequest | None = None,
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if req is not None:
            _mark_finished(req)
        if self.command != "HEAD":
            self.wfile.write(data)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    # --- verbs

    def do_HEAD(self) -> None:
        self.model._note_other(self.command, self.path)
        self._send_json(200, {})

    def do_GET(self) -> None:
        self.model._note_other(self.command, self.path)
        self._send_json(200, {})

    def do_POST(self) -> None:
        arrived = time.monotonic()
        path = urlsplit(self.path).path.rstrip("/")
        try:
            raw = self._read_body()
        except (OSError, ValueError):
            self.close_connection = True
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError as exc:
            body = f"bad JSON body: {exc}"
        if not isinstance(body, dict):
            self.model._note_other(self.command, self.path)
            problem = body if isinstance(body, str) else "the body is not a JSON object"
            self._send_json(400, _error_body("invalid_request_error", problem))
            return
        if path == "/v1/messages/count_tokens":
            self.model._note_other(self.command, self.path)
            req = parse_request(self.path, body, arrived)
            tokens = _estimate_tokens(req.system_text + req.all_text)
            self._send_json(200, {"input_tokens": tokens})
        elif path == "/v1/messages":
            self._messages(body, arrived)
        else:
            self._not_found()

    def _not_found(self) -> None:
        self.model._note_other(self.command, self.path)
        self._send_json(
            404, _error_body("not_found_error", f"{self.command} {self.path}: no such endpoint")
        )

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_found

    # --- /v1/messages

    def _messages(self, body: dict[str, Any], arrived: float) -> None:
        model = self.model
        req = parse_request(self.path, body, arrived)
        rep = model._choose(req)
        try:
            self._pause(rep.latency)
            if rep.error is not None and (rep.error_after is None or not body.get("stream")):
                err = rep.error
                self._send_json(
                    err.status,
                    _error_body(err.error_type, err.message),
                    {"request-id": f"req_scripted_{next(model._ids)}", **err.headers()},
                    req,
                )
            elif body.get("stream"):
                self._stream(req, rep)
            elif rep.drop_after is not None:
                # Without a stream there is nothing to break off in the middle of: the answer
                # breaks off after its headers and half of its body.
                data = json.dumps(self._message_json(req, rep)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data[: len(data) // 2])
                self._drop(req)
            else:
                self._send_json(200, self._message_json(req, rep), req=req)
        except (_ClientGone, OSError):
            self.close_connection = True
            req.finished = None
            req.aborted = True
        model._notify()

    def _message_json(self, req: ModelRequest, rep: Reply) -> dict[str, Any]:
        blocks = _resolve_blocks(rep)
        return {
            "id": f"msg_scripted_{next(self.model._ids)}",
            "type": "message",
            "role": "assistant",
            "model": req.model or "scripted",
            "content": [_full_block(b) for b in blocks],
            "stop_reason": "tool_use" if rep.has_tool_use else "end_turn",
            "stop_sequence": None,
            "usage": _reply_usage(req, rep, blocks).as_dict(),
        }

    def _stream(self, req: ModelRequest, rep: Reply) -> None:
        blocks = _resolve_blocks(rep)
        msg_id = f"msg_scripted_{next(self.model._ids)}"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("request-id", msg_id.replace("msg_", "req_"))
        self.end_headers()
        usage = _reply_usage(req, rep, blocks)
        self._event(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": req.model or "scripted",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {**usage.as_dict(), "output_tokens": 1},
                },
            },
        )
        first_delta = True
        sent = 0
        if rep.drop_after == 0:
            self._drop(req)
        if rep.error_after == 0:
            self._stream_error(req, rep)
            return
        for index, block in enumerate(blocks):
            start: dict[str, Any]
            deltas: list[dict[str, Any]]
            if isinstance(block, Text):
                start = {"type": "text", "text": ""}
                deltas = [
                    {"type": "text_delta", "text": c} for c in _chunks(block.text, rep.chunk_chars)
                ]
            elif isinstance(block, Thinking):
                start = {"type": "thinking", "thinking": "", "signature": ""}
                deltas = [
                    {"type": "thinking_delta", "thinking": c}
                    for c in _chunks(block.text, rep.chunk_chars)
                ]
                deltas.append({"type": "signature_delta", "signature": _signature(block.text)})
            else:
                start = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
                deltas = [
                    {"type": "input_json_delta", "partial_json": c}
                    for c in _chunks(json.dumps(block.input), rep.chunk_chars)
                ]
            self._event(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
            for delta in deltas:
                if not first_delta:
                    self._pause(rep.chunk_delay)
                first_delta = False
                self._event(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
                sent += 1
                if sent == rep.drop_after:
                    self._drop(req, rep.chunk_delay)
                if sent == rep.error_after:
                    self._stream_error(req, rep)
                    return
            self._event("content_block_stop", {"type": "content_block_stop", "index": index})
        if rep.drop_after is not None:  # fewer deltas than drop_after: break off before the end
            self._drop(req, rep.chunk_delay)
        if rep.error_after is not None:  # fewer deltas than error_after: the error before the end
            self._stream_error(req, rep)
            return
        self._event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": "tool_use" if rep.has_tool_use else "end_turn",
                    "stop_sequence": None,
                },
                "usage": usage.as_dict(),
            },
        )
        _mark_finished(req)
        self._event("message_stop", {"type": "message_stop"}, last=True)
        self.wfile.flush()

    def _pause(self, seconds: float) -> None:
        """Wait `seconds` (a latency, a chunk delay), unless the model is stopping meanwhile:
        then the answer is abandoned (_ClientGone)."""
        if seconds > 0 and self.model._stopping.wait(seconds):
            raise _ClientGone

    def _stream_error(self, req: ModelRequest, rep: Reply) -> None:
        """End the stream with an `error` event, as the API does when a request fails after its
        stream began (an overload mid-answer): the HTTP status stays 200."""
        assert rep.error is not None
        self._pause(rep.chunk_delay)
        req.stream_error = True
        _mark_finished(req)
        self._event("error", _error_body(rep.error.error_type, rep.error.message), last=True)

    def _drop(self, req: ModelRequest, pause: float = 0.0) -> None:
        """Break the connection off mid-stream, as a failing network or proxy would: no
        message_delta, no message_stop, no end of the chunked body.

        It breaks where the next delta would have come, ``pause`` (the chunk delay) after the
        last one: the CLI does not pass on events that arrive together with the break.
        Everything sent so far still arrives (FIN first, so the deltas are not lost to the
        reset); then, once the client hangs up or after a second, close() with SO_LINGER 0
        resets the connection (TCP RST) if it is still open."""
        self._pause(pause)
        req.dropped = True
        conn = self.connection
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_WR)
            conn.settimeout(1.0)
            while conn.recv(65536):  # until the client closes its side (b"") or the timeout
                pass
        with contextlib.suppress(OSError):
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        # The descriptor only closes once the file objects over it are closed too.
        for stream in (self.wfile, self.rfile, conn):
            with contextlib.suppress(OSError):
                stream.close()
        self.wfile = io.BytesIO()  # what the server still flushes and closes goes nowhere
        self.close_connection = True
        raise _ClientGone

    def _event(self, name: str, payload: dict[str, Any], last: bool = False) -> None:
        frame = f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode()
        end = b"0\r\n\r\n" if last else b""
        self.wfile.write(f"{len(frame):x}\r\n".encode() + frame + b"\r\n" + end)
        self.wfile.flush()


# --------------------------------------------------------------------------- the model


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


# --------------------------------------------------------------------------- script files

_REPLY_KEYS = {"latency", "chunk_chars", "chunk_delay", "drop_after", "error_after"}
_ERROR_KEYS = {"status", "message", "type", "should_retry", "retry_after", "retry_after_ms"}
_USAGE_KEYS = {
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
}


def _parse_block(item: Any, where: str) -> Block:
    if isinstance(item, str):
        return Text(item)
    if isinstance(item, dict) and len(item) == 1:
        ((kind, value),) = item.items()
        if kind == "text" and isinstance(value, str):
            return Text(value)
        if kind == "thinking" and isinstance(value, str):
            return Thinking(value)
        if kind == "tool_use" and isinstance(value, dict) and "name" in value:
            extra = set(value) - {"name", "input", "id"}
            if not extra:
                return ToolUse(str(value["name"]), dict(value.get("input") or {}), value.get("id"))
    raise ValueError(
        f"{where}: a block is a string, {{text: ...}}, {{thinking: ...}} or "
        f"{{tool_use: {{name: ..., input: {{...}}}}}}, not {item!r}"
    )


def _parse_reply(spec: Mapping[str, Any], where: str) -> Reply:
    kw: dict[str, Any] = {k: spec[k] for k in _REPLY_KEYS if k in spec}
    usage = spec.get("usage")
    if usage is not None:
        if not isinstance(usage, Mapping) or set(usage) - _USAGE_KEYS:
            raise ValueError(f"{where}: usage takes {', '.join(sorted(_USAGE_KEYS))}")
        if not {"input_tokens", "output_tokens"} <= set(usage):
            raise ValueError(f"{where}: usage needs input_tokens and output_tokens")
        kw["usage"] = Usage(**usage)
    blocks = spec.get("reply", [])
    if isinstance(blocks, (str, dict)):
        blocks = [blocks]
    if not isinstance(blocks, list):
        raise TypeError(f"{where}: reply must be a list of blocks")
    error = spec.get("error")
    if error is not None:
        if "reply" in spec and "error_after" not in spec:
            raise ValueError(
                f"{where}: give 'reply' or 'error', not both (unless error_after: the reply's "
                "first deltas, then the error)"
            )
        if not isinstance(error, dict) or set(error) - _ERROR_KEYS:
            raise ValueError(
                f"{where}: error takes status, message, type, should_retry, retry_after "
                "and retry_after_ms"
            )
        should_retry = error.get("should_retry")
        if should_retry is not None and not isinstance(should_retry, bool):
            raise ValueError(f"{where}: should_retry is true or false")
        kw["error"] = HttpError(
            status=int(error.get("status", 500)),
            message=str(error.get("message", "scripted failure")),
            error_type=str(error.get("type", "api_error")),
            should_retry=should_retry,
            retry_after=error.get("retry_after"),
            retry_after_ms=error.get("retry_after_ms"),
        )
    return Reply(
        blocks=tuple(_parse_block(b, f"{where} block {i}") for i, b in enumerate(blocks)), **kw
    )


def load_script(script: str | os.PathLike[str] | Mapping[str, Any]) -> ScriptedModel:
    """Build a (not started) model from a YAML (or JSON) file or an already-parsed mapping::

    default: "fallback text"            # or a list of blocks, or {reply: [...], latency: 1}
    rules:
      - match: "hello"                  # substring of the last user turn; or  regex: "^fix"
        times: 1                        # optional; also latency, chunk_chars, chunk_delay
        reply:                          # blocks; a plain string is a text block
          - thinking: "Let me think"
          - "Some text"
          - tool_use: {name: Bash, input: {command: "echo hi"}}
        usage: {input_tokens: 100, output_tokens: 20,        # optional: reported usage
                cache_read_input_tokens: 1000, cache_creation_input_tokens: 50}
      - match: "boom"                   # an HTTP error instead of a reply
        error: {status: 529, message: "busy", type: overloaded_error, should_retry: false}
                                        # also retry_after (seconds), retry_after_ms
      - match: "flaky"
        drop_after: 3                   # break the connection off after 3 deltas
        reply: "never finished"
      - match: "shaky"                  # an `error` event after 2 deltas, mid-stream
        error_after: 2
        error: {status: 529, type: overloaded_error, message: "Overloaded"}
        reply: "cut short"
      - match: "Your directive:"        # a rule for the CLI's subagents only
        subagent: true
        reply: "Done."

    docs/testing.md is the full reference. Raises ValueError or TypeError saying what is wrong.
    """
    if isinstance(script, Mapping):
        data: Any = script
    else:
        import yaml  # only script files need it

        data = yaml.safe_load(Path(script).read_text(encoding="utf-8")) or {}
    if not isinstance(data, Mapping):
        raise TypeError("a script is a mapping with 'rules' and optionally 'default'")
    unknown = set(data) - {"rules", "default"}
    if unknown:
        raise ValueError(f"unknown top-level keys in script: {sorted(unknown)}")
    rules: list[Rule] = []
    for i, spec in enumerate(data.get("rules") or []):
        where = f"rule {i}"
        if not isinstance(spec, Mapping):
            raise TypeError(f"{where}: must be a mapping")
        unknown = (
            set(spec) - {"match", "regex", "times", "subagent", "reply", "error", "usage"}
        ) - _REPLY_KEYS
        if unknown:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
        if ("match" in spec) == ("regex" in spec):
            raise ValueError(f"{where}: give exactly one of 'match' or 'regex'")
        if "reply" not in spec and "error" not in spec:
            raise ValueError(f"{where}: needs 'reply' or 'error'")
        match: Matcher = str(spec["match"]) if "match" in spec else re.compile(str(spec["regex"]))
        times = spec.get("times")
        subagent = spec.get("subagent")
        if subagent is not None and not isinstance(subagent, bool):
            raise ValueError(f"{where}: subagent is true or false")
        rules.append(
            Rule(
                match,
                _parse_reply(spec, where),
                None if times is None else int(times),
                subagent,
            )
        )
    default_spec = data.get("default")
    default: Reply | None = None
    if isinstance(default_spec, Mapping):
        # {text: ...} would otherwise read as a reply without blocks: an empty answer.
        unknown = set(default_spec) - {"reply", "error", "usage"} - _REPLY_KEYS
        if unknown:
            raise ValueError(
                f"default: unknown keys {sorted(unknown)}; a mapping default takes reply or "
                "error (and latency, chunk_chars, chunk_delay, drop_after, error_after, usage)"
            )
        default = _parse_reply(default_spec, "default")
    elif default_spec is not None:
        default = _parse_reply({"reply": default_spec}, "default")
    return ScriptedModel(rules, default)


# --------------------------------------------------------------------------- command line


PROG = "python -m coven_ls.testing"

_DESCRIPTION = """\
Serve a scripted stand-in for the Anthropic Messages API on loopback, so that the real
`claude` CLI, and coven-ls which runs it, can be tested offline. Every POST /v1/messages
is answered by the first rule of the script whose match fits the last user message
(rules are tried in order; a rule with `times` stops after that many answers), else by
the script's default."""

_EPILOG = """\
output:
  stdout  exactly one line, once the server accepts connections, then nothing:
              listening on http://127.0.0.1:PORT
          (--port-file, if given, is written before it)
  stderr  unless --quiet: the environment to export, then one line per request
          (for people, not a stable format); a reader that pipes stderr must drain it
  exit    runs until SIGTERM or SIGINT (Ctrl+C), then exits 0; a bad option, a bad
          script or a port that cannot be bound exits 2 with the reason on stderr

environment for `claude` or `coven-ls`:
  ANTHROPIC_BASE_URL=http://127.0.0.1:PORT   (the URL printed on stdout)
  ANTHROPIC_API_KEY=anything                 (must be set; it is not checked)
  CLAUDE_CONFIG_DIR=<a fresh empty directory>
  CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1

script (YAML or JSON):
  default: "text"                 # answer when no rule matches (or a list of blocks)
  rules:
    - match: "substring"          # or  regex: "python regex"; searched in the last user
                                  # message: prompt text or tool results, reminders removed
      times: 1                    # optional: answer at most this often (all clients count)
      latency: 0.5                # optional: seconds before the answer starts
      chunk_chars: 40             # optional: characters per streamed delta
      chunk_delay: 0.02           # optional: seconds between deltas
      drop_after: 3               # optional: break the connection off after 3 deltas
      error_after: 2              # optional, with error: an `error` event after 2 deltas
      subagent: true              # optional: only the CLI's subagents (false: only the main
                                  # conversation)
      usage: {input_tokens: 100, output_tokens: 20, cache_read_input_tokens: 1000,
              cache_creation_input_tokens: 50}   # optional: the usage reported
      reply:                      # blocks, streamed in order; a plain string is text
        - thinking: "..."
        - "Some text"             # or  text: "..."
        - tool_use: {name: Bash, input: {command: "ls"}}
    - match: "fail now"           # an HTTP error instead of a reply
      error: {status: 529, type: overloaded_error, message: "busy", should_retry: false}
                                  # also retry_after: SECONDS, retry_after_ms: MS (headers)

The full reference and a worked example are docs/testing.md and
docs/examples/fork-script.yaml in the coven-ls repository."""


def _env_hint(url: str) -> str:
    return (
        "point claude or coven-ls at it with:\n"
        f"  export ANTHROPIC_BASE_URL={url} ANTHROPIC_API_KEY=scripted-model-key\n"
        '  export CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 CLAUDE_CONFIG_DIR="$(mktemp -d)"'
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m coven_ls.testing``: serve a script until SIGTERM/SIGINT (see ``--help``)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--script",
        metavar="FILE",
        help=f"YAML or JSON script of rules (without one, every request gets {DEFAULT_TEXT!r})",
    )
    parser.add_argument(
        "--port",
        metavar="N",
        type=int,
        default=0,
        help="TCP port to listen on (default: 0, a free port chosen by the OS)",
    )
    parser.add_argument(
        "--host",
        metavar="ADDR",
        default="127.0.0.1",
        help="IPv4 loopback address to bind (default: 127.0.0.1; others are refused)",
    )
    parser.add_argument(
        "--port-file",
        metavar="PATH",
        help="once listening, write the port number and a newline to PATH (atomically)",
    )
    parser.add_argument("--quiet", action="store_true", help="write nothing to stderr but errors")
    args = parser.parse_args(argv)

    try:
        script = load_script(args.script) if args.script else ScriptedModel()
    except Exception as exc:  # a bad file is the user's to fix: say why, no traceback
        print(f"{PROG}: cannot use script {args.script}: {exc}", file=sys.stderr)
        return 2
    say = None if args.quiet else lambda line: print(line, file=sys.stderr, flush=True)
    try:
        # Rebuilt with the chosen address and logging; rules and default come from the script.
        model = ScriptedModel(script.rules, script.default, host=args.host, port=args.port, log=say)
    except ValueError as exc:
        parser.error(str(exc))
    done = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        url = model.start()
    except (OSError, OverflowError) as exc:
        print(f"{PROG}: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    try:
        if args.port_file:
            # Written whole then renamed, so a poller never reads a half-written number.
            tmp = Path(args.port_file + ".tmp")
            tmp.write_text(f"{model.port}\n", encoding="utf-8")
            tmp.replace(args.port_file)
        print(f"listening on {url}", flush=True)
        if say is not None:
            source = f"from {args.script}" if args.script else "(no script)"
            say(f"scripted model: {len(model.rules)} rules {source}; {_env_hint(url)}")
        while not done.wait(1.0):
            pass
    finally:
        model.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
