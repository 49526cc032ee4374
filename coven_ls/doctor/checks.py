"""`coven-ls doctor`: what a session needs, checked without starting one (and without a model
request anyone pays for), each finding with its fix. `--json` prints a DoctorReport
(docs/doctor.md); the exit code is 0 only when no finding is an error."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import msgspec

from .. import __version__, protocol
from ..agents.claude import INSTALL_HINT, probe_claude, resolve_claude
from ..core.store import SCHEMA_VERSION, database_path
from ..core.workspace import pool
from ..core.workspace.git import MIN_GIT_VERSION, git_version
from ..protocol.codec import parse
from ..protocol.doctor import DoctorReport, Finding
from ..protocol.types import AcpAgentConfig, InitializationOptions
from .acp_agents import check_agents
from .cluster import ClusterOptions, check_cluster, parse_cluster

PACKAGES = ("claude-agent-sdk", "pygls", "lsprotocol", "anyio", "msgspec", "agent-client-protocol")
AUTH_SECONDS = 20.0


def check(
    root: str,
    state_dir: str | None,
    claude: str | None,
    codex: str | None = None,
    agents: dict[str, AcpAgentConfig] | None = None,
    cluster: ClusterOptions | None = None,
) -> DoctorReport:
    findings = [python(), packages()]
    found = claude_cli(claude)
    findings.append(found[0])
    if found[1] is not None:
        findings.append(auth(found[1]))
        findings.append(claude_sandbox())
    codex_found, codex_path = codex_cli(codex)
    findings.append(codex_found)
    if codex_path is not None:
        findings.append(codex_sandbox(codex_path))
    findings.extend(check_agents(agents))
    findings.append(git())
    findings.extend(state(root, state_dir))
    if cluster is not None:
        findings.append(check_cluster(cluster))
    return DoctorReport(
        ok=all(f.status != "error" for f in findings), version=__version__, findings=findings
    )


def python() -> Finding:
    # Always fine when this runs: coven-ls installs on, and imports in, Python 3.10+ only.
    version = ".".join(map(str, sys.version_info[:3]))
    return Finding("python", "ok", "Python", f"Python {version} at {sys.executable}")


def packages() -> Finding:
    versions, missing = [], []
    for name in PACKAGES:
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            missing.append(name)
    found = f"coven-ls {__version__}; " + ", ".join(versions)
    if missing:
        return Finding(
            "packages", "error", "Python packages", found + f"; missing: {', '.join(missing)}",
            f"Reinstall coven-ls (pip install --force-reinstall coven-ls) to bring back "
            f"{', '.join(missing)}.",
        )  # fmt: skip
    return Finding("packages", "ok", "Python packages", found)


def claude_cli(configured: str | None) -> tuple[Finding, str | None]:
    """The CLI a session would use, and its path when it runs."""
    title = "Claude Code CLI"
    try:
        path, source = resolve_claude(configured)
        version = probe_claude(path, source)
    except protocol.CovenError as exc:
        return Finding("claude", "error", title, exc.message, INSTALL_HINT), None
    return Finding("claude", "ok", title, f"{version} at {path} (from {source})"), path


def codex_cli(configured: str | None) -> tuple[Finding, str | None]:
    """The codex binary Codex sessions would use (optional: Claude sessions do not need it), and
    whether its CODEX_HOME has a login or a model provider of its own; and its path when it
    runs."""
    from ..agents.codex.backend import INSTALL_HINT as CODEX_HINT
    from ..agents.codex.backend import probe_codex, resolve_codex

    title = "codex (for Codex sessions)"
    try:
        path, source = resolve_codex(configured)
        version = probe_codex(path, source)
    except protocol.CovenError as exc:
        return Finding("codex", "warning", title, exc.message, CODEX_HINT), None
    return _codex_home(title, f"{version} at {path} (from {source})"), shutil.which(path) or path


def _codex_home(title: str, version: str) -> Finding:
    home = Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")
    config = home / "config.toml"
    configured_provider = config.is_file() and "model_provider" in config.read_text(
        errors="replace"
    )
    if (home / "auth.json").is_file() or configured_provider or os.environ.get("OPENAI_API_KEY"):
        how = "a model provider in config.toml" if configured_provider else "a login or API key"
        return Finding("codex", "ok", title, f"{version}; {how}")
    return Finding(
        "codex", "warning", title,
        f"{version}, but {home} has no login (auth.json) and no model_provider in config.toml",
        "Run `codex login` (or set OPENAI_API_KEY), or configure a model provider in "
        f"{config}.",
    )  # fmt: skip


SANDBOX_SECONDS = 30.0
SANDBOX_MARK = "coven-sandbox-ok"
SANDBOX_TITLE = "Codex sandbox (a command run through it)"
SANDBOX_DOCS = "https://developers.openai.com/codex/concepts/sandboxing#prerequisites"
# What bubblewrap says when the kernel (or a container's seccomp profile, or Ubuntu's AppArmor
# rule) refuses it user namespaces; codex's own list, plus bwrap's other wordings.
USER_NAMESPACE_FAILURES = (
    "setting up uid map: Permission denied",
    "No permissions to create a new namespace",
    "loopback: Failed RTM_NEWADDR",
    "loopback: Failed RTM_NEWLINK",
    "Creating new namespace failed",
    "unshare failed",
    "needs access to create user namespaces",
)


def codex_sandbox(codex: str) -> Finding:
    """One harmless command (`echo`) through `codex sandbox`, the sandbox codex runs every
    command of a session in (bubblewrap on Linux, Seatbelt on macOS), with the PATH coven-ls
    starts the app-server with; no model request. Only a warning when it fails: Codex sessions
    are optional."""
    from ..agents.codex.appserver import make_helper_aliases

    helpers = make_helper_aliases(codex)
    env = dict(os.environ)
    if helpers is not None:
        env["PATH"] = os.pathsep.join(filter(None, [str(helpers), env.get("PATH")]))
    try:
        with tempfile.TemporaryDirectory(prefix="coven-doctor-") as cwd:
            done = subprocess.run(
                [codex, "sandbox", "--", "/bin/sh", "-c", f"echo {SANDBOX_MARK}"], cwd=cwd,
                env=env, capture_output=True, text=True, timeout=SANDBOX_SECONDS, check=False,
            )  # fmt: skip
    except subprocess.TimeoutExpired:
        return sandbox_finding(None, "", f"no answer in {SANDBOX_SECONDS:.0f} s")
    except OSError as exc:
        return sandbox_finding(None, "", str(exc))
    bwrap = shutil.which("bwrap", path=env.get("PATH"))
    linux = sys.platform.startswith("linux")
    return sandbox_finding(done.returncode, done.stdout, done.stderr, bwrap, linux)


def sandbox_finding(
    code: int | None, stdout: str, stderr: str, bwrap: str | None = None, linux: bool = True
) -> Finding:
    """What `codex sandbox -- echo …` said, as a finding with its fix. `bwrap`: the one on PATH,
    which codex uses (it looks there, and uses a copy of its own when there is none)."""
    if code == 0 and SANDBOX_MARK in stdout:
        found = "a command ran in codex's sandbox"
        if linux and bwrap is None:
            found += "; no bwrap on PATH, so codex uses its bundled bubblewrap"
        elif linux:
            found += f"; bubblewrap on PATH: {bwrap}"
        return Finding("codexSandbox", "ok", SANDBOX_TITLE, found)
    text = stderr + "\n" + stdout
    # Without codex's own noise: its warnings and a Rust backtrace after an `Error:`.
    lines = [line.strip() for line in text.split("Stack backtrace:")[0].splitlines()]
    lines = [line for line in lines if line and not line.startswith("WARNING: proceeding")]
    said = "; ".join(lines[-3:]) or f"exit code {code}"
    found = f"codex could not run a command in its sandbox: {said}"
    errors = [line for line in lines if line.startswith("Error:")]
    if errors:
        return Finding(
            "codexSandbox", "warning", SANDBOX_TITLE, f"`codex sandbox` failed: {errors[-1]}",
            "Fix what codex says (its configuration is $CODEX_HOME/config.toml, ~/.codex by "
            "default); Codex sessions start the same codex.",
        )  # fmt: skip
    if "execvp codex-linux-sandbox" in text:
        fix = (
            "codex runs each command as `bwrap … codex-linux-sandbox`, a name for its own binary "
            "that it puts on PATH from $CODEX_HOME/tmp, except when CODEX_HOME is in the "
            "temporary folder. Point COVEN_CODEX_PATH (initializationOptions.codexPath) at the "
            "codex binary itself rather than a wrapper script, or set CODEX_HOME outside "
            "/tmp and $TMPDIR."
        )
    elif any(failure in text for failure in USER_NAMESPACE_FAILURES):
        fix = (
            "bubblewrap needs unprivileged user namespaces. Allow them: `sudo sysctl -w "
            "kernel.unprivileged_userns_clone=1` (Debian), or on Ubuntu 24.04+ `sudo sysctl -w "
            "kernel.apparmor_restrict_unprivileged_userns=0` (or an AppArmor profile for bwrap); "
            "in a container, run it with `--security-opt seccomp=unconfined` (Docker). See "
            f"{SANDBOX_DOCS}."
        )
    else:
        fix = (
            "Codex sessions run every command in this sandbox. On Linux install bubblewrap "
            f"(`sudo apt install bubblewrap`, `sudo dnf install bubblewrap`); see {SANDBOX_DOCS}."
        )
    return Finding("codexSandbox", "warning", SANDBOX_TITLE, found, fix)


CLAUDE_SANDBOX_TITLE = "Claude Code's sandbox (fencing fork children)"


def claude_sandbox() -> Finding:
    """Whether worktree children of Claude can run fenced (`childSandbox`): bubblewrap and socat
    on Linux, able to make a sandbox here (user namespaces), Seatbelt on macOS. A warning when
    not: `auto` runs the children unfenced, `required` forks fail."""
    from ..agents.claude import fence

    problem = fence.support().problem
    if problem is None:
        if sys.platform == "darwin":
            return Finding("claudeSandbox", "ok", CLAUDE_SANDBOX_TITLE, "Seatbelt (sandbox-exec)")
        found = f"bubblewrap {shutil.which('bwrap')} and socat {shutil.which('socat')} work"
        return Finding("claudeSandbox", "ok", CLAUDE_SANDBOX_TITLE, found)
    found = (
        f"{problem}. Until it is fixed, worktree children of Claude run unfenced "
        "(childSandbox auto) and forks with childSandbox required fail"
    )
    if "not found on PATH" in problem:
        fix = (
            "Install them: `sudo apt install bubblewrap socat` (Debian, Ubuntu, and WSL 2 "
            "inside its distribution), `sudo dnf install bubblewrap socat` (Fedora). WSL 1 has no "
            "sandbox: move the distribution to WSL 2 (`wsl --set-version <distro> 2`)."
        )
    elif "user namespaces" in problem:
        fix = (
            "bubblewrap needs unprivileged user namespaces. Ubuntu 23.10+ restricts them with "
            "AppArmor: `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` (or an "
            "AppArmor profile for bwrap); Debian: `sudo sysctl -w "
            "kernel.unprivileged_userns_clone=1`. In a container without them (Docker's default "
            "seccomp profile), run it with `--security-opt seccomp=unconfined --security-opt "
            "apparmor=unconfined`, or set childSandbox to off there."
        )
    else:
        fix = "Claude Code's sandbox runs on Linux (bubblewrap, socat) and macOS only."
    return Finding("claudeSandbox", "warning", CLAUDE_SANDBOX_TITLE, found, fix)


def auth(claude: str) -> Finding:
    """Whether the CLI can authenticate, by its own `claude auth status` (no model request)."""
    title = "Claude Code authentication"
    try:
        done = subprocess.run(
            [claude, "auth", "status"], capture_output=True, text=True, timeout=AUTH_SECONDS,
            check=False,
        )  # fmt: skip
        status = json.loads(done.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        return Finding(
            "auth", "warning", title, f"`claude auth status` did not say ({exc})",
            "Check by hand: run `claude` once and log in, or set ANTHROPIC_API_KEY.",
        )  # fmt: skip
    if status.get("loggedIn"):
        how = status.get("apiKeySource") or status.get("authMethod") or "logged in"
        return Finding("auth", "ok", title, f"{how} ({status.get('apiProvider', 'firstParty')})")
    return Finding(
        "auth", "error", title,
        f"not logged in (config directory {status.get('configDirectory', '?')})",
        "Run `claude` once and log in with /login, or set ANTHROPIC_API_KEY in the environment "
        "coven-ls starts in (your editor's).",
    )  # fmt: skip


def git() -> Finding:
    title = "git (worktrees for fork children)"
    executable = shutil.which("git")
    minimum = ".".join(map(str, MIN_GIT_VERSION))
    if executable is None:
        return Finding(
            "git", "warning", title, "git is not installed",
            f"Install git {minimum} or newer; until then fork children share the parent's "
            "folder.",
        )  # fmt: skip
    version = git_version(executable)
    shown = ".".join(map(str, version)) if version else "an unknown version"
    if version is None or version < MIN_GIT_VERSION:
        return Finding(
            "git", "warning", title, f"git {shown} at {executable}",
            f"Install git {minimum} or newer; until then fork children share the parent's "
            "folder.",
        )  # fmt: skip
    return Finding("git", "ok", title, f"git {shown} at {executable}")


def state(root: str, state_dir: str | None) -> list[Finding]:
    """The state dir (can a database be made there) and the workspace's database."""
    path = database_path(root, state_dir)
    folder = path.parent
    title = "State folder"
    fix = (
        f"Make {folder} writable, or set initializationOptions.stateDir (--state-dir here) to a "
        "folder that is; until then sessions run but are not saved."
    )
    trouble = _unwritable(folder)
    if trouble is not None:
        return [Finding("stateDir", "error", title, f"{folder}: {trouble}", fix)]
    findings = [Finding("stateDir", "ok", title, f"{folder} (writable)")]
    findings.append(_database(path))
    findings.append(worktree_pool(state_dir))
    return findings


