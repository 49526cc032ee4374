"""`coven-ls chat` through a real pseudo-terminal (pexpect), the real server and the real `claude`
CLI on the scripted model: a conversation, branches and forks typed at the prompt, questions
answered inline, Ctrl+C, and going back to a stored session. No process is left after any."""

from __future__ import annotations

import json
import re
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pexpect
import pytest

from coven_ls import protocol
from coven_ls.agents.codex import resolve_codex
from coven_ls.testing.scripted_model import ScriptedModel, ToolUse, Usage, reply
from coven_ls.testing.scripted_responses import ScriptedResponses

from ..gitrepo import NOTES, git_env, make_repo
from .test_run_e2e import (
    DOCS,
    FILE,
    PLAN,
    assert_no_process_left,
    run_env,
    script_children,
    workspace,
)

try:
    resolve_codex(None)
    HAVE_CODEX = True
except protocol.CovenError:
    HAVE_CODEX = False

FORK_TWO = "I will split this.\n<fork>\n- Write the docs\n- Fix the bugs\n</fork>"


class Chat:
    """One `coven-ls chat` in a pseudo-terminal."""

    def __init__(
        self,
        tmp_path: Path,
        model: ScriptedModel,
        *args: str,
        env_extra: dict[str, str] | None = None,
    ) -> None:
        env = run_env(model, tmp_path)
        env.update(
            HOME=str(tmp_path / "home"),
            XDG_STATE_HOME=str(tmp_path / "state"),
            TERM="xterm",
            # pexpect answers no cursor-position query: without this prompt_toolkit waits for one.
            PROMPT_TOOLKIT_NO_CPR="1",
        )
        env.update(env_extra or {})
        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "coven_ls", "chat", "--cwd", str(workspace(tmp_path)), *args],
            env=env,
            encoding="utf-8",
            timeout=120,
            dimensions=(50, 220),
        )
        # What the terminal showed, for a failure's report.
        log = tmp_path / f"terminal-{self.child.pid}.log"
        self.child.logfile_read = log.open("a", encoding="utf-8")

    def expect(self, text: str) -> None:
        self.child.expect_exact(text)

    def idle(self, after: str) -> None:
        """`after` printed, then the session's status line saying it is idle again."""
        self.expect(after)
        self.expect(" idle\r\n")

    def line(self, text: str) -> None:
        self.child.send(text + "\r")

    def ctrl_d(self, prompt: str) -> None:
        """Ctrl+D once `prompt` is drawn again after the last line printed. The chat prints its
        lines with the terminal in cooked mode (prompt_toolkit's run_in_terminal); a Ctrl+D sent
        then is the tty's end-of-file mark, which the chat, reading keys raw again, gets as a
        NUL key: it would never quit. The prompt is redrawn once keys are read raw again (its
        trailing space is a cursor move: `prompt` ends at its `>`)."""
        self.expect(prompt)
        self.child.sendcontrol("d")

    def quit(self) -> None:
        self.line("/quit")
        self.child.expect(pexpect.EOF, timeout=120)
        self.child.close()
        assert self.child.exitstatus == 0, self.child.before


@contextmanager
def chat(
    tmp_path: Path,
    model: ScriptedModel,
    *args: str,
    env_extra: dict[str, str] | None = None,
    attached: bool = False,
) -> Iterator[Chat]:
    """A chat; one `attached` to a TCP server leaves the processes for the server's end."""
    session = Chat(tmp_path, model, *args, env_extra=env_extra)
    try:
        yield session
    finally:
        if session.child.isalive():
            session.child.terminate(force=True)
        if not attached:
            assert_no_process_left(tmp_path)


