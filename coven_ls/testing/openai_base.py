"""What the two scripted OpenAI APIs share (the Responses API for codex,
:mod:`~coven_ls.testing.scripted_responses`; Chat Completions for OpenAI-compatible agents,
:mod:`~coven_ls.testing.scripted_chat`): the record of a request, OpenAI's error body, and a
handler that reads a JSON body and answers JSON."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from .http_base import ScriptedHandler


@dataclass
class OpenAIRequest:
    """One POST to an OpenAI API as the model saw it; each API adds properties reading `body`."""

    time: float
    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    model: str
    last_user_text: str
    rule_index: int | None = None
    finished: float | None = None
    aborted: bool = False
    # Rule.matches looks at this (the Anthropic model's subagents); OpenAI's APIs have none.
    is_subagent: bool = False


def content_text(content: Any) -> str:
    """A message's or an input item's `content` as text: the string itself, or its parts'
    `text`s one a line (both OpenAI APIs take either form)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def error_body(message: str, error_type: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "code": None, "param": None}}


def chunks(text: str, size: int) -> list[str]:
    """`text` in pieces of `size` characters, as a stream sends it (one empty piece for none)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


class OpenAIHandler(ScriptedHandler):
    def _send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _read_json(self) -> tuple[float, Any] | None:
        """When the request arrived and its JSON body; None once a bad body was answered 400."""
        arrived = time.monotonic()
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return arrived, json.loads(raw or b"{}")
        except ValueError as exc:
            self._send_json(400, error_body(f"bad JSON body: {exc}", "invalid_request_error"))
            return None

    def _record(self, arrived: float, body: dict[str, Any]) -> dict[str, Any]:
        """The fields of this request's record every API fills the same way."""
        return {
            "time": arrived,
            "path": self.path,
            "body": body,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "model": str(body.get("model") or ""),
        }