def worktree_pool(state_dir: str | None) -> Finding:
    """The spare worktrees kept for forks (initializationOptions.worktreePool), with their disk."""
    title = "Worktree pool"
    found = list(pool.usage(state_dir))
    if not found:
        return Finding("worktreePool", "ok", title, "no spare worktrees")
    total = sum(p.bytes for p in found)
    each = "; ".join(
        f"{p.repository}: {p.spares} spare(s), {p.bytes / 2**20:.1f} MiB in {p.folder}"
        for p in found
    )
    return Finding("worktreePool", "ok", title, f"{total / 2**20:.1f} MiB in all: {each}")


def _unwritable(folder: Path) -> str | None:
    """Why nothing can be written in `folder` (or where it would be made), or None."""
    existing = folder
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a folder"
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".coven-doctor-"):
            pass
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _database(path: Path) -> Finding:
    title = "Session database"
    if not path.exists():
        return Finding("database", "ok", title, f"{path} (not made yet: the first session will)")
    size = path.stat().st_size + _size(Path(f"{path}-wal"))
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        finally:
            db.close()
    except sqlite3.Error as exc:
        return Finding(
            "database", "warning", title, f"{path} cannot be read ({exc})",
            "The server will set it aside (renamed .corrupt-<time>) and start a new one; "
            "sessions in it will not be listed.",
        )  # fmt: skip
    version = int(row[0]) if row else 0
    found = f"{path}, schema {version}, {size / 2**20:.1f} MiB"
    holder = _holder(path)
    if holder is not None:
        found += f"; in use by coven-ls process {holder}"
    if version > SCHEMA_VERSION:
        return Finding(
            "database", "error", title, found + f" (this coven-ls knows up to {SCHEMA_VERSION})",
            "Upgrade coven-ls, or set initializationOptions.stateDir to use another folder.",
        )  # fmt: skip
    # Held by a running server is how it should be (the editor's own, say); only a second server
    # on the folder would be refused, and that one says so itself, naming this pid.
    return Finding("database", "ok", title, found)


