"""The server SIGKILLed at each point of a fork's life, then restarted: nothing any client saw is
lost, no `claude` process outlives the killed server, and the fork can be carried to its end
(resumed, decided, or its parent's turn taken up again)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from coven_ls.testing.scripted_model import ModelRequest, ScriptedModel, ToolUse

from ..fixtures.record import make_repository
from ..gitrepo import git
from ..harness import Coven, FaultRecord, wait_until

# The server's git (worktrees, commits, merges) without the user's configuration.
pytestmark = pytest.mark.usefixtures("no_user_git_config")

PLAN = "Plan the release"
FORK = "Splitting.\n<fork>\n- Write the docs\n- Fix the bugs\n</fork>"
HANG = 300.0  # a model call that would outlive the test: the server is killed during it


def assigned(label: str) -> str:
    return f"You were assigned '{label}'"


def script(model: ScriptedModel, point: str, killed: threading.Event) -> None:
    """The model for a point: whatever runs when the server is killed hangs until then (and
    answers when asked again after the restart)."""
    model.on(PLAN, FORK, times=1)
    docs, bugs = assigned("Write the docs"), assigned("Fix the bugs")

    def before_kill(text: str) -> Callable[[ModelRequest], bool]:
        return lambda r: text in r.last_user_text and not killed.is_set()

    if point in ("started", "running"):
        model.on(before_kill(docs), "(never)", latency=HANG)
    if point in ("started", "running", "one child done"):
        model.on(before_kill(bugs), "(never)", latency=HANG)
    if point == "reviewing":
        model.on(docs, ToolUse("Bash", {"command": "printf 'd\\n' > docs.txt && echo wrote-docs"}))
        model.on(bugs, ToolUse("Bash", {"command": "printf 'b\\n' > bugs.txt && echo wrote-bugs"}))
        model.on("wrote-docs", "Docs are written.")
        model.on("wrote-bugs", "Bugs are fixed.")
    model.on(docs, "Docs are written.")
    model.on(bugs, "Bugs are fixed.")
    if point == "results turn":
        model.on(before_kill("<fork-results>"), "(never)", latency=HANG)
    model.on("<fork-results>", "Both parts are done.")
    model.on("Carry on", "Carrying on after the restart.")


async def reached(coven: Coven, sid: str, point: str) -> None:
    """Wait until the fork of session `sid` is at `point`."""
    if point == "proposed":
        await coven.wait_kind(sid, "forkProposed")
        await coven.wait_status(sid, "awaitingApproval")
        return
    started = await coven.wait_kind(sid, "forkStarted")
    docs, bugs = (c["sessionId"] for c in started["children"])
    if point == "started":
        return
    if point == "running":
        coven.model.wait_for_requests(
            2, timeout=90, predicate=lambda r: "You were assigned" in r.last_user_text
        )
        for child in (docs, bugs):
            await coven.wait_status(child, "running")
    elif point == "one child done":
        done = await coven.wait_kind(docs, "turnResult")
        await coven.wait_status(docs, "idle", after_seq=done["seq"])
        await coven.wait_status(bugs, "running")
    elif point == "results turn":
        await coven.wait_kind(sid, "prompt", origin="forkResults")
        await coven.wait_status(sid, "running")
    elif point == "reviewing":
        await coven.wait_kind(sid, "forkReviewing")


async def carry_on(coven: Coven, sid: str, point: str) -> str:
    """Take the fork to its end after the restart; the parent's last answer."""
    sessions = (await coven.request("coven/listSessions", {}))["sessions"]
    parent = next(s for s in sessions if s["sessionId"] == sid)
    log = (await coven.request("coven/getEvents", {"sessionId": sid}))["events"]
    [fork_id] = {e["forkId"] for e in log if e["kind"] in ("forkProposed", "forkStarted")}
    if point == "proposed":
        assert parent["status"] == "awaitingApproval"
        await coven.request("coven/decideFork", {"forkId": fork_id, "approve": True})
    elif point == "reviewing":
        assert parent["status"] == "reviewing"
        for child in (s for s in sessions if s["parentId"] == sid):
            await coven.request("coven/applyChanges", {"sessionId": child["sessionId"]})
    elif point == "results turn":
        # The results were given before the kill: the parent's cut-off turn is taken up again
        # by a message, and the fork is not run (nor its results given) a second time.
        assert parent["status"] == "interrupted"
        await coven.request("coven/sendMessage", {"sessionId": sid, "text": "Carry on"})
        result = await coven.wait_kind(sid, "turnResult")
        return str(result["text"])
    else:
        interrupted = await coven.wait_kind(sid, "forkInterrupted")
        assert interrupted["forkId"] == fork_id
        await coven.request("coven/resumeFork", {"forkId": fork_id})
    prompt = await coven.wait_kind(sid, "prompt", origin="forkResults")
    assert "Docs are written." in prompt["text"] and "Bugs are fixed." in prompt["text"]
    result = await coven.wait_for(
        lambda e: e["sessionId"] == sid and e["kind"] == "turnResult" and e["seq"] > prompt["seq"],
        what="the parent's answer to the fork's results",
    )
    return str(result["text"])


