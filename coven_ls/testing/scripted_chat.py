"""A scripted stand-in for the OpenAI Chat Completions API (``POST /v1/chat/completions``, ``GET
/v1/models``), for agents that speak it (opencode through ``@ai-sdk/openai-compatible``,
qwen-code through ``OPENAI_BASE_URL``), in the script vocabulary of
:mod:`coven_ls.testing.scripted_model`::

    with ScriptedChat() as model:
        model.on("hello", "Hi ", "there", chunk_chars=3)
        model.on("list files", ToolUse("bash", {"command": "ls"}), times=1)
        model.on(lambda r: r.last_is_tool_result, "done", usage=Usage(120, 8))
        env = {"OPENAI_BASE_URL": model.url + "/v1", "OPENAI_API_KEY": "any"}

The vocabulary is the Anthropic model's (:class:`Text`, :class:`Thinking`, :class:`ToolUse`,
:class:`HttpError`, :class:`Usage`, :class:`Reply` with ``latency``, ``chunk_chars``,
``chunk_delay``, ``drop_after``; :class:`Rule` with ``times``); what differs:

- A rule's string matches the text of the last ``user`` or ``tool`` message, so a rule can
  answer a tool's result (:attr:`ChatRequest.last_is_tool_result`, :attr:`ChatRequest.tool_result`).
- A :class:`ToolUse` is a ``function`` tool call; its ``input`` is sent as the JSON ``arguments``.
- :class:`Thinking` streams as ``delta.reasoning_content`` (the field OpenAI-compatible servers
  use for reasoning).
- ``stream: true`` gets ``chat.completion.chunk`` events (``data: {...}`` lines, the role first,
  text as ``delta.content`` pieces, tool calls as ``delta.tool_calls`` pieces), a chunk with the
  ``finish_reason`` (``stop`` or ``tool_calls``), a last chunk with ``usage`` when
  ``stream_options.include_usage`` is set, then ``data: [DONE]``. Otherwise one
  ``chat.completion`` object.
- An :class:`HttpError` is that HTTP status before any answer, with OpenAI's error body.
- ``drop_after`` ends the stream after that many content pieces without a finish or
  ``[DONE]``; ``error_after`` is not supported.
- ``GET /v1/models`` lists the ``models`` the server was made with.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterable
from typing import Any, cast
from urllib.parse import urlsplit

from .http_base import ClientGone, Rule, ScriptedServer
from .openai_base import OpenAIHandler, OpenAIRequest, chunks, content_text, error_body
from .replies import HttpError, Reply, Text, Thinking, ToolUse, Usage, reply

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_TEXT",
    "ChatRequest",
    "HttpError",
    "Reply",
    "Rule",
    "ScriptedChat",
    "Text",
    "Thinking",
    "ToolUse",
    "Usage",
    "reply",
]

DEFAULT_TEXT = "(scripted chat: no rule matched)"
DEFAULT_MODEL = "scripted-chat"
_PATHS = ("/v1/chat/completions", "/chat/completions")
_MODEL_PATHS = ("/v1/models", "/models")


class ChatRequest(OpenAIRequest):
    """One `POST /v1/chat/completions` as the model saw it."""

    @property
    def messages(self) -> list[dict[str, Any]]:
        items = self.body.get("messages")
        return [m for m in items if isinstance(m, dict)] if isinstance(items, list) else []

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True

    @property
    def last_is_tool_result(self) -> bool:
        """The last message is a tool's result (``role: tool``): the model is to go on with it."""
        messages = self.messages
        return bool(messages) and messages[-1].get("role") == "tool"

    @property
    def tool_result(self) -> str | None:
        """The content of the last message when it is a tool's result, else None."""
        return _content_text(self.messages[-1]) if self.last_is_tool_result else None

    @property
    def tool_names(self) -> list[str]:
        """The names of the function tools the request offers."""
        tools = self.body.get("tools")
        names: list[str] = []
        for tool in tools if isinstance(tools, list) else []:
            function = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(function, dict) and isinstance(function.get("name"), str):
                names.append(function["name"])
        return names

    @property
    def all_text(self) -> str:
        return "\n".join(_content_text(m) for m in self.messages)

    @property
    def system_text(self) -> str:
        """The text of its ``system`` messages: what tells an agent's side requests (opencode's
        title generator) from its turns, whose last user message may be the same."""
        return "\n".join(_content_text(m) for m in self.messages if m.get("role") == "system")


def _content_text(message: dict[str, Any]) -> str:
    return content_text(message.get("content"))


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") in ("user", "tool"):
            return _content_text(message)
    return ""


def _block_text(block: Any) -> str:
    if isinstance(block, (Text, Thinking)):
        return block.text
    return json.dumps(getattr(block, "input", {}))


