"""The HTTP side of the scripted model: its handler on the shared scripted server
(http_base.py), which answers ``POST /v1/messages`` as JSON or as a server-sent event stream,
breaks a stream off or ends it with an error when the reply says so, and records every other
request."""

from __future__ import annotations

import contextlib
import io
import json
import socket
import struct
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from .http_base import ClientGone as _ClientGone
from .http_base import ScriptedHandler, ScriptedServer
from .prompt_cache import CacheError, PromptCache, prompt_tokens
from .replies import Reply, Text, Thinking, Usage
from .request import ModelRequest, parse_request
from .stream import (
    _charged_usage,
    _chunks,
    _error_body,
    _full_block,
    _mark_finished,
    _resolve_blocks,
    _signature,
)


class _Handler(ScriptedHandler):
    server_version = "ScriptedModel/1"

    @property
    def model(self) -> ScriptedServer[ModelRequest]:
        return self.server.model

    @property
    def cache(self) -> PromptCache:
        cache = getattr(self.model, "cache", None)
        if not isinstance(cache, PromptCache):
            raise TypeError(f"{type(self.model).__name__} has no prompt cache")
        return cache

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
            self._send_json(200, {"input_tokens": prompt_tokens(body)})
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
            if rep.error is None or (rep.error_after is not None and body.get("stream")):
                # Answered (its stream begun): the prompt is read from and written to the cache.
                try:
                    req.cache = self.cache.charge(body)
                except CacheError as exc:
                    self._send_json(400, _error_body("invalid_request_error", str(exc)), req=req)
                    model._notify()
                    return
                req.usage = _charged_usage(rep, req.cache)
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
            "usage": self._usage(req).as_dict(),
        }

    @staticmethod
    def _usage(req: ModelRequest) -> Usage:
        if req.usage is None:
            raise RuntimeError("a reply is written only once the prompt cache charged it")
        return req.usage

    def _stream(self, req: ModelRequest, rep: Reply) -> None:
        blocks = _resolve_blocks(rep)
        msg_id = f"msg_scripted_{next(self.model._ids)}"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("request-id", msg_id.replace("msg_", "req_"))
        self.end_headers()
        usage = self._usage(req)
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
