"""A `--tcp` server's token as both sides find it: the variable, the private file, and where a
server writes the token it made itself. The server (`lsp/auth.py`) and a terminal attaching to it
(`coven-ls chat --tcp`) read it the same way."""

from __future__ import annotations

import os
import stat
from pathlib import Path

TOKEN_ENV = "COVEN_TOKEN"


def default_state_dir() -> Path:
    """`$XDG_STATE_HOME/coven-ls`, else `~/.local/state/coven-ls`: the server's databases and
    worktrees, and the terminal's history."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local/state")
    return Path(base) / "coven-ls"


class TokenError(Exception):
    """The server cannot start with this token source; the message says what to do."""


def read_token_file(path: str) -> str:
    """A token from a file only its owner (this user) can read."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise TokenError(f"cannot read the token file {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if info.st_uid != os.getuid():
            raise TokenError(
                f"the token file {path} belongs to another user; use a file of your own, "
                f"readable by you alone (chmod 600 {path})"
            )
        if info.st_mode & 0o077:
            raise TokenError(
                f"the token file {path} can be read by others (mode "
                f"{stat.S_IMODE(info.st_mode):04o}); make it yours alone: chmod 600 {path}"
            )
        token = f.read().decode("utf-8", "replace").strip()
    if not token:
        raise TokenError(f"the token file {path} is empty")
    return token


def token_file_path(port: int) -> Path:
    """Where a generated token is written: the user's runtime folder (private, and gone at
    logout) when there is one, else the state folder."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    folder = Path(runtime) / "coven-ls" if runtime else default_state_dir()
    return folder / f"tcp-{port}.token"
