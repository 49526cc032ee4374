"""`coven-ls run`: a session from the terminal, through the real server and the real `claude` CLI,
on the scripted model (pointed at through the environment, as a user's ANTHROPIC_BASE_URL
would be)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from coven_ls.core.models import MODELS, PRICES_AS_OF
from coven_ls.term.run import NO_TERMINAL_DENIAL, NO_TERMINAL_FORK_REASON
from coven_ls.testing.scripted_model import HttpError, Reply, ScriptedModel, ToolUse, Usage

from ..gitrepo import NOTES, append, git, git_env, make_repo, status
from ..harness import processes_with_env

PLAN = "Plan the release"
FORK_TWO = "I will split this.\n<fork>\n- Write the docs\n- Fix the bugs\n</fork>"
# ~30 pieces of 5 characters, 50 ms apart: an answer that takes 1.5 s to arrive.
STORY = (
    "Streaming works: this answer arrives in small pieces, one after the other, long before "
    "the whole message is done."
)
OVERLOADED = Reply(error=HttpError(529, "Overloaded", "overloaded_error"))
USAGE_LINE = re.compile(
    r"^Σ ([\d,]+) tokens in \(([\d,]+) uncached, ([\d,]+) cache read, ([\d,]+) cache write\) "
    r"· ([\d,]+) out · \$(\d+\.\d{4})( over \d+ sessions)?$"
)


def run_env(model: ScriptedModel, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CLAUDECODE", "CLAUDE_CODE_SESSION_ID")}
    env.update(model.cli_env(tmp_path / "claude-config"))
    return env


def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir(exist_ok=True)
    return path


def run_json(
    tmp_path: Path, model: ScriptedModel, *args: str
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """`coven-ls run --json`: the process and the lines it printed, parsed (events, and with
    `--deltas` the streamed pieces too)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "coven_ls",
            "run",
            "--json",
            "--cwd",
            str(workspace(tmp_path)),
            *args,
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=run_env(model, tmp_path),
        timeout=240,
        check=False,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert_no_process_left(tmp_path)
    return done, lines


def assert_no_process_left(tmp_path: Path) -> None:
    marker = str(tmp_path / "claude-config")
    deadline = time.monotonic() + 30
    while processes_with_env(marker):
        assert time.monotonic() < deadline, f"left behind: {processes_with_env(marker)}"
        time.sleep(0.1)


def of(events: list[dict[str, Any]], sid: str, kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["sessionId"] == sid and e["kind"] == kind]


def test_run_json_streams_events_until_the_session_settles(
    tmp_path: Path, model: ScriptedModel
) -> None:
    target = workspace(tmp_path) / "precious.txt"
    target.write_text("keep me")
    model.on("clean up the workspace", ToolUse("Bash", {"command": f"rm {target}"}))
    # The model only gets this far if the denial that says why reached it.
    model.on("no terminal to ask the user", "Understood, I will leave it.")

    done, events = run_json(tmp_path, model, "Please clean up the workspace")

    assert done.returncode == 0, done.stderr[-3000:]
    sid = events[0]["sessionId"]
    assert {e["sessionId"] for e in events} == {sid}
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    [decision] = of(events, sid, "permissionDecision")
    assert decision["allow"] is False and decision["message"] == NO_TERMINAL_DENIAL
    assert target.read_text() == "keep me"
    [result] = of(events, sid, "turnResult")
    assert result["text"] == "Understood, I will leave it."
    assert events[-1] == {**events[-1], "kind": "status", "status": "idle"}
    assert "stdin is not a terminal" in done.stderr


