"""The Codex agent: threads of one shared `codex app-server` process (appserver.py), their
notifications translated into the session's messages (translate.py), priced from a dated table
(prices.py)."""

from .backend import CodexAgent, CodexBackend, probe_codex, resolve_codex

__all__ = ["CodexAgent", "CodexBackend", "probe_codex", "resolve_codex"]
