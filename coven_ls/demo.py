"""`coven-ls demo`: a scripted session through the real `claude` CLI, with no API key.

It starts the scripted model in this process, starts `coven-ls` as a subprocess pointed at it,
and talks LSP to the server exactly as an editor would, printing events as they arrive.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

from .client import CovenClient
from .render import TreePrinter, one_line
from .scripted_model import ScriptedModel, Text, Thinking, ToolUse, reply

FIRST_PROMPT = "Give me a quick tour of this workspace."
FOLLOW_UP = "Thanks! Which file should I read first?"


def demo_model() -> ScriptedModel:
    """The demo's script: a tool call that needs permission, then a follow-up turn."""
    model = ScriptedModel()
    pace = {"latency": 0.4, "chunk_chars": 12, "chunk_delay": 0.02}
    model.on(
        "quick tour of this workspace",
        reply(
            Thinking("The user wants an overview. Listing the files is the quickest start."),
            Text("Let me look at what is here."),
            ToolUse("Bash", {"command": "ls -1 && head -n 1 README.txt"}),
            **pace,
        ),
    )
    model.on(
        "notes.txt",  # the tool result lists the files
        reply(
            "This workspace holds a README (a one-line project summary), notes.txt with open "
            "questions, and plan.md with the next steps.",
            **pace,
        ),
    )
    model.on(
        "Which file should I read first",
        reply("Start with plan.md: it says what to do next, and links the other two.", **pace),
    )
    return model


def _workspace(root: Path) -> Path:
    workspace = root / "workspace"
    workspace.mkdir()
    (workspace / "README.txt").write_text("coven demo: a tiny project to look around in.\n")
    (workspace / "notes.txt").write_text("- why is the build slow?\n")
    (workspace / "plan.md").write_text("# Plan\n1. Read notes.txt\n")
    return workspace


async def _run(as_json: bool) -> int:
    printer = TreePrinter(as_json=as_json)

    def allow(request: dict[str, Any]) -> dict[str, Any]:
        if not as_json:
            command = request["input"].get("command", "")
            print(f"    (the demo allows {request['toolName']}: {one_line(command, 60)})")
        return {"allow": True}

    with tempfile.TemporaryDirectory(prefix="coven-demo-") as tmp, demo_model() as model:
        workspace = _workspace(Path(tmp))
        client = CovenClient(on_event=printer, on_permission=allow)
        await client.start(workspace, env=model.cli_env(Path(tmp) / "claude-config"))
        try:
            started = await client.request("coven/startSession", {"prompt": FIRST_PROMPT})
            sid = started["sessionId"]
            first = await client.wait_for(_turn_result(sid))
            await client.request("coven/sendMessage", {"sessionId": sid, "text": FOLLOW_UP})
            await client.wait_for(_turn_result(sid, after_seq=first["seq"]))
            failed = [e for e in client.events if e["kind"] == "error" or e.get("isError")]
        finally:
            await client.stop()
    if not as_json:
        print("\nThat was the real Claude Code CLI, driven through coven-ls by a scripted model.")
    return 1 if failed else 0


def _turn_result(sid: str, after_seq: int = 0) -> Any:
    return lambda e: e["sessionId"] == sid and e["kind"] == "turnResult" and e["seq"] > after_seq


def run_demo(json_output: bool = False) -> int:
    try:
        return asyncio.run(asyncio.wait_for(_run(json_output), 300))
    except asyncio.TimeoutError:
        print("coven-ls demo: timed out after 300 s", file=sys.stderr)
        return 1
