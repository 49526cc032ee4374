"""What coven-ls ships for testing against it offline: a scripted Anthropic Messages API that the
real `claude` CLI can be pointed at (used by coven-ls' own tests, its demo and plugin authors),
a scripted Responses API for codex (:mod:`coven_ls.testing.scripted_responses`) and a scripted
Chat Completions API for OpenAI-compatible agents (:class:`ScriptedChat`).

Run it with ``python -m coven_ls.testing --script FILE`` (see ``--help``), or use
:mod:`coven_ls.testing.scripted_model` from Python; docs/testing.md documents both."""

from .scripted_chat import ScriptedChat

__all__ = ["ScriptedChat"]