def test_run_yes_approves_the_fork_and_waits_for_the_results(
    tmp_path: Path, model: ScriptedModel
) -> None:
    model.on(PLAN, FORK_TWO)
    model.on("You were assigned 'Write the docs'", "Docs are written.")
    model.on(
        "You were assigned 'Fix the bugs'",
        ToolUse("Bash", {"command": "touch fixed.txt && echo fixed-it"}),
    )
    model.on("fixed-it", "Bugs are fixed.")
    model.on("<fork-results>", "Both parts are done.")

    done, events = run_json(tmp_path, model, "--yes", PLAN)

    assert done.returncode == 0, done.stderr[-3000:]
    sid = events[0]["sessionId"]
    kinds = [e["kind"] for e in events if e["sessionId"] == sid]
    assert kinds.index("forkProposed") < kinds.index("forkStarted") < kinds.index("forkFinished")
    [finished] = of(events, sid, "forkFinished")
    assert [(r["label"], r["ok"]) for r in finished["results"]] == [
        ("Write the docs", True),
        ("Fix the bugs", True),
    ]
    bugs = finished["results"][1]["sessionId"]
    assert [d["allow"] for d in of(events, bugs, "permissionDecision")] == [True]
    assert of(events, sid, "turnResult")[-1]["text"] == "Both parts are done."
    assert events[-1]["sessionId"] == sid and events[-1].get("status") == "idle"


def test_run_fork_context_fresh_starts_the_approved_children_afresh(
    tmp_path: Path, model: ScriptedModel
) -> None:
    model.on("You were assigned 'Write the docs'", "Docs are written.")
    model.on("You were assigned 'Fix the bugs'", "Bugs are fixed.")
    model.on("<fork-results>", "Both parts are done.")
    model.on(PLAN, FORK_TWO)

    done, events = run_json(tmp_path, model, "--yes", "--fork-context", "fresh", PLAN)

    assert done.returncode == 0, done.stderr[-3000:]
    sid = events[0]["sessionId"]
    [started] = of(events, sid, "forkStarted")
    assert started["context"] == "fresh"
    children = [r for r in model.requests if "You were assigned" in r.last_user_text]
    assert len(children) == 2 and all(PLAN not in r.all_text for r in children)
    assert of(events, sid, "turnResult")[-1]["text"] == "Both parts are done."


def test_run_without_a_terminal_rejects_the_fork(tmp_path: Path, model: ScriptedModel) -> None:
    model.on(PLAN, FORK_TWO, times=1)
    model.on("declined your proposed fork", "Fine, I will do it alone.")

    done, events = run_json(tmp_path, model, PLAN)

    assert done.returncode == 0, done.stderr[-3000:]
    sid = events[0]["sessionId"]
    [rejected] = of(events, sid, "forkRejected")
    assert rejected["reason"] == NO_TERMINAL_FORK_REASON
    # The run went on past the `idle` that came with the rejection, to the model's answer.
    follow_up = of(events, sid, "prompt")[-1]
    assert follow_up["origin"] == "forkRejected" and NO_TERMINAL_FORK_REASON in follow_up["text"]
    assert of(events, sid, "turnResult")[-1]["text"] == "Fine, I will do it alone."
    assert of(events, sid, "forkStarted") == []


def usage_numbers(stderr: str) -> tuple[int, ...]:
    """The numbers of the usage line `coven-ls run --json` ends with on stderr."""
    [line] = [m for m in map(USAGE_LINE.match, stderr.splitlines()) if m]
    *tokens, cost, _ = line.groups()
    return (*(int(t.replace(",", "")) for t in tokens), round(float(cost) * 10_000))


def expected_usage(results: list[dict[str, Any]]) -> tuple[int, ...]:
    """The same numbers, added up from what the CLI reported for each turn."""
    total = {k: sum(r["usage"][k] for r in results) for k in results[0]["usage"]}
    uncached, read, write = (
        total["inputTokens"],
        total["cacheReadTokens"],
        total["cacheCreationTokens"],
    )
    cost = round(sum(r["costUsd"] for r in results) * 10_000)
    return (uncached + read + write, uncached, read, write, total["outputTokens"], cost)


