"""A worktree setup: a shell command run in each new child's worktree, after the
`.worktreeinclude` copies and before the child starts (install dependencies, make a venv).

Where it comes from (`resolve`): the `worktreeSetup` option (the user's own setting, run as is),
or with `"auto"` (the default) the setup the user already wrote for another tool, when the
repository has one: `.cursor/worktrees.json` (`setup-worktree-unix`, else `setup-worktree`: a list
of commands or a script's path), then `conductor.json` (`scripts.setup`), then the Codex app's
local environment, `.codex/environments/environment.toml` (`[setup] script`, or this platform's
`[setup.linux]`/`[setup.darwin]` one). `""` turns setup off.

A setup found in the repository runs without any tool-permission prompt, so it needs the user's
yes first, for that exact setup (`Approvals`: per repository and content, the script a file names
included), asked again when it changes.

`run` runs it with `sh -c` in its own process group, streams its output, and kills the whole group
on a timeout or a cancel.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process

from ...protocol.methods import WORKTREE_SETUP_TOOL
from ...protocol.types import SetupSource

CURSOR_FILE = ".cursor/worktrees.json"
CONDUCTOR_FILE = "conductor.json"
CODEX_FILE = ".codex/environments/environment.toml"
# The Codex app's platform sections (`[setup.darwin]`, ...) by Python's sys.platform.
_CODEX_PLATFORMS = {"linux": "linux", "darwin": "darwin", "win32": "windows"}
APPROVALS_FILE = "worktree-setup-approvals.json"

TAIL_CHARS = 2000
"""how much of a failed setup's output goes into its task's error"""

# The question the editor is asked, as a tool permission request: clients show the command.
APPROVAL_TOOL = WORKTREE_SETUP_TOOL


class SetupFileError(Exception):
    """A setup file of the repository cannot be used (bad JSON, a script that is not there)."""


@dataclass(frozen=True)
class Setup:
    command: str
    """what `sh -c` runs, in the worktree"""
    source: SetupSource
    file: str | None = None
    """for a setup from the repository: the file it came from, relative to its top"""
    script: str | None = None
    """the script the file names, relative to the top (its content is part of the approval)"""
    content: str = ""
    """what the user approves: the command and the script's text"""

    @property
    def from_repository(self) -> bool:
        return self.source != "option"

    def tool_env(self, root: str, worktree: str, port: int) -> dict[str, str]:
        """The variables the tool this setup was written for gives its own setups."""
        return tool_env(self.source, root, worktree, port)

    def describe(self) -> str:
        where = f" (from {self.file})" if self.file else " (the worktreeSetup setting)"
        return f"{self.command}{where}"


def tool_env(source: str, root: str, worktree: str, port: int) -> dict[str, str]:
    """The variables the tool a setup of this source was written for gives its own setups (and
    its agents: a resumed child gets them again, with its new port)."""
    if source == "cursor":
        return {"ROOT_WORKTREE_PATH": root}
    if source == "conductor":
        return {
            "CONDUCTOR_ROOT_PATH": root,
            "CONDUCTOR_WORKSPACE_PATH": worktree,
            "CONDUCTOR_WORKSPACE_NAME": os.path.basename(worktree),
            "CONDUCTOR_PORT": str(port),
        }
    if source == "codex":
        return {"CODEX_SOURCE_TREE_PATH": root, "CODEX_WORKTREE_PATH": worktree}
    return {}


def resolve(value: str | None, top: Path) -> Setup | None:
    """The setup for a repository: `value` is the `worktreeSetup` option (None: `auto`).
    Raises SetupFileError for a setup file that cannot be read."""
    if value is None or value == "auto":
        return _cursor(top) or _conductor(top) or _codex(top)
    if not value.strip():
        return None
    return Setup(command=value, source="option", content=value)


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise SetupFileError(f"{path.name} could not be read as JSON: {exc}") from exc


