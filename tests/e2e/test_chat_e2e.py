"""`coven-ls chat` through a real pseudo-terminal (pexpect), the real server and the real `claude`
CLI on the scripted model: a conversation, branches and forks typed at the prompt, questions
answered inline, Ctrl+C, and going back to a stored session. No process is left after any."""

from __future__ import annotations

import re
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pexpect

from coven_ls.testing.scripted_model import ScriptedModel, ToolUse, reply

from .test_run_e2e import assert_no_process_left, run_env, workspace

FORK_TWO = "I will split this.\n<fork>\n- Write the docs\n- Fix the bugs\n</fork>"


class Chat:
    """One `coven-ls chat` in a pseudo-terminal."""

    def __init__(self, tmp_path: Path, model: ScriptedModel, *args: str) -> None:
        env = run_env(model, tmp_path)
        env.update(
            HOME=str(tmp_path / "home"),
            XDG_STATE_HOME=str(tmp_path / "state"),
            TERM="xterm",
            # pexpect answers no cursor-position query: without this prompt_toolkit waits for one.
            PROMPT_TOOLKIT_NO_CPR="1",
        )
        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "coven_ls", "chat", "--cwd", str(workspace(tmp_path)), *args],
            env=env,
            encoding="utf-8",
            timeout=120,
            dimensions=(50, 220),
        )
        # What the terminal showed, for a failure's report.
        self.child.logfile_read = (tmp_path / "terminal.log").open("a", encoding="utf-8")

    def expect(self, text: str) -> None:
        self.child.expect_exact(text)

    def idle(self, after: str) -> None:
        """`after` printed, then the session's status line saying it is idle again."""
        self.expect(after)
        self.expect(" idle\r\n")

    def line(self, text: str) -> None:
        self.child.send(text + "\r")

    def quit(self) -> None:
        self.line("/quit")
        self.child.expect(pexpect.EOF, timeout=120)
        self.child.close()
        assert self.child.exitstatus == 0, self.child.before


@contextmanager
def chat(tmp_path: Path, model: ScriptedModel, *args: str) -> Iterator[Chat]:
    session = Chat(tmp_path, model, *args)
    try:
        yield session
    finally:
        if session.child.isalive():
            session.child.terminate(force=True)
        assert_no_process_left(tmp_path)


def saw(*words: str) -> object:
    return lambda r: reply(" ".join(f"saw-{w}={w in r.all_text}" for w in words))


def test_three_turns_then_a_branch_and_back_to_a_parent_that_never_heard_of_it(
    tmp_path: Path, model: ScriptedModel
) -> None:
    model.on("first question", "Answer one: zebra.")
    model.on("second question", "Answer two: quokka.")
    model.on("third question", "Answer three: okapi.")
    model.on("Branch it", saw("zebra", "okapi"))
    model.on("Back in the parent", saw("Branch"))
    with chat(tmp_path, model, "A first question") as c:
        c.expect("Answer one: zebra.")
        c.line("A second question")
        c.expect("Answer two: quokka.")
        c.line("A third question")
        c.idle("Answer three: okapi.")
        c.line('/fork "Branch it"')
        c.expect("branched: now in")
        c.expect("saw-zebra=True saw-okapi=True")
        c.line("/switch parent")
        c.expect("→ A first question")
        c.line("Back in the parent")
        c.expect("saw-Branch=False")
        c.line("/tree")
        c.expect("⎇ Branch it")
        c.quit()
    history = tmp_path / "state" / "coven-ls" / "chat-history"
    assert stat.S_IMODE(history.stat().st_mode) == 0o600
    assert "Back in the parent" in history.read_text()


def test_a_fork_typed_a_fork_approved_inline_and_a_permission_answered(
    tmp_path: Path, model: ScriptedModel
) -> None:
    model.on("hello", "Hi.")
    model.on("You were assigned 'task a'", "A is done.")
    model.on("You were assigned 'task b'", "B is done.")
    model.on("You were assigned 'Write the docs'", "Docs written.")
    model.on("You were assigned 'Fix the bugs'", "Bugs fixed.")
    model.on("Plan the release", FORK_TWO)
    model.on(lambda r: "A is done." in r.last_user_text, "Both tasks came back.")
    model.on(lambda r: "Docs written." in r.last_user_text, "The release is planned.")
    note = workspace(tmp_path) / "note.txt"
    # Slow enough for the test to type a line before the question comes.
    write = ToolUse("Write", {"file_path": str(note), "content": "chat\n"})
    model.on("Write the note", write, latency=3)
    model.on("created successfully", "The note is written.")
    model.on("half typed", "Got the draft.")
    with chat(tmp_path, model, "hello") as c:
        c.idle("Hi.")
        c.line("/fork --fresh task a; task b")
        c.expect("forking into 2 tasks")
        c.idle("Both tasks came back.")
        fresh = [r for r in model.requests if "You were assigned 'task" in r.last_user_text]
        assert len(fresh) == 2 and all("Hi." not in r.all_text for r in fresh)
        c.line("Plan the release")
        c.expect("Approve the fork?")
        c.line("y")
        c.idle("The release is planned.")
        c.line("Write the note")
        c.child.send("half typed")  # no Enter: the question puts it aside
        c.expect("Allow Write")
        c.line("y")
        c.idle("The note is written.")
        c.line("")  # the line typed before the question, given back
        c.expect("Got the draft.")
        c.quit()
    assert note.read_text() == "chat\n"


def test_ctrl_c_cancels_a_turn_then_a_follow_up_and_resume_after_quitting(
    tmp_path: Path, model: ScriptedModel
) -> None:
    # After an interrupt the CLI sends the cut-off prompt again with the next one: this rule
    # must come first.
    model.on("Now be short", "Short answer: walrus.")
    model.on("Tell a long story", "Once upon a time.", latency=90)
    model.on("After the resume", saw("walrus"))
    with chat(tmp_path, model, "Tell a long story") as c:
        c.expect("(running)")
        model.wait_for_requests(1, timeout=60, predicate=lambda r: "long story" in r.last_user_text)
        c.child.sendcontrol("c")
        c.expect("^C cancelling")
        c.line("Now be short")
        c.idle("Short answer: walrus.")
        c.line("/sessions")
        c.child.expect(r"(s-[0-9a-f]{12})")
        sid = c.child.match.group(1)
        c.quit()
    assert "Once upon a time." not in "".join(r.all_text for r in model.requests)

    with chat(tmp_path, model, "--resume", sid) as c:
        c.idle("Short answer: walrus.")  # the conversation so far, replayed
        c.expect("resumed")
        c.line("After the resume")
        c.expect("saw-walrus=True")
        c.child.sendcontrol("d")
        c.child.expect(pexpect.EOF, timeout=120)
        c.child.close()
        assert c.child.exitstatus == 0
    assert re.match(r"s-[0-9a-f]{12}", sid)
