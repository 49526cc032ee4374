"""opencode (`opencode acp`, the real binary, pinned in tests/e2e/acp_agents) behind coven-ls as
the known agent `opencode`, against the scripted Chat Completions API: streaming, a shell command
asked about and answered from the client, usage and cost on the wire, cancel, and a restart of
the server mid-conversation. Fixtures: tests/e2e/conftest.py (start_opencode, scripted_chat)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pygls.exceptions import JsonRpcException

from coven_ls.testing.scripted_chat import ToolUse, Usage

from ..gitrepo import make_repo
from .acp_real import OPENCODE_WINDOW, cancel_then_restart, command_turn, opencode_cost, streamed


async def test_opencode_streams_asks_before_a_command_and_reports_its_cost(
    start_opencode, scripted_chat
) -> None:
    # Each model call reports these tokens; opencode prices them (acp_real.OPENCODE_PRICE).
    usage = Usage(input_tokens=2000, output_tokens=40)
    scripted_chat.on("hello", "Hello from opencode!", chunk_chars=4, usage=usage)
    scripted_chat.on("WRITE-ONE", ToolUse("bash", {"command": "echo one > one.txt",
            "description": "Writes one.txt"}), times=1, usage=usage)  # fmt: skip
    scripted_chat.on(lambda r: r.last_is_tool_result, "the command ran", usage=usage)
    coven = await start_opencode()
    offered = coven.init_result.capabilities.experimental["coven"]["agents"]
    # Known (known.py) to report its cost, and not to copy into another folder.
    assert {"name": "opencode", "kind": "acp", "fork": "transcript", "cost": True} in offered
    asked: list[dict] = []
    coven.permission_answer = lambda request: asked.append(request) or {"allow": True}
    sid = await coven.start("hello there")
    first = await coven.wait_kind(sid, "turnResult")
    assert first["text"] == "Hello from opencode!" and not first["isError"], first
    assert streamed(coven, sid) == "Hello from opencode!"
    assert len([d for d in coven.deltas if d["sessionId"] == sid]) > 1
    # The gauge is opencode's usage_update: what is in the context, in the model's window.
    assert first["contextUsage"]["tokens"] == usage.input_tokens
    assert first["contextUsage"]["window"] == OPENCODE_WINDOW
    # ACP's cost (cumulative, USD) is told as the turn's share: one model call's price (the
    # session's title request is opencode's own, not the session's).
    one_call = opencode_cost(usage.input_tokens, usage.output_tokens)
    assert first["costUsd"] == pytest.approx(one_call, rel=1e-3)
    # The tokens are the prompt answer's `usage` (unstable in ACP), which opencode sends.
    assert (first["usage"]["inputTokens"], first["usage"]["outputTokens"]) == (2000, 40)
    await coven.wait_status(sid, "idle")

    second = await command_turn(coven, sid, asked)
    # Two model calls: the command, then the answer after its output.
    assert second["costUsd"] == pytest.approx(2 * one_call, rel=1e-3)
    await coven.wait_status(sid, "idle", after_seq=second["seq"] - 1)
    [info] = (await coven.request("coven/listSessions", {}))["sessions"]
    assert info["agent"] == "opencode"
    assert info["costUsd"] == pytest.approx(3 * one_call, rel=1e-3)


async def test_opencode_cancel_then_a_restart_resumes_the_session(
    start_opencode, scripted_chat
) -> None:
    _, _, result, _ = await cancel_then_restart(start_opencode, scripted_chat, "opencode")
    # session/resume: the model saw the conversation from before the restart.
    assert "Noted: pineapple." in scripted_chat.requests[-1].all_text
    # The resumed session's cumulative cost includes what it spent before: the first figure
    # after the restart is its base, so this turn's share is unknown (absent), not guessed.
    assert "costUsd" not in result, result


@pytest.mark.usefixtures("no_user_git_config")
async def test_opencode_forks_into_transcript_children_whose_work_is_merged_back(
    start_opencode, scripted_chat, tmp_path: Path
) -> None:
    """opencode advertises session/fork, but its copy keeps the parent's folder (known.py), so
    the `<fork>` in its answer forks into children given the parent's conversation written out
    (`transcript`), each in its worktree, their commands asked about and their files merged back
    into the user's checkout; `inherit` is refused with the reason."""
    repo = make_repo(tmp_path / "repo", {"README": "base\n"}, message="base")
    for name in ("alpha", "beta"):
        scripted_chat.on(f"'Make {name}'", ToolUse("bash", {"command": f"printf '{name}\\n' > "
            f"{name}.txt", "description": f"Writes {name}.txt"}), times=1)  # fmt: skip
    scripted_chat.on(lambda r: r.last_is_tool_result, "Made it.")
    scripted_chat.on(re.compile(r"^<fork-results>"), "Both merged.")
    scripted_chat.on("Split it", "Splitting.\n<fork>\n- Make alpha\n- Make beta\n</fork>")
    coven = await start_opencode(init_options={"forkMode": "auto"})
    asked: list[dict] = []
    coven.permission_answer = lambda request: asked.append(request) or {"allow": True}
    sid = await coven.start("Split it", cwd=str(repo))
    started = await coven.wait_kind(sid, "forkStarted")
    assert started["isolation"] == "worktree" and started["context"] == "transcript", started
    done = await coven.wait_kind(sid, "turnResult", count=2)
    assert done["text"] == "Both merged.", done
    assert (repo / "alpha.txt").read_text() == "alpha\n"
    assert (repo / "beta.txt").read_text() == "beta\n"
    assert sorted(q["input"]["command"].split(" > ")[1] for q in asked) == [
        "alpha.txt",
        "beta.txt",
    ]
    # Each child's first prompt held the parent's conversation as coven-ls recorded it.
    for label in ("Make alpha", "Make beta"):
        first = next(r for r in scripted_chat.requests if f"'{label}'" in r.last_user_text)
        written = first.last_user_text.split("\n<conversation>\n")[1]
        assert "Split it" in written and "Splitting." in written
    listed = {
        s["sessionId"]: s for s in (await coven.request("coven/listSessions", {}))["sessions"]
    }
    for child in started["children"]:
        info = listed[child["sessionId"]]
        assert info["agent"] == "opencode" and info["changes"]["merge"] == "applied", info
        assert info["agentSessionId"] != listed[sid]["agentSessionId"]
    await coven.wait_status(sid, "idle", after_seq=done["seq"] - 1)
    with pytest.raises(JsonRpcException) as refused:
        await coven.request(
            "coven/fork", {"sessionId": sid, "tasks": ["a", "b"], "context": "inherit"}
        )
    assert "keeps the parent's folder" in str(refused.value)
