"""Forks and branches of ACP sessions through the core, against the scripted ACP agent
(tests/acp_fake_agent.py) in this process, with and without `session/fork`: the fork
instructions on the first prompt, children by `session/fork` or from a transcript of what
coven-ls recorded, `inherit` refused where the agent cannot copy, branches, children of another
agent, and what `capabilities.experimental.coven.agents` says of each agent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from coven_ls import protocol
from coven_ls.agents import REGISTRY
from coven_ls.agents.acp import AcpBackend
from coven_ls.agents.acp.instructions import OPEN
from coven_ls.core.agent import AgentSpec, Copy, Resume
from coven_ls.core.hub import Hub
from coven_ls.core.session import Session
from coven_ls.lsp.connection import offer
from coven_ls.protocol import Kind
from coven_ls.protocol.events import ENVELOPE_FIELDS, check_event
from coven_ls.protocol.types import AcpAgentConfig, ForkChoices

from ..acp_fake_agent import FakeAgent, connector, cwd_of
from ..fakes import FakeBackend, reply
from .test_acp_agents_unit import Asker, turn
from .test_hub_unit import LIMIT, PLAN, RecordingClient, fork_tag, settings

CONFIG = AcpAgentConfig(command=["fake-acp"])
TASKS = ["alpha", "beta"]


def scripted(fork: bool) -> FakeAgent:
    """The fake ACP agent: PLAN forks into TASKS, a child answers for its task."""
    fake = FakeAgent(fork=fork)
    for label in TASKS:
        fake.replies[f"You were assigned '{label}'"] = f"answer for {label}"
    fake.replies[PLAN] = fork_tag(TASKS)
    return fake


def written(prompt: str) -> str:
    """The conversation a prompt holds written out (core/fork/transcript.py)."""
    return prompt.split("\n<conversation>\n")[1].split("\n</conversation>")[0]


def own_prompts(fake: FakeAgent, session_id: str) -> list[str]:
    return [text for sid, text in fake.prompts if sid == session_id]


# --- the adapter


async def test_the_fork_instructions_lead_a_new_sessions_first_prompt_only(
    tmp_path: Path,
) -> None:
    fake = FakeAgent()
    async with anyio.create_task_group() as tg:
        b = AcpBackend("fake", CONFIG, tg, connect=connector(fake))
        spec = AgentSpec(cwd=str(tmp_path), append_system_prompt="FORK RULES")
        agent = await b.open(spec, Asker())
        await turn(agent, "first")
        await turn(agent, "second")
        await agent.close()
        # A copy holds them from its parent's first prompt; a resumed session from its own.
        for start in (Copy("s1"), Resume("s1")):
            again = await b.open(
                AgentSpec(str(tmp_path), start=start, append_system_prompt="X"), Asker()
            )
            await turn(again, "later")
            await again.close()
        tg.cancel_scope.cancel()
    first, second, *later = [text for _sid, text in fake.prompts]
    assert first.startswith(OPEN) and "FORK RULES" in first and first.endswith("\n\nfirst")
    assert second == "second"
    assert later == ["later", "later"]


async def test_what_an_acp_agent_can_do_is_learned_when_it_starts_or_asked(
    tmp_path: Path,
) -> None:
    for fork in (True, False):
        fake = FakeAgent(fork=fork)
        async with anyio.create_task_group() as tg:
            b = AcpBackend("fake", CONFIG, tg, connect=connector(fake))
            unknown = b.abilities()
            assert (unknown.kind, unknown.copies, unknown.reports_cost) == ("acp", None, None)
            assert not unknown.copies_up_to_a_message and not unknown.reads_conversations
            assert offer("fake", unknown) == protocol.AgentOffer(
                name="fake", kind="acp", fork=None, cost=None
            )
            asked = await b.find_abilities()  # starts the agent once to ask
            assert asked.copies is fork and not fake.prompts
            assert offer("fake", asked).fork == ("inherit" if fork else "transcript")
            if not fork:
                assert "has no session/fork" in (asked.no_copy_reason or "")
            agent = await b.open(AgentSpec(cwd=str(tmp_path)), Asker())
            await turn(agent, "hello")
            await agent.close()
            assert b.abilities().reports_cost is True  # its usage_update had a cost in USD
            tg.cancel_scope.cancel()

    fake = FakeAgent(currency="EUR")
    async with anyio.create_task_group() as tg:
        b = AcpBackend("fake", CONFIG, tg, connect=connector(fake))
        agent = await b.open(AgentSpec(cwd=str(tmp_path)), Asker())
        assert b.abilities().copies is True  # known from its initialize
        await turn(agent, "hello")
        await agent.close()
        assert b.abilities().reports_cost is False  # a cost in EUR is no cost coven can give
        tg.cancel_scope.cancel()


# --- through the hub


class Rig:
    def __init__(self, hub: Hub, client: RecordingClient, fake: FakeAgent, claude: FakeBackend):
        self.hub, self.client, self.fake, self.claude = hub, client, fake, claude

    async def start(self, prompt: str, agent: str = "fake") -> Session:
        params = protocol.StartSessionParams(prompt=prompt, agent=agent)
        return await self.hub.start_session(self.client, params)

    async def idle(self, session: Session, after: int = 0) -> None:
        await self.client.wait_for(Kind.STATUS, session, after=after, status="idle")

    def children(self, started: dict[str, Any]) -> list[Session]:
        return [self.hub.get(c["sessionId"]) for c in started["children"]]


@asynccontextmanager
async def acp_hub(tmp_path: Path, fake: FakeAgent, **options: Any) -> AsyncIterator[Rig]:
    """A hub whose agent `fake` is the scripted ACP agent (and `claude` the fake backend)."""
    claude = FakeBackend()
    claude.default_reply = lambda text: reply(f"claude: {text[-30:]}", agent_session_id="c-1")

    def make(agent: str, opts: protocol.InitializationOptions, tg: Any) -> Any:
        if agent == "claude":
            return claude
        return AcpBackend(agent, CONFIG, tg, connect=connector(fake))

    given = {"agents": {"fake": CONFIG}, "agent": "fake", "forkMode": "auto", **options}
    async with anyio.create_task_group() as tg:
        hub = Hub(tg, REGISTRY.with_backends(make))
        client = RecordingClient(settings(tmp_path, **given), None)
        hub.attach(client)
        try:
            yield Rig(hub, client, fake, claude)
        finally:
            with anyio.move_on_after(LIMIT):
                await hub.close_all()
            tg.cancel_scope.cancel()


async def test_a_fork_tag_in_an_acp_answer_forks_with_session_fork(tmp_path: Path) -> None:
    fake = scripted(fork=True)
    async with acp_hub(tmp_path, fake) as rig:
        parent = await rig.start(PLAN)
        started = await rig.client.wait_for(Kind.FORK_STARTED, parent)
        await rig.client.wait_for(Kind.FORK_FINISHED, parent)
        children = rig.children(started)
        await rig.idle(parent, after=started["seq"])
    assert started.get("context") is None  # inherit: the default where the agent copies
    # The parent's first prompt carried the fork instructions; each child is a session/fork of
    # its conversation (which holds them), so its prompt carries none again.
    [first] = own_prompts(fake, "s1")[:1]
    assert first.startswith(OPEN) and first.endswith(PLAN)
    assert [c for c in fake.calls if c[0] == "fork"] == [("fork", "s1"), ("fork", "s1")]
    for child in children:
        [brief] = own_prompts(fake, child.agent_session_id or "")
        assert not brief.startswith(OPEN) and "\n<conversation>\n" not in brief
        assert child.last_outcome is not None and child.last_outcome.ok


async def test_without_session_fork_children_start_from_coven_s_record(tmp_path: Path) -> None:
    fake = scripted(fork=False)
    async with acp_hub(tmp_path, fake) as rig:
        parent = await rig.start(PLAN)
        started = await rig.client.wait_for(Kind.FORK_STARTED, parent)
        await rig.client.wait_for(Kind.FORK_FINISHED, parent)
        children = rig.children(started)
        await rig.idle(parent, after=started["seq"])
    assert started["context"] == "transcript"  # the default for an agent that cannot copy
    assert not [c for c in fake.calls if c[0] == "fork"]
    for child in children:
        [brief] = own_prompts(fake, child.agent_session_id or "")
        conversation = written(brief)
        # What coven recorded: the user's prompt (not the instructions ahead of it) and the
        # answer with its tag.
        assert f"<user>\n{PLAN}\n</user>" in conversation and "<fork>" in conversation
        assert OPEN not in conversation
        assert f"You were assigned '{child.label}'" in brief
        assert child.last_outcome is not None and child.last_outcome.ok


async def test_inherit_is_refused_before_anything_is_made_where_the_agent_cannot_copy(
    tmp_path: Path,
) -> None:
    fake = scripted(fork=False)
    async with acp_hub(tmp_path, fake, forkMode="approve") as rig:
        parent = await rig.start("hello")
        await rig.idle(parent)
        inherit = ForkChoices(context="inherit")
        with pytest.raises(protocol.CovenError, match="has no session/fork") as refused:
            await rig.hub.forks.fork_by_hand(parent, ["a", "b"], choices=inherit)
        assert refused.value.code == protocol.ErrorCode.InvalidParams
        assert refused.value.data == {"field": "context"} or "context" in str(refused.value.data)
        # A proposal: its estimate and its approval refuse it too, and it stays proposed.
        rig.hub.get(parent.id).send(PLAN)
        proposed = await rig.client.wait_for(Kind.FORK_PROPOSED, parent)
        with pytest.raises(protocol.CovenError, match="has no session/fork"):
            await rig.hub.forks.estimate(proposed["forkId"], choices=inherit)
        with pytest.raises(protocol.CovenError, match="'transcript'"):
            rig.hub.forks.decide(proposed["forkId"], True, choices=inherit)
        fork = rig.hub.forks.get(proposed["forkId"])
        assert fork.state == "proposed" and not fork.children
        estimate = await rig.hub.forks.estimate(proposed["forkId"])
        assert estimate is not None and estimate.context == "transcript"
        rig.hub.forks.decide(proposed["forkId"], False)
    assert not [c for c in fake.calls if c[0] == "fork"]


async def test_a_branch_copies_at_the_last_message_and_writes_out_an_earlier_one(
    tmp_path: Path,
) -> None:
    fake = FakeAgent(fork=True)
    async with acp_hub(tmp_path, fake, forkMode="off") as rig:
        parent = await rig.start("one")
        await rig.idle(parent)
        early = await rig.client.wait_for(Kind.TEXT, parent)
        rig.hub.get(parent.id).send("two")
        second = await rig.client.wait_for(Kind.TEXT, parent, after=early["seq"])
        await rig.idle(parent, after=second["seq"])

        at_last = await rig.hub.branch(rig.client, parent, second["messageId"], "go on")
        await rig.client.wait_for(Kind.TURN_RESULT, at_last)
        at_early = await rig.hub.branch(rig.client, parent, early["messageId"], "other way")
        await rig.client.wait_for(Kind.TURN_RESULT, at_early)
        idle = await rig.hub.branch(rig.client, parent, early["messageId"], None)
        await rig.idle(idle)
        rig.hub.get(idle.id).send("later")
        await rig.client.wait_for(Kind.TURN_RESULT, idle)
    assert [c for c in fake.calls if c[0] == "fork"] == [("fork", "s1")]  # the last message
    assert own_prompts(fake, at_last.agent_session_id or "") == ["go on"]
    for branch, text in ((at_early, "other way"), (idle, "later")):
        [prompt] = own_prompts(fake, branch.agent_session_id or "")
        conversation = written(prompt)
        assert "<user>\none\n</user>" in conversation and "echo: one" in conversation
        assert "two" not in conversation  # cut at the earlier message
        assert prompt.endswith(f"\n\n{text}")
    # What the branch shows of its first message is the user's own.
    assert [e["text"] for e in rig.client.of(at_early) if e["kind"] == Kind.PROMPT] == ["other way"]


async def test_children_of_another_agent_start_from_a_transcript_both_ways(
    tmp_path: Path,
) -> None:
    fake = scripted(fork=True)
    async with acp_hub(tmp_path, fake, forkMode="off") as rig:
        # An ACP parent's claude children: the conversation from coven's record.
        parent = await rig.start("hello acp")
        await rig.idle(parent)
        fork = await rig.hub.forks.fork_by_hand(parent, TASKS, choices=ForkChoices(agent="claude"))
        await rig.client.wait_for(Kind.FORK_FINISHED, parent)
        assert fork.settings.context == "transcript"
        briefs = [a.sent[0] for a in rig.claude.agents]
        assert len(briefs) == 2
        assert all("<user>\nhello acp\n</user>" in b and "echo: hello acp" in b for b in briefs)

        # A claude parent's ACP children: the conversation claude keeps.
        from coven_ls.core.agent import Entry

        rig.claude.conversations = {"c-1": [Entry("user", "hi claude"), Entry("assistant", "yo")]}
        other = await rig.start("hi claude", agent="claude")
        await rig.idle(other)
        await rig.hub.forks.fork_by_hand(other, TASKS, choices=ForkChoices(agent="fake"))
        await rig.client.wait_for(Kind.FORK_FINISHED, other)
    acp_children = [sid for sid, text in fake.prompts if "<user>\nhi claude\n</user>" in text]
    assert len(acp_children) == 2
    assert not [c for c in fake.calls if c[0] == "fork"]  # another agent's: no session/fork


async def test_a_fork_approved_before_the_agent_was_asked_falls_back_to_a_transcript(
    tmp_path: Path,
) -> None:
    fake = scripted(fork=False)
    async with acp_hub(tmp_path, fake, forkMode="approve") as rig:
        parent = await rig.start("hello")
        await rig.idle(parent)
        backend = parent.backend
        assert isinstance(backend, AcpBackend)
        backend.learned.copies = None  # as after a restart: not asked yet
        rig.hub.get(parent.id).send(PLAN)
        proposed = await rig.client.wait_for(Kind.FORK_PROPOSED, parent)
        assert proposed["estimate"]["context"] == "inherit"  # the default while not known
        rig.hub.forks.decide(proposed["forkId"], True)
        started = await rig.client.wait_for(Kind.FORK_STARTED, parent)
        await rig.client.wait_for(Kind.FORK_FINISHED, parent)
        fork = rig.hub.forks.get(proposed["forkId"])
    # Asked at the fork's start: no session/fork, so the children got a transcript, and the
    # fork's choices keep it (a restart goes on with it).
    assert started["context"] == "transcript" and fork.choices.context == "transcript"
    assert backend.abilities().copies is False
    assert not [c for c in fake.calls if c[0] == "fork"]
    for child in rig.children(started):
        [brief] = own_prompts(fake, child.agent_session_id or "")
        assert "<user>\nhello\n</user>" in written(brief)


def test_the_record_reads_as_a_conversation_cut_at_a_message() -> None:
    from coven_ls.core.agent import Entry
    from coven_ls.core.fork.recorded import entries

    def event(kind: str, **fields: Any) -> dict[str, Any]:
        return {"sessionId": "s-1", "seq": 0, "kind": kind, "time": "", **fields}

    events = [
        event(Kind.STATUS, status="running"),
        event(Kind.PROMPT, text="look", origin="user"),
        event(Kind.THINKING, text="hmm", messageId="m1"),
        event(Kind.TOOL_USE, toolUseId="t1", name="Bash", input={"command": "ls"}, messageId="m1"),
        event(Kind.TEXT, text="inside a task", messageId="m9", parentToolUseId="t0"),
        event(Kind.TOOL_RESULT, toolUseId="t1", content="a.txt", isError=True),
        event(Kind.TEXT, text="found a.txt", messageId="m2"),
        event(Kind.PROMPT, text="more", origin="user"),
        event(Kind.TEXT, text="later", messageId="m3"),
    ]
    whole = entries(events)  # a background task's own message is not the conversation's
    assert whole == [
        Entry("user", "look"),
        Entry("thinking", "hmm"),
        Entry("toolCall", '{"command": "ls"}', name="Bash"),
        Entry("toolResult", "a.txt", error=True),
        Entry("assistant", "found a.txt"),
        Entry("user", "more"),
        Entry("assistant", "later"),
    ]
    assert entries(events, "m2") == whole[:5]
    assert entries(events, "m1") == whole[:3]  # through the message's last event


async def test_a_branch_of_an_agent_without_session_fork_is_a_transcript(tmp_path: Path) -> None:
    fake = FakeAgent(fork=False)
    async with acp_hub(tmp_path, fake, forkMode="off") as rig:
        parent = await rig.start("one")
        await rig.idle(parent)
        branch = await rig.hub.branch(rig.client, parent, None, "go on")
        await rig.client.wait_for(Kind.TURN_RESULT, branch)
    assert not [c for c in fake.calls if c[0] == "fork"]
    [prompt] = own_prompts(fake, branch.agent_session_id or "")
    assert "<user>\none\n</user>" in written(prompt) and prompt.endswith("\n\ngo on")
    assert branch.agent_session_id != parent.agent_session_id


async def test_an_acp_agents_plan_and_tool_updates_reach_the_client(tmp_path: Path) -> None:
    fake = FakeAgent()
    async with acp_hub(tmp_path, fake) as rig:
        session = await rig.start("plan")
        await rig.idle(session)
        said = [e for e in rig.client.events if e["sessionId"] == session.id]
    plans = [e["entries"] for e in said if e["kind"] == Kind.PLAN]
    assert plans == [
        [
            {"content": "Read the parser", "status": "in_progress", "priority": "high"},
            {"content": "Fix it", "status": "pending", "priority": "low"},
        ],
        [
            {"content": "Read the parser", "status": "completed", "priority": "medium"},
            {"content": "Fix it", "status": "completed", "priority": "medium"},
        ],
    ]
    updates = [e for e in said if e["kind"] == Kind.TOOL_UPDATE]
    where = updates[0]["locations"][0]["path"]  # in the folder the agent's session opened in
    assert where == str(Path(cwd_of(fake)) / "parser.py")
    assert [{k: v for k, v in u.items() if k not in ENVELOPE_FIELDS} for u in updates] == [
        {
            "toolUseId": "call-3",
            "status": "in_progress",
            "title": "Read parser.py",
            "content": "def parse(",
            "locations": [{"path": where, "line": 7}],
        },
        {
            "toolUseId": "call-3",
            "status": "completed",
            "content": "def parse(): ...",
        },
    ]
    kinds = [e["kind"] for e in said]
    # The update comes after the call it updates, and its result after the last update.
    assert kinds.index(Kind.TOOL_USE) < kinds.index(Kind.TOOL_UPDATE)
    assert max(i for i, k in enumerate(kinds) if k == Kind.TOOL_UPDATE) < kinds.index(
        Kind.TOOL_RESULT
    )
    for event in said:
        check_event(event)
