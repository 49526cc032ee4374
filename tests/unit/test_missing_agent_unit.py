"""A stored session whose agent was removed from `initializationOptions.agents`: a restart keeps
it as it was (its agent, its events), refuses to run it with an error naming the agent and how
to bring it back, and still deletes it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from coven_ls import protocol
from coven_ls.core.hub import ClientSettings, Hub
from coven_ls.protocol import Kind
from coven_ls.protocol.types import AcpAgentConfig

from ..fakes import Gate
from .test_agents_unit import LIMIT, Factory, run
from .test_hub_unit import RecordingClient, running_hub, settings, start_fork


def options(tmp_path: Path, **agents: AcpAgentConfig) -> ClientSettings:
    return ClientSettings(
        str(tmp_path),
        protocol.InitializationOptions(stateDir=str(tmp_path / "state"), agents=agents or None),
    )


async def test_a_session_of_a_removed_agent_is_kept_refused_and_deletable(
    tmp_path: Path,
) -> None:
    configured = options(tmp_path, oc=AcpAgentConfig(command=[sys.executable]))
    ids: dict[str, Any] = {}

    async def first(hub: Hub, client: RecordingClient) -> None:
        session = await hub.start_session(
            client, protocol.StartSessionParams(prompt="hello", agent="oc")
        )
        with anyio.fail_after(LIMIT):
            await session.wait_settled()
        await hub.flushed()
        ids["id"] = session.id
        ids["agent_session"] = session.agent_session_id
        ids["events"] = await session.events_after(0)
        assert session.info().agent == "oc" and ids["agent_session"] is not None

    await run(configured, Factory(), first)

    restarted = Factory()

    async def second(hub: Hub, client: RecordingClient) -> None:
        session = hub.get(ids["id"])
        # Kept as it was: its agent, its conversation and its events.
        assert session.info().agent == "oc"
        assert session.agent_session_id == ids["agent_session"]
        assert await session.events_after(0) == ids["events"]
        assert [s.sessionId for s in hub.list_sessions()] == [ids["id"]]

        def refused(exc: pytest.ExceptionInfo[protocol.CovenError]) -> None:
            assert exc.value.code == protocol.ErrorCode.ClaudeUnavailable
            assert exc.value.data == {"agent": "oc", "sessionId": ids["id"]}
            assert "'oc'" in exc.value.message
            assert "initializationOptions.agents" in exc.value.message

        with pytest.raises(protocol.CovenError) as exc:
            session.send("again")
        refused(exc)
        with pytest.raises(protocol.CovenError) as exc:
            await hub.forks.fork_by_hand(session, ["a", "b"])
        refused(exc)
        with pytest.raises(protocol.CovenError) as exc:
            await hub.branch(client, session, None, "elsewhere")
        refused(exc)
        assert session.status == "idle"  # refused, not failed
        deleted, _kept = await hub.delete(session, purge=True)
        assert deleted == [ids["id"]] and hub.list_sessions() == []
        # No backend was ever made for the missing agent.
        assert "oc" not in restarted.backends

    await run(options(tmp_path), restarted, second)

    async def third(hub: Hub, client: RecordingClient) -> None:
        assert hub.list_sessions() == []  # the deletion was stored

    await run(configured, Factory(), third)


async def test_a_restored_fork_whose_children_ran_a_removed_agent_is_refused(
    tmp_path: Path,
) -> None:
    """A fork cut off by a restart, its children running an ACP agent that the restarted
    server's configuration no longer names: resuming it is the same clear refusal, nothing
    moves, and abandoning it still gives the parent what finished."""
    state = str(tmp_path / "state")
    agent = AcpAgentConfig(command=[sys.executable])
    cfg = settings(tmp_path, forkMode="auto", stateDir=state, agents={"oc": agent}, agent="oc")
    gates = {"beta": Gate()}
    async with running_hub(cfg, gates=gates) as rig:
        parent, children = await start_fork(rig)
        assert {c.config.agent for c in children.values()} == {"oc"}
        await rig.client.wait_for(Kind.STATUS, children["alpha"], status="idle")
        await gates["beta"].wait_reached()
        await rig.hub.flushed()
        await rig.kill()
    for store in rig.hub.stores.values():
        store.close()
    fork_id = next(e["forkId"] for e in rig.client.of(parent) if e["kind"] == Kind.FORK_STARTED)

    async with running_hub(settings(tmp_path, forkMode="auto", stateDir=state)) as rig:
        hub = rig.hub
        restored = hub.get(parent.id)
        await hub.flushed()
        assert hub.forks.get(fork_id).state == "interrupted"
        beta = children["beta"].id
        assert hub.get(beta).info().agent == "oc"
        with pytest.raises(protocol.CovenError) as refused:
            hub.forks.resume(fork_id)
        assert refused.value.code == protocol.ErrorCode.ClaudeUnavailable
        assert refused.value.data == {"agent": "oc", "sessionId": parent.id}
        assert "initializationOptions.agents" in refused.value.message
        # Nothing moved: the fork is still interrupted, nothing was started.
        assert hub.forks.get(fork_id).state == "interrupted"
        assert hub.get(beta).status == "interrupted" and rig.backend.agents == []
        hub.forks.abandon(fork_id)
        finished = await rig.client.wait_for(Kind.FORK_FINISHED, restored)
        assert [(r["label"], r["ok"]) for r in finished["results"]] == [
            ("alpha", True),
            ("beta", False),
        ]
