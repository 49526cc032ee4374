"""A real git repository for the clients' end-to-end tests of isolated fork children, with the
user's git configuration out of reach: the server (and the git it runs) gets a HOME, a global
config and a TMPDIR of the test's own, and no GIT_* variable of the machine's."""

from __future__ import annotations

import subprocess
from pathlib import Path

NOTES = "first line\n"
# The test's own commits carry a person's identity; the server must do without one.
IDENTITY = ("-c", "user.name=Test User", "-c", "user.email=test@example.com")


def git_env(tmp_path: Path, base: dict[str, str]) -> dict[str, str]:
    """`base` without GIT_* variables, with a HOME, an empty global git config and a TMPDIR
    under `tmp_path`."""
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir(exist_ok=True)
    tmp.mkdir(exist_ok=True)
    config = tmp_path / "gitconfig"
    config.touch()
    env = {k: v for k, v in base.items() if not k.startswith("GIT_")}
    env.update(
        HOME=str(home),
        TMPDIR=str(tmp),
        GIT_CONFIG_GLOBAL=str(config),
        GIT_CONFIG_NOSYSTEM="1",
    )
    return env


def git(top: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        ["git", *IDENTITY, *args],
        cwd=top,
        env={**env, "GIT_OPTIONAL_LOCKS": "0"},  # reading never rewrites the user's index
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


def make_repo(top: Path, env: dict[str, str]) -> Path:
    """A repository with one commit: `notes.txt` holding NOTES."""
    top.mkdir(parents=True, exist_ok=True)
    git(top, env, "init", "-q", "-b", "main")
    (top / "notes.txt").write_text(NOTES)
    git(top, env, "add", "-A")
    git(top, env, "commit", "-q", "-m", "initial")
    return top


def append(line: str, path: str, done: str) -> dict[str, str]:
    """A Bash tool call's input that appends `line` to `path` (relative: in the child's own
    worktree) and echoes `done`, for the model's next rule to recognise its result."""
    return {"command": f"printf '{line}\\n' >> {path} && echo {done}"}


def status(top: Path, env: dict[str, str]) -> list[str]:
    """`git status --porcelain` of the user's working tree, a line per file."""
    return git(top, env, "status", "--porcelain", "--untracked-files=all").splitlines()
