"""How long each of `coven-ls chat`'s fork children has been at work, from its status events:
since it started working (`starting`, `running`, `forking`; not while `queued`) until it stops.
Shown on the chat's prompt and in /tree, which the prompt's redraw (twice a second) moves."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

WORKING = frozenset({"starting", "running", "forking"})


class WorkClock:
    def __init__(self) -> None:
        self._since: dict[str, float] = {}  # sessionId -> when it started its work (epoch s)

    def status(self, session_id: str, status: str, stamp: str) -> None:
        """A `status` event of the session, sent at `stamp` (its `time`)."""
        if status in WORKING:
            self._since.setdefault(session_id, seconds_of(stamp))
        else:
            self._since.pop(session_id, None)

    def elapsed(self, info: dict[str, Any], now: float | None = None) -> str:
        """` 1m05s`: how long a fork child (SessionInfo `info`) has been at work; empty for other
        sessions and for one that is not at work."""
        since = self._since.get(info["sessionId"])
        if since is None or not info.get("forkId"):
            return ""
        seconds = max(0, int((time.time() if now is None else now) - since))
        return f" {seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f" {seconds}s"


def seconds_of(stamp: str) -> float:
    """An event's `time` (`2026-11-22T01:37:02.114Z`) in seconds since the epoch."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