POINTS = ["proposed", "started", "running", "one child done", "results turn", "reviewing"]


@pytest.mark.parametrize("point", POINTS)
async def test_sigkill_at_each_point_of_a_fork(
    coven_factory: Callable[..., Awaitable[Coven]],
    model: ScriptedModel,
    tmp_path: Path,
    point: str,
    fault: FaultRecord,
) -> None:
    options: dict[str, Any] = {"forkMode": "approve" if point == "proposed" else "auto"}
    if point == "reviewing":
        options["mergeMode"] = "review"
        make_repository(tmp_path / "ws" / "workspace")
    killed = threading.Event()
    script(model, point, killed)
    first = await coven_factory(home="ws", init_options=options)
    sid = await first.start(PLAN)
    await reached(first, sid, point)
    seen: dict[str, list[dict[str, Any]]] = {}
    for event in first.events:
        seen.setdefault(event["sessionId"], []).append(event)
    server = first.client._server
    assert server is not None
    os.kill(server.pid, signal.SIGKILL)
    fault.inject()
    killed.set()
    await asyncio.wait_for(server.wait(), 30)
    await wait_until(lambda: not first.agent_pids(), 30, "the killed server's agents to die")

    second = await coven_factory(home="ws", init_options=options)
    for session_id, events in seen.items():
        stored = await second.request("coven/getEvents", {"sessionId": session_id})
        assert fault.lost(events, stored["events"]) == 0, f"{session_id} lost events"
        assert stored["events"][: len(events)] == events, f"{session_id}'s log changed"
    fault.recovered()
    answer = await carry_on(second, sid, point)

    expected = (
        "Carrying on after the restart." if point == "results turn" else "Both parts are done."
    )
    assert answer == expected
    results = [e for e in second.of(sid, "prompt") if e["origin"] == "forkResults"]
    assert len(results) == (0 if point == "results turn" else 1)
    if point == "reviewing":
        workspace = tmp_path / "ws" / "workspace"
        assert (workspace / "docs.txt").exists() and (workspace / "bugs.txt").exists()


# --- points inside the server's own steps (coven_ls/core/failpoints.py) -------------------------
# The server is stopped dead at a named point (COVEN_FAILPOINT) and killed there: between a
# fork's approval and its children, while its worktrees are being made, between a child's end and
# the commit of its work, between the merges of two children, and in the middle of a deletion.

FAILPOINTS = ["approved", "worktrees", "commit", "merge", "delete"]


def git_lines(repo: Path, *args: str) -> list[str]:
    return git(repo, *args).splitlines()


