"""Standard LSP for editors that know nothing of coven/*: executeCommand mirrors of every
request, work-done progress for turns and forks, and a readable log line per event."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .server import CovenServer

Handler = Callable[["CovenServer", Any], Awaitable[Any]]


class StandardLsp:
    """Per-connection state of the standard-LSP mirror."""

    def __init__(self, server: CovenServer) -> None:
        self._server = server

    def observe(self, event: dict[str, Any]) -> None:
        """Called for every coven/event this connection is sent."""


def install_standard_lsp(server: CovenServer, handlers: dict[str, Handler]) -> None:
    """Register the standard-LSP features on a new connection's server."""
    server.standard = StandardLsp(server)
