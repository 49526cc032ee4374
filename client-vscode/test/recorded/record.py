"""Record the streams the VS Code client's tests replay for what the golden fixtures
(tests/fixtures/events) predate: streamed text (`coven/delta`) and getEvents' `partial`, API
retries, the CLI's background tasks (subagents) and the turns it starts to report them, the fork
queue and usage, a turn cancelled mid-stream.

    .venv/bin/python client-vscode/test/recorded/record.py [scenario ...]   (default: all)

A real coven-ls, the real `claude` CLI, the scripted model; the format is the golden fixtures'
(see tests/fixtures/record.py) plus one line per `coven/delta` notification, where it arrived:
`{"fixture": "delta", "params": {...}}`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from coven_ls import protocol  # noqa: E402
from coven_ls.testing.scripted_model import (  # noqa: E402
    HttpError,
    ModelRequest,
    Reply,
    ScriptedModel,
    Thinking,
    ToolUse,
    reply,
)
from tests.fixtures.record import (  # noqa: E402
    PLAN,
    Recorder,
    Recording,
    assigned,
    turn_over,
    write,
)
from tests.harness import Coven  # noqa: E402

OUT = Path(__file__).resolve().parent


class DeltaRecorder(Recorder):
    """The golden fixtures' recorder, which also keeps `coven/delta` notifications."""

    def _capture(self, message: dict[str, Any]) -> None:
        if message.get("method") == protocol.DELTA and message.get("id") is None:
            self.lines.append({"fixture": "delta", "params": message["params"]})
            return
        super()._capture(message)


def deltas(rec: Recorder) -> int:
    return sum(1 for line in rec.lines if line.get("fixture") == "delta")


