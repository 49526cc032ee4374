"""A fenced worktree child under Claude Code's own sandbox (bubblewrap and socat on Linux,
Seatbelt on macOS), turned on for its process alone through `--settings`. Checked with Claude
Code 2.1.332 against the scripted Messages API (issue #31):

- `failIfUnavailable`: a machine without the sandbox fails the command instead of running it
  unfenced; `allowUnsandboxedCommands: false`: no command leaves it (`dangerouslyDisableSandbox`
  otherwise escapes it in bypassPermissions).
- Its commands write only the cwd (the worktree, and the git folder a worktree shares with its
  parent, so that its commits work) and `allowWrite` (the child's own TMPDIR). In the shared git
  folder, `denyWrite` holds the parent's HEAD, index, config and branch (and their `.lock`
  names): existing files or lock names only, as a missing path becomes an unreadable stub.
  Narrower still, the `bwrap` first on the CLI's PATH mounts that git folder read-only but for
  the loose objects and the child's own branch ref and reflog (`COVEN_FENCE_GIT`, below): the
  parent's other branches, tags, reflogs and packs too stay as they are.
- The sandbox covers Bash only: the file tools (Write, Edit, ...) are held by a PreToolUse hook,
  which the CLI runs in every permission mode. A `permissions.deny` rule `Edit(//REPO/**)`
  would hold them too, but it also becomes a sandbox `denyWrite` of the shared git folder, which
  blocks the child's own commits.
- A user's `sandbox.filesystem.allowWrite` in their settings files is merged into the child's
  and widens it: such a settings file is not loaded for a fenced child (`--setting-sources`).
- The Bash tool's schema is the same fenced or not (its `dangerouslyDisableSandbox` parameter is
  always there), and so is the system prompt: a fenced child's first request repeats its
  parent's from the start and reads it from the prompt cache. What the sandbox adds comes after
  the child's brief: the CLI's system message telling the child where it works ("# Environment
  update", in every worktree child's first request) starts, in a fenced child's, with a
  "## Bash command sandbox" section (agents/claude/notes.py), written to the cache with the
  brief.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...core.agent import AgentSpec, Fence
from ...core.fork.fence import SandboxSupport

if TYPE_CHECKING:
    from claude_agent_sdk import HookContext, HookInput, HookJSONOutput

log = logging.getLogger(__name__)

INSTALL_HINT = (
    "Install bubblewrap and socat (Debian/Ubuntu: `sudo apt install bubblewrap socat`; Fedora: "
    "`sudo dnf install bubblewrap socat`)"
)
# The file tools and the input naming the file each writes.
WRITING_TOOLS = {
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "Write": "file_path",
    "NotebookEdit": "notebook_path",
}
SETTING_SOURCES = ("user", "project", "local")
# bubblewrap as Claude Code runs it: its own user, pid and network namespaces.
_PROBE = ("--ro-bind", "/", "/", "--dev", "/dev", "--unshare-all", "--die-with-parent", "true")


def support() -> SandboxSupport:
    """Whether Claude Code's sandbox can run here (blocking: it starts bubblewrap once)."""
    return SandboxSupport(
        by="claude", problem=_problem(shutil.which("bwrap"), shutil.which("socat"))
    )


