"""Events in words: one line per `coven/event`, for any front end that shows text (the terminal
tree, standard-LSP log lines and progress messages)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .events import Kind

STATUS_MARKS = {
    "starting": "…",
    "running": "▶",
    "idle": "✓",
    "awaitingApproval": "?",
    "forking": "⑂",
    "reviewing": "?",
    "failed": "✗",
    "cancelled": "■",
    "closed": "◼",
    "interrupted": "!",
}


def one_line(text: str, limit: int = 100) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def summarize_input(tool_input: dict[str, Any], limit: int = 80) -> str:
    """What a tool call will do, in one line: its command, path, URL or pattern if it has one."""
    for key in ("command", "file_path", "path", "url", "pattern", "prompt", "description"):
        value = tool_input.get(key)
        if isinstance(value, str) and value:
            return one_line(value, limit)
    return one_line(json.dumps(tool_input, ensure_ascii=False), limit)


def compact_count(n: int) -> str:
    """A count in few characters: 950, 12.3k, 4.5M."""
    if n < 1000:
        return str(n)
    if n < 999_950:
        return f"{n / 1000:.1f}k".replace(".0k", "k")
    return f"{n / 1_000_000:.1f}M".replace(".0M", "M")


def seconds(ms: float) -> str:
    """A delay in seconds, as a person says it: `4 s`, `0.6 s`, `12 s`."""
    value = ms / 1000
    if value >= 10 or value == int(value):
        return f"{value:.0f} s"
    return f"{value:.1f} s"


API_FAILURES = {429: "API rate-limited", 529: "API overloaded"}


def api_retry(event: dict[str, Any]) -> str:
    """`⟳ API overloaded — retrying in 4 s (3/10)`."""
    status = event.get("errorStatus")
    error = str(event.get("error") or "")
    if isinstance(status, int) and status in API_FAILURES:
        what = API_FAILURES[status]
    elif "overloaded" in error.lower():
        what = "API overloaded"
    elif isinstance(status, int):
        what = f"API error {status}"
    else:
        what = f"API call failed ({one_line(error, 40)})" if error else "API call failed"
    delay = seconds(event.get("retryDelayMs") or 0)
    return f"⟳ {what} — retrying in {delay} ({event.get('attempt')}/{event.get('maxRetries')})"


TASK_MARKS = {"started": "◇", "running": "◇", "completed": "◆", "failed": "✗", "stopped": "■"}


def task(event: dict[str, Any]) -> str:
    """A background task's news: `◇ task started: Find TODOs`, `◆ task completed: Find TODOs —
    Found 3 TODOs.` (the description when the event has it, else the task id)."""
    status = event.get("status", "")
    name = one_line(event.get("description") or event.get("taskId") or "", 60)
    line = f"{TASK_MARKS.get(status, '◇')} task {status}: {name}"
    if status == "running":
        progress = [
            str(event["lastToolName"]) if event.get("lastToolName") else "",
            f"{event['toolUses']} tool use{'s' * (event['toolUses'] != 1)}"
            if isinstance(event.get("toolUses"), int)
            else "",
            f"{compact_count(event['totalTokens'])} tokens"
            if isinstance(event.get("totalTokens"), int)
            else "",
        ]
        shown = [p for p in progress if p]
        return line + (f" ({', '.join(shown)})" if shown else "")
    summary = event.get("summary")
    if summary and status in ("completed", "failed", "stopped"):
        line += f" — {one_line(summary, 80)}"
    return line


def queue_position(position: int) -> str:
    """`· queued: next to start`, `· queued: 3rd in line`."""
    if position <= 1:
        return "· queued: next to start"
    suffix = (
        "th" if 10 <= position % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(position % 10, "th")
    )
    return f"· queued: {position}{suffix} in line"


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' * (count != 1)}"


def change_counts(changes: Mapping[str, Any]) -> str:
    """`+40 −2 · 2 files`: a child's changes in one glance (lines added and removed, files)."""
    files = len(changes.get("files") or [])
    added, removed = changes.get("linesAdded") or 0, changes.get("linesRemoved") or 0
    return f"+{added} −{removed} · {plural(files, 'file')}"


def changes_line(changes: Mapping[str, Any]) -> str:
    """A child's `changes` event: `± +40 −2 · 2 files changed`. (Its `merge` is `pending` in
    either merge mode until the fork ends: what became of it is the fork's summary.)"""
    if not changes.get("files"):
        return "± no files changed"
    merge = changes.get("merge")
    done = "" if merge == "pending" else f" · {merge}"
    return f"± {change_counts(changes)} changed{done}"


def isolation_note(event: Mapping[str, Any]) -> str:
    """` · worktrees, merged when done`, or ` · shared folder: <why>`: where a fork's children
    work decides whether the user's files change under them."""
    isolation = event.get("isolation")
    if isolation == "worktree":
        review = event.get("mergeMode") == "review"
        return f" · worktrees, {'changes reviewed' if review else 'merged when done'}"
    if isolation == "shared":
        reason = event.get("isolationReason")
        return " · shared folder" + (f": {reason}" if reason else "")
    return ""


def disk_size(size: int) -> str:
    """`812 bytes`, `40 KB`, `1.8 MB`, `2.1 GB` (powers of 1024, as `du -h` counts)."""
    if size < 1024:
        return f"{size} bytes"
    if size < 1024**2:
        return f"{size / 1024:.0f} KB"
    if size < 1024**3:
        return f"{size / 1024**2:.1f} MB"
    return f"{size / 1024**3:.1f} GB"


def describe(event: dict[str, Any]) -> str | None:
    """One line for an event, or None for events a reader does not need to see."""
    kind = event["kind"]
    if kind == Kind.STATUS:
        return f"{STATUS_MARKS.get(event['status'], '·')} {event['status']}"
    if kind == Kind.PROMPT:
        who = "you" if event.get("origin") == "user" else event.get("origin", "server")
        text = str(event["text"])
        if event.get("origin") == "fork":  # a child's brief: its first line names the task
            text = text.split("\n", 1)[0]
        return f"› {who}: {one_line(text)}"
    if kind == Kind.AGENT:
        return f"· agent session {event.get('agentSessionId')} ({event.get('model')})"
    if kind == Kind.TEXT:
        return f"⏺ {one_line(event['text'])}"
    if kind == Kind.THINKING:
        return f"✻ {one_line(event['text'])}"
    if kind == Kind.TOOL_USE:
        return f"⚙ {event['name']}  {summarize_input(event['input'])}"
    if kind == Kind.TOOL_RESULT:
        mark = "✗" if event.get("isError") else "↳"
        return f"  {mark} {one_line(event.get('content', ''), 90)}"
    if kind == Kind.PERMISSION_REQUEST:
        return f"? {event['toolName']} asks for permission"
    if kind == Kind.PERMISSION_DECISION:
        return f"  {'allowed' if event['allow'] else 'denied'} {event['toolName']}"
    if kind == Kind.TURN_RESULT:
        if event.get("cancelled"):
            return "■ turn cancelled"
        mark = "✗ turn failed" if event.get("isError") else "✓ turn done"
        seconds = (event.get("durationMs") or 0) / 1000
        return f"{mark} ({seconds:.1f} s, ${event.get('costUsd') or 0:.4f})"
    if kind == Kind.API_RETRY:
        return api_retry(event)
    if kind == Kind.TASK:
        return f"  {task(event)}"
    if kind == Kind.QUEUE_POSITION:
        return queue_position(int(event["position"]))
    if kind == Kind.ERROR:
        return f"✗ error: {event['message']}"
    if kind == Kind.FORK_PROPOSED:
        tasks = event["tasks"]
        return f"⑂ Fork proposed  {len(tasks)} task{'s' * (len(tasks) != 1)}: {'; '.join(tasks)}"
    if kind == Kind.FORK_STARTED:
        count = len(event["children"])
        return f"⑂ Fork  {plural(count, 'task')}{isolation_note(event)}"
    if kind == Kind.FORK_FINISHED:
        results = event["results"]
        ok = sum(1 for r in results if r["ok"])
        line = f"⑂ Fork done  {ok} of {len(results)} tasks succeeded"
        if isinstance(event.get("diskBytes"), int):
            line += f" · worktrees take {disk_size(event['diskBytes'])}"
        return line
    if kind == Kind.FORK_REVIEWING:
        count = len(event.get("pending") or [])
        return f"⑂ Fork review  changes of {plural(count, 'task')} wait: apply or discard each"
    if kind == Kind.CHANGES:
        return changes_line(event["changes"])
    if kind == Kind.FORK_REJECTED:
        reason = event.get("reason")
        return "⑂ Fork rejected" + (f": {reason}" if reason else "")
    if kind == Kind.FORK_INTERRUPTED:
        count = len(event["unfinished"])
        return f"⑂ Fork interrupted  {count} unfinished: resume or abandon it"
    if kind == Kind.FORK_RESUMED:
        count = len(event["children"])
        return f"⑂ Fork resumed  {count} task{'s' * (count != 1)} again"
    if kind == Kind.FORK_ERROR:
        return f"⑂ Fork tag refused: {one_line(event['message'])}"
    if kind == Kind.WORKTREE_ENV:
        return worktree_env(event)
    if kind == Kind.SETUP_OUTPUT:
        return f"  │ {one_line(event['text'], 110)}"
    if kind == Kind.SETUP_ENDED:
        seconds = int(event.get("durationMs") or 0) / 1000
        if event.get("ok"):
            return f"✓ worktree setup done ({seconds:.1f} s)"
        return f"✗ worktree setup failed: {one_line(str(event.get('error') or ''), 160)}"
    return None


def worktree_env(event: dict[str, Any]) -> str:
    """A worktree child's environment in one line: what was copied, its port, its setup, and
    what the user should know."""
    parts = []
    copied = event.get("copied") or []
    if copied:
        what = f"{plural(int(event.get('copiedFiles') or 0), 'file')}, "
        what += disk_size(int(event.get("copiedBytes") or 0))
        if event.get("clonedFiles"):
            what += f", {event['clonedFiles']} cloned"
        parts.append(f"copied {', '.join(copied)} ({what})")
    parts.append(f"port {event['port']}")
    if event.get("setup"):
        source = f" from {event['setupFile']}" if event.get("setupFile") else ""
        parts.append(f"setup{source}: {one_line(str(event['setup']), 60)}")
    line = "⌂ environment  " + " · ".join(parts)
    for notice in event.get("notices") or []:
        line += f" ⚠ {notice}"
    return line
