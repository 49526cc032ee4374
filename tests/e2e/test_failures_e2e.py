"""What a user is told when the CLI fails: its own reason, the signal that killed it, the retries
it makes. Through the real CLI."""

from __future__ import annotations

import os
import signal

import pytest

from coven_ls.testing.scripted_model import HttpError, Reply, ScriptedModel

from ..harness import Coven, FaultRecord, wait_until


@pytest.mark.skipif(os.geteuid() != 0, reason="the CLI refuses this mode only to root")
async def test_the_clis_reason_is_in_the_error(coven: Coven, model: ScriptedModel) -> None:
    model.on("Anything", "Never reached.")
    sid = await coven.start("Anything", permissionMode="bypassPermissions")
    error = await coven.wait_kind(sid, "error")
    # The CLI says why on stderr only; the user reads it, not "Check stderr output for details".
    assert "cannot be used with root/sudo privileges" in error["message"], error
    assert "Check stderr output" not in error["message"]
    assert error["message"].startswith("Claude Code exited with code 1")


async def test_a_killed_cli_is_named_by_its_signal(
    coven: Coven, model: ScriptedModel, fault: FaultRecord
) -> None:
    model.on("Start", "Started.")
    model.on("Take your time", "Too late.", latency=120)
    sid = await coven.start("Start")
    await coven.wait_kind(sid, "turnResult")
    await coven.request("coven/sendMessage", {"sessionId": sid, "text": "Take your time"})
    await coven.wait_status(
        sid, "running", after_seq=(await coven.wait_kind(sid, "turnResult"))["seq"]
    )
    await wait_until(lambda: bool(coven.agent_pids()), 30, "the CLI")
    for pid in coven.agent_pids():
        os.kill(pid, signal.SIGKILL)
    fault.inject()
    error = await coven.wait_kind(sid, "error")
    assert "SIGKILL" in error["message"], error
    await coven.wait_status(sid, "failed")
    fault.recovered()  # the user knows, and why
    kept = (await coven.request("coven/getEvents", {"sessionId": sid}))["events"]
    assert fault.lost(coven.of(sid), kept) == 0


async def test_each_retry_is_an_event(
    coven: Coven, model: ScriptedModel, fault: FaultRecord
) -> None:
    # Two overloaded answers, then the real one: the CLI retries, and says so each time.
    overloaded = HttpError(529, "Overloaded", "overloaded_error", should_retry=True)
    model.on("Hello", Reply(error=overloaded), times=2)
    model.on("Hello", "Hi after the retries.")
    fault.inject()
    sid = await coven.start("Hello")
    first = await coven.wait_kind(sid, "apiRetry")
    assert first["attempt"] == 1 and first["errorStatus"] == 529
    assert first["maxRetries"] >= 2 and first["retryDelayMs"] > 0
    done = await coven.wait_kind(sid, "turnResult")
    fault.recovered()
    assert done["text"] == "Hi after the retries." and done["isError"] is False
    retries = coven.of(sid, "apiRetry")
    assert [r["attempt"] for r in retries] == [1, 2]
    assert all(r["seq"] < done["seq"] for r in retries)