@pytest.mark.parametrize("point", FAILPOINTS)
async def test_sigkill_at_a_failpoint(
    coven_factory: Callable[..., Awaitable[Coven]],
    model: ScriptedModel,
    tmp_path: Path,
    point: str,
    fault: FaultRecord,
) -> None:
    workspace = tmp_path / "ws" / "workspace"
    make_repository(workspace)
    options: dict[str, Any] = {"forkMode": "approve" if point == "approved" else "auto"}
    model.on(PLAN, FORK, times=1)
    for label, name in (("Write the docs", "docs.txt"), ("Fix the bugs", "bugs.txt")):
        model.on(
            assigned(label),
            ToolUse("Bash", {"command": f"printf '{label}\\n' > {name} && echo wrote-{name}"}),
        )
        model.on(f"wrote-{name}", f"{label}: done.")
    model.on("<fork-results>", "Both parts are done.")
    marker = tmp_path / "failpoint-reached"
    armed = {"COVEN_FAILPOINT": point, "COVEN_FAILPOINT_FILE": str(marker)}
    first = await coven_factory(home="ws", init_options=options, extra_env=armed)
    sid = await first.start(PLAN)
    if point == "approved":
        proposed = await first.wait_kind(sid, "forkProposed")
        await first.request("coven/decideFork", {"forkId": proposed["forkId"], "approve": True})
    if point == "delete":
        await first.wait_for(
            lambda e: (
                e["sessionId"] == sid
                and e["kind"] == "turnResult"
                and e["text"] == "Both parts are done."
            ),
            what="the fork's end",
        )
        deleting = asyncio.ensure_future(first.request("coven/deleteSession", {"sessionId": sid}))
    await wait_until(marker.exists, 90, f"the server to reach {point}")
    seen = {s: list(first.of(s)) for s in {e["sessionId"] for e in first.events}}
    server = first.client._server
    assert server is not None and int(marker.read_text()) == server.pid
    os.kill(server.pid, signal.SIGKILL)
    fault.inject()
    await asyncio.wait_for(server.wait(), 30)
    await wait_until(lambda: not first.agent_pids(), 30, "the killed server's agents to die")
    if point == "delete":
        with pytest.raises(Exception):  # noqa: B017 (no answer: the server died in the middle)
            await deleting

    second = await coven_factory(home="ws", init_options=options)
    for session_id, events in seen.items():
        stored = await second.request("coven/getEvents", {"sessionId": session_id})
        assert fault.lost(events, stored["events"]) == 0, f"{session_id} lost events"
    fault.recovered()
    # What the restart said happened before this client was attached: read, as clients do.
    restarted = (await second.request("coven/getEvents", {"sessionId": sid}))["events"]

    if point == "delete":
        # Its worktrees were already gone; the sessions were not: deleting again finishes it.
        await second.request("coven/deleteSession", {"sessionId": sid})
        listed = (await second.request("coven/listSessions", {}))["sessions"]
        assert listed == []
    else:
        [interrupted] = [e for e in restarted if e["kind"] == "forkInterrupted"]
        await second.request("coven/resumeFork", {"forkId": interrupted["forkId"]})
        answer = await second.wait_for(
            lambda e: (
                e["sessionId"] == sid
                and e["kind"] == "turnResult"
                and e["text"] == "Both parts are done."
            ),
            what="the parent's answer to the fork's results",
        )
        results = [e for e in second.of(sid, "prompt") if e["origin"] == "forkResults"]
        assert len(results) == 1 and answer["seq"] > results[0]["seq"]
        assert (
            "Write the docs: done." in results[0]["text"]
            and "Fix the bugs: done." in results[0]["text"]
        )
        # Each child's work is in the working tree once: merged, not twice, not half.
        assert (workspace / "docs.txt").read_text() == "Write the docs\n"
        assert (workspace / "bugs.txt").read_text() == "Fix the bugs\n"
    # Nothing left of the children in git: no worktree but the user's (and the pool's complete
    # spares, detached, which hold no work), no stray branch when the session is gone.
    pool = (tmp_path / "xdg-state" / "coven-ls" / "pool").resolve()
    listed = [w for w in git_lines(workspace, "worktree", "list") if w.strip()]
    spares = [w for w in listed if Path(w.split()[0]).resolve().is_relative_to(pool)]
    assert all("(detached HEAD)" in spare for spare in spares)
    assert len(listed) - len(spares) == (1 if point == "delete" else 3)
    if point == "delete":
        assert git_lines(workspace, "branch", "--list", "coven/*") == []
    assert git_lines(workspace, "status", "--porcelain", "--untracked-files=no") == []
