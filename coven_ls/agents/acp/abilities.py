"""What an ACP agent can do with its sessions, as coven's core asks it (`Backend.abilities`): it
is known only once the agent has answered `initialize` (whether it advertises `session/fork`)
and ended a turn (whether its `usage_update`s carry a cost in USD: translate.CostReports), so
each backend learns it from its sessions, and `probe` starts the agent once to ask where a fork
needs it first.

What every ACP agent shares: a copy (`session/fork`) is of a whole session, never up to an
earlier message; and no agent gives a session's conversation back in a form coven could write
out (`session/load` replays it as updates, not every agent has it, and it would mean a process
a read), so the core reads it from what it recorded of the session.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, cast

import anyio
from acp.interfaces import Client

from ...core.agent import Abilities
from .known import copy_problem
from .process import Connect, initialize
from .purge import PurgeClient

log = logging.getLogger(__name__)

PROBE_SECONDS = 60.0


def advertises_fork(init: Any) -> bool:
    """Whether an `initialize` answer advertises the unstable `session/fork`."""
    caps = init.agent_capabilities
    sessions = caps.session_capabilities if caps is not None else None
    return sessions is not None and sessions.fork is not None


@dataclass
class Learned:
    """What one configured ACP agent said of itself in this server (None: not yet)."""

    copies: bool | None = None

    def abilities(self, name: str) -> Abilities:
        problem = copy_problem(name)
        copies = False if problem is not None else self.copies
        return Abilities(
            "acp",
            copies=copies,
            copies_up_to_a_message=False,
            reads_conversations=False,
            reports_cost=None,  # the backend's (AcpBackend.reports_cost)
            no_copy_reason=problem
            or (
                None
                if copies is not False
                else f"ACP agent '{name}' cannot copy a session (it has no session/fork), so "
                "its children cannot inherit their parent's context."
            ),
        )


async def probe(name: str, connect: Connect, learned: Learned) -> None:
    """Start the agent once, ask `initialize` what it can do, and end it. A failure is logged
    and leaves what is unknown unknown (the session that needs the agent says why it fails)."""
    try:
        link = await connect(cast(Client, PurgeClient()), lambda _reason: None)
    except Exception as exc:
        log.warning("ACP agent %s could not be started to ask what it can do: %s", name, exc)
        return
    try:
        with anyio.fail_after(PROBE_SECONDS):
            init = await initialize(link.conn)
        learned.copies = advertises_fork(init)
    except Exception as exc:
        log.warning("ACP agent %s did not say what it can do: %s", name, exc)
    finally:
        with anyio.CancelScope(shield=True):
            await link.aclose()
