"""The agent registry and how the hub uses it: a backend per agent and binary, the session's agent
in its info and its stored row, and a restored session back on its own agent."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import anyio
import pytest
from anyio.abc import TaskGroup

from coven_ls import agents, protocol
from coven_ls.agents.codex.backend import PERMISSIONS
from coven_ls.core.hub import ClientSettings, Hub
from coven_ls.protocol.codec import parse
from coven_ls.protocol.types import PermissionMode

from ..fakes import FakeBackend
from .test_hub_unit import RecordingClient

LIMIT = 10


class Factory:
    """A backend factory that hands out one FakeBackend per call and records the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, protocol.InitializationOptions]] = []
        self.backends: dict[str, list[FakeBackend]] = {}

    def __call__(
        self, agent: str, options: protocol.InitializationOptions, tg: TaskGroup
    ) -> FakeBackend:
        self.calls.append((agent, options))
        backend = FakeBackend()
        self.backends.setdefault(agent, []).append(backend)
        return backend


async def run(settings: ClientSettings, factory: Factory, work: Any) -> None:
    async with anyio.create_task_group() as tg:
        hub = Hub(tg, agents.REGISTRY.with_backends(factory))
        store = (await hub.open_store(settings))[0]
        client = RecordingClient(settings, store)
        hub.attach(client)
        try:
            await work(hub, client)
        finally:
            with anyio.move_on_after(LIMIT):
                await hub.close_all()
            tg.cancel_scope.cancel()


async def test_each_session_runs_on_its_agents_backend_and_a_restart_keeps_it(
    tmp_path: Path,
) -> None:
    options = protocol.InitializationOptions(stateDir=str(tmp_path / "state"), agent="codex")
    settings = ClientSettings(str(tmp_path), options)
    factory = Factory()
    ids: dict[str, str] = {}

    async def first(hub: Hub, client: RecordingClient) -> None:
        codex = await hub.start_session(client, protocol.StartSessionParams(prompt="a"))
        claude = await hub.start_session(
            client, protocol.StartSessionParams(prompt="b", agent="claude")
        )
        again = await hub.start_session(client, protocol.StartSessionParams(prompt="c"))
        for session in (codex, claude, again):
            with anyio.fail_after(LIMIT):
                await session.wait_settled()
        ids.update(codex=codex.id, claude=claude.id)
        assert [s.info().agent for s in (codex, claude, again)] == ["codex", "claude", "codex"]
        # One backend per agent, shared by its sessions.
        assert [agent for agent, _ in factory.calls] == ["codex", "claude"]
        assert len(factory.backends["codex"][0].agents) == 2

    await run(settings, factory, first)

    restarted = Factory()

    async def second(hub: Hub, client: RecordingClient) -> None:
        assert hub.get(ids["codex"]).info().agent == "codex"
        assert hub.get(ids["claude"]).info().agent == "claude"
        assert sorted(agent for agent, _ in restarted.calls) == ["claude", "codex"]

    await run(settings, restarted, second)


def test_backend_key_is_per_agent_and_binary() -> None:
    plain = protocol.InitializationOptions()
    paths = protocol.InitializationOptions(claudePath="/x/claude", codexPath="/y/codex")
    assert agents.backend_key("claude", plain) == ("claude", None)
    assert agents.backend_key("codex", paths) == ("codex", "/y/codex")
    assert agents.backend_key("claude", paths) == ("claude", "/x/claude")
    # The names coven-ls hosts itself are the ones an ACP agent's configuration cannot take.
    assert set(agents.AGENTS) == set(protocol.types.RESERVED_AGENT_NAMES)


def test_every_permission_mode_has_a_codex_policy_and_sandbox() -> None:
    assert set(PERMISSIONS) == {None, *get_args(PermissionMode)}
    assert PERMISSIONS["bypassPermissions"] == ("never", "danger-full-access")
    assert PERMISSIONS[None] == PERMISSIONS["default"] == ("on-request", "read-only")


async def test_an_unknown_agent_is_refused_when_its_session_starts(tmp_path: Path) -> None:
    # Any name passes the wire types (a configured ACP agent's is a name); the registry refuses
    # one that is neither coven's own nor configured, saying which there are.
    params = parse(
        protocol.START_SESSION, protocol.StartSessionParams, {"prompt": "x", "agent": "o"}
    )
    options = protocol.InitializationOptions(stateDir=str(tmp_path / "state"))
    factory = Factory()

    async def work(hub: Hub, client: Any) -> None:
        with pytest.raises(protocol.CovenError, match="Unknown agent 'o'") as refused:
            await hub.start_session(client, params)
        assert refused.value.code == protocol.ErrorCode.InvalidParams

    await run(ClientSettings(str(tmp_path), options), factory, work)
    assert factory.calls == []
