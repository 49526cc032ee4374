"""Script files: a YAML or JSON list of rules (and a default) made into a :class:`ScriptedModel`
by :func:`load_script`; docs/testing.md has the format."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .model import Matcher, Rule, ScriptedModel
from .replies import Block, HttpError, Reply, Text, Thinking, ToolUse, Usage

_REPLY_KEYS = {"latency", "chunk_chars", "chunk_delay", "drop_after", "error_after"}
_ERROR_KEYS = {"status", "message", "type", "should_retry", "retry_after", "retry_after_ms"}
_USAGE_KEYS = {
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "cache_creation_1h_input_tokens",
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
        try:
            kw["usage"] = Usage(**usage)
        except ValueError as exc:
            raise ValueError(f"{where}: usage: {exc}") from None
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
