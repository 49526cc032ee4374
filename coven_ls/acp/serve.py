"""`coven-ls acp`: the agent on stdio (newline-delimited JSON-RPC) until stdin closes."""

from __future__ import annotations

import os

import anyio
from acp import run_agent

from ..cluster import make_cluster
from ..core.agent_registry import AgentRegistry
from ..core.hub import Hub
from .agent import CovenAgent


async def serve_acp(agents: AgentRegistry) -> int:
    # Claude Code refuses to start when it thinks it is nested in another Claude Code session.
    for name in ("CLAUDECODE", "CLAUDE_CODE_SESSION_ID"):
        os.environ.pop(name, None)
    async with anyio.create_task_group() as tg:
        hub = Hub(tg, agents, make_cluster)
        agent = CovenAgent(hub)
        try:
            # session/fork and session/close are still "unstable" in ACP's schema.
            await run_agent(agent, use_unstable_protocol=True)
        finally:
            # stdin closed (the editor is gone) or a signal: no agent process may outlive us.
            with anyio.CancelScope(shield=True):
                await agent.close()
                await hub.close_all()
            tg.cancel_scope.cancel()
    return 0
