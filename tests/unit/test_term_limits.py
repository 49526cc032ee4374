"""A fork's limits typed in the terminal's approval (`coven-ls run`'s `l`), sent with
coven/decideFork."""

from __future__ import annotations

import asyncio
import io
import os
from typing import Any

import pytest

from coven_ls import protocol
from coven_ls.term.limits import LimitsError, limits_text, parse_limits
from coven_ls.term.run import Runner, RunOptions, Terminal


def test_limits_are_typed_by_name_and_written_back_as_typed() -> None:
    typed = "childTokens=200000, child-seconds=600 forkcostusd=2.5 childCostUsd=0"
    limits = parse_limits(typed)
    assert limits == {
        "childTokens": 200000,
        "childSeconds": 600.0,
        "forkCostUsd": 2.5,
        "childCostUsd": 0.0,
    }
    assert limits_text(limits) == (
        "childTokens=200000 childSeconds=600 forkCostUsd=2.5 childCostUsd=0"
    )
    assert parse_limits("  ") == {}


@pytest.mark.parametrize(
    ("typed", "said"),
    [
        ("tokens=5", "'tokens=5' is not a limit: type name=value, the names being childTokens"),
        ("childTokens", "'childTokens' is not a limit"),
        ("childTokens=1.5", "childTokens takes a whole number, not '1.5'"),
        ("forkCostUsd=lots", "forkCostUsd takes a number, not 'lots'"),
        ("childSeconds=-1", "childSeconds must be 0 (no limit) or more, not -1"),
        ("childSeconds=inf", "childSeconds must be 0 (no limit) or more, not inf"),
    ],
)
def test_a_bad_limit_says_what_to_type(typed: str, said: str) -> None:
    with pytest.raises(LimitsError, match=f"^{said}".replace("(", r"\(").replace(")", r"\)")):
        parse_limits(typed)


def test_runs_approval_sends_the_limits_typed_after_l() -> None:
    async def scenario() -> tuple[list[dict[str, Any]], str]:
        read, write = os.pipe()
        os.write(write, b"l\nchildTokens=-3\nl\nchildTokens=5000 forkCostUsd=1.5\ny\n")
        out = io.StringIO()
        terminal = Terminal(interactive=True, yes=False, out=out, fd=read)
        runner = Runner(RunOptions("go", "."), io.StringIO(), terminal)
        sent: list[dict[str, Any]] = []

        async def request(method: str, params: dict[str, Any]) -> dict[str, Any]:
            assert method == protocol.DECIDE_FORK
            sent.append(params)
            return {}

        runner.client.request = request  # type: ignore[method-assign]
        event = {"sessionId": "s-1", "forkId": "f-1", "tasks": ["Docs", "Bugs"]}
        try:
            await asyncio.wait_for(runner._decide_fork(event), 10)
        finally:
            os.close(read)
            os.close(write)
        return sent, out.getvalue()

    sent, asked = asyncio.run(scenario())
    assert sent == [
        {
            "forkId": "f-1",
            "approve": True,
            "limits": {"childTokens": 5000, "forkCostUsd": 1.5},
        }
    ]
    assert "Approve the fork? (e: edit the tasks, l: set its limits) [y/n/e/l]" in asked
    assert "childTokens must be 0 (no limit) or more, not -3" in asked
    assert "Limits for this fork: childTokens=5000 forkCostUsd=1.5\n" in asked