@contextmanager
def tcp_server(tmp_path: Path, model: ScriptedModel, token: str) -> Iterator[TcpServer]:
    """`coven-ls --tcp` on a free port, as an editor would run it (its token from
    $COVEN_TOKEN), until the block ends; then SIGTERM, and no process may be left."""
    err = tmp_path / "tcp-server.err"
    env = {
        **run_env(model, tmp_path),
        "HOME": str(tmp_path / "home"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_RUNTIME_DIR": str(tmp_path / "run"),
        "COVEN_TOKEN": token,
    }
    with err.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "coven_ls", "--tcp", "127.0.0.1:0"],
            env=env,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            cwd=workspace(tmp_path),
        )
    try:
        deadline = time.monotonic() + 60
        while not (found := re.search(r"listening on 127\.0\.0\.1:(\d+)", err.read_text())):
            assert process.poll() is None, err.read_text()
            assert time.monotonic() < deadline, "the server did not listen"
            time.sleep(0.05)
        yield TcpServer(process, int(found.group(1)))
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        assert_no_process_left(tmp_path)


class TcpServer:
    def __init__(self, process: subprocess.Popen[bytes], port: int) -> None:
        self.process = process
        self.port = port
        self.address = f"127.0.0.1:{port}"


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
    model.on("Plan the release", FORK_TWO, usage=Usage(1000, 10, cache_read_input_tokens=9000))
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
        c.expect("Context: 10k / 1M tokens (1%)")  # the request that proposed the fork
        # Reading the parent's 10k, and writing its last answer and their briefs to the cache.
        c.expect("Fork cost: 2 × 10k = 20k tokens read from the cache + ")
        c.expect(" written to it ≈ $0.0")
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
        c.idle("saw-walrus=True")  # the turn's last line printed
        c.ctrl_d("Tell a long story >")
        c.child.expect(pexpect.EOF, timeout=120)
        c.child.close()
        assert c.child.exitstatus == 0
    assert re.match(r"s-[0-9a-f]{12}", sid)


def test_attach_to_a_tcp_server_quit_and_the_server_and_its_session_go_on(
    tmp_path: Path, model: ScriptedModel
) -> None:
    model.on("hello over tcp", "Answer over TCP: narwhal.")
    model.on("Still there", saw("narwhal"))
    token_file = tmp_path / "token"
    token_file.write_text("the-editors-token\n")
    token_file.chmod(0o600)
    with tcp_server(tmp_path, model, "the-editors-token") as server:
        address = ("--tcp", server.address)
        # The token from a file (never the command line): a turn, then quitting disconnects.
        with chat(
            tmp_path, model, *address, "--token-file", str(token_file), "hello over tcp",
            attached=True,
        ) as c:  # fmt: skip
            c.idle("Answer over TCP: narwhal.")
            c.line("/sessions")
            c.child.expect(r"(s-[0-9a-f]{12})")
            sid = c.child.match.group(1)
            c.line("/quit")
            c.expect("(disconnected: the server and its sessions go on)")
            c.child.expect(pexpect.EOF, timeout=60)
            c.child.close()
            assert c.child.exitstatus == 0
        assert server.process.poll() is None, "quitting an attached chat stopped the server"
        # The server's own chat cannot open the store the TCP server holds: it says how to share.
        with chat(
            tmp_path, model, "--resume", sid, attached=True
        ) as c:  # its processes: the server's
            c.expect("is in use by coven-ls process")
            c.expect("coven-ls chat --tcp")
            c.child.expect(pexpect.EOF, timeout=60)
            c.child.close()
            assert c.child.exitstatus == 2
        # A wrong token is refused, and says where the right one is.
        with chat(
            tmp_path, model, *address, env_extra={"COVEN_TOKEN": "a-guess"}, attached=True
        ) as c:
            c.expect("Wrong initializationOptions.token")
            c.child.expect(pexpect.EOF, timeout=60)
            c.child.close()
            assert c.child.exitstatus == 2
        # Attached again (the token from $COVEN_TOKEN): the session is intact and goes on.
        env = {"COVEN_TOKEN": "the-editors-token"}
        with chat(tmp_path, model, *address, "--resume", sid, env_extra=env, attached=True) as c:
            c.idle("Answer over TCP: narwhal.")
            c.expect("resumed")
            c.line("Still there?")
            c.expect("saw-narwhal=True")
            c.quit()
        assert server.process.poll() is None


