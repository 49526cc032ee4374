"""An editor that knows nothing of coven/* (pytest-lsp's Neovim capability profile: work-done
progress, showMessageRequest, no `experimental.coven`) runs sessions and forks through
`workspace/executeCommand`, answers questions through `window/showMessageRequest`, watches
work-done progress, and cancels work by cancelling the progress."""

from __future__ import annotations

from typing import Any

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import client_capabilities

from coven_ls.agents.codex import resolve_codex
from coven_ls.protocol import PROTOCOL_VERSION, CovenError, to_plain
from coven_ls.testing.scripted_model import ScriptedModel, ToolUse

from ..harness import Coven, wait_until

NEOVIM = client_capabilities("neovim")
PLAN = "Plan the release"
FORK_TWO = "I will split this.\n<fork>\n- Write the docs\n- Fix the bugs\n</fork>"
COMMANDS = [
    "coven.startSession",
    "coven.sendMessage",
    "coven.fork",
    "coven.decideFork",
    "coven.cancel",
    "coven.listSessions",
    "coven.getEvents",
    "coven.closeSession",
]


async def execute(coven: Coven, command: str, params: dict[str, Any] | None = None) -> Any:
    return to_plain(
        await coven.client.workspace_execute_command_async(
            types.ExecuteCommandParams(command=command, arguments=[params or {}])
        )
    )


def progress_of(coven: Coven, prefix: str) -> dict[str, list[Any]]:
    """The progress reports the client got, by token, for tokens that start with `prefix`."""
    return {
        str(token): reports
        for token, reports in coven.client.progress_reports.items()
        if str(token).startswith(prefix)
    }


async def wait_progress_ended(coven: Coven, prefix: str, count: int = 1) -> dict[str, list[Any]]:
    """Progress ends follow the event that ended the work on the wire; wait until the client has
    read them too."""

    def ended() -> bool:
        done = [r for r in progress_of(coven, prefix).values() if r and r[-1].kind == "end"]
        return len(done) >= count

    await wait_until(ended, 30, f"{count} progress end(s) for {prefix}")
    return progress_of(coven, prefix)


def log_lines(coven: Coven) -> list[str]:
    return [m.message for m in coven.client.log_messages if m.message.startswith("[")]


async def test_a_plain_lsp_client_runs_a_session_through_commands(
    coven_factory, model: ScriptedModel
) -> None:
    coven = await coven_factory(capabilities=NEOVIM)
    model.on("Please make a file", ToolUse("Bash", {"command": "touch made.txt && echo made-it"}))
    model.on("made-it", "Created it.")
    model.on("And now?", "Nothing else.")
    coven.message_answer = lambda request: "Allow"

    assert coven.init_result is not None
    advertised = coven.init_result.capabilities.execute_command_provider
    assert advertised is not None and set(COMMANDS) <= set(advertised.commands)
    # A plain client is told the protocol version too.
    experimental = to_plain(coven.init_result.capabilities.experimental)
    assert experimental["coven"]["protocolVersion"] == PROTOCOL_VERSION
    assert set(experimental["coven"]) == {"protocolVersion", "agents", "cluster"}
    assert experimental["coven"]["cluster"] is None  # no initializationOptions.cluster

    sid = (await execute(coven, "coven.startSession", {"prompt": "Please make a file"}))[
        "sessionId"
    ]
    result = await coven.wait_kind(sid, "turnResult")
    assert result["text"] == "Created it."
    # The tool was allowed through the standard question, not coven/requestPermission.
    assert coven.permission_requests == []
    [asked] = coven.message_requests
    assert asked["actions"] == ["Allow", "Deny"] and "touch made.txt" in asked["message"]
    assert (coven.workspace / "made.txt").exists()

    # The turn was a work-done progress: begin with the session's title, the tool call as a
    # report, end with the turn's outcome.
    [reports] = (await wait_progress_ended(coven, f"coven:turn:{sid}:")).values()
    begin, *middle, end = reports
    assert begin.kind == "begin" and begin.title == "Claude: Please make a file"
    assert begin.cancellable is True
    assert any(r.message and "⚙ Bash" in r.message for r in middle)
    assert end.kind == "end" and end.message.startswith("✓ turn done")

    # A log line per event, for a client that shows nothing else.
    lines = log_lines(coven)
    assert "[Please make a file] › you: Please make a file" in lines
    assert any(line.startswith("[Please make a file] ✓ turn done") for line in lines)

    # The other commands answer exactly as the custom requests do.
    sent = await execute(coven, "coven.sendMessage", {"sessionId": sid, "text": "And now?"})
    assert sent == {"queued": False, "position": 0}
    await coven.wait_kind(sid, "turnResult", count=2)
    await coven.wait_status(sid, "idle", after_seq=result["seq"])
    listed = await execute(coven, "coven.listSessions", {})
    assert listed == await coven.request("coven/listSessions", {})
    assert [s["sessionId"] for s in listed["sessions"]] == [sid]
    events = await execute(coven, "coven.getEvents", {"sessionId": sid, "afterSeq": 0})
    assert events == await coven.request("coven/getEvents", {"sessionId": sid})
    assert await execute(coven, "coven.cancel", {"sessionId": sid}) == {"droppedMessages": 0}

    # And fail with the same JSON-RPC errors.
    for command, params, code in [
        ("coven.sendMessage", {"sessionId": "s-nope", "text": "hi"}, -32001),
        ("coven.startSession", {"prompt": 7}, -32602),
        ("coven.decideFork", {"forkId": "f-nope", "approve": True}, -32004),
    ]:
        with pytest.raises(JsonRpcException) as caught:
            await execute(coven, command, params)
        assert caught.value.code == code, command

    await execute(coven, "coven.closeSession", {"sessionId": sid})
    await coven.wait_status(sid, "closed")


