"""The `coven-ls chat` session README.md's picture shows, played in a real pseudo-terminal.

`coven-ls chat` (the real server, the real `claude` CLI on the scripted model, in a git
repository) is asked to prepare a release; the model proposes a fork into two tasks, the fork is
approved at the prompt, both children run in worktrees of their own and their changes are merged
back, and the parent answers with their results. Everything the terminal received (the bytes,
colours and cursor moves as they came) is written to OUT, and its size to OUT.json, for
scripts/pictures/render.mjs to draw as a terminal would.

    .venv/bin/python scripts/pictures/chat_scene.py OUT

Run by scripts/pictures.sh; it reuses the chat end-to-end tests' helpers (tests/e2e).
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import pexpect  # noqa: E402

from coven_ls.testing.scripted_model import (  # noqa: E402
    ModelRequest,
    Reply,
    ScriptedModel,
    ToolUse,
    Usage,
    reply,
)
from tests.e2e.test_run_e2e import assert_no_process_left, run_env  # noqa: E402
from tests.gitrepo import git_env, make_repo  # noqa: E402

ROWS, COLUMNS = 72, 128
PROMPT = "Prepare the 2.1 release: check the parser and update the docs."
TASKS = ("Check the parser", "Update the docs")
CHILDREN = {
    TASKS[0]: (
        "tests/test_parser.py",
        "from ledger.parser import parse\n\n\ndef test_parse():\n"
        "    assert parse('a;b') == ['a', 'b']\n",
        "The parser handles every case in the changelog; tests/test_parser.py checks it.",
    ),
    TASKS[1]: (
        "docs/dry-run.md",
        "# Dry runs\n\n    ledger import --dry-run FILE\n",
        "docs/dry-run.md shows the new --dry-run flag.",
    ),
}
FILES = {
    "README.md": "# ledger\n\nA small double-entry ledger.\n",
    "CHANGELOG.md": "# Changelog\n\n## 2.1 (unreleased)\n\n- New `--dry-run` flag\n",
    "ledger/parser.py": "def parse(line):\n    return line.split(';')\n",
    "docs/usage.md": "# Usage\n\n    ledger import FILE\n",
}


def script(model: ScriptedModel) -> None:
    model.on(
        PROMPT,
        "The parser and the docs are independent, so I will do them in parallel.\n<fork>\n"
        + "".join(f"- {task}\n" for task in TASKS)
        + "</fork>",
        usage=Usage(1200, 40, cache_read_input_tokens=11000),
    )
    # First: the fork's results name the children's files too.
    model.on(
        "<fork-results>",
        "Both are done and merged: the parser has a test, and the usage page shows --dry-run. "
        "The release is ready to tag.",
    )
    for task, (path, content, answer) in CHILDREN.items():
        model.on(f"You were assigned '{task}'", write_in_worktree(path, content))
        model.on(f"{path}", answer, latency=1)


def write_in_worktree(path: str, content: str) -> Callable[[ModelRequest], Reply]:
    """A Write of `path` in the child's own worktree, which its assignment names."""

    def answer(request: ModelRequest) -> Reply:
        found = re.search(r"\(a git worktree\): (.+?)\. It ", request.all_text)
        assert found, "the child's assignment names no worktree"
        file_path = f"{found.group(1)}/{path}"
        return reply(ToolUse("Write", {"file_path": file_path, "content": content}), latency=1)

    return answer


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = Path(sys.argv[1])
    with (
        tempfile.TemporaryDirectory(prefix="coven-", ignore_cleanup_errors=True) as tmp,
        ScriptedModel() as model,
    ):
        tmp_path = Path(tmp)
        script(model)
        env = git_env(tmp_path, run_env(model, tmp_path))
        repo = make_repo(tmp_path / "ledger", FILES, env=env, message="ledger 2.0")
        env.update(
            XDG_STATE_HOME=str(tmp_path / "state"),
            TERM="xterm-256color",
            # pexpect answers no cursor-position query: without this prompt_toolkit waits for one.
            PROMPT_TOOLKIT_NO_CPR="1",
        )
        received: list[str] = []

        class Recorder:
            def write(self, text: str) -> None:
                received.append(text)

            def flush(self) -> None:
                pass

        child = pexpect.spawn(
            sys.executable,
            [
                "-m",
                "coven_ls",
                "chat",
                "--cwd",
                str(repo),
                "--permission-mode",
                "acceptEdits",
                PROMPT,
            ],
            env=env,
            cwd=str(repo),
            encoding="utf-8",
            timeout=180,
            dimensions=(ROWS, COLUMNS),
        )
        child.logfile_read = Recorder()
        try:
            child.expect_exact("Approve the fork?")
            child.send("y\r")
            child.expect_exact("ready to tag.")
            child.expect_exact(" idle\r\n")
            child.expect_exact(">")
            screen = "".join(received)
            child.send("/quit\r")
            child.expect(pexpect.EOF)
        except pexpect.ExceptionPexpect:
            failed = out.with_suffix(".failed")
            failed.write_text("".join(received), encoding="utf-8")
            print(f"chat scene: what the terminal showed is in {failed}", file=sys.stderr)
            raise
        finally:
            if child.isalive():
                child.terminate(force=True)
        assert_no_process_left(tmp_path)
    out.write_text(screen, encoding="utf-8")
    out.with_suffix(out.suffix + ".json").write_text(
        json.dumps({"rows": ROWS, "columns": COLUMNS}), encoding="utf-8"
    )
    print(f"chat scene: {len(screen)} characters to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
