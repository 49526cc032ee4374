"""Finding and checking an agent's binary (`claude`, `codex`): the same order and the same
errors for every agent, each naming the option, variable and wheel that agent uses."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .. import protocol


@dataclass(frozen=True)
class BinarySource:
    """Where one agent's binary may come from, in the order they are tried."""

    name: str
    """what the errors call it ("Claude Code CLI")"""
    command: str
    """its name on PATH"""
    option: str
    """the initializationOptions field that names it"""
    variable: str
    """the server's environment variable that names it"""
    wheel: str
    """where the bundled one comes from, as the user knows it"""
    bundled: Callable[[], Path | None]
    """the bundled binary, when its wheel is installed"""
    missing: str
    """the first sentence when none is found anywhere"""
    install_hint: str
    """what to install or set"""
    data: Mapping[str, str] = field(default_factory=dict)
    """added to every error's data (which agent it is)"""


def resolve(source: BinarySource, explicit: str | None) -> tuple[str, str]:
    """Pick the binary: (path, where the choice came from). Does not check that it runs."""
    if explicit:
        return explicit, f"initializationOptions.{source.option}"
    named = os.environ.get(source.variable)
    if named:
        return named, source.variable
    bundled = source.bundled()
    if bundled is not None:
        return str(bundled), source.wheel
    found = shutil.which(source.command)
    if found:
        return found, "PATH"
    raise protocol.CovenError(
        protocol.ErrorCode.ClaudeUnavailable,
        f"{source.missing} {source.install_hint}",
        dict(source.data) or None,
    )


def probe(source: BinarySource, path: str, where: str) -> str:
    """Run `<binary> --version` and return what it printed, or raise a CovenError that says what
    to install. Blocking: call it from a worker thread."""
    hint = source.install_hint
    data = {**source.data, source.option: path, "source": where}

    def unavailable(message: str) -> protocol.CovenError:
        return protocol.CovenError(protocol.ErrorCode.ClaudeUnavailable, message, data)

    resolved = shutil.which(path) if os.sep not in path else path
    # os.path, not pathlib: its checks are False for any path the OS refuses (too long, a NUL
    # in it), where pathlib's raise.
    if not resolved or not os.path.exists(resolved):
        raise unavailable(f"{source.name} not found at '{path}' (from {where}). {hint}")
    if not os.access(resolved, os.X_OK) or os.path.isdir(resolved):
        raise unavailable(f"'{resolved}' (from {where}) is not an executable file. {hint}")
    try:
        done = subprocess.run(
            [resolved, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise unavailable(f"'{resolved}' (from {where}) could not be run: {exc}. {hint}") from exc
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise unavailable(
            f"'{resolved} --version' (from {where}) failed with exit code {done.returncode}: "
            f"{detail[0]}. {hint}"
        )
    return done.stdout.strip()