async def test_a_fork_is_approved_through_show_message_request_and_shows_progress(
    coven_factory, model: ScriptedModel
) -> None:
    coven = await coven_factory(capabilities=NEOVIM)
    coven.message_answer = lambda request: "Approve fork"
    model.on(PLAN, FORK_TWO)
    model.on("You were assigned 'Write the docs'", "Docs are written.")
    model.on("You were assigned 'Fix the bugs'", "Bugs are fixed.", latency=1.0)
    model.on("<fork-results>", "Both parts are done.")

    sid = (await execute(coven, "coven.startSession", {"prompt": PLAN}))["sessionId"]
    results = await coven.wait_kind(sid, "prompt", origin="forkResults")
    await coven.wait_for(
        lambda e: e["sessionId"] == sid and e["kind"] == "turnResult" and e["seq"] > results["seq"],
        what="the parent's turn after the fork",
    )

    [asked] = coven.message_requests
    assert asked["actions"] == ["Approve fork", "Reject"] and "2 parallel tasks" in asked["message"]
    [started] = coven.of(sid, "forkStarted")
    [reports] = (await wait_progress_ended(coven, f"coven:fork:{started['forkId']}")).values()
    begin, *middle, end = reports
    assert begin.title == f"Fork: {PLAN}" and begin.percentage == 0
    messages = [r.message for r in middle]
    assert "Fork 1/2 done: Write the docs" in messages  # the quick child finished first
    assert messages[-1] == "Fork 2/2 done: Fix the bugs" and middle[-1].percentage == 100
    assert end.message == "⑂ Fork done  2 of 2 tasks succeeded"
    # Every child's turn and the parent's two turns had a progress of their own.
    await wait_progress_ended(coven, "coven:turn:", count=4)
    assert any("⑂ Fork  2 tasks" in line for line in log_lines(coven))


async def test_a_dismissed_proposal_is_decided_by_command(
    coven_factory, model: ScriptedModel
) -> None:
    coven = await coven_factory(capabilities=NEOVIM)
    coven.message_answer = lambda request: None  # the user closed the question
    model.on(PLAN, FORK_TWO, times=1)
    model.on("You were assigned 'Only the docs'", "Docs only.")
    model.on("You were assigned 'Check again'", "Checked.")
    model.on("<fork-results>", "Merged.")

    sid = (await execute(coven, "coven.startSession", {"prompt": PLAN}))["sessionId"]
    proposed = await coven.wait_kind(sid, "forkProposed")
    await wait_until(lambda: bool(coven.message_requests), 30, "the approval question")
    assert coven.of(sid, "status")[-1]["status"] == "awaitingApproval"
    decided = await execute(
        coven,
        "coven.decideFork",
        {"forkId": proposed["forkId"], "approve": True, "tasks": ["Only the docs"]},
    )
    assert decided == {}
    first = await coven.wait_kind(sid, "forkFinished")
    await coven.wait_status(sid, "idle", after_seq=first["seq"])

    forked = await execute(coven, "coven.fork", {"sessionId": sid, "tasks": ["Check again"]})
    second = await coven.wait_kind(sid, "forkFinished", count=2)
    assert second["forkId"] == forked["forkId"]
    assert [r["label"] for r in second["results"]] == ["Check again"]


