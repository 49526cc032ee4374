"""Events in words: one line per `coven/event`, for any front end that shows text (the terminal
tree, standard-LSP log lines and progress messages)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from . import events as ev
from .events import EventDict
from .labels import API_FAILURES, STATUS_MARKS
from .tree import Event, decode_payload
from .types import Changes, ContextUsage, ForkEstimate


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
        return f"{_tenths(n / 1000)}k".replace(".0k", "k")
    return f"{_tenths(n / 1_000_000)}M".replace(".0M", "M")


def _tenths(x: float) -> str:
    """`x` to one decimal, a tie rounded up as JavaScript's toFixed and the Neovim plugin's
    LuaJIT do (Python's format rounds it to even: 16250 tokens would read 16.2k here and 16.3k
    in the other clients)."""
    return str(Decimal(x).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def usd(amount: float) -> str:
    """An estimate in dollars: to the cent, and below a cent to a hundredth of one (a fork that
    costs $0.0027 is not "$0.00")."""
    return f"${amount:.2f}" if amount >= 0.01 else f"${amount:.4f}"


def context_gauge(usage: ContextUsage) -> str:
    """A session's context in a few words: `170k / 200k tokens (85%)`, or the tokens alone and
    why for a model the price table does not know."""
    if usage.window:
        share = usage.tokens * 100 // usage.window
        return f"{compact_count(usage.tokens)} / {compact_count(usage.window)} tokens ({share}%)"
    model = usage.model or "the model"
    return f"{compact_count(usage.tokens)} tokens (window unknown: {model} is not in the table)"


def _parent_context(estimate: ForkEstimate) -> ContextUsage:
    return ContextUsage(tokens=estimate.contextTokens, window=estimate.window, model=estimate.model)


def fork_cost(estimate: ForkEstimate) -> list[str]:
    """A fork approval's context and cost lines: the parent's context, what the children pay
    to read it (and write to the prompt cache), and the warning past 80% of the window."""
    usage = _parent_context(estimate)
    how = "read from the cache" if estimate.pricedAs == "cacheRead" else "at the full input price"
    cost = (
        f"≈ {usd(estimate.costUsd)} (prices of {estimate.pricesAsOf})"
        if estimate.costUsd is not None
        else f"(cost unknown: {estimate.model or 'the model'} is not in coven-ls's price table)"
    )
    if estimate.context == "inherit":
        read = f"{estimate.children} × {compact_count(estimate.contextTokens)}"
    else:  # fresh children read their briefs, transcript ones the conversation after its cuts
        plural = "child" if estimate.children == 1 else "children"
        read = f"{estimate.children} {estimate.context} {plural}"
    written = (
        f" + {compact_count(estimate.writeTokens)} written to it" if estimate.writeTokens else ""
    )
    lines = [
        f"Context: {context_gauge(usage)}",
        f"Fork cost: {read} = {compact_count(estimate.tokens)} tokens {how}{written} {cost}",
    ]
    if estimate.warning:
        lines.append(f"⚠ Warning: {estimate.warning}")
    return lines


def fork_cost_brief(estimate: ForkEstimate) -> str:
    """The same in one line: `context 170k / 200k tokens (85%) · fork ≈ $0.10 ⚠ 85% full`."""
    usage = _parent_context(estimate)
    cost = f"≈ {usd(estimate.costUsd)}" if estimate.costUsd is not None else "cost unknown"
    line = f"context {context_gauge(usage)} · fork {compact_count(estimate.tokens)} tokens {cost}"
    return line + (" ⚠ context nearly full" if estimate.warning else "")


def seconds(ms: float) -> str:
    """A delay in seconds, as a person says it: `4 s`, `0.6 s`, `12 s`."""
    value = ms / 1000
    if value >= 10 or value == int(value):
        return f"{value:.0f} s"
    return f"{value:.1f} s"


def api_retry(retry: ev.ApiRetry) -> str:
    """`⟳ API overloaded — retrying in 4 s (3/10)`."""
    status, error = retry.errorStatus, retry.error or ""
    if status in API_FAILURES:
        what = API_FAILURES[status]
    elif "overloaded" in error.lower():
        what = "API overloaded"
    elif status is not None:
        what = f"API error {status}"
    else:
        what = f"API call failed ({one_line(error, 40)})" if error else "API call failed"
    delay = seconds(retry.retryDelayMs or 0)
    return f"⟳ {what} — retrying in {delay} ({retry.attempt}/{retry.maxRetries})"


TASK_MARKS = {"started": "◇", "running": "◇", "completed": "◆", "failed": "✗", "stopped": "■"}


def task(news: ev.Task) -> str:
    """A background task's news: `◇ task started: Find TODOs`, `◆ task completed: Find TODOs —
    Found 3 TODOs.` (the description when the event has it, else the task id)."""
    status = news.status
    name = one_line(news.description or news.taskId or "", 60)
    line = f"{TASK_MARKS.get(status, '◇')} task {status}: {name}"
    if status == "running":
        progress = [
            news.lastToolName or "",
            plural(news.toolUses, "tool use") if news.toolUses is not None else "",
            f"{compact_count(news.totalTokens)} tokens" if news.totalTokens is not None else "",
        ]
        shown = [p for p in progress if p]
        return line + (f" ({', '.join(shown)})" if shown else "")
    if news.summary and status in ("completed", "failed", "stopped"):
        line += f" — {one_line(news.summary, 80)}"
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


def change_counts(changes: Changes | Mapping[str, Any]) -> str:
    """`+40 −2 · 2 files`: a child's changes in one glance (lines added and removed, files)."""
    if isinstance(changes, Changes):
        changes = {"files": changes.files, "linesAdded": changes.linesAdded,
                   "linesRemoved": changes.linesRemoved}  # fmt: skip
    files = len(changes.get("files") or [])
    added, removed = changes.get("linesAdded") or 0, changes.get("linesRemoved") or 0
    return f"+{added} −{removed} · {plural(files, 'file')}"


def changes_line(changes: Changes) -> str:
    """A child's `changes` event: `± +40 −2 · 2 files changed`. (Its `merge` is `pending` in
    either merge mode until the fork ends: what became of it is the fork's summary.)"""
    if not changes.files:
        return "± no files changed"
    done = "" if changes.merge == "pending" else f" · {changes.merge}"
    return f"± {change_counts(changes)} changed{done}"


def isolation_note(started: ev.ForkStarted) -> str:
    """` · worktrees, merged when done`, or ` · shared folder: <why>`: where a fork's children
    work decides whether the user's files change under them."""
    if started.isolation == "worktree":
        review = started.mergeMode == "review"
        return f" · worktrees, {'changes reviewed' if review else 'merged when done'}"
    if started.isolation == "shared":
        reason = started.isolationReason
        return " · shared folder" + (f": {reason}" if reason else "")
    return ""


def placement_note(started: ev.ForkStarted) -> str:
    """` · 2 on the ray cluster`, or ` · all here: <why>` when the fork's children that would
    have gone to the cluster run on this machine; nothing for a fork that runs here."""
    placed = [c.placement for c in started.children if c.placement is not None]
    if placed:
        return f" · {len(placed)} on the {placed[0].cluster} cluster"
    reason = started.placementReason
    return f" · all here: {reason}" if reason else ""


def placed_line(placed: ev.Placed) -> str:
    """`⇢ on host-2 (ray cluster)`: a child's agent runs on that node from now on."""
    return f"⇢ on {placed.node}" + (f" ({placed.cluster} cluster)" if placed.cluster else "")


def disk_size(size: int) -> str:
    """`812 bytes`, `40 KB`, `1.8 MB`, `2.1 GB` (powers of 1024, as `du -h` counts)."""
    if size < 1024:
        return f"{size} bytes"
    if size < 1024**2:
        return f"{size / 1024:.0f} KB"
    if size < 1024**3:
        return f"{size / 1024**2:.1f} MB"
    return f"{size / 1024**3:.1f} GB"


def describe(event: Event | EventDict) -> str | None:
    """One line for an event, or None for events a reader does not need to see."""
    payload = event.payload if isinstance(event, Event) else decode_payload(event)
    return None if payload is None else describe_payload(payload)


def describe_payload(payload: ev.Payload) -> str | None:
    match payload:
        case ev.StatusChanged(status=status):
            return f"{STATUS_MARKS.get(status, '·')} {status}"
        case ev.Prompt(text=text, origin=origin):
            who = "you" if origin == "user" else origin
            if origin == "fork":  # a child's brief: its assignment line names the task
                text = next(
                    (ln for ln in text.splitlines() if ln.startswith("You were assigned ")),
                    text.split("\n", 1)[0],
                )
            return f"› {who}: {one_line(text)}"
        case ev.AgentStarted(agentSessionId=agent, model=model):
            return f"· agent session {agent} ({model})"
        case ev.Text(text=text):
            return f"⏺ {one_line(text)}"
        case ev.Thinking(text=text):
            return f"✻ {one_line(text)}"
        case ev.ToolUse(name=name, input=tool_input):
            return f"⚙ {name}  {summarize_input(tool_input)}"
        case ev.ToolResult(content=content, isError=failed):
            return f"  {'✗' if failed else '↳'} {one_line(content, 90)}"
        case ev.PermissionRequest(toolName=tool, options=options):
            offered = f" ({' / '.join(o.name for o in options)})" if options else ""
            return f"? {tool} asks for permission{offered}"
        case ev.PermissionDecision(toolName=tool, allow=allow, optionId=option):
            line = f"  {'allowed' if allow else 'denied'} {tool}"
            return f"{line} ({option})" if option else line
        case ev.TurnResult(cancelled=True):
            return "■ turn cancelled"
        case ev.TurnResult(isError=failed, durationMs=duration, costUsd=cost, contextUsage=ctx):
            mark = "✗ turn failed" if failed else "✓ turn done"
            line = f"{mark} ({(duration or 0) / 1000:.1f} s, ${cost or 0:.4f})"
            return f"{line} · context {context_gauge(ctx)}" if ctx else line
        case ev.ApiRetry():
            return api_retry(payload)
        case ev.Task():
            return f"  {task(payload)}"
        case ev.QueuePosition(position=position):
            return queue_position(position)
        case ev.Error(message=message):
            return f"✗ error: {message}"
        case ev.ModeChanged(mode=mode):
            return f"◆ mode: {mode}"
        case ev.Plan(entries=entries):
            return plan_line(entries)
        case ev.ToolUpdate(status=None, title=None, locations=None):
            return None  # its output so far alone: the result says it whole
        case ev.ToolUpdate():
            return f"  {tool_update(payload)}"
        case ev.AgentRestarted(reason=reason, restart=restart, maxRestarts=most):
            return f"↻ agent started again ({restart} of {most}): {one_line(reason, 160)}"
        case ev.ForkProposed(tasks=tasks, estimate=estimate):
            line = f"⑂ Fork proposed  {plural(len(tasks), 'task')}: {'; '.join(tasks)}"
            return f"{line} · {fork_cost_brief(estimate)}" if estimate else line
        case ev.ForkStarted(children=children):
            notes = isolation_note(payload) + placement_note(payload)
            return f"⑂ Fork  {plural(len(children), 'task')}{notes}"
        case ev.Placed():
            return placed_line(payload)
        case ev.ForkFinished(results=results, diskBytes=disk):
            ok = sum(1 for r in results if r.ok)
            line = f"⑂ Fork done  {ok} of {len(results)} tasks succeeded"
            return line + (f" · worktrees take {disk_size(disk)}" if disk is not None else "")
        case ev.ForkReviewing(pending=pending):
            waiting = plural(len(pending), "task")
            return f"⑂ Fork review  changes of {waiting} wait: apply or discard each"
        case ev.ChangesEvent(changes=changes):
            return changes_line(changes)
        case ev.ForkRejected(reason=reason):
            return "⑂ Fork rejected" + (f": {reason}" if reason else "")
        case ev.ForkInterrupted(unfinished=unfinished):
            return f"⑂ Fork interrupted  {len(unfinished)} unfinished: resume or abandon it"
        case ev.ForkResumed(children=children):
            return f"⑂ Fork resumed  {plural(len(children), 'task')} again"
        case ev.ForkError(message=message):
            return f"⑂ Fork tag refused: {one_line(message)}"
        case ev.WorktreeEnv():
            return worktree_env(payload)
        case ev.SetupOutput(text=text):
            return f"  │ {one_line(text, 110)}"
        case ev.SetupEnded(ok=True, durationMs=duration):
            return f"✓ worktree setup done ({duration / 1000:.1f} s)"
        case ev.SetupEnded(durationMs=duration, error=error):
            return f"✗ worktree setup failed: {one_line(error or '', 160)}"
    return None


def worktree_env(env: ev.WorktreeEnv) -> str:
    """A worktree child's environment in one line: what was copied, its port, its setup, and
    what the user should know."""
    parts = []
    if env.copied:
        what = f"{plural(env.copiedFiles or 0, 'file')}, {disk_size(env.copiedBytes or 0)}"
        if env.clonedFiles:
            what += f", {env.clonedFiles} cloned"
        if env.copiedAhead:
            what += ", made ahead"
        parts.append(f"copied {', '.join(env.copied)} ({what})")
    parts += env.rewritten or []
    parts.append(f"port {env.port}")
    if env.setup:
        source = f" from {env.setupFile}" if env.setupFile else ""
        parts.append(f"setup{source}: {one_line(env.setup, 60)}")
    line = "⌂ environment  " + " · ".join(parts)
    for notice in env.notices or []:
        line += f" ⚠ {notice}"
    return line


PLAN_MARKS = {"completed": "[x]", "in_progress": "[>]", "pending": "[ ]"}


def plan_line(entries: list[ev.PlanEntry]) -> str:
    """A plan in one line: how far it is, and the step under way (else the next one)."""
    if not entries:
        return "☰ plan: empty"
    done = sum(1 for e in entries if e.status == "completed")
    line = f"☰ plan {done}/{len(entries)} done"
    current = next((e for e in entries if e.status == "in_progress"), None)
    current = current or next((e for e in entries if e.status == "pending"), None)
    return (
        f"{line} · {PLAN_MARKS[current.status]} {one_line(current.content, 120)}"
        if current
        else line
    )


def tool_update(update: ev.ToolUpdate) -> str:
    """A running tool call's news: its status and title, and where it works."""
    parts: list[str] = [update.status or "running"]
    if update.title:
        parts.append(one_line(update.title, 120))
    if update.locations:
        loc = update.locations[0]
        where = f"{loc.path}:{loc.line}" if loc.line is not None else loc.path
        more = f" (+{len(update.locations) - 1})" if len(update.locations) > 1 else ""
        parts.append(where + more)
    return f"↳ tool {update.toolUseId[:12]}: " + " · ".join(parts)