def test_a_question_decided_by_another_client_goes_away_and_the_typed_line_stays(
    tmp_path: Path, model: ScriptedModel
) -> None:
    # After an interrupt the CLI sends the cut-off prompt again with the next one: these rules
    # come first.
    model.on("second draft", "Got the second draft.")
    model.on("first draft", "Got the first draft.")
    model.on("hello", "Hi.")
    model.on("You were assigned 'Write the docs'", "Docs written.")
    model.on("You were assigned 'Fix the bugs'", "Bugs fixed.")
    # Slow enough for the test to type a line before the question comes.
    model.on("Plan the release", FORK_TWO, latency=3)
    model.on(lambda r: "Docs written." in r.last_user_text, "The release is planned.")
    note = workspace(tmp_path) / "note.txt"
    write = ToolUse("Write", {"file_path": str(note), "content": "chat\n"})
    model.on("Write the note", write, latency=3)
    env = {"COVEN_TOKEN": "shared"}
    with tcp_server(tmp_path, model, "shared") as server:
        address = ("--tcp", server.address)
        with chat(tmp_path, model, *address, "hello", env_extra=env, attached=True) as a:
            a.idle("Hi.")
            a.line("/sessions")
            a.child.expect(r"(s-[0-9a-f]{12})")
            sid = a.child.match.group(1)
            with chat(
                tmp_path, model, *address, "--resume", sid, env_extra=env, attached=True
            ) as b:
                b.expect("resumed")
                # A fork question in both terminals: b approves, a's goes away.
                a.line("Plan the release")
                a.child.send("first draft")  # no Enter: the question puts it aside
                a.expect("Approve the fork?")
                b.expect("Approve the fork?")
                b.line("y")
                a.expect("(the fork was decided elsewhere)")
                a.idle("The release is planned.")
                b.expect("The release is planned.")
                a.line("")  # the line typed before the question, given back
                a.expect("Got the first draft.")
                # A permission only a asks about; b cancels the turn, and a's question goes.
                a.line("Write the note")
                a.child.send("second draft")
                a.expect("Allow Write")
                b.expect("Write")  # the permissionRequest, shown in b's tree
                b.line("/cancel")
                b.expect("cancelled")
                a.expect("(the permission request was withdrawn: its turn ended)")
                a.line("")
                a.expect("Got the second draft.")
                b.quit()
            a.quit()
        assert server.process.poll() is None
    assert not note.exists()


def test_the_answer_streams_as_it_arrives(tmp_path: Path, model: ScriptedModel) -> None:
    # ~26 pieces of 5 characters, 0.25 s apart: an answer that takes over 6 s to arrive.
    story = (
        "Streaming works: this answer arrives in small pieces, one after the other, long "
        "before the whole message is done."
    )
    model.on("Tell it slowly", story, chunk_chars=5, chunk_delay=0.25)
    with chat(tmp_path, model, "Tell it slowly") as c:
        # The first piece, drawn above the input line (prompt_toolkit then draws only what each
        # later piece adds, so the whole text shows in one piece only once the block ends).
        c.expect("⏺ Strea")
        first = time.monotonic()
        c.expect(story)
        assert time.monotonic() - first > 2, "the answer appeared at once, not as it streamed"
        c.idle("")
        c.quit()