async def test_cancelling_the_progress_cancels_the_turn(
    coven_factory, model: ScriptedModel
) -> None:
    coven = await coven_factory(capabilities=NEOVIM)
    model.on("the endless task", "This takes forever.", latency=120.0, times=1)

    sid = (await execute(coven, "coven.startSession", {"prompt": "Start the endless task"}))[
        "sessionId"
    ]
    model.wait_for_requests(1, timeout=60, predicate=lambda r: "endless task" in r.last_user_text)
    await wait_until(lambda: bool(progress_of(coven, f"coven:turn:{sid}:")), 30, "turn progress")
    [token] = progress_of(coven, f"coven:turn:{sid}:")
    coven.client.protocol.notify(
        types.WINDOW_WORK_DONE_PROGRESS_CANCEL, types.WorkDoneProgressCancelParams(token=token)
    )

    cancelled = await coven.wait_kind(sid, "turnResult")
    assert cancelled["cancelled"] is True
    await coven.wait_status(sid, "idle")
    reports = (await wait_progress_ended(coven, token))[token]
    assert reports[-1].message == "■ turn cancelled"


async def test_cancelling_the_fork_progress_cancels_the_fork(
    coven_factory, model: ScriptedModel
) -> None:
    coven = await coven_factory(capabilities=NEOVIM, init_options={"forkMode": "auto"})
    model.on(PLAN, FORK_TWO)
    model.on("You were assigned 'Write the docs'", "Docs are written.")
    model.on("You were assigned 'Fix the bugs'", "Never finishes.", latency=300)
    model.on("<fork-results>", "Stopped; only the docs are in.")

    sid = (await execute(coven, "coven.startSession", {"prompt": PLAN}))["sessionId"]
    started = await coven.wait_kind(sid, "forkStarted")
    docs, bugs = (c["sessionId"] for c in started["children"])
    await coven.wait_status(docs, "idle")
    model.wait_for_requests(1, timeout=60, predicate=lambda r: "Fix the bugs" in r.last_user_text)
    token = f"coven:fork:{started['forkId']}"
    await wait_until(lambda: token in progress_of(coven, token), 30, "fork progress")
    coven.client.protocol.notify(
        types.WINDOW_WORK_DONE_PROGRESS_CANCEL, types.WorkDoneProgressCancelParams(token=token)
    )

    finished = await coven.wait_kind(sid, "forkFinished")
    assert [(r["ok"], r.get("error")) for r in finished["results"]] == [
        (True, None),
        (False, "cancelled by the user"),
    ]
    assert coven.of(bugs, "status")[-1]["status"] == "cancelled"
    reports = (await wait_progress_ended(coven, token))[token]
    assert reports[-1].message == "⑂ Fork done  1 of 2 tasks succeeded"


@pytest.mark.parametrize("progress", [True, False])
async def test_a_coven_aware_client_gets_no_log_lines(
    coven_factory, model: ScriptedModel, progress: bool
) -> None:
    # It renders coven/event itself: log lines would only repeat them. Progress it gets unless it
    # turns it off.
    coven = await coven_factory(
        capabilities=types.ClientCapabilities(
            window=types.WindowClientCapabilities(work_done_progress=True),
            experimental={"coven": {"permissions": True, "forks": True, "progress": progress}},
        )
    )
    model.on("hello", "hi")
    sid = await coven.start("hello")
    await coven.wait_status(sid, "idle")
    if progress:
        await wait_progress_ended(coven, f"coven:turn:{sid}:")
    else:
        assert coven.client.progress_reports == {}
    assert log_lines(coven) == []


async def test_a_coven_aware_client_is_offered_no_command_mirrors(coven: Coven) -> None:
    # It speaks coven/* itself; VS Code's client would even register the mirrors as editor
    # commands and clash with its own coven.* commands.
    assert coven.init_result is not None
    assert coven.init_result.capabilities.execute_command_provider is None
    # What it talks to: the protocol version (protocol.md, Protocol version).
    experimental = to_plain(coven.init_result.capabilities.experimental)
    assert experimental["coven"]["protocolVersion"] == PROTOCOL_VERSION == 2
    # And which agents it can start: the ones whose binary it finds (claude in these tests; codex
    # when its wheel is installed, as this test process sees it too), and what each can do.
    agents = experimental["coven"]["agents"]
    assert [a["name"] for a in agents] == (["claude", "codex"] if have_codex() else ["claude"])
    assert agents[0] == {"name": "claude", "kind": "claude", "fork": "inherit", "cost": True}
    # The commands still answer, for a client that calls them anyway.
    listed = await execute(coven, "coven.listSessions", {})
    assert listed == {"sessions": []}


def have_codex() -> bool:
    try:
        resolve_codex(None)
    except CovenError:
        return False
    return True
