"""The worktree pool end to end: real LSP client -> coven-ls -> real `claude` CLIs -> scripted
model, in a real git repository. After a first fork the server prepares spare worktrees; the user
then commits, stages, edits, deletes and adds files; the next fork's children get the spares and
see exactly the user's new state (the fork's `base`), nothing of the spares' older tree."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
from pathlib import Path

import pytest

from coven_ls.testing.scripted_model import ModelRequest, Reply, ScriptedModel, Text, ToolUse

from ..gitrepo import git, make_repo
from ..harness import wait_until

# The server's git (worktrees, the pool's spares) without the user's configuration.
pytestmark = pytest.mark.usefixtures("no_user_git_config")

PLAN = "Split the work"
# Every file of the child's folder but git's, with its digest, one a line, sorted.
LISTING = (
    "find . -path ./.git -prune -o -type f -print | LC_ALL=C sort | "
    'while read -r f; do printf \'%s %s\\n\' "$(sha256sum < "$f" | cut -c1-64)" "$f"; done; '
    "echo HEAD=$(git rev-parse HEAD)"
)


def project_repo(repo: Path) -> Path:
    """20 small files, one the user deletes later and a .gitignore, in one commit."""
    files = {f"src/m{i}.py": f"x = {i}\n" for i in range(20)}
    files.update({"gone.txt": "deleted by the user later\n", ".gitignore": "*.log\n"})
    return make_repo(repo, files)


def spares(state: Path) -> list[str]:
    return sorted(p.name.removesuffix(".ready") for p in (state / "pool").glob("*/*.ready"))


def expected_listing(repo: Path) -> list[str]:
    """What the parent sees: tracked and untracked files that are not ignored, as they are."""
    found = []
    for rel in sorted(set(git(repo, "ls-files", "-co", "--exclude-standard", "-z").split("\0"))):
        if rel and (repo / rel).is_file():
            digest = hashlib.sha256((repo / rel).read_bytes()).hexdigest()
            found.append(f"{digest} ./{rel}")
    return sorted(found, key=lambda line: line.split(" ", 1)[1].encode())


async def test_children_get_spares_brought_to_the_users_new_state(
    coven_factory, model: ScriptedModel, tmp_path: Path, isolated_state: Path
) -> None:
    state = isolated_state / "coven-ls"
    repo = project_repo(tmp_path / "repo")

    seen: dict[str, str] = {}

    def listed(request: ModelRequest) -> Reply:
        label = "One" if "You were assigned 'One'" in request.all_text else "Two"
        seen[label] = request.last_user_text
        return Reply((Text(f"{label}: listed."),))

    model.on(PLAN, "Ready to split.")
    model.on("You were assigned 'Warm up'", "Nothing to do.")
    for label in ("One", "Two"):
        model.on(f"You were assigned '{label}'", ToolUse("Bash", {"command": LISTING}))
    model.on("HEAD=", listed)
    model.on("<fork-results>", "Done.")
    coven = await coven_factory(init_options={"worktreePool": 2})
    sid = await coven.start(PLAN, cwd=str(repo))
    first = await coven.wait_kind(sid, "turnResult")
    await coven.wait_status(sid, "idle", first["seq"])

    # A first fork: from now on the server keeps two spares for the repository.
    await coven.request("coven/fork", {"sessionId": sid, "tasks": ["Warm up"]})
    results = await coven.wait_kind(sid, "prompt", origin="forkResults")
    answered = await coven.wait_for(
        lambda e: e["sessionId"] == sid and e["kind"] == "turnResult" and e["seq"] > results["seq"]
    )
    await coven.wait_status(sid, "idle", answered["seq"])
    await wait_until(lambda: len(spares(state)) == 2, 120, "two spare worktrees")
    ready = spares(state)

    # The user moves on: a new commit, a staged edit, an edit, a deletion, a new file, and an
    # ignored file (not in a snapshot).
    (repo / "src" / "m1.py").write_text("x = 'committed after the spares'\n")
    git(repo, "commit", "-q", "-am", "later")
    (repo / "src" / "m2.py").write_text("x = 'staged'\n")
    git(repo, "add", "src/m2.py")
    (repo / "src" / "m3.py").write_text("x = 'edited'\n")
    (repo / "gone.txt").unlink()
    (repo / "new.txt").write_text("untracked\n")
    (repo / "debug.log").write_text("ignored\n")
    expected = expected_listing(repo)
    assert "./debug.log" not in "\n".join(expected) and "./new.txt" in "\n".join(expected)

    await coven.request("coven/fork", {"sessionId": sid, "tasks": ["One", "Two"]})
    await wait_until(lambda: len(seen) == 2, 120, "both children's listings")
    started = coven.of(sid, "forkStarted")[-1]
    base = started["base"]
    assert base != git(repo, "rev-parse", "HEAD").strip()  # the uncommitted work is in it
    for label, text in seen.items():
        lines = [ln for ln in text.splitlines() if ln[:64].isalnum() and " ./" in ln]
        assert sorted(lines, key=lambda ln: ln.split(" ", 1)[1].encode()) == expected, label
        assert f"HEAD={base}" in text, label
    # The children's worktrees are the spares (git keeps a moved worktree's own folder name).
    infos = {s["sessionId"]: s for s in (await coven.request("coven/listSessions", {}))["sessions"]}
    used = set()
    for child in started["children"]:
        tree = Path(infos[child["sessionId"]]["worktree"]["path"])
        used.add((tree / ".git").read_text().strip().rsplit("/", 1)[-1])
    assert used == set(ready)
    await wait_until(lambda: len(coven.of(sid, "forkFinished")) == 2, 120, "the fork's end")


async def test_a_server_killed_while_making_a_spare_leaves_nothing_half_made(
    coven_factory, model: ScriptedModel, tmp_path: Path, isolated_state: Path
) -> None:
    state = isolated_state / "coven-ls"
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    model.on(PLAN, "Ready to split.")
    model.on("You were assigned 'Look'", "Looked.")
    model.on("<fork-results>", "Done.")
    marker = tmp_path / "failpoint-reached"
    armed = {"COVEN_FAILPOINT": "pool", "COVEN_FAILPOINT_FILE": str(marker)}
    options = {"worktreePool": 1}
    first = await coven_factory(home="ws", init_options=options, extra_env=armed)
    sid = await first.start(PLAN, cwd=str(repo))
    done = await first.wait_kind(sid, "turnResult")
    await first.wait_status(sid, "idle", done["seq"])
    await first.request("coven/fork", {"sessionId": sid, "tasks": ["Look"]})
    await wait_until(marker.exists, 120, "the server to stop while it makes a spare")
    server = first.client._server
    assert server is not None and int(marker.read_text()) == server.pid
    folder = next((state / "pool").iterdir())
    [half] = [p for p in folder.iterdir() if p.is_dir()]  # made by git, never marked complete
    assert not list(folder.glob("*.ready"))
    os.kill(server.pid, signal.SIGKILL)
    await asyncio.wait_for(server.wait(), 30)
    await wait_until(lambda: not first.agent_pids(), 30, "the killed server's agents to die")

    second = await coven_factory(home="ws", init_options=options)
    await second.request("coven/listSessions", {})
    await wait_until(lambda: len(spares(state)) == 1, 120, "the pool made up again")
    assert not half.exists()
    listed = git(repo, "worktree", "list", "--porcelain").split("\n\n")
    pooled = [w for w in listed if w.startswith(f"worktree {state / 'pool'}")]
    assert len(pooled) == 1 and f"worktree {half}\n" not in pooled[0]  # the one complete spare


async def test_worktrees_made_while_approval_is_asked_give_the_new_state(
    coven_factory, model: ScriptedModel, tmp_path: Path, isolated_state: Path
) -> None:
    """A proposed fork's worktrees are made while the user reads the question; the user then
    changes files before approving: the children see exactly the state at the approval."""
    state = isolated_state / "coven-ls"
    repo = project_repo(tmp_path / "repo")

    seen: dict[str, str] = {}

    def listed(request: ModelRequest) -> Reply:
        label = "One" if "You were assigned 'One'" in request.all_text else "Two"
        seen[label] = request.last_user_text
        return Reply((Text(f"{label}: listed."),))

    model.on(PLAN, "Two parts.\n<fork>\n- One\n- Two\n</fork>")
    for label in ("One", "Two"):
        model.on(f"You were assigned '{label}'", ToolUse("Bash", {"command": LISTING}))
    model.on("HEAD=", listed)
    model.on("<fork-results>", "Done.")
    coven = await coven_factory(init_options={"forkMode": "approve"})
    sid = await coven.start(PLAN, cwd=str(repo))
    proposed = await coven.wait_kind(sid, "forkProposed")
    made = [state / "worktrees" / proposed["forkId"] / name for name in ("1-one", "2-two")]

    def made_ahead() -> bool:
        return all(
            (p / "src" / "m0.py").is_file()
            and git(p, "symbolic-ref", "-q", "--short", "HEAD").startswith("coven/")
            for p in made
        )

    await wait_until(made_ahead, 120, "the proposal's worktrees, made while it is asked")
    (repo / "src" / "m1.py").write_text("x = 'committed while asked'\n")
    git(repo, "commit", "-q", "-am", "later")
    (repo / "src" / "m2.py").write_text("x = 'staged'\n")
    git(repo, "add", "src/m2.py")
    (repo / "src" / "m3.py").write_text("x = 'edited'\n")
    (repo / "gone.txt").unlink()
    (repo / "new.txt").write_text("untracked\n")
    (repo / "debug.log").write_text("ignored\n")
    expected = expected_listing(repo)

    await coven.request("coven/decideFork", {"forkId": proposed["forkId"], "approve": True})
    await wait_until(lambda: len(seen) == 2, 120, "both children's listings")
    [started] = coven.of(sid, "forkStarted")
    base = started["base"]
    for label, text in seen.items():
        lines = [ln for ln in text.splitlines() if ln[:64].isalnum() and " ./" in ln]
        assert sorted(lines, key=lambda ln: ln.split(" ", 1)[1].encode()) == expected, label
        assert f"HEAD={base}" in text, label
    infos = {s["sessionId"]: s for s in (await coven.request("coven/listSessions", {}))["sessions"]}
    assert sorted(
        Path(infos[c["sessionId"]]["worktree"]["path"]) for c in started["children"]
    ) == sorted(made)
    await wait_until(lambda: len(coven.of(sid, "forkFinished")) == 1, 120, "the fork's end")
