"""The model's tool calls and their outputs as codex writes them to a thread's rollout file
(`$CODEX_HOME/sessions/…/rollout-…-<thread>.jsonl`, one `{"type": "response_item", "payload":
…}` a line), read as they are added: the one record of a command codex could not start, for a
thread that gets no raw Responses items (a fork, a resumed thread; translate.py)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

TOOL_ITEMS = ("function_call", "function_call_output")


class RolloutTail:
    """What a rollout file gains from now on."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        try:
            self._offset = self.path.stat().st_size
        except OSError:
            self._offset = 0  # not written yet: everything in it will be new

    def new_tool_items(self) -> list[dict[str, Any]]:
        """The function calls and outputs written since the last call, in order (whole lines
        only: a line still being written waits for the next call)."""
        try:
            with self.path.open("rb") as file:
                file.seek(self._offset)
                data = file.read()
        except OSError as exc:
            log.debug("codex rollout %s not read: %s", self.path, exc)
            return []
        end = data.rfind(b"\n") + 1
        self._offset += end
        items = []
        for line in data[:end].splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            payload = record.get("payload") if isinstance(record, dict) else None
            if (
                record.get("type") == "response_item"
                and isinstance(payload, dict)
                and payload.get("type") in TOOL_ITEMS
            ):
                items.append(payload)
        return items