async def until_deltas(rec: Recorder, count: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while deltas(rec) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {deltas(rec)} of {count} deltas arrived")
        await asyncio.sleep(0.01)


ANSWER = (
    "The parser reads the input line by line.\n"
    "Each line becomes a token list.\n"
    "Then the tokens are folded into a tree."
)


async def stream(rec: DeltaRecorder) -> Coven:
    """The model is overloaded twice (two apiRetry events), then thinks and answers, both
    streamed in small pieces; mid-answer the client asks getEvents, whose `partial` has the text
    so far."""
    overloaded = Reply(error=HttpError(529, "Overloaded", "overloaded_error"))
    rec.model.on("Explain the parser", overloaded, times=2)
    rec.model.on(
        "Explain the parser",
        Thinking("The user wants the parser explained."),
        ANSWER,
        chunk_chars=8,
        chunk_delay=0.08,
    )
    coven = await rec.start()
    sid = await rec.start_session(coven, "Explain the parser")
    prompt = await coven.wait_kind(sid, "prompt")
    await coven.wait_kind(sid, "thinking")
    await until_deltas(rec, deltas(rec) + 4)
    await rec.request(coven, protocol.GET_EVENTS, {"sessionId": sid})
    await turn_over(coven, sid, prompt)
    return coven


def task_notification(request: ModelRequest) -> bool:
    """The CLI's own message when a background task ended (inside a system reminder, which the
    scripted model leaves out of `last_user_text`: match the raw message)."""
    return "<task-notification>" in json.dumps(request.messages[-1:])


def report(request: ModelRequest) -> Reply:
    status = re.search(r"<status>(\w+)</status>", json.dumps(request.messages[-1:]))
    if status and status.group(1) == "completed":
        return reply("The background agent found 3 TODOs.")
    return reply("The log watcher was stopped before it found anything.")


async def background(rec: DeltaRecorder) -> Coven:
    """The model starts the CLI's Agent tool in the background: the turn ends while the subagent
    works (its text, its Bash call, a `running` task event), the task completes, and the CLI
    starts a turn by itself to report it (prompt origin "task"). Then a second background agent
    is stopped with coven/stopTask, and the CLI reports that too."""
    model = rec.model
    model.on(
        "Look for TODOs",
        "Let me search.",
        ToolUse("Bash", {"command": "echo 3 TODOs found", "description": "Search for TODOs"}),
        latency=0.5,
    )
    model.on(
        "3 TODOs found",
        "Found 3 TODOs: two in the parser, one in the docs.",
        latency=0.5,
        chunk_chars=5,
        chunk_delay=0.05,
    )
    model.on("Watch the logs", "(never)", latency=120)
    agent = {"subagent_type": "general-purpose", "run_in_background": True}
    model.on(
        "Research the code",
        "I'll start a background agent.",
        ToolUse("Agent", {"description": "Find TODOs", "prompt": "Look for TODOs", **agent}),
    )
    model.on(
        "Keep an eye on the logs",
        ToolUse("Agent", {"description": "Watch the logs", "prompt": "Watch the logs", **agent}),
    )
    model.on("Async agent launched", "The agent is working in the background.")
    model.on(task_notification, report)
    coven = await rec.start()
    sid = await rec.start_session(coven, "Research the code")
    reported = await coven.wait_kind(sid, "prompt", origin="task")
    await turn_over(coven, sid, reported)

    follow_up = {"sessionId": sid, "text": "Keep an eye on the logs"}
    await rec.request(coven, protocol.SEND_MESSAGE, follow_up)
    started = await coven.wait_for(
        lambda e: (
            e["sessionId"] == sid
            and e["kind"] == "task"
            and e["status"] == "started"
            and e["seq"] > reported["seq"]
        ),
        what="the second task",
    )
    await coven.wait_kind(sid, "turnResult", count=2)
    await rec.request(coven, protocol.STOP_TASK, {"sessionId": sid, "taskId": started["taskId"]})
    again = await coven.wait_kind(sid, "prompt", origin="task", count=2)
    await turn_over(coven, sid, again)
    return coven


async def queue(rec: DeltaRecorder) -> Coven:
    """Fork mode `auto` and maxParallel 1: the model forks into three tasks, which run one at a
    time, the others `queued` with their place in line (queuePosition); forkFinished adds up the
    children's tokens."""
    model = rec.model
    tasks = ["Write the docs", "Fix the bugs", "Tag the release"]
    tag = "\n".join(["Splitting.", "<fork>", *(f"- {t}" for t in tasks), "</fork>"])
    model.on(PLAN, tag)
    for task in tasks:
        model.on(assigned(task), f"{task}: done.", latency=0.3)
    model.on("<fork-results>", "All three done.")
    coven = await rec.start(init_options={"forkMode": "auto", "maxParallel": 1})
    sid = await rec.start_session(coven, PLAN)
    results = await coven.wait_kind(sid, "prompt", origin="forkResults")
    await turn_over(coven, sid, results)
    return coven


async def cancel(rec: DeltaRecorder) -> Coven:
    """A long answer streams; the client cancels it mid-way: the turn ends `cancelled` (no error,
    no text), its pieces never become a text event; the next message is answered."""
    model = rec.model
    essay = " ".join(f"Sentence {n} of a long essay." for n in range(1, 60))
    model.on("Write a long essay", essay, chunk_chars=6, chunk_delay=0.1)
    model.on("Are you there?", "Still here.")
    coven = await rec.start()
    sid = await rec.start_session(coven, "Write a long essay")
    prompt = await coven.wait_kind(sid, "prompt")
    await until_deltas(rec, 5)
    await rec.request(coven, protocol.CANCEL, {"sessionId": sid})
    cancelled = await turn_over(coven, sid, prompt)
    await rec.request(coven, protocol.SEND_MESSAGE, {"sessionId": sid, "text": "Are you there?"})
    again = await coven.wait_for(
        lambda e: e["sessionId"] == sid and e["kind"] == "prompt" and e["seq"] > cancelled["seq"],
        what="the prompt after the cancel",
    )
    await turn_over(coven, sid, again)
    return coven


SCENARIOS: dict[str, Callable[[DeltaRecorder], Awaitable[Coven]]] = {
    "stream": stream,
    "background": background,
    "queue": queue,
    "cancel": cancel,
}


async def record(name: str, workdir: Path) -> Recording:
    with ScriptedModel() as model:
        rec = DeltaRecorder(model, workdir)
        try:
            last = await SCENARIOS[name](rec)
            lines = list(rec.lines)
            sessions = protocol.to_plain(
                await last.client.protocol.send_request_async(protocol.LIST_SESSIONS, {})
            )
        finally:
            await rec.stop()
    return Recording(lines, sessions)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenarios", nargs="*", help=f"any of {', '.join(SCENARIOS)} (all)")
    args = parser.parse_args(argv)
    unknown = [name for name in args.scenarios if name not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    for name in args.scenarios or list(SCENARIOS):
        began = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"coven-recording-{name}-") as tmp:
            recording = asyncio.run(record(name, Path(tmp)))
        write(name, recording, OUT)
        print(f"{name}: {len(recording.lines)} lines in {time.monotonic() - began:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
