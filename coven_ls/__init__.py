"""coven-ls: a language server that hosts Claude Code sessions and forks them."""

__version__ = "0.1.0"