class _Handler(OpenAIHandler):
    server_version = "ScriptedChat/1"

    @property
    def _model(self) -> ScriptedChat:
        return cast("ScriptedChat", self.server.model)

    def do_GET(self) -> None:
        model = self._model
        path = urlsplit(self.path).path.rstrip("/")
        model._note_other("GET", self.path)
        if path not in _MODEL_PATHS:
            self._send_json(404, error_body(f"GET {self.path}: no such endpoint", "not_found"))
            return
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "coven-ls"}
            for name in model.models
        ]
        self._send_json(200, {"object": "list", "data": data})

    def do_POST(self) -> None:
        read = self._read_json()
        if read is None:
            return
        arrived, body = read
        model = self._model
        if urlsplit(self.path).path.rstrip("/") not in _PATHS or not isinstance(body, dict):
            model._note_other("POST", self.path)
            self._send_json(404, error_body(f"POST {self.path}: no such endpoint", "not_found"))
            return
        raw_messages = body.get("messages")
        messages = (
            [m for m in raw_messages if isinstance(m, dict)]
            if isinstance(raw_messages, list)
            else []
        )
        req = ChatRequest(
            **self._record(arrived, body),
            last_user_text=_last_user_text(messages),
        )
        rep = model._choose(req)
        try:
            self._pause(rep.latency)
            if rep.error is not None:
                req.finished = time.monotonic()
                self._send_json(
                    rep.error.status, error_body(rep.error.message, rep.error.error_type)
                )
            elif req.stream:
                self._stream(req, rep)
            else:
                self._complete(req, rep)
        except (ClientGone, OSError):
            req.aborted = True
            self.close_connection = True
        finally:
            model._notify()

    # --- the answer, whole or streamed

    def _usage(self, req: ChatRequest, rep: Reply) -> dict[str, Any]:
        usage = rep.usage or Usage(
            input_tokens=max(len(json.dumps(req.body.get("messages", ""))) // 4, 1),
            output_tokens=max(sum(len(_block_text(b)) for b in rep.blocks) // 4, 1),
        )
        # OpenAI counts cached tokens inside prompt_tokens.
        prompt = usage.input_tokens + usage.cache_read_input_tokens
        return {
            "prompt_tokens": prompt,
            "completion_tokens": usage.output_tokens,
            "total_tokens": prompt + usage.output_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cache_read_input_tokens},
        }

    def _tool_call(self, block: ToolUse) -> dict[str, Any]:
        return {
            "id": block.id or f"call_scripted_{next(self._model._ids)}",
            "type": "function",
            "function": {"name": block.name, "arguments": json.dumps(block.input)},
        }

    def _complete(self, req: ChatRequest, rep: Reply) -> None:
        blocks = list(rep.blocks) or [Text(DEFAULT_TEXT)]
        text = "".join(b.text for b in blocks if isinstance(b, Text))
        thinking = "".join(b.text for b in blocks if isinstance(b, Thinking))
        calls = [self._tool_call(b) for b in blocks if isinstance(b, ToolUse)]
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if thinking:
            message["reasoning_content"] = thinking
        if calls:
            message["tool_calls"] = calls
        req.finished = time.monotonic()
        self._send_json(
            200,
            {
                "id": f"chatcmpl-scripted-{next(self._model._ids)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": req.model or DEFAULT_MODEL,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if calls else "stop",
                    }
                ],
                "usage": self._usage(req, rep),
            },
        )

    def _write(self, data: bytes, last: bool = False) -> None:
        end = b"0\r\n\r\n" if last else b""
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n" + end)
        self.wfile.flush()

    def _stream(self, req: ChatRequest, rep: Reply) -> None:
        ids = self._model._ids
        base = {
            "id": f"chatcmpl-scripted-{next(ids)}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": req.model or DEFAULT_MODEL,
        }

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return {**base, "choices": [choice], **extra}

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._event(chunk({"role": "assistant", "content": ""}))
        blocks: list[Any] = list(rep.blocks) or [Text(DEFAULT_TEXT)]
        pieces: list[dict[str, Any]] = []
        tool_index = 0
        for block in blocks:
            if isinstance(block, Text):
                pieces += [{"content": c} for c in chunks(block.text, rep.chunk_chars)]
            elif isinstance(block, Thinking):
                pieces += [{"reasoning_content": c} for c in chunks(block.text, rep.chunk_chars)]
            else:
                call = self._tool_call(block)
                head = {
                    "index": tool_index,
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": block.name, "arguments": ""},
                }
                pieces.append({"tool_calls": [head]})
                pieces += [
                    {"tool_calls": [{"index": tool_index, "function": {"arguments": c}}]}
                    for c in chunks(call["function"]["arguments"], rep.chunk_chars)
                ]
                tool_index += 1
        for sent, delta in enumerate(pieces, start=1):
            if sent > 1:
                self._pause(rep.chunk_delay)
            self._event(chunk(delta))
            if sent == rep.drop_after:
                self._drop(rep.chunk_delay)
        if rep.drop_after is not None:
            self._drop(rep.chunk_delay)
        self._event(chunk({}, "tool_calls" if tool_index else "stop"))
        options = req.body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            self._event({**base, "choices": [], "usage": self._usage(req, rep)})
        req.finished = time.monotonic()
        self._write(b"data: [DONE]\n\n", last=True)

    def _event(self, payload: dict[str, Any]) -> None:
        self._write(f"data: {json.dumps(payload)}\n\n".encode())

    def _drop(self, pause: float) -> None:
        """End the stream without a finish or ``[DONE]``: the chunked body ends, the
        connection closes."""
        self._pause(pause)
        with contextlib.suppress(OSError):
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        self.close_connection = True
        raise ClientGone


class ScriptedChat(ScriptedServer[ChatRequest]):
    """A Chat Completions API server that answers from rules; see the module docstring.
    `models` is what ``GET /v1/models`` lists."""

    handler = _Handler
    label = "scripted chat"
    default_text = DEFAULT_TEXT

    def __init__(
        self,
        rules: Iterable[Rule] = (),
        default: Reply | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        log: Callable[[str], None] | None = None,
        models: Iterable[str] = (DEFAULT_MODEL,),
    ) -> None:
        super().__init__(rules, default, host, port, log=log)
        self.models: list[str] = list(models) or [DEFAULT_MODEL]

    @property
    def base_url(self) -> str:
        """What an OpenAI-compatible client takes as its base URL (``OPENAI_BASE_URL``)."""
        return f"{self.url}/v1"
