"""What a fork child inherits, and children of another agent, end to end: a real coven-ls, the
real `claude` CLI on the scripted Messages API and the real `codex` on the scripted Responses
API, through pytest-lsp's client. A `fresh` child starts with only its brief; a `transcript`
child's first request holds the parent's conversation written out, with the cuts and the
preamble; a Claude parent's children can be Codex sessions and the reverse, their work merged
back and their answers in the parent's `<fork-results>`."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coven_ls import protocol
from coven_ls.agents.codex import resolve_codex
from coven_ls.testing.scripted_model import ModelRequest, ScriptedModel, Thinking, ToolUse
from coven_ls.testing.scripted_responses import ScriptedResponses, command

from ..gitrepo import make_repo
from ..harness import Coven, wait_until

try:
    resolve_codex(None)
    HAVE_CODEX = True
except protocol.CovenError:
    HAVE_CODEX = False

needs_codex = pytest.mark.skipif(not HAVE_CODEX, reason="no codex binary (coven-ls[codex])")


def assigned(label: str) -> str:
    return f"You were assigned '{label}'"


def first_request(model: ScriptedModel, label: str) -> ModelRequest:
    return next(r for r in model.requests if assigned(label) in r.last_user_text)


async def results_turn(coven: Coven, sid: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The parent's `<fork-results>` prompt and the turn that read it."""
    prompt = await coven.wait_kind(sid, "prompt", origin="forkResults")
    turn = await coven.wait_for(
        lambda e: e["sessionId"] == sid and e["kind"] == "turnResult" and e["seq"] > prompt["seq"],
        what="the parent's turn after the fork",
    )
    return prompt, turn


async def test_a_fresh_child_holds_none_of_the_parents_conversation(
    coven: Coven, model: ScriptedModel
) -> None:
    model.on(assigned("Write the docs"), "Docs written afresh.")
    model.on("<fork-results>", "Thanks.")
    model.on("Look at PARENT-SECRET", "Looked at it: PARENT-ANSWER.")
    sid = await coven.start("Look at PARENT-SECRET")
    await coven.wait_kind(sid, "turnResult")
    await coven.wait_status(sid, "idle")
    await coven.request(
        protocol.FORK, {"sessionId": sid, "tasks": ["Write the docs"], "context": "fresh"}
    )
    [started] = [await coven.wait_kind(sid, "forkStarted")]
    prompt, turn = await results_turn(coven, sid)

    assert started["context"] == "fresh" and "agent" not in started
    child = first_request(model, "Write the docs")
    assert "PARENT-SECRET" not in child.all_text and "PARENT-ANSWER" not in child.all_text
    # A new conversation: no answer before its brief (the CLI's reminders aside).
    assert all(m["role"] != "assistant" for m in child.messages)
    assert child.last_user_text.startswith(assigned("Write the docs"))
    assert "Docs written afresh." in prompt["text"] and turn["text"] == "Thanks."


async def test_a_transcript_child_gets_the_conversation_with_the_cuts_and_a_preamble(
    coven: Coven, model: ScriptedModel
) -> None:
    """Three parent turns of about 120k tokens in all: the oldest (60k) is cut past the 100k
    limit; the 5,000-character tool result is cut to 1,500; the thinking is left out."""
    oldest = "OLDEST-MARK " + "o " * 120_000
    newest = "NEWEST-MARK " + "n " * 120_000
    model.on(assigned("Summarize"), "Summary written.")
    model.on("<fork-results>", "Thanks.")
    model.on("OLDEST-MARK", "Read the oldest.")
    model.on(
        "Run the big tool",
        Thinking("SECRET-THINKING"),
        ToolUse("Bash", {"command": "python3 -c \"print('R' * 5000)\""}),
    )
    model.on("RRRRRRRRRR", "The tool printed many Rs.")
    model.on("NEWEST-MARK", "Read the newest.")
    sid = await coven.start(oldest)
    for n, text in enumerate(("Run the big tool", newest), 2):
        await coven.wait_kind(sid, "turnResult", count=n - 1)
        await coven.wait_status(sid, "idle")
        await coven.request(protocol.SEND_MESSAGE, {"sessionId": sid, "text": text})
    last = await coven.wait_kind(sid, "turnResult", count=3)
    assert last["text"] == "Read the newest."
    await coven.wait_status(sid, "idle")
    await coven.request(
        protocol.FORK, {"sessionId": sid, "tasks": ["Summarize"], "context": "transcript"}
    )
    started = await coven.wait_kind(sid, "forkStarted")
    prompt, turn = await results_turn(coven, sid)

    assert started["context"] == "transcript"
    child = first_request(model, "Summarize")
    text = child.last_user_text
    # One prompt, the conversation written out and then the task: no answer before it.
    assert all(m["role"] != "assistant" for m in child.messages)
    assert text.startswith("You were forked from another session")
    assert text.endswith(assigned("Summarize"))
    # The oldest prompt alone is enough to cut: 60k tokens go, 60k are left.
    assert "the oldest 1 of its messages are left out" in text and "OLDEST-MARK" not in text
    assert "NEWEST-MARK" in text and "Read the newest." in text and "Run the big tool" in text
    assert "R" * 1_500 in text and "R" * 1_501 not in text
    assert "1 tool result longer than 1,500 characters is cut" in text
    assert "[… cut: 3,5" in text  # 5,000 Rs (and the newline the CLI may keep)
    assert "SECRET-THINKING" not in child.all_text and "thinking (1 blocks) is left out" in text
    assert "Summary written." in prompt["text"] and turn["text"] == "Thanks."


