"""Tying an agent's process to ours: a small launcher that execs the agent's program (Claude
Code, codex) so that it dies with the server that started it, even when the server is killed with
SIGKILL and cannot clean up (Linux's PR_SET_PDEATHSIG)."""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

_LAUNCHER = """#!{python}
# Written by coven-ls: runs an agent's program (Claude Code, codex) so that it dies with the
# server that started it, even when that server is killed with SIGKILL and cannot clean up.
import ctypes, os, signal, sys
PR_SET_PDEATHSIG = 1
ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
if str(os.getppid()) != os.environ.get("COVEN_PARENT_PID"):
    sys.exit(1)  # the server died before the line above took effect
real = os.environ["COVEN_REAL_CLAUDE"]
os.execv(real, [real, *sys.argv[1:]])
"""


def launcher_path() -> str | None:
    """An executable that starts the CLI tied to this process (Linux only), or None."""
    if not sys.platform.startswith("linux"):
        return None
    text = _LAUNCHER.format(python=sys.executable)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"coven-ls-{os.getuid()}" / f"claude-{digest}"
    if not path.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(text)
        partial.chmod(0o700)
        partial.replace(path)  # atomic: another server may be writing the same file
    return str(path)
