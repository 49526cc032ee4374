"""Drive a real coven-ls process through a real LSP client (pytest-lsp's), against the real
`claude` CLI and a scripted model. Each harness has its own workspace, CLAUDE_CONFIG_DIR and
model port; `stop()` shuts the server down and checks that no agent process is left."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import re
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsprotocol import types
from pytest_lsp import ClientServerConfig
from pytest_lsp.client import LanguageClient, make_test_lsp_client

from coven_ls.protocol import to_plain
from coven_ls.term.client import EventLog, serve_coven
from coven_ls.testing.scripted_model import ScriptedModel

Predicate = Callable[[dict[str, Any]], bool]


class FaultRecord:
    """A fault test's figures (the `fault` fixture): inject() when the fault happens,
    recovered() once the session (or server) is usable again, lost() for what a client saw
    before it and what is kept after."""

    def __init__(self) -> None:
        self._injected: float | None = None
        self._recovered: float | None = None
        self.events_lost: int | None = None

    def inject(self) -> None:
        self._injected = time.monotonic()

    def recovered(self) -> None:
        assert self._injected is not None, "recovered() before inject()"
        self._recovered = time.monotonic()

    def lost(self, seen: list[dict[str, Any]], kept: list[dict[str, Any]]) -> int:
        """How many of the events a client saw are not (the same) among those kept; adds up
        over calls (one per session)."""
        missing = sum(1 for event in seen if event not in kept)
        self.events_lost = (self.events_lost or 0) + missing
        return missing

    def figures(self) -> dict[str, Any]:
        recover = None
        if self._injected is not None and self._recovered is not None:
            recover = self._recovered - self._injected
        return {"recoverSeconds": recover, "eventsLost": self.events_lost}


def processes_with_env(marker: str, exclude: tuple[int, ...] = ()) -> list[int]:
    """PIDs of live processes whose environment holds `marker` (e.g. this test's config dir)."""
    found = []
    needle = marker.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in (os.getpid(), *exclude):
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                status = (entry / "status").read_text()
                if "\nState:\tZ" not in status:  # a zombie holds no resources
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


async def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)


class Coven:
    """A started coven-ls server and the client talking to it."""

    def __init__(self, client: LanguageClient, model: ScriptedModel, workspace: Path, marker: str):
        self.client = client
        self.model = model
        self.workspace = workspace
        self.marker = marker
        # coven/delta notifications, each with the number of events received before it.
        self.deltas: list[dict[str, Any]] = []
        self.permission_requests: list[dict[str, Any]] = []
        self.message_requests: list[dict[str, Any]] = []
        self.permission_answer: Callable[[dict[str, Any]], Any] = lambda _: {"allow": True}
        # Either may return an awaitable (one that never finishes: a user who never answers).
        self.message_answer: Callable[[dict[str, Any]], Any] = lambda _: None
        self.init_result: types.InitializeResult | None = None
        # The same log and waiting as coven-ls' own client (coven_ls/term/client.py).
        self.log = EventLog()
        self.events = self.log.events

    def _record(self, event: dict[str, Any]) -> None:
        self.log.record(event)

    def _delta(self, delta: dict[str, Any]) -> None:
        self.deltas.append({**delta, "eventsBefore": len(self.events)})
        self.log.touch()

    def _permission(self, request: dict[str, Any]) -> Any:
        self.permission_requests.append(request)
        return self.permission_answer(request)

    async def request(self, method: str, params: Any) -> Any:
        return to_plain(await self.client.protocol.send_request_async(method, params))

    async def start(self, prompt: str, **params: Any) -> str:
        result = await self.request("coven/startSession", {"prompt": prompt, **params})
        return result["sessionId"]

    def of(self, session_id: str, kind: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events
            if e["sessionId"] == session_id and (kind is None or e["kind"] == kind)
        ]

    async def wait_for(self, predicate: Predicate, timeout: float = 90.0, what: str = "") -> dict:
        """The first event (already received or still to come) that matches."""
        return await self.log.wait_for(predicate, timeout, what)

    async def wait_kind(self, session_id: str, kind: str, count: int = 1, **match: Any) -> dict:
        """The `count`-th event of `kind` on the session whose fields include `match`."""
        found = 0

        def predicate(e: dict[str, Any]) -> bool:
            nonlocal found
            if e["sessionId"] != session_id or e["kind"] != kind:
                return False
            if any(e.get(k) != v for k, v in match.items()):
                return False
            found += 1
            return found == count

        return await self.wait_for(predicate, what=f"{kind} #{count} {match} on {session_id}")

    async def wait_status(self, session_id: str, status: str, after_seq: int = 0) -> dict:
        return await self.wait_for(
            lambda e: (
                e["sessionId"] == session_id
                and e["kind"] == "status"
                and e["status"] == status
                and e["seq"] > after_seq
            ),
            what=f"status {status} on {session_id} after seq {after_seq}",
        )

    def agent_pids(self) -> list[int]:
        """Agent processes (and anything they started) of this server; not the server itself."""
        server = self.client._server
        return processes_with_env(self.marker, exclude=(server.pid,) if server else ())

    def pids_running(self, text: str) -> list[int]:
        """This server's agent processes whose command line mentions `text` (a fork child's CLI
        carries its agent session id in `--session-id`)."""
        found = []
        for pid in self.agent_pids():
            try:
                if text.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(pid)
            except OSError:
                continue
        return found

    async def stop(self) -> None:
        """Shut down in order and prove no agent process survives."""
        server = self.client._server
        try:
            if server is not None and server.returncode is None and not self.client.stopped:
                await asyncio.wait_for(self.client.shutdown_session(), 60)
        finally:
            await self.client.stop()
        await wait_until(lambda: not self.agent_pids(), 30, "agent processes to end")


