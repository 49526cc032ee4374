"""A scripted stand-in for the OpenAI Responses API (``POST /v1/responses``), for the real
``codex`` binary, in the script vocabulary of :mod:`coven_ls.testing.scripted_model`::

    with ScriptedResponses() as model:
        model.on("hello", Thinking("let me see"), "Hi ", "there", chunk_chars=3)
        model.on("write", command("echo hi > f", escalate=True), times=1)
        model.on("patch", patch("*** Begin Patch\\n*** Add File: a.txt\\n+x\\n*** End Patch\\n"))
        model.on("boom", error=HttpError(500, "overloaded"))
        env = {**os.environ, **model.codex_env(tmp_path / "codex-home")}
        # codex app-server (or coven-ls with agent "codex") now talks to it

The vocabulary is the Anthropic model's (:class:`Text`, :class:`Thinking`, :class:`ToolUse`,
:class:`HttpError`, :class:`Usage`, :class:`Reply` with ``latency``, ``chunk_chars``,
``chunk_delay``, ``drop_after``; :class:`Rule` with ``times``); what differs:

- A rule's string matches the text of the last input item: the last user message, or the
  output of the tool call the model just made (``function_call_output`` /
  ``custom_tool_call_output``), so a rule can answer a tool's result.
- A command is ``ToolUse("exec_command", {"cmd": ...})`` (:func:`command` builds one;
  ``escalate=True`` asks to run outside the sandbox, which makes codex ask for approval under
  ``on-request``); a patch is ``ToolUse("apply_patch", {"input": PATCH})`` (:func:`patch`).
  Codex only offers ``apply_patch`` for a model in its catalog (``gpt-5.5`` is what
  :meth:`ScriptedResponses.codex_env` configures).
- :class:`Thinking` is a reasoning item whose summary streams as
  ``response.reasoning_summary_text.delta``.
- An :class:`HttpError` is that HTTP status before any stream, with OpenAI's error body.
- ``drop_after`` ends the stream without ``response.completed`` (codex: "stream disconnected
  before completion"); ``error_after`` is not supported.

Verified with codex-cli 0.163.0 (see the notes in docs/testing.md): codex sends only
``POST {base_url}/responses``, re-sends the whole conversation each time (``store: false``),
and its thread id in the ``thread-id`` header (:attr:`ResponsesRequest.thread_id`).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .http_base import ClientGone, Rule, ScriptedServer
from .openai_base import OpenAIHandler, OpenAIRequest, chunks, content_text, error_body
from .replies import HttpError, Reply, Text, Thinking, ToolUse, Usage, reply

__all__ = [
    "API_KEY_VARIABLE",
    "DEFAULT_MODEL",
    "DEFAULT_TEXT",
    "HttpError",
    "Reply",
    "ResponsesRequest",
    "Rule",
    "ScriptedResponses",
    "Text",
    "Thinking",
    "ToolUse",
    "Usage",
    "command",
    "patch",
    "reply",
]

DEFAULT_TEXT = "(scripted responses: no rule matched)"
# A slug from codex's bundled catalog: an unknown one loses the apply_patch tool.
DEFAULT_MODEL = "gpt-5.5"
# The variable codex reads the provider's key from (sent as `Authorization: Bearer`).
API_KEY_VARIABLE = "COVEN_SCRIPTED_API_KEY"


def command(
    cmd: str,
    *,
    escalate: bool = False,
    justification: str | None = None,
    workdir: str | None = None,
    yield_time_ms: int | None = None,
) -> ToolUse:
    """An `exec_command` call; `escalate`: ask to run it outside the sandbox (approval);
    `yield_time_ms`: how long codex waits for it before the model goes on with it still running
    (a background command)."""
    args: dict[str, Any] = {"cmd": cmd}
    if workdir is not None:
        args["workdir"] = workdir
    if yield_time_ms is not None:
        args["yield_time_ms"] = yield_time_ms
    if escalate:
        args["sandbox_permissions"] = "require_escalated"
        args["justification"] = justification or "the scripted model needs to write"
    return ToolUse("exec_command", args)


def patch(text: str) -> ToolUse:
    """An `apply_patch` call (codex's freeform patch format, `*** Begin Patch` ...)."""
    return ToolUse("apply_patch", {"input": text})


class ResponsesRequest(OpenAIRequest):
    """One `POST /v1/responses` as the model saw it."""

    @property
    def thread_id(self) -> str | None:
        return self.headers.get("thread-id")

    @property
    def input(self) -> list[dict[str, Any]]:
        items = self.body.get("input")
        return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

    @property
    def all_text(self) -> str:
        return "\n".join(_item_text(item) for item in self.input)


def _item_text(item: dict[str, Any]) -> str:
    kind = item.get("type")
    if kind in ("function_call_output", "custom_tool_call_output"):
        output = item.get("output")
        return output if isinstance(output, str) else json.dumps(output)
    return content_text(item.get("content"))


def _last_user_text(items: list[dict[str, Any]]) -> str:
    for item in reversed(items):
        if item.get("type") in ("function_call_output", "custom_tool_call_output"):
            return _item_text(item)
        if item.get("role") == "user":
            return _item_text(item)
    return ""


class _Handler(OpenAIHandler):
    server_version = "ScriptedResponses/1"

    def do_GET(self) -> None:
        self._send_json(404, error_body(f"GET {self.path}: no such endpoint", "not_found"))

    def do_POST(self) -> None:
        read = self._read_json()
        if read is None:
            return
        arrived, body = read
        if urlsplit(self.path).path.rstrip("/") != "/v1/responses" or not isinstance(body, dict):
            self._send_json(404, error_body(f"POST {self.path}: no such endpoint", "not_found"))
            return
        raw_items = body.get("input")
        items: list[Any] = raw_items if isinstance(raw_items, list) else []
        req = ResponsesRequest(
            **self._record(arrived, body),
            last_user_text=_last_user_text([i for i in items if isinstance(i, dict)]),
        )
        model = self.server.model
        rep = model._choose(req)
        try:
            self._pause(rep.latency)
            if rep.error is not None:
                req.finished = time.monotonic()
                self._send_json(
                    rep.error.status, error_body(rep.error.message, rep.error.error_type)
                )
            else:
                self._stream(req, rep)
        except (ClientGone, OSError):
            req.aborted = True
            self.close_connection = True
        finally:
            model._notify()

    def _event(self, payload: dict[str, Any], last: bool = False) -> None:
        frame = f"event: {payload['type']}\ndata: {json.dumps(payload)}\n\n".encode()
        end = b"0\r\n\r\n" if last else b""
        self.wfile.write(f"{len(frame):x}\r\n".encode() + frame + b"\r\n" + end)
        self.wfile.flush()

    def _stream(self, req: ResponsesRequest, rep: Reply) -> None:
        ids = self.server.model._ids
        response_id = f"resp_scripted_{next(ids)}"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._event({"type": "response.created", "response": {"id": response_id}})
        sent = 0
        first = True
        blocks: list[Any] = list(rep.blocks) or [Text(DEFAULT_TEXT)]
        for index, block in enumerate(blocks):
            n = next(ids)
            deltas: list[dict[str, Any]] = []
            if isinstance(block, Text):
                item_id = f"msg_scripted_{n}"
                done: dict[str, Any] = {
                    "type": "message",
                    "id": item_id,
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": block.text, "annotations": []}],
                }
                added = {**done, "status": "in_progress", "content": []}
                deltas = [
                    {
                        "type": "response.output_text.delta",
                        "item_id": item_id,
                        "output_index": index,
                        "content_index": 0,
                        "delta": c,
                    }
                    for c in chunks(block.text, rep.chunk_chars)
                ]
            elif isinstance(block, Thinking):
                item_id = f"rs_scripted_{n}"
                done = {
                    "type": "reasoning",
                    "id": item_id,
                    "summary": [{"type": "summary_text", "text": block.text}],
                }
                added = {**done, "summary": []}
                deltas = [
                    {
                        "type": "response.reasoning_summary_part.added",
                        "item_id": item_id,
                        "output_index": index,
                        "summary_index": 0,
                        "part": {"type": "summary_text", "text": ""},
                    }
                ] + [
                    {
                        "type": "response.reasoning_summary_text.delta",
                        "item_id": item_id,
                        "output_index": index,
                        "summary_index": 0,
                        "delta": c,
                    }
                    for c in chunks(block.text, rep.chunk_chars)
                ]
            elif block.name == "apply_patch":
                done = {
                    "type": "custom_tool_call",
                    "id": f"ctc_scripted_{n}",
                    "call_id": block.id or f"call_scripted_{n}",
                    "name": "apply_patch",
                    "input": str(block.input.get("input", "")),
                    "status": "completed",
                }
                added = done
            else:
                done = {
                    "type": "function_call",
                    "id": f"fc_scripted_{n}",
                    "call_id": block.id or f"call_scripted_{n}",
                    "name": block.name,
                    "arguments": json.dumps(block.input),
                    "status": "completed",
                }
                added = done
            self._event(
                {"type": "response.output_item.added", "output_index": index, "item": added}
            )
            for delta in deltas:
                if not first:
                    self._pause(rep.chunk_delay)
                first = False
                self._event(delta)
                if delta["type"].endswith(".delta"):
                    sent += 1
                    if sent == rep.drop_after:
                        self._drop(rep.chunk_delay)
            self._event({"type": "response.output_item.done", "output_index": index, "item": done})
        if rep.drop_after is not None:
            self._drop(rep.chunk_delay)
        usage = rep.usage or Usage(
            input_tokens=max(len(json.dumps(req.body.get("input", ""))) // 4, 1),
            output_tokens=max(sum(len(_block_text(b)) for b in rep.blocks) // 4, 1),
        )
        req.finished = time.monotonic()
        self._event(
            {
                "type": "response.completed",
                "response": {
                    "id": response_id,
                    "usage": {
                        # OpenAI counts cached tokens inside input_tokens.
                        "input_tokens": usage.input_tokens + usage.cache_read_input_tokens,
                        "input_tokens_details": {"cached_tokens": usage.cache_read_input_tokens},
                        "output_tokens": usage.output_tokens,
                        "output_tokens_details": {"reasoning_tokens": 0},
                        "total_tokens": usage.input_tokens
                        + usage.cache_read_input_tokens
                        + usage.output_tokens,
                    },
                },
            },
            last=True,
        )

    def _drop(self, pause: float) -> None:
        """End the stream without `response.completed`: the chunked body ends, the connection
        closes."""
        self._pause(pause)
        with contextlib.suppress(OSError):
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        self.close_connection = True
        raise ClientGone


def _block_text(block: Any) -> str:
    if isinstance(block, (Text, Thinking)):
        return block.text
    return json.dumps(getattr(block, "input", {}))


class ScriptedResponses(ScriptedServer[ResponsesRequest]):
    """A Responses API server that answers from rules; see the module docstring."""

    handler = _Handler
    label = "scripted responses"
    default_text = DEFAULT_TEXT

    def codex_config(self, model: str = DEFAULT_MODEL) -> str:
        """`config.toml` text that points codex at this server, offline: a provider of its own
        (OPENAI_BASE_URL is ignored by codex), no retries, no plugin or analytics traffic."""
        return (
            f'model = "{model}"\n'
            'model_provider = "scripted"\n'
            "[features]\n"
            "plugins = false\n"
            "apps = false\n"
            "remote_plugin = false\n"
            # Otherwise an unreachable model makes a turn retry forever.
            "unbounded_connection_retries = false\n"
            "[analytics]\n"
            "enabled = false\n"
            "[model_providers.scripted]\n"
            'name = "Scripted"\n'
            f'base_url = "{self.url}/v1"\n'
            'wire_api = "responses"\n'
            f'env_key = "{API_KEY_VARIABLE}"\n'
            "request_max_retries = 0\n"
            "stream_max_retries = 0\n"
        )

    def codex_env(
        self, codex_home: str | os.PathLike[str], model: str = DEFAULT_MODEL
    ) -> dict[str, str]:
        """Make `codex_home` (a CODEX_HOME with :meth:`codex_config`) and return the variables
        that send a codex started with them here; XDG_CACHE_HOME in it too, so that the helper
        folder a coven-ls makes for its codex goes with it (appserver.make_helper_aliases)."""
        home = Path(codex_home)
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(self.codex_config(model))
        return {
            "CODEX_HOME": str(home),
            API_KEY_VARIABLE: "scripted",
            "XDG_CACHE_HOME": str(home / "xdg-cache"),
        }
