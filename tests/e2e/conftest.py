"""Fixtures of the end-to-end tests that are theirs alone."""

from __future__ import annotations

import os
import shutil
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from coven_ls.testing.scripted_chat import ScriptedChat
from coven_ls.testing.scripted_model import ScriptedModel

from ..harness import Coven
from .acp_real import CLAUDE_AGENT_ACP, INSTALL, OPENCODE, agents_path, opencode_env


def path_without(program: str, path: str, shadows: Path) -> str:
    """`path` with every folder that holds `program` replaced by a folder of links to all its
    other entries: the same commands, but `program` is not found. (On a merged /usr, /bin and
    /usr/bin both hold it.)"""
    folders = []
    for index, folder in enumerate(path.split(os.pathsep)):
        if not folder or not (Path(folder) / program).exists():
            folders.append(folder)
            continue
        shadow = shadows / f"{index}-{Path(folder).name or 'root'}"
        shadow.mkdir(parents=True, exist_ok=True)
        for entry in Path(folder).iterdir():
            if entry.name != program and not (shadow / entry.name).exists():
                (shadow / entry.name).symlink_to(entry)
        folders.append(str(shadow))
    return os.pathsep.join(folders)


@pytest.fixture(scope="session")
def path_without_bwrap(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = path_without("bwrap", os.environ.get("PATH", ""), tmp_path_factory.mktemp("no-bwrap"))
    assert shutil.which("bwrap", path=path) is None
    return path


@pytest.fixture(params=["bubblewrap", "no-bubblewrap"])
def bubblewrap(request: pytest.FixtureRequest, path_without_bwrap: str) -> dict[str, str]:
    """The environment for a codex with bubblewrap and one without: codex (0.163.0) looks for
    `bwrap` on PATH and runs each sandboxed command through it (`bwrap … codex-linux-sandbox`);
    when there is none it uses the copy of bubblewrap it carries. scripts/test.sh installs the
    Debian package when it runs as root (CI); elsewhere the first case is skipped without it."""
    if request.param == "no-bubblewrap":
        return {"PATH": path_without_bwrap}
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap)")
    return {"PATH": os.environ.get("PATH", "")}


# --- real ACP agents (tests/e2e/acp_real.py) ----------------------------------------------------


@pytest.fixture
def scripted_chat() -> Iterator[ScriptedChat]:
    """The scripted Chat Completions API (opencode's model)."""
    with ScriptedChat() as scripted:
        yield scripted


@pytest.fixture
def start_opencode(
    coven_factory: Callable[..., Awaitable[Coven]],
    scripted_chat: ScriptedChat,
    tmp_path: Path,
) -> Callable[..., Awaitable[Coven]]:
    """A coven-ls whose sessions run the real opencode (the known agent `opencode`, found on
    PATH) against `scripted_chat`; a second server started with the same `home` is a restart
    (opencode's own folders are the test's, shared by both)."""
    if not OPENCODE.is_file():
        pytest.skip(f"opencode {INSTALL}")
    # Its title request comes first, with the first prompt as its last user message: a rule
    # meant for the turn (`times=1`) must not be spent on it.
    scripted_chat.on(lambda r: "title generator" in r.system_text, "A title")

    async def start(home: str = "ws", **kw: Any) -> Coven:
        env = {
            "PATH": agents_path(tmp_path / "agents-bin"),
            **opencode_env(scripted_chat, tmp_path / "oc"),
        }
        options = {"agent": "opencode", **kw.pop("init_options", {})}
        return await coven_factory(
            home=home, init_options=options, extra_env={**env, **kw.pop("extra_env", {})}, **kw
        )

    return start


@pytest.fixture
def start_claude_agent_acp(
    coven_factory: Callable[..., Awaitable[Coven]], model: ScriptedModel, tmp_path: Path
) -> Callable[..., Awaitable[Coven]]:
    """A coven-ls whose sessions run the real claude-agent-acp (the known agent, found on PATH)
    against the test's scripted Messages API (`model`, whose address the server's environment
    already has). Its side requests (a session title) get a title."""
    if not CLAUDE_AGENT_ACP.is_file():
        pytest.skip(f"claude-agent-acp {INSTALL}")
    model.on(lambda r: "Write the title" in r.last_user_text, "A title")

    async def start(home: str = "ws", **kw: Any) -> Coven:
        # Always some IS_SANDBOX other than `1`: as root its sessions fail unless the known
        # agent's entry keeps it from the agent (elsewhere it changes nothing).
        env = {"PATH": agents_path(tmp_path / "agents-bin"), "IS_SANDBOX": "yes"}
        options = {"agent": "claude-agent-acp", **kw.pop("init_options", {})}
        return await coven_factory(
            home=home, init_options=options, extra_env={**env, **kw.pop("extra_env", {})}, **kw
        )

    return start