async def start_coven(
    tmp_path: Path,
    model: ScriptedModel,
    *,
    init_options: dict[str, Any] | None = None,
    custom_permissions: bool = True,
    custom_forks: bool = True,
    custom_review: bool = True,
    extra_env: dict[str, str] | None = None,
    capabilities: types.ClientCapabilities | None = None,
    on_client: Callable[[LanguageClient], None] | None = None,
    stdout_copy: Path | None = None,
) -> Coven:
    """`on_client` sees the client before anything is sent or received (a recorder taps it).
    `stdout_copy`: the server's stdout is copied there too (json_rpc_frames reads it)."""
    workspace = tmp_path / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    config_dir = tmp_path / "claude-config"
    config_dir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("CLAUDECODE", "CLAUDE_CODE_SESSION_ID")}
    env.update(model.cli_env(config_dir))
    env.update(extra_env or {})
    command = [sys.executable, "-m", "coven_ls"]
    if stdout_copy is not None:
        tap = Path(__file__).parent / "stdout_tap.py"
        command = [sys.executable, str(tap), str(stdout_copy), "--", *command]
    config = ClientServerConfig(
        server_command=command,
        client_factory=make_test_lsp_client,
        server_env=env,
    )
    client = await config.start()
    if on_client is not None:
        on_client(client)
    coven = Coven(client, model, workspace, str(config_dir))

    serve_coven(client, coven._record, coven._delta, coven._permission)

    @client.feature(types.WINDOW_SHOW_MESSAGE_REQUEST)
    async def on_message_request(params: types.ShowMessageRequestParams) -> Any:
        request = {
            "message": params.message,
            "actions": [a.title for a in params.actions or []],
            "type": int(params.type),
        }
        coven.message_requests.append(request)
        title = coven.message_answer(request)
        title = await title if inspect.isawaitable(title) else title
        return None if title is None else types.MessageActionItem(title=title)

    caps = capabilities or types.ClientCapabilities(
        experimental={
            "coven": {
                "permissions": custom_permissions,
                "forks": custom_forks,
                "review": custom_review,
            }
        }
    )
    coven.init_result = await client.initialize_session(
        types.InitializeParams(
            capabilities=caps,
            root_uri=workspace.as_uri(),
            initialization_options=init_options or {},
        )
    )
    return coven


# --- a `coven-ls --tcp` server ---------------------------------------------------------------


@dataclass
class TcpServer:
    process: asyncio.subprocess.Process
    port: int
    listening: str  # the whole "listening on" line
    token: str | None  # the generated one, as printed
    token_file: Path | None  # where the generated one was written


@asynccontextmanager
async def tcp_server(env: dict[str, str], *args: str) -> AsyncIterator[TcpServer]:
    """`coven-ls --tcp` on a free port until the block ends (then SIGTERM, in order)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "coven_ls", "--tcp", "127.0.0.1:0", *args,
        env=env, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stderr is not None
    try:
        while True:
            line = (await asyncio.wait_for(process.stderr.readline(), 30)).decode()
            assert line, "the server ended before it listened"
            if found := re.search(
                r"listening on 127\.0\.0\.1:(\d+)(?: token (\S+) token-file (.+))?$", line
            ):
                break
        token_file = Path(found.group(3)) if found.group(3) else None
        yield TcpServer(process, int(found.group(1)), line, found.group(2), token_file)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(process.wait(), 60)


def tcp_server_env(tmp_path: Path, model: ScriptedModel, **extra: str) -> dict[str, str]:
    """A TCP server's environment: the model's, no token of the machine's, a runtime folder of
    the test's own (where a generated token's file goes)."""
    env = {**os.environ, **model.cli_env(tmp_path / "claude-config")}
    env.pop("COVEN_TOKEN", None)
    return {**env, "XDG_RUNTIME_DIR": str(tmp_path / "run"), **extra}


def json_rpc_frames(stream: bytes) -> list[dict[str, Any]]:
    """The messages of an LSP stream (`Content-Length` framed JSON); an AssertionError says
    where anything else is."""
    messages, at = [], 0
    while at < len(stream):
        end = stream.find(b"\r\n\r\n", at)
        assert end != -1, f"not a frame at byte {at}: {stream[at : at + 200]!r}"
        headers = dict(
            line.split(b": ", 1) for line in stream[at:end].split(b"\r\n") if b": " in line
        )
        assert b"Content-Length" in headers, f"no Content-Length at byte {at}: {stream[at:end]!r}"
        start = end + 4
        length = int(headers[b"Content-Length"])
        messages.append(json.loads(stream[start : start + length]))
        at = start + length
    return messages