@functools.lru_cache(maxsize=8)
def _problem(bwrap: str | None, socat: str | None) -> str | None:
    if sys.platform == "darwin":
        return None if Path("/usr/bin/sandbox-exec").exists() else "sandbox-exec is missing"
    if not sys.platform.startswith("linux"):
        return f"Claude Code's sandbox runs on Linux and macOS only, not {sys.platform}"
    missing = [name for name, path in (("bubblewrap (bwrap)", bwrap), ("socat", socat)) if not path]
    if missing:
        return f"{' and '.join(missing)} not found on PATH: {INSTALL_HINT}"
    assert bwrap is not None
    try:
        done = subprocess.run(
            [bwrap, *_PROBE], capture_output=True, timeout=10, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not be run: {exc}"
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        return (
            f"bubblewrap cannot make a sandbox here ({said[-1] if said else done.returncode}): "
            "user namespaces are off or restricted (a container without them, or AppArmor's "
            "kernel.apparmor_restrict_unprivileged_userns; see `coven-ls doctor`)"
        )
    return None


# The sandbox's network bridges are Unix sockets in the CLI's TMPDIR
# (`claude-http-<16 hex digits>.sock`), whose paths may not pass 107 bytes.
_SOCKET_NAME = len("/claude-socks-0123456789abcdef.sock")
_SOCKET_PATH_MAX = 107


def make_temp() -> str:
    """A fenced child's own temporary folder (its CLI's TMPDIR), short enough for the sandbox's
    sockets: in the server's temporary folder, else in /tmp when that one's path is too long (so
    not `AgentSpec.temp_dir`, deep in the state folder). Named after this server's process, so
    that those a killed server left are removed by the next. Blocking."""
    base = _temp_base()
    _sweep(base)
    return tempfile.mkdtemp(prefix=_temp_prefix(), dir=base)


def _temp_prefix() -> str:
    return f"coven-{os.getpid()}-"


def _temp_base() -> str:
    base = tempfile.gettempdir()
    if len(_temp_like(base)) + _SOCKET_NAME > _SOCKET_PATH_MAX and os.path.isdir("/tmp"):
        return "/tmp"
    return base


def _temp_like(base: str) -> str:
    return f"{base}/{_temp_prefix()}12345678"  # mkdtemp adds 8 characters


def temp_like() -> str:
    """A path as long as the temporary folder make_temp would make now (without making it)."""
    return _temp_like(_temp_base())


_swept: set[str] = set()


def _sweep(base: str) -> None:
    """Remove the temporary folders of fenced children whose server has ended (once a folder)."""
    if base in _swept:
        return
    _swept.add(base)
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if len(parts) != 3 or parts[0] != "coven" or not parts[1].isdigit():
            continue
        try:
            os.kill(int(parts[1]), 0)
            continue  # its server runs
        except ProcessLookupError:
            pass
        except OSError:
            continue  # another user's
        shutil.rmtree(os.path.join(base, name), ignore_errors=True)


_SOCAT_WRAPPER = """#!{python}
# Written by coven-ls: Claude Code's sandbox starts its network bridges with `socat`, which
# outlive a CLI that is killed; this one dies with the CLI that started it.
import ctypes, os, signal
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
os.execv({socat!r}, [{socat!r}, *__import__("sys").argv[1:]])
"""

# Claude Code's sandbox write-protects each git folder's `config.lock` in every command: an
# existing one is bound over itself (`--ro-bind L L`), a missing one gets an empty stub made in
# the real folder for as long as the command runs. The stub of one fenced child's command is
# an existing file to a sibling's sandbox being built meanwhile (they share the parent's git
# folder); removed before that sibling's bubblewrap mounts it, it failed the command ("bwrap:
# Can't find source path .../.git/config.lock", "Can't get type of source"). This bubblewrap
# binds a `*.lock` over itself only if it is there when it mounts it (`--ro-bind-try`): a lock
# that is gone has nothing in it to protect, and a new one cannot be renamed over the file it
# locks (that file is a mount point). Mounts the CLI passes in a file (`--args FD`, when there
# are too many for its command line) too.
#
# For a worktree child the CLI binds the whole git folder it shares with the parent writable
# (`--bind G G`), so that its commits work: the parent's other branches, tags, reflogs,
# packed-refs, MERGE_HEAD... too. With `COVEN_FENCE_GIT` set (a GitFence as JSON), that mount
# becomes a read-only one with only the object store and the folders of the child's own ref and
# reflog bound writable again, every other entry of those folders (a sibling's branch) read-only
# over itself: git cannot rename its lock over a mount point, nor remove one. In the object
# store the packs (most of the history) and `info` stay read-only: a commit writes loose objects.
# The CLI's later read-only mounts in the read-only part whose target is missing go (bubblewrap
# would make a stub there, in the real folder: the `config.lock` that failed the user's own `git
# config` while a command ran), and so do those of `/dev/null` over a lock file there (gone by
# the time bubblewrap mounts it, it could not make the stub: the command would fail).
_BWRAP_WRAPPER = """#!{python} -IS
# Written by coven-ls (agents/claude/fence.py): a `--ro-bind L L` of a `*.lock` file (which
# another command's sandbox may remove meanwhile) becomes `--ro-bind-try L L`; with
# COVEN_FENCE_GIT, the shared git folder's writable mount becomes a read-only one but for what the
# child's own commits write. Then the real bubblewrap runs.
import json, os, sys

MOUNTS = ("--bind", "--bind-try", "--ro-bind", "--ro-bind-try", "--dev-bind", "--dev-bind-try")
FENCE = json.loads(os.environ.get("COVEN_FENCE_GIT") or "null")
FENCED = []  # the git folder's mount was made read-only (mounts in a file count too)


def within(path, folder):
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def git_mounts(fence):
    out = ["--ro-bind", fence["common"], fence["common"]]
    for folder in fence["writable"]:
        out += ["--bind-try", folder, folder]
    for folder in fence["readonly"]:
        out += ["--ro-bind-try", folder, folder]
    for folder in fence["writable"]:
        own = [os.path.basename(p) for p in fence["own"] if os.path.dirname(p) == folder]
        if not own:
            continue
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            if name in own or name[: -len(".lock")] in own and name.endswith(".lock"):
                continue
            path = os.path.join(folder, name)
            out += ["--ro-bind-try", path, path]
    return out


def needless(option, source, dest):
    # A read-only mount in the part of the git folder already read-only.
    if not FENCED or not option.startswith("--ro-bind") or not within(dest, FENCE["common"]):
        return False
    writable = any(within(dest, folder) for folder in FENCE["writable"])
    if writable and not any(within(dest, folder) for folder in FENCE["readonly"]):
        return False
    if source == "/dev/null" and dest.endswith(".lock"):
        return True
    return not os.path.lexists(dest)


def rewrite(args):
    out, i = [], 0
    while i < len(args):
        if args[i] == "--":
            return out + args[i:]
        if args[i] in MOUNTS and i + 2 < len(args):
            option, source, dest = args[i], args[i + 1], args[i + 2]
            i += 3
            if FENCE and option == "--bind" and source == dest == FENCE["common"]:
                out += git_mounts(FENCE)
                FENCED.append(True)
                continue
            if needless(option, source, dest):
                continue
            if option == "--ro-bind" and source == dest and source.endswith(".lock"):
                option = "--ro-bind-try"
            out += [option, source, dest]
            continue
        if args[i] == "--setenv" and i + 2 < len(args):
            out += args[i : i + 3]
            i += 3
            continue
        if args[i] == "--args" and i + 1 < len(args) and args[i + 1].isdigit():
            out += ["--args", str(refile(int(args[i + 1])))]
            i += 2
            continue
        out.append(args[i])
        i += 1
    return out


def refile(fd):
    with os.fdopen(fd, "rb") as given:
        parts = given.read().split(b"\\0")
    if parts and parts[-1] == b"":
        parts.pop()
    names = rewrite([os.fsdecode(p) for p in parts])
    body = b"".join(os.fsencode(name) + b"\\0" for name in names)
    new = os.memfd_create("bwrap-args", 0)
    os.write(new, body)
    os.lseek(new, 0, os.SEEK_SET)
    os.set_inheritable(new, True)
    return new


if __name__ == "__main__":
    os.execv({bwrap!r}, [{bwrap!r}, *rewrite(sys.argv[1:])])
"""

FENCE_GIT_VARIABLE = "COVEN_FENCE_GIT"


def environment(fence: Fence) -> dict[str, str]:
    """What a fenced CLI's environment carries for its `bwrap` wrapper: the shared git folder's
    fence."""
    if fence.git is None:
        return {}
    plan = {
        "common": fence.git.common,
        "writable": fence.git.writable,
        "readonly": fence.git.readonly,
        "own": fence.git.own,
    }
    return {FENCE_GIT_VARIABLE: json.dumps(plan)}


def command_wrappers() -> str | None:
    """A folder for the front of a fenced CLI's PATH, holding the `socat` and `bwrap` its sandbox
    runs: a `socat` that dies with its parent, a `bwrap` that does not fail a command over
    another child's vanished lock file; None off Linux or without them. Blocking."""
    if not sys.platform.startswith("linux"):
        return None
    real = {name: shutil.which(name) for name in ("socat", "bwrap")}
    texts = {
        "socat": _SOCAT_WRAPPER.format(python=sys.executable, socat=real["socat"]),
        "bwrap": _BWRAP_WRAPPER.format(python=sys.executable, bwrap=real["bwrap"]),
    }
    texts = {name: text for name, text in texts.items() if real[name] is not None}
    if not texts:
        return None
    digest = hashlib.sha256("".join(sorted(texts.values())).encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / f"coven-ls-{os.getuid()}" / f"bin-{digest}"
    for name, text in texts.items():
        if (folder / name).exists():
            continue
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        # A name of its own: another server, or another child of this one, may be writing it.
        fd, partial = tempfile.mkstemp(prefix=f"{name}.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "w") as file:
            file.write(text)
        os.chmod(partial, 0o700)
        os.replace(partial, folder / name)  # atomic
    return str(folder)


def options(spec: AgentSpec, fence: Fence, temp: str) -> dict[str, Any]:
    """The CLI options of a fenced child: its settings, the settings files it may load and the
    hook holding its file tools; `temp` is its TMPDIR."""
    from claude_agent_sdk import HookMatcher

    filesystem: dict[str, Any] = {"allowWrite": [temp]}
    if fence.protected:
        filesystem["denyWrite"] = list(fence.protected)
    sandbox: dict[str, Any] = {
        "enabled": True,
        "failIfUnavailable": True,
        "allowUnsandboxedCommands": False,
        "filesystem": filesystem,
    }
    if fence.network == "full":
        sandbox["network"] = {"allowedDomains": ["*"]}
    else:
        # Each command has a network namespace of its own: its loopback is there whatever the
        # settings (what it starts itself, on COVEN_PORT, it reaches); every host is denied.
        sandbox["network"] = {"deniedDomains": ["*"]}
    settings = {"sandbox": sandbox}
    guard = _FileGuard(spec.cwd, temp, spec.read_only_roots)
    out: dict[str, Any] = {
        "settings": json.dumps(settings),
        "hooks": {"PreToolUse": [HookMatcher(matcher="|".join(WRITING_TOOLS), hooks=[guard])]},
    }
    sources = loadable_sources(spec.cwd, spec.env)
    if sources != list(SETTING_SOURCES):
        out["setting_sources"] = sources
    return out


def loadable_sources(cwd: str, env: dict[str, str]) -> list[str]:
    """The settings files a fenced child loads: each but those whose `allowWrite` would widen
    its fence (the CLI merges them into the child's)."""
    config = env.get("CLAUDE_CONFIG_DIR") or os.environ.get("CLAUDE_CONFIG_DIR")
    files = {
        "user": Path(config or os.path.expanduser("~/.claude")) / "settings.json",
        "project": Path(cwd) / ".claude" / "settings.json",
        "local": Path(cwd) / ".claude" / "settings.local.json",
    }
    sources = []
    for source in SETTING_SOURCES:
        widening = _allow_write(files[source])
        if widening:
            log.warning(
                "%s widens the sandbox's writable folders (%s): a fenced child does not load it",
                files[source],
                ", ".join(widening),
            )
        else:
            sources.append(source)
    return sources


def _allow_write(file: Path) -> list[str]:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []  # none, or one the CLI itself will complain about
    sandbox = data.get("sandbox") if isinstance(data, dict) else None
    filesystem = sandbox.get("filesystem") if isinstance(sandbox, dict) else None
    allow = filesystem.get("allowWrite") if isinstance(filesystem, dict) else None
    return [str(p) for p in allow] if isinstance(allow, list) else []


class _FileGuard:
    """A PreToolUse hook: a file tool's write under a read-only root (the parent's checkout) is
    refused unless it lands in the child's own worktree or temporary folder. Paths are resolved
    (symbolic links followed), so a link out of the worktree does not lead the write out."""

    def __init__(self, cwd: str, temp: str | None, roots: tuple[str, ...]) -> None:
        self._mine = [os.path.realpath(p) for p in (cwd, temp) if p]
        self._roots = [os.path.realpath(r) for r in roots]
        self._cwd = cwd

    async def __call__(
        self, data: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        tool_input: Any = data.get("tool_input") or {}
        key = WRITING_TOOLS.get(str(data.get("tool_name")))
        value = tool_input.get(key) if key and isinstance(tool_input, dict) else None
        if not isinstance(value, str):
            return {}
        target = os.path.realpath(os.path.join(self._cwd, value))
        if any(_within(target, m) for m in self._mine):
            return {}
        root = next((r for r in self._roots if _within(target, r)), None)
        if root is None:
            return {}
        return {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": (
                    f"Denied by coven-ls's fence: {value} is in {root}, the checkout of the "
                    f"conversation you were forked from; you work in your own worktree, "
                    f"{self._cwd}. Write there instead (your changes are merged back)."
                ),
            }
        }


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)