def _cursor(top: Path) -> Setup | None:
    path = top / CURSOR_FILE
    if not path.is_file():
        return None
    data = _load(path)
    if not isinstance(data, dict):
        raise SetupFileError(f"{CURSOR_FILE} is not a JSON object")
    value = data.get("setup-worktree-unix", data.get("setup-worktree"))
    if value is None:
        return None
    if isinstance(value, list) and all(isinstance(c, str) for c in value):
        # Cursor runs the commands one after the other and stops at a failing one.
        command = "set -e\n" + "\n".join(value)
        return Setup(command=command, source="cursor", file=CURSOR_FILE, content=command)
    if isinstance(value, str) and value.strip():
        return _script(top, path.parent, value, "cursor", CURSOR_FILE)
    raise SetupFileError(
        f"{CURSOR_FILE}: setup-worktree must be a list of commands or a script's path"
    )


def _script(top: Path, beside: Path, name: str, source: SetupSource, file: str) -> Setup:
    """A setup that names a script (relative to the file naming it, else to the top)."""
    for base in (beside, top):
        script = (base / name).resolve()
        if script.is_file() and script.is_relative_to(top.resolve()):
            relative = script.relative_to(top.resolve()).as_posix()
            text = script.read_text(encoding="utf-8", errors="replace")
            quoted = "'" + relative.replace("'", "'\\''") + "'"
            # Its own #! line decides when it is executable; otherwise sh reads it.
            command = f"./{quoted}" if os.access(script, os.X_OK) else f"sh {quoted}"
            return Setup(
                command=command,
                source=source,
                file=file,
                script=relative,
                content=f"{command}\n--- {relative} ---\n{text}",
            )
    raise SetupFileError(f"{file} names the script {name}, which is not in the repository")


def _conductor(top: Path) -> Setup | None:
    path = top / CONDUCTOR_FILE
    if not path.is_file():
        return None
    data = _load(path)
    scripts = data.get("scripts") if isinstance(data, dict) else None
    value = scripts.get("setup") if isinstance(scripts, dict) else None
    if value is None:
        return None
    if not isinstance(value, str):
        raise SetupFileError(f"{CONDUCTOR_FILE}: scripts.setup must be a command (a string)")
    if not value.strip():
        return None
    return Setup(command=value, source="conductor", file=CONDUCTOR_FILE, content=value)


def _load_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib

        try:
            return tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise SetupFileError(f"{CODEX_FILE} could not be read as TOML: {exc}") from exc
    raise SetupFileError(f"reading {CODEX_FILE} needs Python 3.11 or later (its tomllib)")


def _codex(top: Path) -> Setup | None:
    """The Codex app's local environment: `version = 1`, `name`, and a `[setup]` table whose
    `script` runs in each new worktree (a `[setup.linux]` or `[setup.darwin]` table's `script`
    overrides it on that platform), with CODEX_SOURCE_TREE_PATH and CODEX_WORKTREE_PATH."""
    path = top / CODEX_FILE
    if not path.is_file():
        return None
    data = _load_toml(path)
    version = data.get("version", 1)
    if version != 1:
        raise SetupFileError(
            f"{CODEX_FILE} is version {version!r}; coven-ls reads version 1 (the Codex app's): "
            "set worktreeSetup to the setup's command instead"
        )
    setup = data.get("setup")
    if setup is None:
        return None
    if not isinstance(setup, dict):
        raise SetupFileError(f"{CODEX_FILE}: setup must be a table ([setup] with a script)")
    own = setup.get(_CODEX_PLATFORMS.get(sys.platform, ""))
    script = own.get("script") if isinstance(own, dict) and "script" in own else setup.get("script")
    if script is None:
        return None
    if not isinstance(script, str):
        raise SetupFileError(f"{CODEX_FILE}: setup.script must be a script (a string)")
    if not script.strip():
        return None
    return Setup(command=script, source="codex", file=CODEX_FILE, content=script)


# --- the user's approvals -----------------------------------------------------------------------


