"""A session's background tasks: the CLI's subagents and other tasks that outlive a turn.

The CLI reports each one's start, progress and end in messages of their own, often leaving out
what it said before, and starts a turn by itself to report an ended one. `BackgroundTasks` keeps
which still run and which ended, fills in what the CLI leaves out, and knows when a turn to
report an end is due (the session is not done until it comes).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from ...protocol import events


class BackgroundTasks:
    def __init__(self, on_change: Callable[[], None]) -> None:
        """`on_change`: the session may have settled (a task ended)."""
        # The CLI's background tasks that still run (task id -> the last word on each).
        self.running: dict[str, events.Task] = {}
        self._ended_tasks: list[events.Task] = []  # since the last turn, for a CLI-started one
        self._ended: dict[str, events.Task] = {}  # every task that ended, by id
        # A task ended and the CLI is about to start a turn to report it: the session is not
        # done yet (nor may its CLI stop), though nothing runs for a moment.
        self.report_due = False
        self._notify_changed = on_change

    def report(self) -> str:
        """The prompt event of a turn the CLI started: which background tasks it reports on."""
        ended, self._ended_tasks = self._ended_tasks, []
        if not ended:
            return "The agent started a turn by itself."
        return "\n".join(
            f"Background task {t.status}: {t.description or t.summary or t.taskId}" for t in ended
        )

    def track(self, task: events.Task) -> events.Task | None:
        """What to publish of a task's news, with what the CLI leaves out of its later messages
        filled in from earlier ones (description, toolUseId); None when it says nothing new.
        The CLI often reports an end twice: a bare `task_updated`, then a `task_notification`
        with the summary and the figures; the second completes the first."""
        known = self.running.get(task.taskId) or self._ended.get(task.taskId)
        if known is not None:
            # The task's description is what it was started with; progress messages put what
            # it is doing now there ("Running …"), which is no name for it.
            task = msgspec.structs.replace(
                task,
                description=known.description or task.description,
                toolUseId=task.toolUseId or known.toolUseId,
            )
        if task.status in ("started", "running"):
            if task.taskId in self._ended:
                return None  # late progress of a task that has ended
            self.running[task.taskId] = task
            return task
        if self.running.pop(task.taskId, None) is not None:
            self._ended[task.taskId] = task
            self._ended_tasks.append(task)
            self.report_due = True
            self._notify_changed()
            return task
        earlier = self._ended.get(task.taskId)
        if earlier is None or not _adds_to(task, earlier):
            return None
        fuller = msgspec.structs.replace(
            earlier,
            summary=task.summary or earlier.summary,
            totalTokens=task.totalTokens if task.totalTokens is not None else earlier.totalTokens,
            toolUses=task.toolUses if task.toolUses is not None else earlier.toolUses,
            durationMs=task.durationMs if task.durationMs is not None else earlier.durationMs,
        )
        self._ended[task.taskId] = fuller
        return fuller


def _adds_to(news: events.Task, earlier: events.Task) -> bool:
    """Whether a second report of a task's end says more than the first."""
    return bool(news.summary and not earlier.summary) or (
        news.totalTokens is not None and earlier.totalTokens is None
    )
