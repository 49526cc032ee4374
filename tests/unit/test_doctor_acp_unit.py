"""`coven-ls doctor`'s check of ACP agents (coven_ls/doctor/acp_agents.py), with the scripted
agent (tests/acp_fake_agent.py) as a real process, a command not found, one that fails to
initialize, and a known agent found on a temporary PATH."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from coven_ls.doctor import acp_agents
from coven_ls.doctor.acp_agents import agents_to_check, check_agent, check_agents
from coven_ls.doctor.checks import main, parse_agents
from coven_ls.protocol.types import AcpAgentConfig

ROOT = Path(__file__).resolve().parents[2]


def fake(*extra: str) -> AcpAgentConfig:
    return AcpAgentConfig(
        command=[sys.executable, "-m", "tests.acp_fake_agent", *extra],
        env={"PYTHONPATH": str(ROOT)},
    )


@pytest.fixture(autouse=True)
def empty_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No known agent of the machine's own PATH is checked (`sh` and the like still run: the
    commands below name their programs by absolute path, except where a test means otherwise)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    return folder


async def test_an_agent_that_initializes_is_reported_with_its_capabilities() -> None:
    finding = await check_agent("fake", fake(), configured=True)
    assert finding.id == "acpAgent" and finding.status == "ok", finding
    assert finding.title == "ACP agent fake (configured)"
    assert "fake-acp 0.0.1" in finding.found and "ACP protocol 1" in finding.found
    assert "session/fork yes, session/load yes, session/resume yes" in finding.found
    no_fork = await check_agent("fake", fake("--no-fork"), configured=True)
    assert no_fork.status == "ok" and "session/fork no" in no_fork.found
    assert "transcript" in no_fork.found


async def test_another_protocol_version_is_said() -> None:
    finding = await check_agent("fake", fake("--old-protocol"), configured=True)
    assert finding.status == "warning" and "ACP protocol 0" in finding.found
    assert finding.fix is not None and "coven-ls speaks ACP protocol 1" in finding.fix


async def test_a_command_not_found_says_how_to_install_it() -> None:
    finding = await check_agent("nope", AcpAgentConfig(command=["no-such-acp"]), configured=True)
    assert finding.status == "error" and "`no-such-acp` was not found" in finding.found
    assert finding.fix is not None and "initializationOptions.agents.nope.command" in finding.fix
    known = await check_agent("qwen", AcpAgentConfig(command=["qwen", "--acp"]), configured=False)
    assert known.status == "warning"  # a known agent is optional
    assert known.fix is not None and "npm install -g @qwen-code/qwen-code" in known.fix


async def test_one_that_fails_to_initialize_shows_its_last_output(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = "import sys; print('please log in first', file=sys.stderr); sys.exit(3)"
    dies = AcpAgentConfig(command=[sys.executable, "-c", script])
    finding = await check_agent("dies", dies, configured=True)
    assert finding.status == "error" and "failed to initialize" in finding.found
    assert "please log in first" in finding.found
    assert finding.fix is not None and "auth login" in finding.fix
    # One that never answers (it only reads its stdin) is ended after the timeout.
    monkeypatch.setattr(acp_agents, "INITIALIZE_SECONDS", 0.5)
    mute = AcpAgentConfig(command=[sys.executable, "-c", "import sys; sys.stdin.read()"])
    silent = await check_agent("mute", mute, configured=True)
    assert silent.status == "error" and "no answer to initialize" in silent.found


def test_known_agents_on_path_are_checked_and_a_configured_one_replaces_them(
    empty_path: Path,
) -> None:
    assert agents_to_check(None) == []
    stub = empty_path / "opencode"
    stub.write_text("#!/bin/sh\nexit 1\n")
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    assert [(n, c) for n, c, _ in agents_to_check(None)] == [
        ("opencode", AcpAgentConfig(command=["opencode", "acp"]))
    ]
    [finding] = check_agents(None)
    assert finding.title == "ACP agent opencode (found on PATH)"
    assert finding.status == "warning" and "failed to initialize" in finding.found
    mine = fake()
    assert agents_to_check({"opencode": mine}) == [("opencode", mine, True)]


def test_doctor_takes_agents_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_agents('{"oc": {"command": ["opencode", "acp"]}}') == {
        "oc": AcpAgentConfig(command=["opencode", "acp"])
    }
    assert main(".", None, None, False, agents="{") == 2
    assert "--agents is not JSON" in capsys.readouterr().err
    assert main(".", None, None, False, agents='{"claude": {"command": ["x"]}}') == 2
    assert "'claude' is reserved" in capsys.readouterr().err
