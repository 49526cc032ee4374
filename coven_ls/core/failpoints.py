"""Named points where a test stops the server dead, to SIGKILL it exactly there (the
kill-point tests, tests/e2e/test_kill_points_e2e.py): with COVEN_FAILPOINT=<name> in its
environment, the server writes its pid to COVEN_FAILPOINT_FILE on reaching that point and waits
there forever. Unset (as everywhere but in those tests), reaching a point costs one comparison."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import anyio

log = logging.getLogger(__name__)

ARMED = os.environ.get("COVEN_FAILPOINT")


async def reached(name: str) -> None:
    if ARMED != name:
        return
    marker = os.environ.get("COVEN_FAILPOINT_FILE")
    if marker:
        Path(marker).write_text(str(os.getpid()))
    log.warning("failpoint %s reached: the server waits here to be killed", name)
    await anyio.sleep_forever()
