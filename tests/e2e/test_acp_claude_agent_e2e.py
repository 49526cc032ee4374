"""claude-agent-acp (`@agentclientprotocol/claude-agent-acp`, pinned in tests/e2e/acp_agents; it
declares Node >= 22 and runs on the machine's Node 20) behind coven-ls as the known agent
`claude-agent-acp`, against the scripted Messages API: streaming, a shell command asked about
(in its mode `default`, which coven-ls picks) and answered from the client, usage and cost on the
wire, cancel, and a restart of the server mid-conversation. The server runs with
`IS_SANDBOX=yes`: as root, the known agent's entry must keep it from the agent, or no session
starts. Fixtures: tests/e2e/conftest.py (start_claude_agent_acp, model)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from coven_ls.testing.scripted_model import ToolUse

from ..gitrepo import make_repo
from .acp_real import cancel_then_restart, command_turn, streamed


def after_tool(request) -> bool:
    return "Bash completed" in request.last_user_text


async def test_claude_agent_acp_streams_asks_before_a_command_and_reports_its_cost(
    start_claude_agent_acp, model
) -> None:
    model.on("hello", "Hello from claude-agent-acp!", chunk_chars=4)
    model.on("WRITE-ONE", ToolUse("Bash", {"command": "echo one > one.txt",
             "description": "Writes one.txt"}), times=1)  # fmt: skip
    model.on(after_tool, "the command ran")
    coven = await start_claude_agent_acp()
    offered = coven.init_result.capabilities.experimental["coven"]["agents"]
    assert any(a["name"] == "claude-agent-acp" and a["kind"] == "acp" for a in offered), offered
    asked: list[dict] = []
    coven.permission_answer = lambda request: asked.append(request) or {"allow": True}
    sid = await coven.start("hello there")
    first = await coven.wait_kind(sid, "turnResult")
    assert first["text"] == "Hello from claude-agent-acp!" and not first["isError"], first
    assert streamed(coven, sid) == "Hello from claude-agent-acp!"
    assert len([d for d in coven.deltas if d["sessionId"] == sid]) > 1
    gauge = first["contextUsage"]
    assert gauge["tokens"] > 0 and gauge["window"] and gauge["window"] > gauge["tokens"]
    assert first["costUsd"] > 0  # its usage_update's cost, in USD
    # The prompt answer's usage: the scripted API caches the prompt (as the real one does), so
    # its input may be all cache writes and reads.
    used = first["usage"]
    prompt_tokens = used["inputTokens"] + used["cacheReadTokens"] + used["cacheCreationTokens"]
    assert prompt_tokens > 0 and used["outputTokens"] > 0, used
    await coven.wait_status(sid, "idle")

    second = await command_turn(coven, sid, asked)
    assert second["costUsd"] > 0
    await coven.wait_status(sid, "idle", after_seq=second["seq"] - 1)
    [info] = (await coven.request("coven/listSessions", {}))["sessions"]
    assert info["agent"] == "claude-agent-acp"
    assert info["costUsd"] == pytest.approx(first["costUsd"] + second["costUsd"], rel=1e-3)


async def test_claude_agent_acp_cancel_then_a_restart_resumes_the_session(
    start_claude_agent_acp, model
) -> None:
    await cancel_then_restart(start_claude_agent_acp, model, "claude-agent-acp")
    # session/resume: the model saw the conversation from before the restart.
    main = [r for r in model.requests if "Which word" in r.last_user_text]
    assert main and "Noted: pineapple." in main[-1].all_text


@pytest.mark.usefixtures("no_user_git_config")
async def test_claude_agent_acp_forks_into_session_fork_children_whose_work_is_merged_back(
    start_claude_agent_acp, model, tmp_path: Path
) -> None:
    """claude-agent-acp has session/fork: the `<fork>` in its answer forks into children that
    continue the parent's own session (`inherit`), each in its worktree (session/fork's `cwd`),
    their commands asked about and their files merged back into the user's checkout."""
    repo = make_repo(tmp_path / "repo", {"README": "base\n"}, message="base")
    for name in ("alpha", "beta"):
        model.on(f"'Make {name}'", ToolUse("Bash", {"command": f"printf '{name}\\n' > "
            f"{name}.txt", "description": f"Writes {name}.txt"}), times=1)  # fmt: skip
    model.on(after_tool, "Made it.")
    model.on(re.compile(r"^<fork-results>"), "Both merged.")
    model.on("Split it", "Splitting.\n<fork>\n- Make alpha\n- Make beta\n</fork>")
    coven = await start_claude_agent_acp(init_options={"forkMode": "auto"})
    asked: list[dict] = []
    coven.permission_answer = lambda request: asked.append(request) or {"allow": True}
    sid = await coven.start("Split it", cwd=str(repo))
    started = await coven.wait_kind(sid, "forkStarted")
    # No `context`: the parent's conversation, continued natively (session/fork).
    assert started["isolation"] == "worktree" and "context" not in started, started
    done = await coven.wait_kind(sid, "turnResult", count=2)
    assert done["text"] == "Both merged.", done
    assert (repo / "alpha.txt").read_text() == "alpha\n"
    assert (repo / "beta.txt").read_text() == "beta\n"
    assert len(asked) == 2
    # Each child's first model request held the parent's conversation as the agent's own
    # messages, not written into its prompt.
    for label in ("Make alpha", "Make beta"):
        first = next(r for r in model.requests if f"'{label}'" in r.last_user_text)
        assert "Splitting." in first.all_text and "<conversation>" not in first.last_user_text
    listed = {
        s["sessionId"]: s for s in (await coven.request("coven/listSessions", {}))["sessions"]
    }
    for child in started["children"]:
        info = listed[child["sessionId"]]
        assert info["agent"] == "claude-agent-acp" and info["changes"]["merge"] == "applied", info


async def test_claude_agent_acp_shows_its_todo_list_as_a_plan(
    start_claude_agent_acp, model
) -> None:
    todos = [
        {"content": "Read the parser", "status": "completed", "activeForm": "Reading the parser"},
        {"content": "Fix the parser", "status": "in_progress", "activeForm": "Fixing the parser"},
        {"content": "Run the tests", "status": "pending", "activeForm": "Running the tests"},
    ]
    model.on("PLAN-IT", ToolUse("TodoWrite", {"todos": todos}), times=1)
    model.on(lambda r: True, "planned")  # the answer after the tool, whatever it said
    coven = await start_claude_agent_acp()
    coven.permission_answer = lambda request: {"allow": True}
    sid = await coven.start("PLAN-IT please")
    await coven.wait_kind(sid, "turnResult")
    # claude-agent-acp sends TodoWrite's list as ACP's `plan` (the step under way in its
    # `activeForm`): coven's `plan`, whole.
    plans = coven.of(sid, "plan")
    assert plans, [e["kind"] for e in coven.events if e["sessionId"] == sid]
    assert [(e["content"], e["status"]) for e in plans[-1]["entries"]] == [
        ("Read the parser", "completed"),
        ("Fixing the parser", "in_progress"),
        ("Run the tests", "pending"),
    ]
