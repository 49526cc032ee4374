"""`initialize`'s result says which coven/* protocol the server speaks:
`capabilities.experimental.coven.protocolVersion`."""

from __future__ import annotations

from typing import Any

import anyio
import msgspec
import pytest
from lsprotocol import types

from coven_ls import protocol
from coven_ls.core.hub import Hub
from coven_ls.lsp.server import CovenServer
from coven_ls.protocol.schema import build_schema


async def initialize(experimental: Any = None) -> dict[str, Any]:
    """The `initialize` result of a new connection, as it goes on the wire."""
    async with anyio.create_task_group() as tg:
        server = CovenServer(Hub(tg), lambda code: None)
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
    assert coven == {"protocolVersion": 1}
    assert msgspec.convert(coven, protocol.CovenServerCapabilities).protocolVersion == 1


def test_the_schema_describes_the_server_capabilities() -> None:
    schema = build_schema()
    assert schema["properties"]["CovenServerCapabilities"] == {
        "$ref": "#/$defs/CovenServerCapabilities"
    }
    version = schema["$defs"]["CovenServerCapabilities"]["properties"]["protocolVersion"]
    assert version["type"] == "integer" and version["minimum"] == 1
    assert "breaking change" in version["description"]
    assert schema["$defs"]["CovenServerCapabilities"]["required"] == ["protocolVersion"]
