from __future__ import annotations

import os
import subprocess

# A status change missing from core/session/status.py's table fails the test that makes it, here
# and in every server the tests start (they inherit the environment), instead of only being logged.
os.environ["COVEN_STRICT_STATUS"] = "1"

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from coven_ls.testing.scripted_model import ScriptedModel

from .gitrepo import git_env
from .harness import Coven, FaultRecord, start_coven

E2E = Path(__file__).parent / "e2e"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The folder says what a test is: everything under tests/e2e is `e2e`, so `-m 'not e2e'`
    and `tests/unit` select the same quick lane."""
    for item in items:
        if item.path.is_relative_to(E2E):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(autouse=True)
def isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test (and every server it starts) keeps its session databases in its own folder."""
    state = tmp_path / "xdg-state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state


@pytest.fixture
def no_user_git_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The test (and every process it starts with os.environ: git, a server) without the user's
    git configuration: no ~/.gitconfig (HOME, GIT_CONFIG_GLOBAL), no system config, no GIT_*
    variable of the machine's; see tests/gitrepo.py. Returns that environment."""
    env = git_env(tmp_path, os.environ)
    for name in list(os.environ):
        if name not in env:
            monkeypatch.delenv(name)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)  # git's other place for a user config
    env.pop("XDG_CONFIG_HOME", None)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel() as scripted:
        yield scripted


@pytest.fixture
async def coven_factory(
    tmp_path: Path, model: ScriptedModel
) -> AsyncIterator[Callable[..., Awaitable[Coven]]]:
    """Start coven-ls servers on the test's scripted model; each is stopped (and checked to leave
    no agent process) at the end of the test."""
    started: list[Coven] = []

    async def start(home: str | None = None, **kw: Any) -> Coven:
        """`home` names the folder (workspace, CLI config) to use: the same home is the same
        workspace, so a second server started there is a restart."""
        coven = await start_coven(tmp_path / (home or f"server{len(started)}"), model, **kw)
        started.append(coven)
        return coven

    yield start
    for coven in reversed(started):  # a restarted server shares its home with the first one
        await coven.stop()


@pytest.fixture
async def coven(coven_factory: Callable[..., Awaitable[Coven]]) -> Coven:
    return await coven_factory()


@pytest.fixture
def fault(request: pytest.FixtureRequest) -> Iterator[FaultRecord]:
    """What a fault test measured (bench/faults.py prints it as a table): when the fault was
    injected and when things were usable again, and how many events a client saw that were
    not kept. Processes left behind are counted by bench/faults.py after the test's teardown."""
    record = FaultRecord()
    yield record
    request.node.user_properties.append(("fault", record.figures()))


@pytest.fixture
def read_only_folder(tmp_path: Path) -> Iterator[Path]:
    """A folder nothing can be written in: a read-only tmpfs where mounting is allowed (root, as
    in CI, where file modes do not stop writes), else a folder of mode 0500."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(folder)],
        capture_output=True, check=False,
    ).returncode == 0  # fmt: skip
    if not mounted:
        if os.geteuid() == 0:
            pytest.skip("running as root and cannot mount: nothing makes a folder read-only")
        folder.chmod(0o500)
    try:
        yield folder
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(folder)], check=False)
        else:
            folder.chmod(0o700)
