"""The scripted model driven by real processes: `python -m coven_ls.testing` as docs/testing.md
starts it, the real `claude` CLI against it, and the documented fork example through coven-ls."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from coven_ls.testing.scripted_model import ScriptedModel, ToolUse

from ..unit.test_scripted_model import EXAMPLE, _module_env, _read_line


@contextmanager
def served(script: Path, log: Path) -> Iterator[str]:
    """`python -m coven_ls.testing --script SCRIPT`, as docs/testing.md says to start it; yields
    the URL it prints. Its stderr goes to `log`, so nothing has to drain it."""
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "coven_ls.testing", "--script", str(script)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=_module_env(),
        )
    assert proc.stdout is not None
    try:
        line = _read_line(proc.stdout, timeout=30)
        found = re.fullmatch(r"listening on (http://127\.0\.0\.1:\d+)\n", line)
        assert found, (line, log.read_text())
        yield found.group(1)
        proc.send_signal(signal.SIGINT)  # Ctrl+C
        assert proc.wait(timeout=10) == 0
        assert proc.stdout.read() == ""  # the one line was all
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        proc.stdout.close()


def _run(cmd: Sequence[str], timeout: float, **kw: Any) -> subprocess.CompletedProcess[str]:
    """subprocess.run, but a timeout kills the command's whole process group."""
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **kw,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _pids_with_env(marker: str) -> list[int]:
    """Live processes whose environment holds `marker` (a test's own config dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes():
                if "\nState:\tZ" not in (entry / "status").read_text():
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def assert_nothing_left(marker: str) -> None:
    if not Path("/proc/self/environ").exists():
        return
    deadline = time.monotonic() + 30
    while left := _pids_with_env(marker):
        assert time.monotonic() < deadline, f"left behind: {left}"
        time.sleep(0.1)


def documented_env(url: str, tmp_path: Path) -> dict[str, str]:
    """Only what docs/testing.md lists (plus PATH, and a HOME of the test's own)."""
    home = tmp_path / "home"
    config = tmp_path / "claude-config"
    home.mkdir()
    config.mkdir()
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": "anything",
        "CLAUDE_CONFIG_DIR": str(config),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }


# --------------------------------------------------------------------------- the real CLI


def _bundled_claude() -> Path | None:
    try:
        import claude_agent_sdk
    except ImportError:
        return None
    path = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    return path if path.is_file() and os.access(path, os.X_OK) else None


CLAUDE = _bundled_claude()