class Approvals:
    """The user's answers about repository setups, in the state folder: one per repository and
    setup content, so that a changed setup is asked about again."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / APPROVALS_FILE

    @staticmethod
    def key(repository: str, setup: Setup) -> str:
        text = "\0".join(
            (os.path.realpath(repository), setup.source, setup.file or "", setup.content)
        )
        return hashlib.sha256(text.encode()).hexdigest()

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            return {}  # unreadable: asked again, and rewritten with the answer
        return data if isinstance(data, dict) else {}

    def answer(self, repository: str, setup: Setup) -> bool | None:
        """The remembered answer: True allowed, False refused, None never asked."""
        row = self._read().get(self.key(repository, setup))
        return row.get("allow") if isinstance(row, dict) else None

    def remember(self, repository: str, setup: Setup, allow: bool) -> None:
        data = self._read()
        data[self.key(repository, setup)] = {
            "allow": allow,
            "repository": os.path.realpath(repository),
            "source": setup.source,
            "file": setup.file,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        scratch = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        scratch.write_text(json.dumps(data, indent=1), encoding="utf-8")
        os.replace(scratch, self.path)


# --- running it ---------------------------------------------------------------------------------


@dataclass
class SetupRun:
    ok: bool
    exit_code: int | None
    duration_ms: int
    tail: str
    """the end of its output"""
    error: str | None = None
    """why it failed, in a sentence (with the tail)"""
    output: list[str] = field(default_factory=list)


async def run(
    setup: Setup,
    cwd: str,
    env: Mapping[str, str],
    limit_seconds: float,
    on_output: Callable[[str], None],
    on_start: Callable[[int], None] | None = None,
) -> SetupRun:
    """Run the setup in `cwd` with these variables added to the server's; its output (stdout
    and stderr together) goes to `on_output` as it comes. Past `limit_seconds` (0: none), or
    when cancelled, its whole process group is killed."""
    started = time.monotonic()
    tail = ""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    process: Process = await anyio.open_process(
        ["sh", "-c", setup.command],
        cwd=cwd,
        env={**os.environ, **env},
        stdin=None,
        stderr=-2,  # subprocess.STDOUT: one stream, in the order it was written
        start_new_session=True,  # its own group: a timeout kills what it started too
    )
    timed_out = False
    try:
        if on_start is not None:
            on_start(process.pid)  # its process group's id too
        with anyio.move_on_after(limit_seconds if limit_seconds > 0 else None) as scope:
            assert process.stdout is not None
            async for chunk in process.stdout:
                text = decoder.decode(chunk)
                if text:
                    tail = (tail + text)[-TAIL_CHARS:]
                    on_output(text)
            await process.wait()
        timed_out = scope.cancelled_caught
    finally:
        with anyio.CancelScope(shield=True):
            # Whatever it left behind goes too (a server it started in the background): nothing
            # of a setup outlives it.
            _kill_group(process.pid)
            await process.aclose()  # waits for it, and closes its pipes
    code = process.returncode
    duration = int((time.monotonic() - started) * 1000)
    if timed_out:
        error = f"the worktree setup did not finish in {limit_seconds:g} seconds and was stopped"
    elif code != 0:
        error = f"the worktree setup failed (exit code {code})"
    else:
        return SetupRun(True, code, duration, tail)
    shown = tail.strip()
    return SetupRun(
        False,
        code,
        duration,
        tail,
        f"{error}: {setup.describe()}" + (f"\n{shown}" if shown else ""),
    )


def stop_leftover(pgid: int, worktree: str) -> bool:
    """Kill what is left of a setup a killed server started in `worktree` (process group
    `pgid`), when that group still runs there; False when there was nothing of it. Linux only
    (elsewhere the group cannot be told from another that took its number)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return False
    folder = os.path.realpath(worktree)
    ours = False
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:  # fields after the name: state, ppid, pgrp, ...
                continue
            cwd = os.path.realpath(os.readlink(entry / "cwd"))
        except (OSError, ValueError, IndexError):
            continue
        if cwd == folder or cwd.startswith(folder + os.sep):
            ours = True
            break
    if ours:
        _kill_group(pgid)
    return ours


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # already gone
