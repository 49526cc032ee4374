"""`coven-ls demo`: a scripted session through the real `claude` CLI (or, with `--agent codex`,
the real `codex`), with no API key.

It starts the scripted model in this process, starts `coven-ls` as a subprocess pointed at it,
and talks LSP to the server exactly as an editor would, printing events as they arrive.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..protocol.describe import one_line
from ..testing import scripted_responses
from ..testing.scripted_model import ReplyOptions, ScriptedModel, Text, Thinking, ToolUse, reply
from .client import CovenClient, PermissionAnswer
from .render import TreePrinter

PROMPT = "Give me a quick tour of this workspace."
TASKS = ("Summarise README.txt", "Review notes.txt", "Check plan.md")
FILES = (  # name, content, what the child that reads it answers
    (
        "README.txt",
        "coven demo: a tiny project to look around in.\n",
        "README.txt says this is a tiny project to look around in.",
    ),
    (
        "notes.txt",
        "Open question: why is the build slow?\n",
        "notes.txt holds one open question: why the build is slow.",
    ),
    (
        "plan.md",
        "# Plan\n1. Answer the open question in the notes.\n",
        "plan.md has one step: answer the question in the notes.",
    ),
)


def demo_model() -> ScriptedModel:
    """The demo's script: a tool call, a fork into three children that work at the same time,
    and the parent carrying on with their results. Nothing here tells the model how to fork:
    coven-ls's system prompt does."""
    model = ScriptedModel()
    pace: ReplyOptions = {"latency": 0.3, "chunk_chars": 12, "chunk_delay": 0.02}
    model.on(
        "quick tour of this workspace",
        reply(
            Thinking("The user wants an overview. Listing the files is the quickest start."),
            Text("Let me look at what is here."),
            ToolUse("Bash", {"command": "ls -1"}),
            **pace,
        ),
    )
    model.on(
        re.compile(r"README\.txt\s+notes\.txt\s+plan\.md"),  # the listing came back
        reply(
            "Three files. I will look at each of them at the same time.\n<fork>\n"
            + "".join(f"- {task}\n" for task in TASKS)
            + "</fork>",
            **pace,
        ),
    )
    for task, (name, content, answer) in zip(TASKS, FILES, strict=True):
        # Each child also writes its summary: in the demo's git repository every child works in
        # a worktree of its own, and what it wrote is merged back when the fork ends.
        summary = f"summaries/{name.split('.')[0]}.md"
        command = f"cat {name} && mkdir -p summaries && printf '%s\\n' '{answer}' > {summary}"
        model.on(f"You were assigned '{task}'", ToolUse("Bash", {"command": command}), **pace)
        model.on(content.strip(), reply(answer, latency=1.0, chunk_chars=12, chunk_delay=0.02))
    model.on(
        "<fork-results>",
        reply(
            "Here is the tour: README.txt introduces the project, notes.txt asks why the build "
            "is slow, and plan.md says to answer that first. Start with notes.txt.",
            **pace,
        ),
    )
    return model


def demo_responses() -> scripted_responses.ScriptedResponses:
    """The same script for codex (the Responses API): its commands are `exec_command` calls; a
    child's, which writes, asks to leave the read-only sandbox, so the user is asked."""
    model = scripted_responses.ScriptedResponses()
    pace: ReplyOptions = {"latency": 0.3, "chunk_chars": 12, "chunk_delay": 0.02}
    model.on(
        "quick tour of this workspace",
        reply(
            Thinking("The user wants an overview. Listing the files is the quickest start."),
            Text("Let me look at what is here."),
            scripted_responses.command("ls -1"),
            **pace,
        ),
    )
    model.on(
        re.compile(r"README\.txt\s+notes\.txt\s+plan\.md"),
        reply(
            "Three files. I will look at each of them at the same time.\n<fork>\n"
            + "".join(f"- {task}\n" for task in TASKS)
            + "</fork>",
            **pace,
        ),
    )
    for task, (name, content, answer) in zip(TASKS, FILES, strict=True):
        summary = f"summaries/{name.split('.')[0]}.md"
        command = f"cat {name} && mkdir -p summaries && printf '%s\\n' '{answer}' > {summary}"
        model.on(
            f"You were assigned '{task}'",
            reply(scripted_responses.command(command, escalate=True), **pace),
            times=1,
        )
        model.on(content.strip(), reply(answer, latency=1.0, chunk_chars=12, chunk_delay=0.02))
    model.on(
        "<fork-results>",
        reply(
            "Here is the tour: README.txt introduces the project, notes.txt asks why the build "
            "is slow, and plan.md says to answer that first. Start with notes.txt.",
            **pace,
        ),
    )
    return model