@pytest.mark.skipif(not HAVE_CODEX, reason="no codex binary (pip install coven-ls[codex])")
def test_agent_codex_for_the_next_session(tmp_path: Path, model: ScriptedModel) -> None:
    model.on("hello claude", "Hi from Claude.")
    with ScriptedResponses() as responses:
        responses.on("hello codex", "Hi from Codex.")
        env = responses.codex_env(tmp_path / "codex-home")
        with chat(tmp_path, model, "hello claude", env_extra=env) as c:
            c.idle("Hi from Claude.")
            c.line("/agent codex")
            c.expect("New sessions run on codex (/new starts one); this one stays on claude.")
            c.line("/new")
            c.expect("Your next message starts a new session (codex)")
            c.line("hello codex")
            c.idle("Hi from Codex.")
            c.line("/sessions")
            c.expect("claude hello claude")
            c.expect("codex  hello codex")
            c.quit()
        assert [r for r in responses.requests if "hello codex" in json.dumps(r.body)]
    assert not [r for r in model.requests if "hello codex" in r.all_text]


def test_edit_the_tasks_inline_review_later_approve_other_tasks_and_reject_with_a_reason(
    tmp_path: Path, model: ScriptedModel
) -> None:
    env = git_env(tmp_path, {})
    repo = make_repo(workspace(tmp_path), env={**run_env(model, tmp_path), **env})
    script_children(model, DOCS, FILE)
    model.on("Plan again", "Splitting again.\n<fork>\n- one thing\n</fork>")
    model.on("You were assigned 'task x'", "X done.")
    model.on("You were assigned 'task y'", "Y done.")
    model.on("Plan once more", "Splitting once more.\n<fork>\n- another thing\n</fork>")
    model.on("Their reason: not now", "Understood: no fork.")
    with chat(tmp_path, model, "--merge", "review", env_extra=env) as c:
        # Editing the tasks at the inline question: the same two, the other way round.
        c.line(PLAN)
        c.expect("Approve the fork? (e: edit the tasks)")
        c.line("e")
        c.expect(f"Tasks (; between them): {DOCS}; {FILE}")
        c.child.sendcontrol("u")  # the proposed list, cleared
        c.line(f"{FILE}; {DOCS}")
        c.expect(f"1. {FILE}")  # the question again, with the edited list
        c.expect(f"2. {DOCS}")
        c.line("y")
        for _ in range(2):  # the children ask in whichever order they run
            c.child.expect(rf"Allow Bash in '({DOCS}|{FILE})'")
            c.line("y")
            c.expect("allowed Bash")  # answered: the next question is a new one
        # Asked at once; Ctrl+C leaves the changes pending, for /review.
        c.expect(f"Fork child '{FILE}' changed +1 −0 · 1 file")
        c.child.sendcontrol("c")
        c.line("/review")
        # The question asked again, not its redraws as Ctrl+C put it aside (matching those,
        # the answer went to the input line while /review still fetched the changes).
        c.expect("> /review")
        c.expect(f"Fork child '{FILE}' changed +1 −0 · 1 file:")
        c.expect("A added.txt  +1 −0")
        c.line("y")
        c.expect(f"✓ applied +1 −0 · 1 file from '{FILE}'")
        c.expect(f"Fork child '{DOCS}' changed +1 −0 · 1 file:")
        c.expect("M notes.txt  +1 −0")
        c.line("n")
        c.idle("Every task reported.")
        # Other tasks than the proposed one: /approve a; b.
        c.line("Plan again")
        c.expect("1. one thing")
        c.child.sendcontrol("c")  # the question is left for /approve or /reject
        c.line("/approve task x; task y")
        c.expect("● task x")
        c.expect("● task y")
        c.idle("Every task reported.")
        # Rejected, with a reason the model hears.
        c.line("Plan once more")
        c.expect("1. another thing")
        c.child.sendcontrol("c")
        c.line("/reject not now")
        c.idle("Understood: no fork.")
        c.quit()
    assert (repo / "added.txt").read_text() == "new\n"
    assert (repo / "notes.txt").read_text() == NOTES
    children = [r.last_user_text for r in model.requests if "You were assigned" in r.last_user_text]
    assert not any("one thing" in text or "another thing" in text for text in children)
