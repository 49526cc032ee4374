"""`coven-ls doctor`'s check of each ACP agent it knows (the configured ones, and the known ones
found on PATH): found, starts, and what its `initialize` says (its name and version, its protocol
version, whether it has session/fork, session/load, session/resume). Started as a session would
start it (agents/acp/process.py), with a timeout; the process always ends; no session is opened
and no model request made."""

from __future__ import annotations

import tempfile
from typing import Any, cast

import anyio
from acp import PROTOCOL_VERSION, RequestError
from acp.interfaces import Client

from ..agents.acp.known import KNOWN, on_path
from ..agents.acp.process import Link, command_problem, initialize, process_connector
from ..core.agent import AgentStartError
from ..protocol.doctor import Finding, FindingStatus
from ..protocol.types import AcpAgentConfig

INITIALIZE_SECONDS = 30.0
FINDING_ID = "acpAgent"


class _Silent:
    """The client side of a doctor's connection: it asks nothing of the agent but `initialize`,
    so anything the agent asks is "method not found"."""

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        return None

    async def request_permission(self, *_: Any, **__: Any) -> Any:
        raise RequestError.method_not_found("session/request_permission")

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise RequestError.method_not_found(f"_{method}")

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        return None


def agents_to_check(
    configured: dict[str, AcpAgentConfig] | None,
) -> list[tuple[str, AcpAgentConfig, bool]]:
    """(name, how to start it, whether it is configured): the configured agents, then the known
    ones found on PATH that no configured entry of the same name replaces."""
    configured = configured or {}
    found = [(n, c, True) for n, c in configured.items()]
    found += [(n, c, False) for n, c in on_path().items() if n not in configured]
    return found


def check_agents(configured: dict[str, AcpAgentConfig] | None) -> list[Finding]:
    return [
        anyio.run(check_agent, name, config, is_configured)
        for name, config, is_configured in agents_to_check(configured)
    ]


async def check_agent(name: str, config: AcpAgentConfig, configured: bool) -> Finding:
    title = f"ACP agent {name} ({'configured' if configured else 'found on PATH'})"
    # A configured agent that does not work is what the user asked for; a known one merely
    # found on PATH is optional.
    bad: FindingStatus = "error" if configured else "warning"
    where = (
        f"initializationOptions.agents.{name}"
        if configured
        else f"initializationOptions.agents.{name} (to start it another way)"
    )
    if command_problem(name, config) is not None:
        known = KNOWN.get(name)
        fix = f"Install it ({known.install})" if known is not None else "Install it"
        program = config.command[0]
        return Finding(
            FINDING_ID, bad, title, f"its command `{program}` was not found (PATH, or its env's)",
            f"{fix}, or fix {where}.command.",
        )  # fmt: skip
    command = " ".join(config.command)
    exits: list[str] = []
    link: Link | None = None
    with tempfile.TemporaryDirectory(prefix="coven-doctor-") as cwd:
        async with anyio.create_task_group() as tg:
            try:
                connect = process_connector(name, config, cwd, tg, {})
                link = await connect(cast(Client, _Silent()), exits.append)
                with anyio.fail_after(INITIALIZE_SECONDS):
                    init = await initialize(link.conn)
            except Exception as exc:
                reason = (
                    f"no answer to initialize in {INITIALIZE_SECONDS:.0f} s"
                    if isinstance(exc, TimeoutError)
                    else str(exc) or type(exc).__name__
                )
                if isinstance(exc, AgentStartError):
                    return Finding(FINDING_ID, bad, title, reason, f"Fix {where}.")
                found = f"`{command}` failed to initialize: {reason}"
                if exits:  # which says how it ended, with its last output
                    found += "; " + " ".join(exits)
                elif link is not None and link.stderr:
                    tail = link.stderr_tail().strip().splitlines()[-5:]
                    found += ". Its last output: " + " | ".join(line.strip() for line in tail)
                return Finding(
                    FINDING_ID, bad, title, found,
                    f"Run `{command}` by hand to see what it needs (a login: `<agent> auth "
                    f"login` or its own; a newer Node), or fix {where}.",
                )  # fmt: skip
            finally:
                if link is not None:
                    with anyio.CancelScope(shield=True):
                        await link.aclose()
                tg.cancel_scope.cancel()
    return _initialized(title, command, init)


def _initialized(title: str, command: str, init: Any) -> Finding:
    info = init.agent_info
    who = f"{info.name} {info.version}" if info is not None else "(no agentInfo)"
    caps = init.agent_capabilities
    sessions = caps.session_capabilities if caps is not None else None

    def has(value: object) -> str:
        return "yes" if value else "no"

    found = (
        f"{who} via `{command}`, ACP protocol {init.protocol_version}; session/fork "
        f"{has(sessions is not None and sessions.fork is not None)}, session/load "
        f"{has(caps is not None and caps.load_session)}, session/resume "
        f"{has(sessions is not None and sessions.resume is not None)}"
    )
    if sessions is None or sessions.fork is None:
        found += " (fork children get a transcript, not the whole context)"
    if init.protocol_version != PROTOCOL_VERSION:
        return Finding(
            FINDING_ID, "warning", title, found,
            f"coven-ls speaks ACP protocol {PROTOCOL_VERSION} and the agent answered "
            f"{init.protocol_version}: update the agent (or coven-ls) so that they agree.",
        )  # fmt: skip
    return Finding(FINDING_ID, "ok", title, found)
