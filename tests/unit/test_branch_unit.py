"""Unit tests of branches (`coven/branch`, `Hub.branch`) against the in-process fake backend: a
new session holding its parent's conversation, which the parent never hears of."""

from __future__ import annotations

from pathlib import Path

import pytest

from coven_ls import protocol
from coven_ls.core.agent import Copy
from coven_ls.core.session import Session
from coven_ls.protocol import Kind

from ..fakes import Gate, copied_up_to, copies, reply, started_from
from .test_hub_unit import PARENT_AGENT, Rig, running_hub, settings, start, trail, turn


async def idle_session(rig: Rig, prompt: str = "Look around") -> Session:
    session = await start(rig, prompt)
    await rig.client.wait_for(Kind.STATUS, session, status="idle")
    return session


async def test_a_branch_holds_the_conversation_and_the_parent_never_hears_of_it(
    tmp_path: Path,
) -> None:
    async with running_hub(settings(tmp_path, forkMode="approve")) as rig:
        parent = await idle_session(rig)
        before = trail(rig.client, parent)
        branch = await rig.hub.branch(rig.client, parent, None, "Try another way")
        await rig.client.wait_for(Kind.STATUS, branch, status="idle")
        listed = {info.sessionId: info for info in rig.hub.list_sessions()}

    [parents_agent, branchs_agent] = rig.backend.agents
    # The branch's CLI is a copy of the parent's conversation, in the parent's folder.
    assert started_from(branchs_agent.spec) == PARENT_AGENT and copies(branchs_agent.spec)
    assert copied_up_to(branchs_agent.spec) is None
    assert isinstance(branchs_agent.spec.start, Copy) and branchs_agent.spec.start.new_id
    assert branchs_agent.spec.cwd == parent.config.cwd
    assert branchs_agent.sent == ["Try another way"]
    # The parent: the same turns, the same events, no fork, not paused.
    assert parents_agent.sent == ["Look around"]
    assert trail(rig.client, parent) == before
    assert [e["kind"] for e in rig.client.of(branch)][:2] == [Kind.STATUS, Kind.PROMPT]
    info = listed[branch.id]
    assert (info.parentId, info.forkId, info.label) == (parent.id, None, None)
    assert info.branchedFrom == protocol.BranchedFrom(atMessageId=None)
    assert info.title == "Try another way" and info.worktree is None and info.isolation is None
    assert listed[parent.id].branchedFrom is None


async def test_a_branch_at_a_message_without_a_prompt_waits_for_one(tmp_path: Path) -> None:
    async with running_hub(settings(tmp_path)) as rig:
        parent = await idle_session(rig)
        early = await rig.client.wait_for(Kind.TEXT, parent)
        await turn(rig, parent, "more")
        branch = await rig.hub.branch(rig.client, parent, early["messageId"], None)
        await rig.client.wait_for(Kind.STATUS, branch, status="idle")
        assert len(rig.backend.agents) == 1  # no CLI until the branch gets a message
        branch.send("Go on from there")
        await rig.client.wait_for(Kind.TURN_RESULT, branch)
        info = branch.info()

    spec = rig.backend.agents[-1].spec
    assert isinstance(spec.start, Copy)
    assert (spec.start.conversation_id, spec.start.up_to) == (PARENT_AGENT, early["messageId"])
    assert info.branchedFrom == protocol.BranchedFrom(atMessageId=early["messageId"])
    assert info.title == parent.title


async def test_a_branch_is_refused_while_busy_blank_at_an_unknown_message_or_unstarted(
    tmp_path: Path,
) -> None:
    gate = Gate()
    async with running_hub(settings(tmp_path)) as rig:
        steps = reply("thinking it over", agent_session_id=PARENT_AGENT)
        steps.insert(1, gate)
        rig.backend.add(steps)
        session = await start(rig, "Look around")
        await gate.wait_reached()
        with pytest.raises(protocol.CovenError) as busy:
            await rig.hub.branch(rig.client, session, None, "x")
        gate.open()
        await rig.client.wait_for(Kind.STATUS, session, status="idle")
        with pytest.raises(protocol.CovenError) as blank:
            await rig.hub.branch(rig.client, session, None, "  ")
        with pytest.raises(protocol.CovenError) as unknown:
            await rig.hub.branch(rig.client, session, "msg-nowhere", None)
        unstarted = await rig.hub.branch(rig.client, session, None, None)
        with pytest.raises(protocol.CovenError) as empty:
            await rig.hub.branch(rig.client, unstarted, None, None)
        assert [s.id for s in rig.hub.children_of(session)] == [unstarted.id]

    assert busy.value.code == protocol.ErrorCode.InvalidState
    assert busy.value.data == {"sessionId": session.id, "status": "running"}
    assert blank.value.code == unknown.value.code == -32602
    assert "msg-nowhere" in unknown.value.message
    assert empty.value.code == protocol.ErrorCode.InvalidState
    assert "no agent conversation" in empty.value.message


async def test_a_branch_outlives_its_parents_close_and_a_restart(tmp_path: Path) -> None:
    cfg = settings(tmp_path, stateDir=str(tmp_path / "state"))
    async with running_hub(cfg) as rig:
        parent = await idle_session(rig)
        branch = await rig.hub.branch(rig.client, parent, None, None)
        await rig.client.wait_for(Kind.STATUS, branch, status="idle")
        await rig.hub.close(parent)
        assert (parent.status, branch.status) == ("closed", "idle")
        await rig.hub.flushed()

    async with running_hub(cfg) as rig:
        restored = rig.hub.get(branch.id)
        info = restored.info()
        restored.send("Now go on")
        await rig.client.wait_for(Kind.TURN_RESULT, restored)

    assert (info.parentId, info.branchedFrom) == (parent.id, protocol.BranchedFrom(None))
    # Its CLI never started before the restart: it starts from the parent's conversation.
    [agent] = rig.backend.agents
    assert (started_from(agent.spec), copies(agent.spec), agent.sent) == (
        PARENT_AGENT,
        True,
        ["Now go on"],
    )
