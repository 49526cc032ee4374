"""The token with which a terminal attaches to a running `coven-ls --tcp` server.

Never from the command line (any user sees a process's arguments): from `--token-file` (a file of
the user's alone), else `$COVEN_TOKEN`, else the file the server wrote when it made a token itself
(`tcp-PORT.token`, where it said when it started)."""

from __future__ import annotations

import os

from ..protocol.tokens import TOKEN_ENV, TokenError, read_token_file, token_file_path


class AttachError(Exception):
    """No token to attach with; the message says where to get one."""


def token_for(port: int, token_file: str | None, environ: dict[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    try:
        if token_file is not None:
            return read_token_file(token_file)
        if (from_env := env.get(TOKEN_ENV, "").strip()) != "":
            return from_env
        generated = token_file_path(port)
        if generated.exists():
            return read_token_file(str(generated))
    except TokenError as exc:
        raise AttachError(str(exc)) from None
    raise AttachError(
        f"no token for the server on port {port}: give --token-file PATH (the file the server "
        f"read with its own --token-file, or the one it named when it started) or set "
        f"${TOKEN_ENV}; a token is never taken from the command line"
    )
