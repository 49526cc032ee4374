"""Real git repositories for the tests, made one way, with the user's git configuration out of
reach: no ~/.gitconfig, no system config, no identity and no GIT_* variable of the machine's.
What works there works for anyone.

- In-process tests (and the servers they start, which inherit os.environ) take the
  `no_user_git_config` fixture (tests/conftest.py), which sets that environment for the test.
- Tests that start their processes with an environment of their own build it with
  :func:`git_env` and pass it to :func:`git` and :func:`make_repo` (``env=``).

The test's own commits carry a person's identity (:data:`IDENTITY`); the server must do
without one, and does."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

NOTES = "first line\n"
# The test's own commits carry a person's identity; the server must do without one.
IDENTITY = ("-c", "user.name=Test User", "-c", "user.email=test@example.com")


def git_env(tmp_path: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (os.environ) without GIT_* variables, with a HOME, an empty global git config and
    a TMPDIR under `tmp_path`: git as freshly installed, and nothing written outside it."""
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir(exist_ok=True)
    tmp.mkdir(exist_ok=True)
    config = tmp_path / "gitconfig"
    config.touch()
    env = {k: v for k, v in (os.environ if base is None else base).items() if k[:4] != "GIT_"}
    env.update(
        HOME=str(home),
        TMPDIR=str(tmp),
        GIT_CONFIG_GLOBAL=str(config),
        GIT_CONFIG_NOSYSTEM="1",
    )
    return env


def git(cwd: Path, *args: str, env: Mapping[str, str] | None = None, check: bool = True) -> str:
    """The test's own git in `cwd` (environment: `env`, else os.environ): a person's identity,
    and never a write to an index it only reads. A failure (with `check`) is an AssertionError
    with git's message; the output is text (bytes that are not UTF-8 kept as surrogates)."""
    done = subprocess.run(
        ["git", *IDENTITY, *args],
        cwd=cwd,
        env={**(os.environ if env is None else env), "GIT_OPTIONAL_LOCKS": "0"},
        capture_output=True,
        check=False,
    )
    if check and done.returncode:
        raise AssertionError(f"git {' '.join(args)}: {done.stderr.decode(errors='replace')}")
    return done.stdout.decode(errors="surrogateescape")


def init_repo(top: Path, env: Mapping[str, str] | None = None) -> Path:
    """`top` (made if missing) as an empty repository on `main`, no commit yet."""
    top.mkdir(parents=True, exist_ok=True)
    git(top, "init", "-q", "-b", "main", env=env)
    return top


def commit_all(top: Path, message: str, env: Mapping[str, str] | None = None) -> str:
    """Commit everything in the working tree (ignored files left out); the new commit's id."""
    git(top, "add", "-A", env=env)
    git(top, "commit", "-q", "--allow-empty", "-m", message, env=env)
    return git(top, "rev-parse", "HEAD", env=env).strip()


def make_repo(
    top: Path,
    files: Mapping[str, str | bytes] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    message: str = "initial",
) -> Path:
    """`top` (made if missing) as a repository on `main` with one commit of what it already
    holds and of `files` (relative path: text or bytes; folders made); without `files`,
    `notes.txt` holding NOTES. `files={}`: an empty commit of what is there."""
    init_repo(top, env)
    for name, content in ({"notes.txt": NOTES} if files is None else files).items():
        path = top / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    commit_all(top, message, env)
    return top


def append(line: str, path: str, done: str) -> dict[str, str]:
    """A Bash tool call's input that appends `line` to `path` (relative: in the child's own
    worktree) and echoes `done`, for the model's next rule to recognise its result."""
    return {"command": f"printf '{line}\\n' >> {path} && echo {done}"}


def status(top: Path, env: Mapping[str, str] | None = None) -> list[str]:
    """`git status --porcelain` of the user's working tree, a line per file."""
    return git(top, "status", "--porcelain", "--untracked-files=all", env=env).splitlines()