def _holder(path: Path) -> int | None:
    """The pid of a running coven-ls that has the database, by its lock (never taken here)."""
    lock = Path(f"{path}.lock")
    if not lock.exists():
        return None
    try:
        import fcntl

        with lock.open("rb") as held:
            try:
                fcntl.flock(held.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                text = held.read(32).decode(errors="replace").strip()
                return int(text) if text.isdigit() else -1
            fcntl.flock(held.fileno(), fcntl.LOCK_UN)
    except (ImportError, OSError):
        return None
    return None


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


MARKS = {"ok": "✓", "warning": "!", "error": "✗"}


def render(report: DoctorReport, write: Callable[[str], object] = print) -> None:
    for f in report.findings:
        write(f"{MARKS[f.status]} {f.title}: {f.found}")
        if f.fix:
            write(f"    → {f.fix}")
    verdict = "ready" if report.ok else "not ready: fix the ✗ lines above"
    write(f"coven-ls {report.version}: {verdict}")


def parse_agents(text: str) -> dict[str, AcpAgentConfig]:
    """`--agents`: a JSON object as `initializationOptions.agents`."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise protocol.CovenError(
            protocol.ErrorCode.InvalidParams,
            f"--agents is not JSON ({exc}): give an object as initializationOptions.agents, "
            '\'{"opencode": {"command": ["opencode", "acp"]}}\'.',
        ) from exc
    options = parse("initializationOptions", InitializationOptions, {"agents": value})
    return options.agents or {}


def main(
    root: str,
    state_dir: str | None,
    claude: str | None,
    as_json: bool,
    codex: str | None = None,
    agents: str | None = None,
    cluster: str | None = None,
) -> int:
    try:
        configured = parse_agents(agents) if agents is not None else None
        on_cluster = parse_cluster(cluster) if cluster is not None else None
    except protocol.CovenError as exc:
        sys.stderr.write(f"coven-ls doctor: {exc.message}\n")
        return 2
    report = check(os.path.abspath(root), state_dir, claude, codex, configured, on_cluster)
    if as_json:
        sys.stdout.write(msgspec.json.encode(report).decode() + "\n")
    else:
        render(report)
    return 0 if report.ok else 1
