"""`coven-ls doctor`, run as a user would (a subprocess), in set-ups that work and that don't:
each gives the finding that names the trouble, its fix, and the exit code."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from coven_ls.doctor.checks import sandbox_finding
from coven_ls.protocol.doctor import DoctorReport, Finding
from coven_ls.testing.scripted_model import ScriptedModel

from ..gitrepo import init_repo, make_repo
from ..harness import Coven


def doctor(
    tmp_path: Path, model: ScriptedModel, *args: str, env: dict[str, str] | None = None
) -> tuple[int, dict[str, Finding], DoctorReport]:
    """Run `coven-ls doctor --json` in a clean home with the scripted model's key."""
    base = {**model.cli_environ(tmp_path / "claude-config"), "HOME": str(tmp_path / "home")}
    base["XDG_STATE_HOME"] = str(tmp_path / "state")
    done = subprocess.run(
        [sys.executable, "-m", "coven_ls", "doctor", "--json", "--root", str(tmp_path), *args],
        env={**base, **(env or {})}, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    report = msgspec.json.decode(done.stdout, type=DoctorReport)
    assert done.returncode == (0 if report.ok else 1), done.stderr
    return done.returncode, {f.id: f for f in report.findings}, report


def codex_home(tmp_path: Path) -> dict[str, str]:
    """A CODEX_HOME whose config names a model provider (as ScriptedResponses.codex_env makes)."""
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        'model_provider = "scripted"\n[model_providers.scripted]\nname = "Scripted"\n'
        'base_url = "http://127.0.0.1:9/v1"\nenv_key = "SCRIPTED_KEY"\nwire_api = "responses"\n'
    )
    return {"CODEX_HOME": str(home)}


def test_a_working_set_up_is_ready(tmp_path: Path, model: ScriptedModel) -> None:
    code, found, report = doctor(tmp_path, model, env=codex_home(tmp_path))
    assert code == 0 and report.ok
    assert set(found) == {
        "python", "packages", "claude", "auth", "claudeSandbox", "codex", "codexSandbox", "git",
        "stateDir", "database", "worktreePool",
    }  # fmt: skip
    assert "codex-cli" in found["codex"].found and "model provider" in found["codex"].found
    assert found["worktreePool"].found == "no spare worktrees"
    assert all(f.status == "ok" and f.fix is None for f in found.values())
    assert "ANTHROPIC_API_KEY" in found["auth"].found  # the CLI's own `auth status` said so
    assert "claude-agent-sdk" in found["packages"].found and "Claude Code" in found["claude"].found


def test_a_missing_cli_is_an_error_that_says_what_to_install(
    tmp_path: Path, model: ScriptedModel
) -> None:
    code, found, _ = doctor(tmp_path, model, "--claude", str(tmp_path / "no-such-claude"))
    assert code == 1 and found["claude"].status == "error"
    assert "no-such-claude" in found["claude"].found
    assert found["claude"].fix is not None and "pip install claude-agent-sdk" in found["claude"].fix
    assert "auth" not in found  # nothing to ask


def test_codex_is_optional_a_missing_or_unconfigured_one_is_a_warning(
    tmp_path: Path, model: ScriptedModel
) -> None:
    code, found, _ = doctor(tmp_path, model, "--codex", str(tmp_path / "no-such-codex"))
    assert code == 0 and found["codex"].status == "warning"
    assert "no-such-codex" in found["codex"].found
    assert found["codex"].fix is not None and "coven-ls[codex]" in found["codex"].fix
    empty = tmp_path / "empty-codex-home"
    empty.mkdir()
    code, found, _ = doctor(tmp_path, model, env={"CODEX_HOME": str(empty), "OPENAI_API_KEY": ""})
    assert code == 0 and found["codex"].status == "warning"
    assert found["codex"].fix is not None and "codex login" in found["codex"].fix


def test_no_login_is_an_error(tmp_path: Path, model: ScriptedModel) -> None:
    code, found, _ = doctor(tmp_path, model, env={"ANTHROPIC_API_KEY": ""})
    assert code == 1 and found["auth"].status == "error"
    assert found["auth"].fix is not None and "/login" in found["auth"].fix


def test_no_git_is_a_warning_sessions_run_without(tmp_path: Path, model: ScriptedModel) -> None:
    bare = tmp_path / "bin"  # a PATH with no git on it
    bare.mkdir()
    code, found, _ = doctor(tmp_path, model, env={"PATH": str(bare)})
    assert code == 0 and found["git"].status == "warning"
    assert found["git"].found == "git is not installed"
    assert found["git"].fix is not None and "share the parent's folder" in found["git"].fix


def test_an_old_git_is_a_warning(tmp_path: Path, model: ScriptedModel) -> None:
    bare = tmp_path / "bin"
    bare.mkdir()
    fake = bare / "git"
    fake.write_text("#!/bin/sh\necho 'git version 2.20.1'\n")
    fake.chmod(0o755)
    code, found, _ = doctor(tmp_path, model, env={"PATH": str(bare)})
    assert code == 0 and found["git"].status == "warning" and "2.20.1" in found["git"].found


def test_a_read_only_state_dir_is_an_error(
    tmp_path: Path, model: ScriptedModel, read_only_folder: Path
) -> None:
    code, found, _ = doctor(tmp_path, model, "--state-dir", str(read_only_folder / "coven"))
    assert code == 1 and found["stateDir"].status == "error"
    assert str(read_only_folder) in found["stateDir"].found
    assert found["stateDir"].fix is not None and "stateDir" in found["stateDir"].fix


