"""A proposed fork's worktrees are made while its approval is asked (core/fork/ahead.py
`Ahead.make`, isolation.MadeAhead): an approved fork's children get them, brought to the fork's
own snapshot when the user changed something meanwhile; a declined fork's go, branches and
all."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from coven_ls import protocol
from coven_ls.core.hub import ClientSettings
from coven_ls.core.workspace import worktree_env, worktrees
from coven_ls.core.workspace.repository import RepoInfo, inspect
from coven_ls.protocol import Kind

from ..gitrepo import git, make_repo
from ..harness import wait_until
from .test_hub_unit import running_hub, start
from .test_pool import tree_files

pytestmark = pytest.mark.usefixtures("no_user_git_config")

GIT_LIMIT = 60.0  # seconds for real git work (removing worktrees) on a busy machine


def project(tmp_path: Path) -> tuple[Path, ClientSettings]:
    files = {f"src/m{i}.py": f"x = {i}\n" for i in range(6)}
    repo = make_repo(tmp_path / "repo", {**files, ".gitignore": "*.log\n"}, message="one")
    options = protocol.InitializationOptions(
        forkMode="approve", stateDir=str(tmp_path / "state"), forkIsolation="worktree"
    )
    return repo, ClientSettings(str(repo), options)


def snapshot_files(repo: Path) -> dict[str, bytes]:
    """What a child should see: the parent's files, ignored ones left out."""
    return {k: v for k, v in tree_files(repo).items() if not k.endswith(".log")}


async def test_worktrees_made_while_asked_give_the_children_exactly_the_state_at_the_start(
    tmp_path: Path,
) -> None:
    repo, cfg = project(tmp_path)
    async with running_hub(cfg) as rig:
        parent = await start(rig)
        proposed = await rig.client.wait_for(Kind.FORK_PROPOSED, parent)
        fork = rig.hub.forks.get(proposed["forkId"])
        ahead = fork.ahead
        assert ahead is not None
        await ahead.ready.wait()
        made = [Path(t.path) for t in ahead.made]
        assert len(made) == 2 and all(p.is_dir() for p in made)
        assert all(tree_files(p) == snapshot_files(repo) for p in made)

        # The user works on while the question is open: a commit, a staged and an unstaged
        # edit, a deletion, a new file, an ignored one.
        (repo / "src" / "m1.py").write_text("x = 'committed'\n")
        git(repo, "commit", "-q", "-am", "two")
        (repo / "src" / "m2.py").write_text("x = 'staged'\n")
        git(repo, "add", "src/m2.py")
        (repo / "src" / "m3.py").write_text("x = 'edited'\n")
        (repo / "src" / "m4.py").unlink()
        (repo / "notes.txt").write_text("new\n")
        (repo / "debug.log").write_text("ignored\n")
        rig.hub.forks.decide(fork.id, True, None, None)
        started = await rig.client.wait_for(Kind.FORK_STARTED, parent)
        children = [rig.hub.get(c["sessionId"]) for c in started["children"]]
        trees = [c.worktree for c in children]
        await rig.client.wait_for(Kind.FORK_FINISHED, parent)

    assert [Path(t.path) for t in trees if t is not None] == made  # the same worktrees
    assert ahead.trees is not None and started["base"] != ahead.trees.base
    expected = snapshot_files(repo)
    for tree in trees:
        assert tree is not None and tree.base == started["base"]
        assert git(Path(tree.path), "rev-parse", "HEAD").strip() == started["base"]
    # The children saw the files as they were when the fork started (their worktrees are
    # gone or merged by now: the snapshot commit holds what they saw).
    listing = git(repo, "ls-tree", "-r", "--name-only", started["base"]).split()
    assert sorted(listing) == sorted(expected)
    for name, content in expected.items():
        assert git(repo, "show", f"{started['base']}:{name}").encode() == content


async def test_an_unchanged_tree_keeps_the_worktrees_as_made(tmp_path: Path) -> None:
    _repo, cfg = project(tmp_path)
    async with running_hub(cfg) as rig:
        parent = await start(rig)
        proposed = await rig.client.wait_for(Kind.FORK_PROPOSED, parent)
        fork = rig.hub.forks.get(proposed["forkId"])
        ahead = fork.ahead
        assert ahead is not None
        await ahead.ready.wait()
        assert ahead.trees is not None
        rig.hub.forks.decide(fork.id, True, None, None)
        started = await rig.client.wait_for(Kind.FORK_STARTED, parent)
        finished = await rig.client.wait_for(Kind.FORK_FINISHED, parent)
    assert started["base"] == ahead.trees.base  # the same files: the snapshot made ahead stands
    assert all(r["ok"] for r in finished["results"])


async def test_a_declined_or_edited_proposal_removes_what_was_made_ahead(tmp_path: Path) -> None:
    repo, cfg = project(tmp_path)
    async with running_hub(cfg) as rig:
        parent = await start(rig)
        proposed = await rig.client.wait_for(Kind.FORK_PROPOSED, parent)
        fork = rig.hub.forks.get(proposed["forkId"])
        ahead = fork.ahead
        assert ahead is not None
        await ahead.ready.wait()
        made = [Path(t.path) for t in ahead.made]
        assert made and all(p.is_dir() for p in made)
        rig.hub.forks.decide(fork.id, False, None, "not now")
        await rig.client.wait_for(Kind.FORK_REJECTED, parent)
        with anyio.fail_after(GIT_LIMIT):
            await ahead.removed.wait()
    assert not any(p.exists() for p in made)
    assert git(repo, "branch", "--list", "coven/*") == ""
    info = inspect(repo)
    assert isinstance(info, RepoInfo)
    # What is left is the pool made up again for the spares the proposal took.
    assert all("pool" in t.path.parts for t in worktrees.list_worktrees(info)[1:])


