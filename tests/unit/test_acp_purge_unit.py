"""`coven/deleteSession` with `purge` for an ACP agent (coven_ls/agents/acp/purge.py): a process
of the agent's closes and deletes the sessions where it advertises `session/close` and
`session/delete`, and logs what it cannot remove, against the scripted agent."""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import pytest

from coven_ls.agents.acp import AcpBackend
from coven_ls.core.agent import AgentSpec, Conversation
from coven_ls.protocol.types import AcpAgentConfig

from ..acp_fake_agent import FakeAgent
from .test_acp_agents_unit import Asker, backend


async def opened(b: AcpBackend, cwd: Path) -> str:
    """A session opened and closed again, as deleteSession leaves it: its ACP session id."""
    agent = await b.open(AgentSpec(cwd=str(cwd)), Asker())
    session_id = agent.session_id
    await agent.close()
    assert session_id is not None
    return session_id


async def test_purge_closes_and_deletes_the_agents_sessions(tmp_path: Path) -> None:
    fake = FakeAgent(close=True, delete=True)
    async with backend(fake) as b:
        first, second = await opened(b, tmp_path), await opened(b, tmp_path)
        fake.calls.clear()
        with anyio.fail_after(10):
            await b.purge(
                [Conversation(first, str(tmp_path)), Conversation(second, str(tmp_path / "gone"))]
            )
    assert fake.calls == [
        ("close", first),
        ("delete", first),
        ("close", second),
        ("delete", second),
    ]


async def test_purge_logs_what_it_cannot_delete_and_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeAgent(delete=True)
    async with backend(fake) as b:
        first, second = await opened(b, tmp_path), await opened(b, tmp_path)
        fake.undeletable.add(first)
        fake.calls.clear()
        with caplog.at_level(logging.INFO), anyio.fail_after(10):
            await b.purge([Conversation(first, str(tmp_path)), Conversation(second, str(tmp_path))])
    # No session/close advertised: none sent.
    assert fake.calls == [("delete", first), ("delete", second)]
    assert f"its session {first} (in {tmp_path}) could not be deleted" in caplog.text


async def test_an_agent_without_session_delete_keeps_its_sessions_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeAgent()
    async with backend(fake) as b:
        session_id = await opened(b, tmp_path)
        fake.calls.clear()
        with caplog.at_level(logging.INFO), anyio.fail_after(10):
            await b.purge([Conversation(session_id, str(tmp_path))])
    assert fake.calls == []
    assert "has no session/delete" in caplog.text and session_id in caplog.text


async def test_an_agent_that_cannot_start_leaves_its_sessions_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with anyio.create_task_group() as tg:
        b = AcpBackend("gone", AcpAgentConfig(command=["no-such-acp-agent-here"]), tg)
        with caplog.at_level(logging.WARNING), anyio.fail_after(10):
            await b.purge([Conversation("s1", str(tmp_path))])
        tg.cancel_scope.cancel()
    assert "ACP agent gone could not be started to delete its sessions ['s1']" in caplog.text