async def test_a_database_in_use_by_a_server_is_named_with_its_pid(
    tmp_path: Path, model: ScriptedModel, coven_factory: Callable[..., Awaitable[Coven]]
) -> None:
    state = tmp_path / "shared-state"
    server = await coven_factory(home="lsp", init_options={"stateDir": str(state)})
    model.on("Hello", "Hi.")
    sid = await server.start("Hello")
    await server.wait_kind(sid, "turnResult")
    code, found, _ = doctor(
        tmp_path, model, "--state-dir", str(state), "--root", str(server.workspace)
    )
    database = found["database"]
    assert code == 0 and database.status == "ok"
    assert server.client._server is not None
    assert f"in use by coven-ls process {server.client._server.pid}" in database.found
    assert "schema" in database.found


def test_the_human_output_says_what_to_fix(tmp_path: Path, model: ScriptedModel) -> None:
    env: dict[str, Any] = {**model.cli_environ(tmp_path / "cc"), "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "coven_ls", "doctor", "--claude", "/nope/claude"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert "✗ Claude Code CLI:" in done.stdout and "→ Install it" in done.stdout
    assert "not ready" in done.stdout.splitlines()[-1]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.usefixtures("no_user_git_config")
def test_json_and_exit_code_agree_on_a_real_repository(
    tmp_path: Path, model: ScriptedModel
) -> None:
    init_repo(tmp_path / "repo")
    code, found, report = doctor(tmp_path, model, "--root", str(tmp_path / "repo"))
    assert (code == 0) == report.ok == all(f.status != "error" for f in found.values())
    assert os.path.basename(str(tmp_path / "repo")) in found["database"].found


@pytest.mark.usefixtures("no_user_git_config")
async def test_the_worktree_pool_and_its_disk_are_shown(
    tmp_path: Path, model: ScriptedModel
) -> None:
    from coven_ls.core.workspace import pool

    repo = make_repo(tmp_path / "project", {"a.txt": "a\n" * 5000}, message="one")
    state = tmp_path / "state" / "coven-ls"
    await pool.Pools().fill(str(state), str(repo), 2)
    code, found, _ = doctor(tmp_path, model)
    shown = found["worktreePool"]
    assert code == 0 and shown.status == "ok"
    assert f"{os.path.realpath(repo)}: 2 spare(s)" in shown.found
    assert str(pool.folder_of(str(state), str(repo))) in shown.found
    [usage] = pool.usage(str(state))
    assert f"{usage.bytes / 2**20:.1f} MiB in all" in shown.found and usage.bytes > 10_000


def test_the_codex_sandbox_check_says_what_ran_and_what_to_fix() -> None:
    """The codexSandbox finding from what `codex sandbox -- echo …` said (the check itself runs
    the real codex: tests/e2e/test_codex_e2e.py)."""
    ok = sandbox_finding(0, "coven-sandbox-ok\n", "", "/usr/bin/bwrap")
    assert ok.status == "ok" and ok.fix is None and "bubblewrap on PATH: /usr/bin/bwrap" in ok.found
    bundled = sandbox_finding(0, "coven-sandbox-ok\n", "", None)
    assert bundled.status == "ok" and "codex uses its bundled bubblewrap" in bundled.found
    assert "bubblewrap" not in sandbox_finding(0, "coven-sandbox-ok\n", "", None, linux=False).found
    helper = sandbox_finding(
        1, "", 'WARNING: proceeding, even though we could not create PATH aliases: Refusing to '
        'create helper binaries under temporary dir "/tmp"\n'
        "bwrap: execvp codex-linux-sandbox: No such file or directory\n", "/usr/bin/bwrap",
    )  # fmt: skip
    assert helper.status == "warning" and helper.fix is not None
    assert helper.found.endswith("bwrap: execvp codex-linux-sandbox: No such file or directory")
    assert "WARNING" not in helper.found  # codex's own noise is left out
    assert "CODEX_HOME outside" in helper.fix and "COVEN_CODEX_PATH" in helper.fix
    for refusal in (
        "bwrap: setting up uid map: Permission denied",
        "bwrap: No permissions to create a new namespace, likely because the kernel does not "
        "allow non-privileged user namespaces.",
        "bwrap: loopback: Failed RTM_NEWADDR: Operation not permitted",
    ):
        userns = sandbox_finding(1, "", refusal + "\n", "/usr/bin/bwrap")
        assert userns.status == "warning" and refusal in userns.found
        assert userns.fix is not None and "unprivileged_userns_clone" in userns.fix
        assert "apparmor_restrict_unprivileged_userns" in userns.fix
    other = sandbox_finding(None, "", "no answer in 30 s")
    assert other.status == "warning" and "no answer in 30 s" in other.found
    assert other.fix is not None and "apt install bubblewrap" in other.fix
    assert "exit code 2" in sandbox_finding(2, "", "").found
    config = sandbox_finding(
        1, "", "Error: Model provider `scripted` not found\n\nStack backtrace:\n   0: <unknown>\n"
    )
    assert config.found == "`codex sandbox` failed: Error: Model provider `scripted` not found"
    assert config.fix is not None and "config.toml" in config.fix
