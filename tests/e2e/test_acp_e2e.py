"""`coven-ls acp` driven by the official ACP Python SDK's client side (`spawn_agent_process`,
`ClientSideConnection`), through the real CLI against the scripted model."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from acp import PROTOCOL_VERSION, RequestError, text_block
from acp.schema import AllowedOutcome, DeniedOutcome, RequestPermissionResponse
from acp.stdio import spawn_agent_process

from coven_ls.testing.scripted_model import ScriptedModel, ToolUse, Usage, reply

from ..harness import processes_with_env, wait_until
from .acp_real import CLAUDE_AGENT_ACP, INSTALL, agents_path

Answer = Callable[[Any, list[Any]], str | None]


class Editor:
    """An ACP client: records every update, answers permission requests with `answer`."""

    def __init__(self) -> None:
        self.updates: list[tuple[str, Any]] = []
        self.asked: list[tuple[str, Any, list[str]]] = []
        self.answer: Answer = lambda _call, _options: "allow_once"
        self._changed = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update))
        self._changed.set()

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> RequestPermissionResponse:
        ids = [o.option_id for o in options]
        self.asked.append((session_id, tool_call, ids))
        self._changed.set()
        choice = self.answer(tool_call, ids)
        if choice is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=choice)
        )

    async def wait(self, check: Callable[[], bool], what: str, timeout: float = 60) -> None:
        async def until() -> None:
            while not check():
                self._changed.clear()
                await self._changed.wait()

        try:
            await asyncio.wait_for(until(), timeout)
        except asyncio.TimeoutError:
            raise AssertionError(f"timed out waiting for {what}") from None

    def of(self, session_id: str, kind: str) -> list[Any]:
        return [u for s, u in self.updates if s == session_id and u.session_update == kind]

    def text(self, session_id: str) -> str:
        return "".join(u.content.text for u in self.of(session_id, "agent_message_chunk"))


class Agent:
    def __init__(self, conn: Any, editor: Editor, workspace: Path) -> None:
        self.conn, self.editor, self.workspace = conn, editor, workspace

    async def new(self) -> str:
        return (await self.conn.new_session(cwd=str(self.workspace), mcp_servers=[])).session_id

    async def prompt(self, session_id: str, text: str) -> Any:
        return await self.conn.prompt(session_id=session_id, prompt=[text_block(text)])


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "workspace").mkdir()
    return tmp_path


@asynccontextmanager
async def acp_agent(
    home: Path, model: ScriptedModel, extra_env: dict[str, str] | None = None
) -> AsyncIterator[Agent]:
    """`coven-ls acp` in `home`; on leaving, its stdin is closed and no process of it may
    remain."""
    env = {
        **model.cli_environ(home / "claude-config"),
        "XDG_STATE_HOME": str(home / "state"),
        **(extra_env or {}),
    }
    editor = Editor()
    async with spawn_agent_process(
        editor, sys.executable, "-m", "coven_ls", "acp",
        env=env, cwd=home / "workspace",
        transport_kwargs={"stderr": None, "shutdown_timeout": 30},
        use_unstable_protocol=True,
    ) as (conn, _process):  # fmt: skip
        started = await conn.initialize(protocol_version=PROTOCOL_VERSION)
        assert started.protocol_version == PROTOCOL_VERSION
        assert started.agent_capabilities.load_session is True
        yield Agent(conn, editor, home / "workspace")
    config = str(home / "claude-config")
    await wait_until(lambda: not processes_with_env(config), 30, "agent processes to end")


async def test_a_prompt_streams_its_answer(home: Path, model: ScriptedModel) -> None:
    model.on(
        "Hello", "Hi there, in pieces.", chunk_chars=4, chunk_delay=0.01,
        usage=Usage(300, 20, cache_read_input_tokens=5000, cache_creation_input_tokens=700),
    )  # fmt: skip
    async with acp_agent(home, model) as agent:
        sid = await agent.new()
        done = await agent.prompt(sid, "Hello")
        assert done.stop_reason == "end_turn"
        chunks = agent.editor.of(sid, "agent_message_chunk")
        assert len(chunks) > 1 and agent.editor.text(sid) == "Hi there, in pieces."
        [info] = agent.editor.of(sid, "session_info_update")
        assert info.title == "Hello"
        # The context is the request's input side, against the scripted model's real window
        # (claude-opus-5-5: 1M in coven-ls's table).
        [usage] = agent.editor.of(sid, "usage_update")
        assert (usage.used, usage.size) == (300 + 5000 + 700, 1_000_000)


async def test_a_tool_is_asked_about_allowed_then_rejected(
    home: Path, model: ScriptedModel
) -> None:
    model.on("Make it", ToolUse("Bash", {"command": "touch made.txt && echo made-it"}))
    model.on("made-it", "Made.")
    model.on("Make another", ToolUse("Bash", {"command": "touch other.txt && echo made-other"}))
    model.on("Denied by the user", "Not allowed, so I stopped.")
    async with acp_agent(home, model) as agent:
        sid = await agent.new()
        assert (await agent.prompt(sid, "Make it")).stop_reason == "end_turn"
        [(asked_in, call, options)] = agent.editor.asked
        assert asked_in == sid and options == ["allow_once", "allow_always", "reject_once"]
        assert call.kind == "execute" and "touch made.txt" in call.title
        [started] = agent.editor.of(sid, "tool_call")
        assert started.tool_call_id == call.tool_call_id
        [finished] = agent.editor.of(sid, "tool_call_update")
        assert finished.status == "completed" and "made-it" in finished.content[0].content.text
        assert (agent.workspace / "made.txt").exists()

        agent.editor.answer = lambda _call, _options: "reject_once"
        assert (await agent.prompt(sid, "Make another")).stop_reason == "end_turn"
        assert not (agent.workspace / "other.txt").exists()
        assert agent.editor.text(sid).endswith("Not allowed, so I stopped.")


FORK = "Splitting.\n<fork>\n- Write the docs\n- Fix the bugs\n</fork>"


async def test_a_model_fork_is_approved_shown_as_a_plan_and_answered(
    home: Path, model: ScriptedModel
) -> None:
    model.on("Plan the release", FORK, times=1, usage=Usage(500, 20, cache_read_input_tokens=9500))
    model.on("You were assigned 'Write the docs'", "Docs are written.")
    model.on("You were assigned 'Fix the bugs'", "Bugs are fixed.")
    model.on("<fork-results>", "Both parts are done.")
    async with acp_agent(home, model) as agent:
        sid = await agent.new()
        done = await agent.prompt(sid, "Plan the release")
        # The answer came only after the results turn.
        assert done.stop_reason == "end_turn"
        assert agent.editor.text(sid).endswith("Both parts are done.")
        [(asked_in, proposal, options)] = agent.editor.asked
        assert asked_in == sid and options == ["allow_once", "reject_once"]
        assert proposal.raw_input["tasks"] == ["Write the docs", "Fix the bugs"]
        # The parent's context (the scripted request's input side) and what the fork costs.
        estimate = proposal.raw_input["estimate"]
        assert (estimate["contextTokens"], estimate["tokens"]) == (10_000, 20_000)
        assert estimate["window"] == 1_000_000 and estimate["pricedAs"] == "cacheRead"
        shown = proposal.content[0].content.text
        assert "Context: 10k / 1M tokens (1%)" in shown
        # Reading the parent's 10k, and writing its last answer and their briefs to the cache.
        written = estimate["writeTokens"]
        assert written > 0
        assert (
            f"Fork cost: 2 × 10k = 20k tokens read from the cache + {written} written to it ≈ $"
            in shown
        )

        plans = agent.editor.of(sid, "plan")
        assert [e.content for e in plans[0].entries] == ["Write the docs", "Fix the bugs"]
        assert [e.status for e in plans[0].entries] == ["pending", "pending"]
        assert [e.status for e in plans[-1].entries] == ["completed", "completed"]
        [fork_call] = agent.editor.of(sid, "tool_call")
        assert fork_call.title == "Fork: 2 tasks"
        last = agent.editor.of(sid, "tool_call_update")[-1]
        assert last.tool_call_id == fork_call.tool_call_id and last.status == "completed"
        shown = last.content[0].content.text
        assert "Docs are written." in shown and "Bugs are fixed." in shown

        listed = (await agent.conn.list_sessions(cwd=str(agent.workspace))).sessions
        children = [s for s in listed if s.field_meta["coven"]["parentId"] == sid]
        assert sorted(c.title for c in children) == ["Fix the bugs", "Write the docs"]
        # A child's whole conversation, loaded like any session.
        child = children[0].session_id
        await agent.conn.load_session(cwd=str(agent.workspace), session_id=child, mcp_servers=[])
        assert agent.editor.text(child).strip() in ("Docs are written.", "Bugs are fixed.")


async def test_cancel_mid_turn_answers_cancelled_and_the_session_goes_on(
    home: Path, model: ScriptedModel
) -> None:
    model.on("Slowly", "Too late.", latency=120, times=1)
    model.on("Again", "Answered.")
    async with acp_agent(home, model) as agent:
        sid = await agent.new()
        running = asyncio.create_task(agent.prompt(sid, "Slowly"))
        await asyncio.to_thread(
            model.wait_for_requests, 1, 90, lambda r: "Slowly" in r.last_user_text
        )
        await agent.conn.cancel(session_id=sid)
        assert (await asyncio.wait_for(running, 60)).stop_reason == "cancelled"
        assert (await agent.prompt(sid, "Again")).stop_reason == "end_turn"
        assert agent.editor.text(sid).endswith("Answered.")


async def test_a_session_is_loaded_again_after_a_restart(home: Path, model: ScriptedModel) -> None:
    model.on("Remember this", "Remembered.")
    async with acp_agent(home, model) as first:
        sid = await first.new()
        await first.prompt(sid, "Remember this")
    async with acp_agent(home, model) as second:
        listed = (await second.conn.list_sessions(cwd=str(second.workspace))).sessions
        assert [s.session_id for s in listed] == [sid]
        await second.conn.load_session(cwd=str(second.workspace), session_id=sid, mcp_servers=[])
        [said] = second.editor.of(sid, "user_message_chunk")
        assert said.content.text == "Remember this"
        assert second.editor.text(sid) == "Remembered."


async def test_bad_params_are_json_rpc_errors(home: Path, model: ScriptedModel) -> None:
    async with acp_agent(home, model) as agent:
        with pytest.raises(RequestError) as caught:
            await agent.prompt("s-nope", "Hello")
        assert caught.value.code == -32001 and "s-nope" in str(caught.value)
        with pytest.raises(RequestError) as caught:
            await agent.conn.new_session(cwd="relative/path", mcp_servers=[])
        assert caught.value.code == -32602
        sid = await agent.new()
        with pytest.raises(RequestError) as caught:
            await agent.conn.set_session_mode(session_id=sid, mode_id="sideways")
        assert caught.value.code == -32602


async def test_cancel_mid_fork_answers_cancelled(home: Path, model: ScriptedModel) -> None:
    model.on("Plan the release", FORK, times=1)
    model.on("You were assigned", "Too late.", latency=120)
    model.on("Again", "Answered after the fork.")
    async with acp_agent(home, model) as agent:
        sid = await agent.new()
        running = asyncio.create_task(agent.prompt(sid, "Plan the release"))

        def children_running() -> bool:
            plans = agent.editor.of(sid, "plan")
            return bool(plans) and all(e.status == "in_progress" for e in plans[-1].entries)

        await agent.editor.wait(children_running, "both children to run")
        await agent.conn.cancel(session_id=sid)
        assert (await asyncio.wait_for(running, 60)).stop_reason == "cancelled"
        assert (await agent.prompt(sid, "Again")).stop_reason == "end_turn"
        assert agent.editor.text(sid).endswith("Answered after the fork.")


async def test_acp_fork_is_a_branch(home: Path, model: ScriptedModel) -> None:
    """session/fork copies the conversation into a session of its own, ready for a prompt; the
    parent is left as it is and never hears of it."""
    model.on("Look around", "I saw a zebra.")
    model.on("Go on here", lambda r: reply(f"saw-zebra={'zebra' in r.all_text}"))
    async with acp_agent(home, model) as agent:
        sid = await agent.new()
        await agent.prompt(sid, "Look around")
        heard = len([u for s, u in agent.editor.updates if s == sid])
        forked = await agent.conn.fork_session(session_id=sid, cwd=str(agent.workspace))
        branch = forked.session_id
        assert branch != sid
        assert (await agent.prompt(branch, "Go on here")).stop_reason == "end_turn"
        assert agent.editor.text(branch).strip() == "saw-zebra=True"
        listed = (await agent.conn.list_sessions(cwd=str(agent.workspace))).sessions
        [info] = [s for s in listed if s.session_id == branch]
        assert info.field_meta["coven"]["parentId"] == sid
        assert info.field_meta["coven"]["branch"] is True
        assert info.field_meta["coven"]["forkId"] is None
        # The parent got nothing: no update, no results turn.
        assert len([u for s, u in agent.editor.updates if s == sid]) == heard
        assert not [r for r in model.requests if "<fork-results>" in r.last_user_text]


async def test_a_store_held_by_a_language_server_is_named(
    home: Path, model: ScriptedModel, coven_factory: Any
) -> None:
    """One store, one process at a time: while a language server has the folder's sessions,
    session/new there says whose they are."""
    server = await coven_factory(
        home="lsp", init_options={"stateDir": str(home / "state" / "coven-ls")}
    )
    async with acp_agent(home, model) as agent:
        with pytest.raises(RequestError) as caught:
            await agent.conn.new_session(cwd=str(server.workspace), mcp_servers=[])
        assert caught.value.code == -32005
        assert str(server.client._server.pid) in str(caught.value)


async def test_a_subagents_tool_calls_show_under_its_agent_call(
    home: Path, model: ScriptedModel
) -> None:
    """The CLI runs an Agent call's subagent in the background: its tool calls reach the editor
    as they happen, marked with the Agent call they belong to; its words stay its own."""
    (home / "workspace" / "notes.txt").write_text("hello notes\n")
    agent_call = {
        "description": "Read notes",
        "prompt": "Read the notes file",
        "subagent_type": "general-purpose",
    }
    model.on("Survey with a helper", ToolUse("Agent", agent_call))
    model.on("Async agent launched", "A helper is on it.")
    model.on(
        "Read the notes file",
        ToolUse("Read", {"file_path": str(home / "workspace" / "notes.txt")}),
        subagent=True,
    )
    model.on("hello notes", "The notes say hello.", subagent=True)
    model.on(lambda r: "task-notification" in r.all_text, "The helper read the notes.")
    async with acp_agent(home, model) as agent:
        sid = await agent.new()
        assert (await agent.prompt(sid, "Survey with a helper")).stop_reason == "end_turn"
        editor = agent.editor

        def calls() -> list[Any]:
            return editor.of(sid, "tool_call")

        await editor.wait(
            lambda: any(c.title.startswith("↳ Read") for c in calls()), "the subagent's Read"
        )
        [outer] = [c for c in calls() if c.title.startswith("Agent")]
        [inner] = [c for c in calls() if c.title.startswith("↳ Read")]
        assert inner.field_meta == {"coven": {"parentToolCallId": outer.tool_call_id}}
        await editor.wait(
            lambda: editor.text(sid).endswith("The helper read the notes."), "the report"
        )
        assert "The notes say hello." not in editor.text(sid)  # the subagent's own words


async def test_set_mode_changes_what_the_running_cli_asks(home: Path, model: ScriptedModel) -> None:
    """Switched to acceptEdits mid-session, the CLI writes files without asking."""
    target = home / "workspace" / "plan.md"
    model.on("Start", "Started.")
    model.on("Write the plan", ToolUse("Write", {"file_path": str(target), "content": "plan\n"}))
    model.on("File created", "Written.")
    async with acp_agent(home, model) as agent:
        sid = await agent.new()
        await agent.prompt(sid, "Start")
        await agent.conn.set_session_mode(session_id=sid, mode_id="acceptEdits")
        assert (await agent.prompt(sid, "Write the plan")).stop_reason == "end_turn"
        assert target.read_text() == "plan\n"
        assert agent.editor.asked == []  # nobody was asked


async def test_the_agent_is_a_session_setting_until_the_first_prompt(
    home: Path, model: ScriptedModel
) -> None:
    """ACP offers the agent as a session config option: Claude Code by default, Codex once
    chosen (before the first prompt); after it the choice is fixed."""
    from coven_ls.agents.codex import resolve_codex
    from coven_ls.testing.scripted_responses import ScriptedResponses

    try:
        resolve_codex(None)
    except Exception:
        pytest.skip("no codex binary (pip install coven-ls[codex])")
    with ScriptedResponses() as responses:
        responses.on("Hello codex", "Codex answers.")
        codex_env = responses.codex_env(home / "codex-home")
        async with acp_agent(home, model, codex_env) as agent:
            new = await agent.conn.new_session(cwd=str(agent.workspace), mcp_servers=[])
            option = new.config_options[0]
            assert option.id == "agent" and option.current_value == "claude"
            assert [o.value for o in option.options] == ["claude", "codex"]
            sid = new.session_id
            chosen = await agent.conn.set_config_option(
                config_id="agent", session_id=sid, value="codex"
            )
            assert chosen.config_options[0].current_value == "codex"
            with pytest.raises(RequestError):
                await agent.conn.set_config_option(
                    config_id="agent", session_id=sid, value="gemini"
                )
            done = await agent.prompt(sid, "Hello codex")
            assert done.stop_reason == "end_turn"
            assert agent.editor.text(sid) == "Codex answers."
            assert len(responses.requests) == 1 and model.requests == []
            with pytest.raises(RequestError) as fixed:
                await agent.conn.set_config_option(
                    config_id="agent", session_id=sid, value="claude"
                )
            assert fixed.value.code == -32602
            resumed = await agent.conn.resume_session(
                cwd=str(agent.workspace), session_id=sid, mcp_servers=[]
            )
            assert resumed.config_options[0].current_value == "codex"


async def test_fork_context_is_a_session_setting_for_the_forks_approved_in_it(
    home: Path, model: ScriptedModel
) -> None:
    """ACP's approval carries no choice: the session's `forkContext` config option says how the
    children of a fork approved in it start, and the question says it, with their agent."""
    model.on("Plan the release PARENT-SECRET", FORK, times=1)
    model.on("You were assigned 'Write the docs'", "Docs are written.")
    model.on("You were assigned 'Fix the bugs'", "Bugs are fixed.")
    model.on("<fork-results>", "Both parts are done.")
    async with acp_agent(home, model) as agent:
        new = await agent.conn.new_session(cwd=str(agent.workspace), mcp_servers=[])
        sid = new.session_id
        assert [o.id for o in new.config_options] == ["agent", "forkContext"]
        context = new.config_options[1]
        assert context.current_value == "inherit"
        assert [o.value for o in context.options] == ["inherit", "fresh", "transcript"]
        with pytest.raises(RequestError) as bad:
            await agent.conn.set_config_option(
                config_id="forkContext", session_id=sid, value="everything"
            )
        assert bad.value.code == -32602
        chosen = await agent.conn.set_config_option(
            config_id="forkContext", session_id=sid, value="fresh"
        )
        assert chosen.config_options[1].current_value == "fresh"

        done = await agent.prompt(sid, "Plan the release PARENT-SECRET")
        assert done.stop_reason == "end_turn"
        assert agent.editor.text(sid).endswith("Both parts are done.")
        [(_asked_in, proposal, _options)] = agent.editor.asked
        assert proposal.title == (
            "Fork into 2 parallel tasks (Claude Code children, starting afresh with only their "
            "task)"
        )
        # Its cost as those children pay it: fresh ones read no warm cache.
        assert proposal.raw_input["estimate"]["pricedAs"] == "input"
        resumed = await agent.conn.resume_session(
            cwd=str(agent.workspace), session_id=sid, mcp_servers=[]
        )
        assert resumed.config_options[1].current_value == "fresh"

    for label in ("Write the docs", "Fix the bugs"):
        first = next(
            r for r in model.requests if f"You were assigned '{label}'" in r.last_user_text
        )
        assert "PARENT-SECRET" not in first.all_text
        assert all(m["role"] != "assistant" for m in first.messages)


async def test_an_acp_agent_behind_coven_ls_is_picked_and_its_plan_reaches_the_editor(
    home: Path, model: ScriptedModel
) -> None:
    """An ACP editor picks claude-agent-acp (found on PATH) in the agent option: its TodoWrite list
    reaches the editor as ACP's `plan`."""
    if not CLAUDE_AGENT_ACP.is_file():
        pytest.skip(f"claude-agent-acp {INSTALL}")
    todos = [
        {"content": "Read the parser", "status": "completed", "activeForm": "Reading the parser"},
        {"content": "Fix the parser", "status": "in_progress", "activeForm": "Fixing the parser"},
    ]
    model.on(lambda r: "Write the title" in r.last_user_text, "A title")
    model.on("PLAN-IT", ToolUse("TodoWrite", {"todos": todos}), times=1)
    model.on(lambda r: True, "planned")
    env = {"PATH": agents_path(home / "agents-bin"), "IS_SANDBOX": "yes"}
    async with acp_agent(home, model, env) as agent:
        sid = await agent.new()
        chosen = await agent.conn.set_config_option(
            config_id="agent", session_id=sid, value="claude-agent-acp"
        )
        option = chosen.config_options[0]
        assert option.current_value == "claude-agent-acp"
        assert {"claude", "claude-agent-acp"} <= {o.value for o in option.options}
        done = await agent.prompt(sid, "PLAN-IT please")
        assert done.stop_reason == "end_turn"
        plans = agent.editor.of(sid, "plan")
        assert plans, [u.session_update for s, u in agent.editor.updates if s == sid]
        assert [(e.content, e.status) for e in plans[-1].entries] == [
            ("Read the parser", "completed"),
            ("Fixing the parser", "in_progress"),
        ]
        assert agent.editor.text(sid).endswith("planned")