async def test_approved_with_other_tasks_makes_their_worktrees_anew(tmp_path: Path) -> None:
    repo, cfg = project(tmp_path)
    async with running_hub(cfg) as rig:
        parent = await start(rig)
        proposed = await rig.client.wait_for(Kind.FORK_PROPOSED, parent)
        fork = rig.hub.forks.get(proposed["forkId"])
        ahead = fork.ahead
        assert ahead is not None
        await ahead.ready.wait()
        made = [Path(t.path) for t in ahead.made]
        rig.hub.forks.decide(fork.id, True, ["alpha", "gamma", "delta"], None)
        started = await rig.client.wait_for(Kind.FORK_STARTED, parent)
        trees = [rig.hub.get(c["sessionId"]).worktree for c in started["children"]]
        paths = [t.path for t in trees if t is not None]
        with anyio.fail_after(GIT_LIMIT):
            await ahead.removed.wait()
        await rig.client.wait_for(Kind.FORK_FINISHED, parent)
    assert len(paths) == 3 and os.path.basename(paths[2]) == "3-delta"
    assert not made[1].exists()  # beta's, made for a task that was edited away
    del repo


async def test_a_finished_worktree_fork_makes_up_the_repositorys_pool(tmp_path: Path) -> None:
    """Once a worktree fork's children are done, the repository's spares are made again for the
    next fork (they were adopted by this one's children)."""
    repo, cfg = project(tmp_path)
    cfg.options.worktreePool = 2
    async with running_hub(cfg) as rig:
        parent = await start(rig)
        proposed = await rig.client.wait_for(Kind.FORK_PROPOSED, parent)
        rig.hub.forks.decide(proposed["forkId"], True, None, None)
        await rig.client.wait_for(Kind.FORK_FINISHED, parent)
        pools, state = rig.hub.forks.ahead.pools, str(tmp_path / "state")
        # The filling has no event of its own: it runs while the server idles.
        await wait_until(lambda: pools.ready(state, str(repo)) >= 2, GIT_LIMIT, "two spares")
    assert pools.ready(state, str(repo)) == 2


def project_with_copies(tmp_path: Path) -> tuple[Path, ClientSettings]:
    """The project with an ignored `deps/` folder that `.worktreeinclude` lists."""
    files = {f"src/m{i}.py": f"x = {i}\n" for i in range(6)}
    files.update({".gitignore": "*.log\ndeps/\n", ".worktreeinclude": "deps/\n"})
    repo = make_repo(tmp_path / "repo", files, message="one")
    (repo / "deps").mkdir()
    (repo / "deps" / "lib.py").write_text("dep = 1\n")
    options = protocol.InitializationOptions(
        forkMode="approve", stateDir=str(tmp_path / "state"), forkIsolation="worktree"
    )
    return repo, ClientSettings(str(repo), options)


async def test_worktreeinclude_copies_are_made_while_asked_and_used_or_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Files changed within 2 s are not trusted for copies made ahead: these were just written
    # (test_pool_copies tests that window).
    monkeypatch.setattr(worktree_env, "_RACY_SECONDS", 0.0)
    _repo, cfg = project_with_copies(tmp_path)
    async with running_hub(cfg) as rig:
        parent = await start(rig)
        proposed = await rig.client.wait_for(Kind.FORK_PROPOSED, parent)
        fork = rig.hub.forks.get(proposed["forkId"])
        ahead = fork.ahead
        assert ahead is not None
        await ahead.ready.wait()
        made = [Path(t.path) for t in ahead.made]
        assert len(made) == 2
        # Copied while the question is open, not on the children's path.
        assert all((p / "deps" / "lib.py").read_text() == "dep = 1\n" for p in made)
        rig.hub.forks.decide(fork.id, True, None, None)
        started = await rig.client.wait_for(Kind.FORK_STARTED, parent)
        envs = [
            await rig.client.wait_for(Kind.WORKTREE_ENV, c["sessionId"])
            for c in started["children"]
        ]
        await rig.client.wait_for(Kind.FORK_FINISHED, parent)
    assert all(e.get("copiedAhead") is True and e["copied"] == ["deps/"] for e in envs)

    # Declined: the worktrees go with the copies made ahead in them.
    _repo, cfg = project_with_copies(tmp_path / "declined")
    async with running_hub(cfg) as rig:
        parent = await start(rig)
        proposed = await rig.client.wait_for(Kind.FORK_PROPOSED, parent)
        fork = rig.hub.forks.get(proposed["forkId"])
        ahead = fork.ahead
        assert ahead is not None
        await ahead.ready.wait()
        made = [Path(t.path) for t in ahead.made]
        assert made and all((p / "deps" / "lib.py").is_file() for p in made)
        rig.hub.forks.decide(fork.id, False, None, "not now")
        await rig.client.wait_for(Kind.FORK_REJECTED, parent)
        with anyio.fail_after(GIT_LIMIT):
            await ahead.removed.wait()
    assert not any(p.exists() for p in made)
