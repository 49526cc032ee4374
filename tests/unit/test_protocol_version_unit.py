"""`initialize`'s result says which coven/* protocol the server speaks:
`capabilities.experimental.coven.protocolVersion`."""

from __future__ import annotations

from typing import Any

import anyio
import msgspec
import pytest
from lsprotocol import types

from coven_ls import protocol
from coven_ls.agents import REGISTRY, available_agents
from coven_ls.core.hub import Hub
from coven_ls.lsp.server import CovenServer
from coven_ls.protocol.schema import build_schema
from coven_ls.protocol.types import InitializationOptions


async def initialize(experimental: Any = None) -> dict[str, Any]:
    """The `initialize` result of a new connection, as it goes on the wire."""
    async with anyio.create_task_group() as tg:
        server = CovenServer(Hub(tg, REGISTRY), lambda code: None)
        caps = types.ClientCapabilities(experimental=experimental)
        steps = server.protocol.lsp_initialize(types.InitializeParams(capabilities=caps))
        try:
            while True:
                next(steps)
        except StopIteration as done:
            wire: dict[str, Any] = server.protocol._converter.unstructure(done.value)
        tg.cancel_scope.cancel()
    return wire


@pytest.mark.parametrize("experimental", [None, {"coven": {"forks": True}}])
async def test_initialize_says_the_protocol_version(experimental: Any) -> None:
    """Coven-aware or not, a client is told the version (a plain LSP client may log it)."""
    coven = (await initialize(experimental))["capabilities"]["experimental"]["coven"]
    assert coven["protocolVersion"] == 2  # 2: `agents` lists objects
    assert set(coven) <= {"protocolVersion", "agents", "cluster"}
    assert (
        coven.get("cluster") is None
    )  # no cluster configured: the placement choice is not offered
    assert msgspec.convert(coven, protocol.CovenServerCapabilities).protocolVersion == 2
    # Each agent as an object whose every field is there, null included (not left out).
    for agent in coven.get("agents") or []:
        assert set(agent) == {"name", "kind", "fork", "cost"}, agent
        assert agent["kind"] in ("claude", "codex", "acp")


def test_the_schema_describes_the_server_capabilities() -> None:
    schema = build_schema()
    assert schema["properties"]["CovenServerCapabilities"] == {
        "$ref": "#/$defs/CovenServerCapabilities"
    }
    version = schema["$defs"]["CovenServerCapabilities"]["properties"]["protocolVersion"]
    assert version["type"] == "integer" and version["minimum"] == 1
    assert "breaking change" in version["description"]
    assert schema["$defs"]["CovenServerCapabilities"]["required"] == ["protocolVersion"]


def _executable(path: Any) -> str:
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return str(path)


def test_the_agents_are_those_whose_binary_is_found(tmp_path: Any, monkeypatch: Any) -> None:
    """`agents` names an agent when its binary leads to an executable file, whatever the source
    (option, variable, wheel, PATH), and leaves it out otherwise, without running it."""
    monkeypatch.setenv("PATH", str(tmp_path))
    claude = _executable(tmp_path / "my-claude")
    codex = _executable(tmp_path / "my-codex")
    found = available_agents(InitializationOptions(claudePath=claude, codexPath=codex))
    assert found == ["claude", "codex"]
    missing = str(tmp_path / "nowhere" / "codex")
    assert available_agents(InitializationOptions(claudePath=claude, codexPath=missing)) == [
        "claude"
    ]
    (tmp_path / "not-executable").write_text("")
    monkeypatch.setenv("COVEN_CODEX_PATH", str(tmp_path / "not-executable"))
    assert available_agents(InitializationOptions(claudePath=claude)) == ["claude"]
    monkeypatch.setenv("COVEN_CODEX_PATH", codex)
    assert available_agents(InitializationOptions(claudePath=claude)) == ["claude", "codex"]


def test_the_schema_describes_the_agents() -> None:
    agents = build_schema()["$defs"]["CovenServerCapabilities"]["properties"]["agents"]
    assert "find" in agents["description"]