# --- children of another agent -------------------------------------------------------------------


@pytest.fixture
def responses() -> Iterator[ScriptedResponses]:
    with ScriptedResponses() as scripted:
        yield scripted


def small_repo(repo: Path) -> Path:
    """A git repository with one commit."""
    return make_repo(repo, {"README": "base\n"}, message="base")


@needs_codex
@pytest.mark.usefixtures("no_user_git_config")
async def test_a_claude_parent_with_codex_children(
    coven_factory, model: ScriptedModel, responses: ScriptedResponses, tmp_path: Path
) -> None:
    """The model forks; the user approves with the children as Codex sessions (a transcript of
    the Claude conversation each): their files are merged back, their answers reach the parent."""
    repo = small_repo(tmp_path / "repo")
    model.on("<fork-results>", "Both codex parts are in.")
    model.on("Split CLAUDE-PARENT", "Splitting.\n<fork>\n- Make alpha\n- Make beta\n</fork>")
    responses.on("'Make alpha'", command("printf 'alpha\\n' > alpha.txt"), times=1)
    responses.on("'Make beta'", command("printf 'beta\\n' > beta.txt"), times=1)
    responses.on("Process exited", "Made it in codex.")
    coven = await coven_factory(
        extra_env=responses.codex_env(tmp_path / "codex-home"),
        init_options={"forkMode": "approve", "permissionMode": "acceptEdits"},
    )
    sid = await coven.start("Split CLAUDE-PARENT", cwd=str(repo))
    proposed = await coven.wait_kind(sid, "forkProposed")
    with pytest.raises(Exception, match="native"):
        await coven.request(
            protocol.DECIDE_FORK,
            {"forkId": proposed["forkId"], "approve": True, "agent": "codex", "context": "inherit"},
        )
    await coven.request(
        protocol.DECIDE_FORK, {"forkId": proposed["forkId"], "approve": True, "agent": "codex"}
    )
    started = await coven.wait_kind(sid, "forkStarted")
    prompt, turn = await results_turn(coven, sid)

    assert (started["agent"], started["context"]) == ("codex", "transcript")
    assert turn["text"] == "Both codex parts are in."
    assert prompt["text"].count("Made it in codex.") == 2
    assert (repo / "alpha.txt").read_text() == "alpha\n"
    assert (repo / "beta.txt").read_text() == "beta\n"
    listed = {
        s["sessionId"]: s for s in (await coven.request("coven/listSessions", {}))["sessions"]
    }
    assert listed[sid]["agent"] == "claude"
    for child in started["children"]:
        info = listed[child["sessionId"]]
        assert info["agent"] == "codex" and info["changes"]["merge"] == "applied"
    first = next(r for r in responses.requests if "'Make alpha'" in r.last_user_text)
    assert "You were forked from another session" in first.last_user_text
    assert "Split CLAUDE-PARENT" in first.last_user_text and "Splitting." in first.last_user_text