@dataclass(frozen=True)
class _Agent:
    """How the demo runs one agent: its scripted model and what points the agent at it."""

    name: str
    title: str
    model: Callable[[], AbstractContextManager[Any]]
    env: Callable[[Any, Path], dict[str, str]]


AGENTS = {
    "claude": _Agent(
        "claude",
        "the real Claude Code CLI",
        demo_model,
        lambda m, tmp: m.cli_env(tmp / "claude-config"),
    ),
    "codex": _Agent(
        "codex", "the real codex", demo_responses, lambda m, tmp: m.codex_env(tmp / "codex-home")
    ),
}


def _workspace(root: Path) -> Path:
    """The demo's project: a git repository with one commit (when git is installed), so that the
    fork's children get worktrees; without git they share the folder."""
    workspace = root / "workspace"
    workspace.mkdir()
    for name, content, _ in FILES:
        (workspace / name).write_text(content)
    if shutil.which("git"):
        git = ["git", "-c", "user.name=coven demo", "-c", "user.email=demo@coven-ls.invalid"]
        for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "The demo project"]):
            subprocess.run([*git, *args], cwd=workspace, check=True, capture_output=True)
    return workspace


async def _run(as_json: bool, agent: _Agent) -> int:
    printer = TreePrinter(as_json=as_json)

    def allow(request: dict[str, Any]) -> PermissionAnswer:
        if not as_json:
            command = request["input"].get("command", "")
            print(f"    (the demo allows {request['toolName']}: {one_line(command, 60)})")
        return {"allow": True}

    with tempfile.TemporaryDirectory(prefix="coven-demo-") as tmp, agent.model() as model:
        workspace = _workspace(Path(tmp))
        client = CovenClient(on_event=printer, on_permission=allow, handles_forks=True)
        await client.start(
            workspace,
            env=agent.env(model, Path(tmp)),
            # The demo's sessions are not worth keeping: its store goes with its temp folder.
            init_options={"stateDir": str(Path(tmp) / "state"), "agent": agent.name},
        )
        try:
            started = await client.request("coven/startSession", {"prompt": PROMPT})
            sid = started["sessionId"]
            proposed = await client.wait_for(_kind(sid, "forkProposed"))
            if not as_json:
                print("    (the demo approves the fork)")
            await client.request(
                "coven/decideFork", {"forkId": proposed["forkId"], "approve": True}
            )
            results = await client.wait_for(_kind(sid, "prompt", origin="forkResults"))
            await client.wait_for(_kind(sid, "turnResult", after_seq=results["seq"]))
            failed = [e for e in client.events if e["kind"] == "error" or e.get("isError")]
        finally:
            await client.stop()
    if not as_json:
        print(f"\nThat was {agent.title}, driven through coven-ls by a scripted model.")
    return 1 if failed else 0


def _kind(
    sid: str, kind: str, after_seq: int = 0, **fields: Any
) -> Callable[[dict[str, Any]], bool]:
    return lambda e: (
        e["sessionId"] == sid
        and e["kind"] == kind
        and e["seq"] > after_seq
        and all(e.get(k) == v for k, v in fields.items())
    )


def run_demo(json_output: bool = False, agent: str = "claude") -> int:
    try:
        return asyncio.run(asyncio.wait_for(_run(json_output, AGENTS[agent]), 300))
    except asyncio.TimeoutError:
        print("coven-ls demo: timed out after 300 s", file=sys.stderr)
        return 1
