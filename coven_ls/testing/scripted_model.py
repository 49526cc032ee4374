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

This module is the package's front door: every name is defined in a module of its own job, and
imported from here as before:

- ``replies.py``: what a rule answers (:class:`Text`, :class:`Thinking`, :class:`ToolUse`,
  :class:`Reply`, :func:`reply`, :class:`Usage`, :class:`HttpError`)
- ``request.py``: a request as the rules see it (:class:`ModelRequest`, :func:`parse_request`)
- ``stream.py``: a reply shaped as the Messages API sends it
- ``server.py``: the HTTP server and its handler (JSON or a server-sent event stream)
- ``model.py``: :class:`ScriptedModel` and its rules (:class:`Rule`)
- ``prompt_cache.py``: what a request's prompt is charged, as the API's prompt caching does
  (:class:`PromptCache`)
- ``script.py``: script files (:func:`load_script`)
- ``cli.py``: ``python -m coven_ls.testing`` (:func:`main`)

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

import sys

from .cli import main
from .model import DEFAULT_TEXT, Matcher, Rule, ScriptedModel
from .prompt_cache import CacheCharge, PromptCache, shared_prefix_tokens
from .replies import Block, HttpError, Reply, ReplyOptions, Text, Thinking, ToolUse, Usage, reply
from .request import ModelRequest, parse_request
from .script import load_script

# bench/relay.py subclasses the request handler to time the first streamed token.
from .server import _Handler as _Handler

__all__ = [
    "DEFAULT_TEXT",
    "Block",
    "CacheCharge",
    "HttpError",
    "Matcher",
    "ModelRequest",
    "PromptCache",
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
    "parse_request",
    "reply",
    "shared_prefix_tokens",
]

if __name__ == "__main__":
    sys.exit(main())