@needs_codex
@pytest.mark.usefixtures("no_user_git_config")
async def test_a_codex_parent_with_claude_children(
    coven_factory, model: ScriptedModel, responses: ScriptedResponses, tmp_path: Path
) -> None:
    """A user forks a Codex session into Claude children (coven/fork with `agent`)."""
    repo = small_repo(tmp_path / "repo")
    responses.on("<fork-results>", "Both claude parts are in.")
    responses.on("Explain CODEX-PARENT", "CODEX-ANSWER: explained.", times=1)
    model.on(
        assigned("Make gamma"),
        ToolUse("Bash", {"command": "printf 'gamma\\n' > gamma.txt && echo WROTE-GAMMA"}),
    )
    model.on("WROTE-GAMMA", "Made gamma in claude.")
    model.on(assigned("Say hi"), "Hi from claude.")
    coven = await coven_factory(
        extra_env=responses.codex_env(tmp_path / "codex-home"),
        init_options={"agent": "codex", "permissionMode": "acceptEdits"},
    )
    sid = await coven.start("Explain CODEX-PARENT", cwd=str(repo))
    await coven.wait_kind(sid, "turnResult")
    await coven.wait_status(sid, "idle")
    await coven.request(
        protocol.FORK, {"sessionId": sid, "tasks": ["Make gamma", "Say hi"], "agent": "claude"}
    )
    started = await coven.wait_kind(sid, "forkStarted")
    prompt, turn = await results_turn(coven, sid)

    assert (started["agent"], started["context"]) == ("claude", "transcript")
    assert turn["text"] == "Both claude parts are in."
    assert "Made gamma in claude." in prompt["text"] and "Hi from claude." in prompt["text"]
    assert (repo / "gamma.txt").read_text() == "gamma\n"
    listed = {
        s["sessionId"]: s for s in (await coven.request("coven/listSessions", {}))["sessions"]
    }
    assert listed[sid]["agent"] == "codex"
    assert all(listed[c["sessionId"]]["agent"] == "claude" for c in started["children"])
    child = first_request(model, "Say hi")
    assert all(m["role"] != "assistant" for m in child.messages)
    assert "<user>\nExplain CODEX-PARENT\n</user>" in child.last_user_text
    assert "CODEX-ANSWER: explained." in child.last_user_text


async def test_a_transcript_fork_cut_off_by_sigkill_resumes_as_a_transcript(
    coven_factory, model: ScriptedModel
) -> None:
    """The fork's context is kept with it: after a restart, coven/resumeFork starts the child
    again as a new session given the conversation written out, not a native copy."""
    model.on(assigned("Summarize it"), "(never)", latency=300, times=1)
    model.on(assigned("Summarize it"), "Summary after the restart.")
    model.on("<fork-results>", "Done after the restart.")
    model.on("Remember KEPT-WORD", "Remembered KEPT-WORD.")
    first = await coven_factory(home="ws")
    sid = await first.start("Remember KEPT-WORD")
    await first.wait_kind(sid, "turnResult")
    await first.wait_status(sid, "idle")
    await first.request(
        protocol.FORK, {"sessionId": sid, "tasks": ["Summarize it"], "context": "transcript"}
    )
    [child] = (await first.wait_kind(sid, "forkStarted"))["children"]
    model.wait_for_requests(1, timeout=90, predicate=lambda r: "Summarize it" in r.last_user_text)
    await first.wait_status(child["sessionId"], "running")
    server = first.client._server
    os.kill(server.pid, signal.SIGKILL)
    await asyncio.wait_for(server.wait(), 30)
    await wait_until(lambda: not first.agent_pids(), 30, "the killed server's agents to die")

    second = await coven_factory(home="ws")
    interrupted = await second.wait_kind(sid, "forkInterrupted")
    await second.request(protocol.RESUME_FORK, {"forkId": interrupted["forkId"]})
    prompt, turn = await results_turn(second, sid)

    assert "Summary after the restart." in prompt["text"]
    assert turn["text"] == "Done after the restart."
    again = [r for r in model.requests if assigned("Summarize it") in r.last_user_text][-1]
    assert again.last_user_text.startswith("You were forked from another session")
    assert "<user>\nRemember KEPT-WORD\n</user>" in again.last_user_text
    assert all(m["role"] != "assistant" for m in again.messages)
