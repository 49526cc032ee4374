"""The language server: assembles an LSP connection's server from its parts.

`jsonrpc` (the hardened protocol), `connection` (the hub's client and its dialogs), `handlers`
(the coven/* methods) and `standard` (mirrors for editors that know nothing of coven/*) are put
together here by `create_server`, with the lifecycle features; `transports` serves the result on
stdio or TCP. One `CovenServer` serves one connection; every connection shares the process's hub,
so a TCP server can have several editors watching the same sessions.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.uris import to_fs_path

from .. import protocol
from ..core.hub import ClientSettings, Hub
from .connection import CovenServer
from .handlers import HANDLERS, adapt
from .standard import install_standard_lsp


def _root_of(params: types.InitializeParams) -> str:
    if params.workspace_folders:
        path = to_fs_path(params.workspace_folders[0].uri)
        if path:
            return path
    if params.root_uri:
        path = to_fs_path(params.root_uri)
        if path:
            return path
    return params.root_path or os.getcwd()


def create_server(hub: Hub, on_exit: Callable[[int], None]) -> CovenServer:
    server = CovenServer(hub, on_exit)

    @server.feature(types.INITIALIZE)
    async def initialize(ls: CovenServer, params: types.InitializeParams) -> None:
        try:
            ls.settings = ClientSettings.parse(params.initialization_options, _root_of(params))
            ls.store, ls.store_warning = await hub.open_store(ls.settings)
        except protocol.CovenError as exc:
            raise JsonRpcException(exc.message, exc.code, exc.data) from exc
        experimental = protocol.to_plain(params.capabilities.experimental) or {}
        coven = experimental.get("coven") if isinstance(experimental, dict) else None
        ls.custom_permissions = isinstance(coven, dict) and coven.get("permissions") is True
        ls.custom_forks = isinstance(coven, dict) and coven.get("forks") is True
        ls.custom_review = isinstance(coven, dict) and coven.get("review") is True
        ls.coven_aware = isinstance(coven, dict)
        hub.attach(ls)

    @server.feature(types.INITIALIZED)
    def initialized(ls: CovenServer, params: types.InitializedParams) -> None:
        if ls.store_warning:
            ls.window_show_message(
                types.ShowMessageParams(type=types.MessageType.Warning, message=ls.store_warning)
            )
        # After a restart, a standard-LSP editor is asked again about changes still in review
        # (a client with its own review UI reads them from the events instead).
        ls.hub.ask_open_reviews()

    @server.feature(types.SHUTDOWN)
    async def shutdown(ls: CovenServer, *args: Any) -> None:
        # Only the last connection's shutdown ends the sessions: other editors may still watch.
        if ls.hub.clients == [ls] or not ls.hub.clients:
            await ls.hub.close_all()

    for method, fn in HANDLERS.items():
        server.feature(method)(adapt(fn))
    server.standard = install_standard_lsp(
        server, hub, {method: adapt(fn) for method, fn in HANDLERS.items()}
    )
    return server