def test_run_json_deltas_retries_and_the_usage_line(tmp_path: Path, model: ScriptedModel) -> None:
    model.on("Tell me a story", OVERLOADED, times=1)
    model.on("Tell me a story", STORY, chunk_chars=5, chunk_delay=0.05)

    done, lines = run_json(tmp_path, model, "--deltas", "Tell me a story")

    assert done.returncode == 0, done.stderr[-3000:]
    events = [line for line in lines if "delta" not in line]
    deltas = [line["delta"] for line in lines if "delta" in line]
    sid = events[0]["sessionId"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    [retry] = of(events, sid, "apiRetry")
    assert retry["attempt"] == 1 and retry["errorStatus"] == 529 and retry["retryDelayMs"] > 0
    # The pieces came before the whole block, in order, and add up to it.
    [text] = of(events, sid, "text")
    assert len(deltas) >= 20
    assert "".join(d["text"] for d in deltas) == text["text"] == STORY
    assert {(d["sessionId"], d["blockId"], d["kind"]) for d in deltas} == {
        (sid, text["blockId"], "text")
    }
    assert max(i for i, line in enumerate(lines) if "delta" in line) < lines.index(text)
    # The usage line on stderr has the numbers the CLI reported.
    results = of(events, sid, "turnResult")
    assert usage_numbers(done.stderr) == expected_usage(results)


def test_run_waits_for_the_background_task_and_the_turn_that_reports_it(
    tmp_path: Path, model: ScriptedModel
) -> None:
    agent = {
        "description": "Find TODOs",
        "prompt": "Look for TODOs",
        "subagent_type": "general-purpose",
        "run_in_background": True,
    }
    model.on("Research the code", ToolUse("Agent", agent))
    model.on("Async agent launched", "The subagent is looking.")
    # The subagent outlives its parent's turn.
    model.on("Look for TODOs", "Found 3 TODOs.", latency=1.5)
    # The CLI's own turn: its message is a <task-notification> inside a <system-reminder>, which
    # the rules' text leaves out.
    model.on(
        lambda request: "<task-notification>" in json.dumps(request.messages[-1]),
        "The subagent found 3 TODOs.",
    )

    done, events = run_json(tmp_path, model, "--yes", "Research the code")

    assert done.returncode == 0, done.stderr[-3000:]
    sid = events[0]["sessionId"]
    [use] = of(events, sid, "toolUse")
    # The CLI reports the end twice (a notice, then the summary): the last is the fullest.
    started, *ends = of(events, sid, "task")
    assert ends and all(e["status"] == "completed" for e in ends)
    ended = ends[-1]
    assert started["status"] == "started" and started["toolUseId"] == use["toolUseId"]
    assert ended["status"] == "completed" and ended["taskId"] == started["taskId"]
    [sub] = [e for e in events if e.get("parentToolUseId") == use["toolUseId"]]
    assert sub["text"] == "Found 3 TODOs."
    # The run did not end at the first `idle`: the CLI's own turn reported the task.
    report = of(events, sid, "prompt")[-1]
    assert report["origin"] == "task" and ended["seq"] < report["seq"]
    results = of(events, sid, "turnResult")
    assert [r["text"] for r in results] == [
        "The subagent is looking.",
        "The subagent found 3 TODOs.",
    ]
    assert events[-1] == {**events[-1], "kind": "status", "status": "idle"}
    assert usage_numbers(done.stderr) == expected_usage(results)


# --- on a terminal -------------------------------------------------------------------------------


class Terminal:
    """`coven-ls run` on a pseudo-terminal of its own (its controlling terminal, so that Ctrl+C
    typed here is a SIGINT to it), with everything it prints collected as it comes."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        master, slave = pty.openpty()
        self._master = master
        self.proc = subprocess.Popen(
            args,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            preexec_fn=_controlling_terminal,
        )
        os.close(slave)
        self._text = ""
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            ready, _, _ = select.select([self._master], [], [], 0.5)
            if not ready:
                if self.proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(self._master, 65536)
            except OSError:  # EIO: the other side is closed
                break
            if not data:
                break
            with self._cond:
                self._text += data.decode(errors="replace").replace("\r\n", "\n")
                self._cond.notify_all()

    @property
    def text(self) -> str:
        with self._cond:
            return self._text

    def expect(self, pattern: str, after: int = 0, timeout: float = 90) -> int:
        """Wait until `pattern` (a regex) appears past offset `after`; returns where it ends."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            while (found := regex.search(self._text, after)) is None:
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"no {pattern!r} in:\n{self._text[-3000:]}"
                self._cond.wait(remaining)
            return found.end()

    def type(self, text: str) -> None:
        os.write(self._master, text.encode())

    def wait(self, timeout: float = 120) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(10)
        os.close(self._master)
        return code


def _controlling_terminal() -> None:
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@pytest.fixture
def terminal(tmp_path: Path, model: ScriptedModel):
    started: list[Terminal] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Terminal:
        command = [sys.executable, "-m", "coven_ls", "run", "--cwd", str(workspace(tmp_path))]
        started.append(Terminal([*command, *args], env or run_env(model, tmp_path)))
        return started[-1]

    yield start
    for term in started:
        if term.proc.poll() is None:
            term.proc.kill()
            term.wait()
    assert_no_process_left(tmp_path)


def test_run_on_a_terminal_asks_edits_the_fork_and_draws_the_tree(
    terminal, model: ScriptedModel
) -> None:
    model.on(PLAN, ToolUse("Bash", {"command": "touch seen.txt && echo looked-around"}))
    # The request that proposes the fork fills 85% of the scripted model's 1M window.
    model.on("looked-around", FORK_TWO, usage=Usage(400, 20, cache_read_input_tokens=849_600))
    model.on("You were assigned 'Only the docs'", "Docs only, done.")
    model.on("<fork-results>", "Merged the docs.")
    per_child = 850_000 * MODELS["claude-opus-5-5"].cache_read / 1_000_000

    def cost(children: int, tokens: str) -> str:
        # Reading the parent's context, and writing its last answer and their briefs to the
        # cache: a few hundred tokens, under a cent.
        return (
            re.escape(
                f"Context: 850k / 1M tokens (85%)\nFork cost: {children} × 850k = {tokens} "
                "tokens read from the cache + "
            )
            + r"\d+ written to it "
            + re.escape(
                f"≈ ${children * per_child:.2f} (prices of {PRICES_AS_OF})\n"
                "⚠ Warning: the parent's context is 85% full (850,000 of 1,000,000 tokens)\n"
            )
        )

    term = terminal(PLAN)
    at = term.expect(
        r"Allow Bash in 'Plan the release': touch seen.txt && echo looked-around\? \[y/n\] "
    )
    term.type("y\n")
    at = term.expect(r"into 2 parallel tasks:\n  1\. Write the docs\n  2\. Fix the bugs\n", at)
    at = term.expect(
        cost(2, "1.7M")
        + r"Approve the fork\? \(e: edit the tasks, l: set its limits\) \[y/n/e/l\] ",
        at,
    )
    term.type("e\n")
    at = term.expect(r"an empty line ends the list:", at)
    term.type("Only the docs\n\n")
    at = term.expect(r"into 1 parallel task:\n  1\. Only the docs\n" + cost(1, "850k"), at)
    term.type("y\n")
    assert term.wait() == 0, term.text[-3000:]

    lines = term.text.splitlines()
    fork_line = next(line for line in lines if "⑂ Fork  1 task" in line)
    child_line = next(line for line in lines if "⏺ Docs only, done." in line)
    indent = len(fork_line) - len(fork_line.lstrip())
    assert len(child_line) - len(child_line.lstrip()) > indent
    assert any("⏺ Merged the docs." in line for line in lines)


def test_runs_question_prices_the_fork_its_flags_would_start(
    terminal, model: ScriptedModel
) -> None:
    # --fork-context fresh: the children read their briefs, not the parent's 850k tokens.
    model.on(PLAN, FORK_TWO, usage=Usage(400, 20, cache_read_input_tokens=849_600))
    model.on("You were assigned", "Done.")
    model.on("<fork-results>", "Merged.")

    term = terminal("--fork-context", "fresh", PLAN)
    at = term.expect(r"into 2 parallel tasks:\n  1\. Write the docs\n  2\. Fix the bugs\n")
    at = term.expect(
        r"Context: 850k / 1M tokens \(85%\)\n"
        r"Fork cost: 2 fresh children = \d{2,3} tokens at the full input price ≈ \$0\.00\d\d ",
        at,
    )
    term.type("e\n")
    at = term.expect(r"an empty line ends the list:", at)
    term.type("Only the docs\n\n")
    at = term.expect(r"Fork cost: 1 fresh child = \d{2,3} tokens at the full input price", at)
    term.type("y\n")
    assert term.wait() == 0, term.text[-3000:]
    assert "× 850k" not in term.text  # never the inherited context's price


def test_ctrl_c_cancels_the_fork_and_a_second_one_quits(terminal, model: ScriptedModel) -> None:
    model.on(PLAN, FORK_TWO)
    model.on("You were assigned 'Write the docs'", "Docs are written.")
    model.on("You were assigned 'Fix the bugs'", "Never finishes.", latency=300)
    model.on("<fork-results>", "Never answers either.", latency=300)

    term = terminal("--fork-mode", "auto", PLAN)
    model.wait_for_requests(1, timeout=90, predicate=lambda r: "Fix the bugs" in r.last_user_text)
    term.expect(r"\[1/2\] ✓ idle")  # the docs child is done
    term.type("\x03")
    at = term.expect(r"\^C cancelling")
    at = term.expect(r"⑂ Fork done  1 of 2 tasks succeeded", at)
    # The parent carries on with what finished; a second Ctrl+C quits in the middle of it.
    model.wait_for_requests(1, timeout=90, predicate=lambda r: "<fork-results>" in r.last_user_text)
    term.type("\x03")
    term.expect(r"\^C quitting", at)
    assert term.wait() == 130, term.text[-3000:]


def test_run_streams_the_answer_on_the_terminal_as_it_arrives(
    terminal, model: ScriptedModel
) -> None:
    model.on("Tell me a story", OVERLOADED, times=1)
    model.on("Tell me a story", STORY, chunk_chars=5, chunk_delay=0.05)

    term = terminal("Tell me a story")
    at = term.expect(r"⟳ API overloaded — retrying in [\d.]+ s \(1/\d+\)\n")
    at = term.expect(re.escape(f"⏺ {STORY[:10]}"), at)
    # The first pieces are on the screen while the rest is still on its way.
    so_far = term.text
    assert STORY not in so_far and "turn done" not in so_far, so_far
    assert term.wait() == 0, term.text[-3000:]

    lines = term.text.splitlines()
    # One line, printed piece by piece: the text event that ends the block added nothing.
    [answer] = [i for i, line in enumerate(lines) if STORY[:20] in line]
    assert lines[answer] == f"  ⏺ {STORY}"
    assert lines[answer + 1].startswith("  ✓ turn done (")
    assert USAGE_LINE.match(lines[-1]), lines[-1]


# --- fork children in git worktrees --------------------------------------------------------------

DOCS, BUGS, FILE = "Write the docs", "Fix the bugs", "Add a file"


def script_children(model: ScriptedModel, *labels: str) -> None:
    """The model forks into `labels`; each child appends a line to a file in its worktree (the
    docs and the bugs to the same place of notes.txt: they clash) and reports."""
    edits = {
        DOCS: append("docs", "notes.txt", "docs-done"),
        BUGS: append("bugs", "notes.txt", "bugs-done"),
        FILE: append("new", "added.txt", "file-done"),
    }
    tasks = "".join(f"- {label}\n" for label in labels)
    model.on(PLAN, f"Splitting.\n<fork>\n{tasks}</fork>")
    for label in labels:
        done = edits[label]["command"].rsplit(" ", 1)[-1]
        model.on(f"You were assigned '{label}'", ToolUse("Bash", edits[label]))
        model.on(done, f"{label}: done.")
    model.on("<fork-results>", "Every task reported.")


def repo_env(tmp_path: Path, model: ScriptedModel) -> tuple[Path, dict[str, str]]:
    """The run's workspace as a git repository with one commit, and the run's environment."""
    env = git_env(tmp_path, run_env(model, tmp_path))
    return make_repo(workspace(tmp_path), env=env), env


def run_in(repo: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`coven-ls run` in the repository, without a terminal."""
    return subprocess.run(
        [sys.executable, "-m", "coven_ls", "run", "--cwd", str(repo), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )


def test_run_merges_worktree_children_and_says_what_became_of_each(
    tmp_path: Path, model: ScriptedModel
) -> None:
    repo, env = repo_env(tmp_path, model)
    head = git(repo, "rev-parse", "HEAD", env=env)
    script_children(model, DOCS, BUGS, FILE)

    done = run_in(repo, env, "--yes", PLAN)
    assert_no_process_left(tmp_path)

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    fork = next(i for i, line in enumerate(lines) if "⑂ Fork  3 tasks" in line)
    assert lines[fork] == "  ⑂ Fork  3 tasks · worktrees, merged when done", done.stdout
    end = next(i for i, line in enumerate(lines) if "⑂ Fork done" in line)
    assert re.fullmatch(
        r"  ⑂ Fork done  3 of 3 tasks succeeded · worktrees take [\d.]+ (bytes|KB|MB)", lines[end]
    ), done.stdout
    # Merged in task order: the docs go in, the bugs clash with them on the same line of
    # notes.txt and are left on their branch, the new file goes in.
    assert lines[end + 1] == f"    ✓ {DOCS}: applied +1 −0 · 1 file", done.stdout
    clash = re.fullmatch(
        rf"    ✗ {BUGS}: conflict in notes\.txt — work kept on branch (coven/\S+)", lines[end + 2]
    )
    assert clash is not None, done.stdout
    assert lines[end + 3] == f"    ✓ {FILE}: applied +1 −0 · 1 file", done.stdout
    # Each child's own lines say what it changed.
    assert sum("± +1 −0 · 1 file changed" in line for line in lines[fork:end]) == 3, done.stdout

    assert (repo / "notes.txt").read_text() == NOTES + "docs\n"
    assert (repo / "added.txt").read_text() == "new\n"
    assert git(repo, "rev-parse", "HEAD", env=env) == head  # uncommitted changes, HEAD untouched
    assert sorted(line[3:] for line in status(repo, env)) == ["added.txt", "notes.txt"]
    assert git(repo, "show", f"{clash.group(1)}:notes.txt", env=env) == NOTES + "bugs\n"


def test_run_json_yes_applies_every_reviewed_child(tmp_path: Path, model: ScriptedModel) -> None:
    repo, env = repo_env(tmp_path, model)
    script_children(model, DOCS, FILE)

    done = run_in(repo, env, "--json", "--yes", "--merge", "review", PLAN)
    assert_no_process_left(tmp_path)

    assert done.returncode == 0, done.stderr[-3000:]
    events = [json.loads(line) for line in done.stdout.splitlines()]  # stdout: events only
    sid = events[0]["sessionId"]
    [started] = of(events, sid, "forkStarted")
    assert (started["isolation"], started["mergeMode"]) == ("worktree", "review")
    children = [c["sessionId"] for c in started["children"]]
    [reviewing] = of(events, sid, "forkReviewing")
    assert reviewing["pending"] == children
    assert [e["status"] for e in of(events, sid, "status")].count("reviewing") == 1
    for child in children:
        merges = [e["changes"]["merge"] for e in of(events, child, "changes")]
        assert merges == ["pending", "applied"], merges
    [finished] = of(events, sid, "forkFinished")
    assert [r["merge"] for r in finished["results"]] == ["applied", "applied"]
    assert of(events, sid, "turnResult")[-1]["text"] == "Every task reported."
    # The questions, answered by --yes, and the summary went to stderr.
    asked = done.stderr.count(f"Apply the changes to {repo}? (n: discard them) → y (--yes)")
    assert asked == 2, done.stderr
    assert f"✓ {DOCS}: applied +1 −0 · 1 file" in done.stderr.splitlines()
    assert f"✓ {FILE}: applied +1 −0 · 1 file" in done.stderr.splitlines()
    assert (repo / "notes.txt").read_text() == NOTES + "docs\n"
    assert (repo / "added.txt").read_text() == "new\n"


def test_run_review_on_a_terminal_applies_one_child_and_discards_the_other(
    tmp_path: Path, terminal, model: ScriptedModel
) -> None:
    repo, env = repo_env(tmp_path, model)
    script_children(model, DOCS, FILE)

    term = terminal("--fork-mode", "auto", "--merge", "review", PLAN, env=env)
    at = 0
    for _ in range(2):  # the children ask in whichever order they run
        at = term.expect(rf"Allow Bash in '({DOCS}|{FILE})': printf .*\? \[y/n\] ", at)
        term.type("y\n")
    question = rf"\nApply the changes to {re.escape(str(repo))}\? \(n: discard them\) \[y/n\] "
    at = term.expect(
        rf"Fork child '{DOCS}' changed \+1 −0 · 1 file:\n  M notes\.txt  \+1 −0" + question, at
    )
    term.type("y\n")
    at = term.expect(rf"✓ applied \+1 −0 · 1 file from '{DOCS}'\n", at)
    at = term.expect(
        rf"Fork child '{FILE}' changed \+1 −0 · 1 file:\n  A added\.txt  \+1 −0" + question, at
    )
    term.type("n\n")
    assert term.wait() == 0, term.text[-3000:]

    lines = term.text.splitlines()
    end = next(i for i, line in enumerate(lines) if "⑂ Fork done" in line)
    assert lines[end + 1] == f"    ✓ {DOCS}: applied +1 −0 · 1 file", term.text[-3000:]
    discarded = re.fullmatch(
        rf"    ■ {FILE}: discarded \+1 −0 · 1 file — work kept on branch (coven/\S+)",
        lines[end + 2],
    )
    assert discarded is not None, term.text[-3000:]
    assert any(line.strip() == "⏺ Every task reported." for line in lines[end:])
    assert (repo / "notes.txt").read_text() == NOTES + "docs\n"
    assert not (repo / "added.txt").exists()
    assert git(repo, "show", f"{discarded.group(1)}:added.txt", env=env) == "new\n"
    # The model was told what became of each child's changes.
    [results] = model.wait_for_requests(1, predicate=lambda r: "<fork-results>" in r.last_user_text)
    assert 'merge="applied"' in results.last_user_text
    assert 'merge="discarded"' in results.last_user_text


def test_run_worktree_setup_runs_and_a_repository_setup_is_not_allowed_by_yes(
    tmp_path: Path, model: ScriptedModel
) -> None:
    repo, env = repo_env(tmp_path, model)
    (repo / "conductor.json").write_text('{"scripts": {"setup": "echo conductor-ran"}}')
    git(repo, "add", "-A", env=env)
    git(repo, "commit", "-q", "-m", "a conductor setup", env=env)
    script_children(model, DOCS)
    model.on(PLAN, f"I will split this.\n<fork>\n- {DOCS}\n</fork>")

    # --worktree-setup: the user's own command runs, with the child's variables.
    done = run_in(
        repo,
        env,
        "--json",
        "--yes",
        "--worktree-setup",
        'echo "setup of child $COVEN_CHILD_INDEX on port $COVEN_PORT"',
        PLAN,
    )
    assert_no_process_left(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    events = [json.loads(line) for line in done.stdout.splitlines()]
    output = "".join(e["text"] for e in events if e["kind"] == "setupOutput")
    assert re.fullmatch(r"setup of child 1 on port \d+\n", output), output
    assert "WorktreeSetup" not in done.stderr  # the user's own setting: nobody is asked

    # The repository's own setup: --yes does not allow it, and without a terminal nobody can.
    done = run_in(repo, env, "--json", "--yes", PLAN)
    assert_no_process_left(tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "The repository's worktree setup (conductor.json)" in done.stderr
    assert "echo conductor-ran" in done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert not [e for e in events if e["kind"] == "setupOutput"]
    [env_event] = [e for e in events if e["kind"] == "worktreeEnv"]
    assert any("conductor.json did not run" in n for n in env_event["notices"])
    # Nobody answered (no terminal): not remembered as a refusal, so the next run asks again.
    done = run_in(repo, env, "--json", "--yes", PLAN)
    assert_no_process_left(tmp_path)
    assert "The repository's worktree setup (conductor.json)" in done.stderr
