"""coven-ls: a language server that hosts coding-agent sessions (Claude Code, Codex) and forks
them."""

__version__ = "0.1.0"
