"""`coven-ls acp` driven by the official ACP TypeScript SDK's client (tests/e2e/acp_ts/drive.mjs, on
node), through the real CLI against the scripted model: an editor's view of streaming, a fork
approved through a permission request, its plan and tool call, its children listed and loaded,
a fork cancelled mid-way, and the agent ending when its stdin closes."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from coven_ls.testing.scripted_model import ScriptedModel

from ..harness import processes_with_env, wait_until

DRIVER = Path(__file__).parent / "acp_ts"
SDK = DRIVER / "node_modules" / "@agentclientprotocol" / "sdk"
FORK = "Splitting.\n<fork>\n- Write the docs\n- Fix the bugs\n</fork>"
SLOW_FORK = "Splitting.\n<fork>\n- Slow one\n- Slow two\n</fork>"

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="needs node (Node.js)")


def of(seen: dict[str, Any], session_id: str, kind: str) -> list[dict[str, Any]]:
    return [
        u["update"]
        for u in seen["updates"]
        if u["sessionId"] == session_id and u["update"]["sessionUpdate"] == kind
    ]


def text(seen: dict[str, Any], session_id: str) -> str:
    return "".join(u["content"]["text"] for u in of(seen, session_id, "agent_message_chunk"))


async def test_the_typescript_sdks_client_drives_forks(
    tmp_path: Path, model: ScriptedModel
) -> None:
    if not SDK.is_dir():
        pytest.fail(f"the ACP TypeScript SDK is not installed: run `npm ci` in {DRIVER}")
    model.on("Hello", "Hi there, in pieces.", chunk_chars=4, chunk_delay=0.01)
    model.on("Plan the release", FORK, times=1)
    model.on("You were assigned 'Write the docs'", "Docs are written.")
    model.on("You were assigned 'Fix the bugs'", "Bugs are fixed.")
    model.on("<fork-results>", "Both parts are done.")
    model.on("Plan a slow one", SLOW_FORK, times=1)
    model.on("You were assigned 'Slow", "Too late.", latency=120)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    config = tmp_path / "claude-config"
    env = {**model.cli_environ(config), "XDG_STATE_HOME": str(tmp_path / "state")}
    command = ["node", str(DRIVER / "drive.mjs"), str(workspace), "--"]
    command += [sys.executable, "-m", "coven_ls", "acp"]
    done = await anyio.run_process(command, env=env, check=False, stderr=None)
    assert done.stdout, f"the driver printed nothing (exit {done.returncode})"
    seen = json.loads(done.stdout)
    assert done.returncode == 0, seen.get("failure")

    init = seen["initialize"]
    assert init["protocolVersion"] == 1
    assert init["agentCapabilities"]["loadSession"] is True
    sid = seen["sessionId"]

    # 1. streamed in pieces
    assert seen["steps"]["stream"]["stopReason"] == "end_turn"
    assert len(of(seen, sid, "agent_message_chunk")) > 1
    assert text(seen, sid).startswith("Hi there, in pieces.")

    # 2. the fork: asked, approved, a plan and a tool call, answered after the results turn
    assert seen["steps"]["fork"]["stopReason"] == "end_turn"
    asked, asked_again = seen["permissions"]  # this fork, then step 4's
    assert asked["sessionId"] == asked_again["sessionId"] == sid
    assert [o["kind"] for o in asked["options"]] == ["allow_once", "reject_once"]
    raw = asked["toolCall"]["rawInput"]
    assert raw["tasks"] == ["Write the docs", "Fix the bugs"]
    # The question says what the fork costs: both children read the parent's context.
    assert raw["estimate"]["children"] == 2
    assert raw["estimate"]["tokens"] == 2 * raw["estimate"]["contextTokens"] > 0
    assert asked_again["toolCall"]["rawInput"]["tasks"] == ["Slow one", "Slow two"]
    plans = of(seen, sid, "plan")
    assert [e["content"] for e in plans[0]["entries"]] == ["Write the docs", "Fix the bugs"]
    first_fork = [p for p in plans if p["entries"][0]["content"] == "Write the docs"]
    assert [e["status"] for e in first_fork[-1]["entries"]] == ["completed", "completed"]
    calls = [c for c in of(seen, sid, "tool_call") if c["title"] == "Fork: 2 tasks"]
    finished = [
        u
        for u in of(seen, sid, "tool_call_update")
        if u["toolCallId"] == calls[0]["toolCallId"] and u.get("status") == "completed"
    ]
    shown = finished[-1]["content"][0]["content"]["text"]
    assert "Docs are written." in shown and "Bugs are fixed." in shown
    assert "Both parts are done." in text(seen, sid)

    # 3. the children are sessions of their own: listed with their parent, loaded whole
    children = [
        s for s in seen["steps"]["list"]["sessions"] if s["_meta"]["coven"].get("parentId") == sid
    ]
    assert sorted(c["title"] for c in children) == ["Fix the bugs", "Write the docs"]
    child = seen["steps"]["loadedChild"]
    assert text(seen, child).strip() in ("Docs are written.", "Bugs are fixed.")

    # 4. a fork cancelled once its children ran: the prompt answers "cancelled"
    assert seen["steps"]["cancel"]["stopReason"] == "cancelled"

    # stdin closed: the agent exited by itself, and no process of it is left
    assert seen["exit"] == {"code": 0, "signal": None}
    await wait_until(lambda: not processes_with_env(str(config)), 30, "agent processes to end")