@pytest.mark.skipif(CLAUDE is None, reason="claude-agent-sdk with a bundled claude binary needed")
def test_real_claude_cli_runs_a_scripted_tool_turn(tmp_path: Path) -> None:
    assert CLAUDE is not None
    work = tmp_path / "work"
    work.mkdir()
    with ScriptedModel() as model:
        model.on("say hello", "Let me check.", ToolUse("Bash", {"command": "echo scripted-ok"}))
        model.on("scripted-ok", "Hello! The command said scripted-ok.")
        started = time.monotonic()
        proc = subprocess.run(
            [
                str(CLAUDE),
                "-p",
                "say hello",
                "--output-format",
                "stream-json",
                "--verbose",
                "--allowedTools",
                "Bash",
            ],
            check=False,
            cwd=work,
            env=model.cli_environ(tmp_path / "claude-config"),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
        elapsed = time.monotonic() - started
        requests = model.requests
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    blocks = [
        (line["type"], block)
        for line in lines
        if line["type"] in ("assistant", "user")
        for block in line["message"]["content"]
        if isinstance(block, dict)
    ]
    texts = [b["text"] for t, b in blocks if t == "assistant" and b["type"] == "text"]
    assert "Let me check." in texts and "Hello! The command said scripted-ok." in texts
    (tool_use,) = [b for t, b in blocks if b["type"] == "tool_use"]
    assert tool_use["name"] == "Bash" and tool_use["input"] == {"command": "echo scripted-ok"}
    (result,) = [b for t, b in blocks if b["type"] == "tool_result"]
    assert result["tool_use_id"] == tool_use["id"] and "scripted-ok" in str(result["content"])
    final = lines[-1]
    assert final["type"] == "result" and final["is_error"] is False
    assert final["result"] == "Hello! The command said scripted-ok."

    # The model saw the tool's output, and the turn used the rules, not the default.
    assert [r.rule_index for r in requests] == [0, 1]
    assert requests[0].last_user_text == "say hello"
    assert "scripted-ok" in requests[1].last_user_text
    assert all(r.finished is not None and r.is_main_turn for r in requests)
    assert elapsed < 60


def _stream_json_blocks(stdout: str) -> tuple[list[dict[str, Any]], list[tuple[str, Any]]]:
    lines = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    blocks = [
        (line["type"], block)
        for line in lines
        if line["type"] in ("assistant", "user")
        for block in line["message"]["content"]
        if isinstance(block, dict)
    ]
    return lines, blocks


@pytest.mark.skipif(CLAUDE is None, reason="claude-agent-sdk with a bundled claude binary needed")
def test_documented_example_through_the_real_cli(tmp_path: Path) -> None:
    """docs/testing.md, first part: the entry point serves the example script and `claude -p`
    runs the scripted Bash call and ends with the scripted answer."""
    assert CLAUDE is not None
    work = tmp_path / "work"
    work.mkdir()
    log = tmp_path / "model.log"
    with served(EXAMPLE, log) as url:
        env = documented_env(url, tmp_path)
        done = _run(
            [
                str(CLAUDE),
                *("-p", "Run the tests", "--output-format", "stream-json", "--verbose"),
                *("--allowedTools", "Bash"),
            ],
            timeout=120,
            cwd=work,
            env=env,
        )
        assert_nothing_left(env["CLAUDE_CONFIG_DIR"])
    assert done.returncode == 0, (done.stderr, log.read_text())
    lines, blocks = _stream_json_blocks(done.stdout)
    (tool_use,) = [b for t, b in blocks if b["type"] == "tool_use"]
    assert tool_use["name"] == "Bash"
    assert tool_use["input"] == {"command": "echo '3 passed, 0 failed'"}
    (result,) = [b for t, b in blocks if b["type"] == "tool_result"]
    assert result["tool_use_id"] == tool_use["id"] and not result.get("is_error")
    assert "3 passed, 0 failed" in str(result["content"])  # the command really ran
    texts = [b["text"] for t, b in blocks if t == "assistant" and b["type"] == "text"]
    assert texts == ["Let me run them.", "All 3 tests pass."]
    final = lines[-1]
    assert final["type"] == "result" and final["is_error"] is False
    assert final["result"] == "All 3 tests pass."
    # What the entry point told the user: the URL to export, then one line per request.
    printed = log.read_text()
    assert f"export ANTHROPIC_BASE_URL={url} " in printed
    assert "rule=0" in printed and "rule=1" in printed and "rule=None" not in printed


@pytest.mark.skipif(CLAUDE is None, reason="claude-agent-sdk with a bundled claude binary needed")
def test_documented_example_forks_through_coven_ls(tmp_path: Path) -> None:
    """docs/testing.md, second part: coven-ls (`coven-ls run --yes`) on the served example
    forks into the two scripted tasks, runs both children and reintegrates their answers."""
    work = tmp_path / "work"
    work.mkdir()
    with served(EXAMPLE, tmp_path / "model.log") as url:
        env = {**documented_env(url, tmp_path), "XDG_STATE_HOME": str(tmp_path / "state")}
        done = _run(
            [
                *(sys.executable, "-m", "coven_ls", "run", "--json", "--yes"),
                *("--cwd", str(work), "Plan the release"),
            ],
            timeout=240,
            env={**env, "PYTHONPATH": _module_env()["PYTHONPATH"]},
        )
        assert_nothing_left(env["CLAUDE_CONFIG_DIR"])
    assert done.returncode == 0, done.stderr[-3000:]
    events = [json.loads(line) for line in done.stdout.splitlines()]
    parent = events[0]["sessionId"]

    def of(sid: str, kind: str) -> list[dict[str, Any]]:
        return [e for e in events if e["sessionId"] == sid and e["kind"] == kind]

    (started,) = of(parent, "forkStarted")
    assert started["tasks"] == ["Write the docs", "Fix the bugs"]
    (finished,) = of(parent, "forkFinished")
    assert [(r["label"], r["ok"]) for r in finished["results"]] == [
        ("Write the docs", True),
        ("Fix the bugs", True),
    ]
    for child, answer in zip(
        finished["results"], ["The docs are written.", "The bugs are fixed."], strict=True
    ):
        (prompt,) = of(child["sessionId"], "prompt")
        assert prompt["text"].split("\n")[0] == f"You were assigned '{child['label']}'"
        assert [r["text"] for r in of(child["sessionId"], "turnResult")] == [answer]
    prompts = [e.get("origin") for e in of(parent, "prompt")]
    assert prompts[-1] == "forkResults"
    assert of(parent, "turnResult")[-1]["text"] == (
        "Both tasks are done: the docs are written and the bugs are fixed."
    )
