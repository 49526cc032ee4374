"""What Claude Code adds to a worktree fork child's first request, for the fork's estimate (the
child writes it to the prompt cache with its brief; core/fork/estimate.py). Measured with Claude
Code 2.1.332 on the scripted Messages API (`python bench/cache.py --isolation worktree --context
inherit --vary childSandbox=auto,off --dump DIR` writes the requests to compare); sizes in
characters, a token per four as the estimate counts:

- A child whose cwd is not its conversation's (a worktree child) gets a system message after
  its brief, "# Environment update": where it works now, and the git worktree's rules. 749
  characters and the two paths it names (the worktree, the parent's checkout).
- A fenced child's message starts with a "## Bash command sandbox" section: prose the same in
  every session (3,150 characters with the default network, `allowedDomains: ["*"]`) and the
  sandbox's configuration as JSON, the first 76 paths it denies or allows (the others
  "truncated for prompt size"): 1,625 characters of keys, quotes and the paths' own names, and
  the folders they are in, each as many times as `_SANDBOX_FOLDERS` says.
"""

from __future__ import annotations

import os

from .fence import temp_like

_MOVED_CHARS = 749
_SANDBOX_CHARS = 3150 + 1625
_SANDBOX_FOLDERS = {"config": 35, "home": 12, "temp": 5, "repository": 4, "cwd": 6}


def first_request_tokens(
    cwd: str, repository: str, fenced: bool, env: dict[str, str] | None = None
) -> int:
    """About how many tokens the CLI adds to the first request of a child working in `cwd`, a
    worktree of `repository`, fenced or not, with the CLI's environment `env` (the server's
    where it says nothing)."""
    chars = _MOVED_CHARS + len(cwd) + len(repository)
    if fenced:
        chars += _sandbox_chars(cwd, repository, {**os.environ, **(env or {})})
    return (chars + 3) // 4


def _sandbox_chars(cwd: str, repository: str, environ: dict[str, str]) -> int:
    """The sandbox section's length: measured 7,091 characters (this says 7,095) for a bench's
    child in /tmp/cache-bench-*/state/worktrees/..., 8,956 (8,953) for a test's in
    /tmp/pytest-of-*/..."""
    home = environ.get("HOME") or os.path.expanduser("~")
    folders = {
        "config": environ.get("CLAUDE_CONFIG_DIR") or os.path.join(home, ".claude"),
        "home": home,
        "temp": temp_like(),
        "repository": repository,
        "cwd": cwd,
    }
    return _SANDBOX_CHARS + sum(n * len(folders[name]) for name, n in _SANDBOX_FOLDERS.items())
