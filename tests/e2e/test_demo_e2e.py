"""`coven-ls demo`: the newcomer's first command works, through the real CLI, with no API key."""

from __future__ import annotations

import json
import subprocess
import sys


def test_demo_runs_a_fork_through_the_real_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "coven_ls", "demo", "--json"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    events = [json.loads(line) for line in done.stdout.splitlines()]
    parent = events[0]["sessionId"]
    kinds = [e["kind"] for e in events if e["sessionId"] == parent]
    assert kinds.index("forkProposed") < kinds.index("forkStarted") < kinds.index("forkFinished")
    [started] = [e for e in events if e["kind"] == "forkStarted"]
    children = {c["sessionId"] for c in started["children"]}
    assert len(children) == 3
    for child in children:
        results = [e for e in events if e["sessionId"] == child and e["kind"] == "turnResult"]
        assert [r["isError"] for r in results] == [False]
    [finished] = [e for e in events if e["kind"] == "forkFinished"]
    assert all(r["ok"] for r in finished["results"])
    # The demo's workspace is a git repository: each child wrote its summary in its own
    # worktree, and every summary was merged back.
    [started] = [e for e in events if e["kind"] == "forkStarted"]
    assert started["isolation"] == "worktree"
    assert [r["merge"] for r in finished["results"]] == ["applied"] * 3
    last = [e for e in events if e["sessionId"] == parent and e["kind"] == "turnResult"][-1]
    assert last["text"].startswith("Here is the tour")


def test_demo_human_output_draws_the_tree() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "coven_ls", "demo"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    fork_line = next(i for i, line in enumerate(lines) if "⑂ Fork  3 tasks" in line)
    child_lines = [line for line in lines if "[1/3]" in line]
    assert child_lines and all(
        len(line) - len(line.lstrip()) > len(lines[fork_line]) - len(lines[fork_line].lstrip())
        for line in child_lines
    )
    assert any("Here is the tour" in line for line in lines[fork_line:])
