"""The parts of coven_ls/cluster/ray that need no Ray: the configuration, which variables
travel, path remapping, the have negotiation and bundles both ways (real git, no cluster), the
node's cache of included files, and which conversations travel."""

from __future__ import annotations

import hashlib
import itertools
import os
import uuid
from pathlib import Path

import pytest

from coven_ls import __version__
from coven_ls.cluster.ray import (
    bundles,
    cluster_from_options,
    conversations,
    local_work,
    node_cache,
)
from coven_ls.cluster.ray.connection import version_problem
from coven_ls.cluster.ray.items import IncludedFile
from coven_ls.cluster.ray.remap import localised, node_spec, remap_path, remap_value
from coven_ls.cluster.ray.target import RayTarget, travelling_env
from coven_ls.core.agent import AgentSpec, AgentStartError, Copy, Fence, New, Resume
from coven_ls.core.agent.events import (
    AgentMessage,
    AgentStarted,
    Location,
    TextPart,
    ToolCall,
    ToolCallUpdate,
)

from ..gitrepo import commit_all, git, make_repo

# --- the configuration ---------------------------------------------------------------------


def test_a_target_is_read_from_the_wire_with_defaults() -> None:
    target = RayTarget.from_wire({"address": "head:6379"})
    assert target == RayTarget("head:6379")
    assert target.actor_options() == {"num_cpus": 1.0}
    full = RayTarget.from_wire(
        {
            "address": "ray://head:10001",
            "env": ["ANTHROPIC_API_KEY"],
            "resources": {"CPU": 2, "GPU": 1, "memory": 1e9, "coven": 1},
            "maxChildren": 3,
            "reattachSeconds": 60,
            "nodeCacheBytes": 1000,
        }
    )
    assert full.env == ("ANTHROPIC_API_KEY",) and full.max_children == 3
    assert full.reattach_seconds == 60.0 and full.node_cache_bytes == 1000
    assert full.actor_options() == {
        "num_cpus": 2.0,
        "num_gpus": 1.0,
        "memory": 1e9,
        "resources": {"coven": 1.0},
    }


@pytest.mark.parametrize(
    ("wire", "says"),
    [
        ({}, "address is required"),
        ({"address": "h:1", "env": "KEY"}, "env must be a list"),
        ({"address": "h:1", "resources": {"CPU": -1}}, "resources must map"),
        ({"address": "h:1", "maxChildren": 0}, "maxChildren must be a positive"),
    ],
)
def test_a_bad_target_says_which_field(wire: dict[str, object], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        RayTarget.from_wire(wire)


def test_a_cluster_is_made_from_the_initialization_options() -> None:
    cluster = cluster_from_options({"ray": {"address": "head:6379", "maxChildren": 2}})
    assert cluster.name == "ray" and cluster.max_children == 2
    assert cluster.target.address == "head:6379"
    with pytest.raises(ValueError, match="names no cluster"):
        cluster_from_options({"dask": {}})


def test_only_the_named_variables_travel_and_the_sessions_own_win() -> None:
    environ = {"ANTHROPIC_API_KEY": "k", "HOME": "/root", "SECRET": "s", "MODEL": "server"}
    chosen = travelling_env(("ANTHROPIC_API_KEY", "MODEL", "ABSENT"), environ, {"MODEL": "own"})
    assert chosen == {"ANTHROPIC_API_KEY": "k", "MODEL": "own"}


def test_a_node_of_another_version_is_named_with_both_versions() -> None:
    assert version_problem({"version": __version__, "node": "n1"}, "h:1") is None
    problem = version_problem({"version": "0.0.1", "node": "n1"}, "h:1")
    assert problem is not None
    assert "n1" in problem and "0.0.1" in problem and __version__ in problem


# --- paths ---------------------------------------------------------------------------------


def test_paths_move_by_their_longest_folder() -> None:
    pairs = [("/work/repo", "/node/repo"), ("/work/repo/child", "/node/w/c1")]
    assert remap_path("/work/repo/child/a.py", pairs) == "/node/w/c1/a.py"
    assert remap_path("/work/repo/b.py", pairs) == "/node/repo/b.py"
    assert remap_path("/work/repo", pairs) == "/node/repo"
    assert remap_path("/work/repository", pairs) == "/work/repository"  # not inside
    value = {"file_path": "/work/repo/child/x", "n": 1, "list": ["/elsewhere", "rel/path"]}
    assert remap_value(value, pairs) == {
        "file_path": "/node/w/c1/x",
        "n": 1,
        "list": ["/elsewhere", "rel/path"],
    }


def test_what_a_node_says_names_this_machines_paths() -> None:
    pairs = [("/cache/work/c1", "/work/child")]
    started = localised(AgentStarted("conv", cwd="/cache/work/c1"), pairs)
    assert isinstance(started, AgentStarted) and started.cwd == "/work/child"
    message = AgentMessage(
        "m1",
        "call",
        (
            TextPart("see /cache/work/c1/a.py"),
            ToolCall(
                "t1",
                "Edit",
                {"file_path": "/cache/work/c1/a.py", "old_string": "x"},
                locations=(Location("/cache/work/c1/a.py", 3),),
            ),
        ),
    )
    moved = localised(message, pairs)
    assert isinstance(moved, AgentMessage)
    text, call = moved.parts
    assert text == TextPart("see /cache/work/c1/a.py")  # words are the model's own
    assert isinstance(call, ToolCall)
    assert call.input == {"file_path": "/work/child/a.py", "old_string": "x"}
    assert call.locations == (Location("/work/child/a.py", 3),)
    update = localised(ToolCallUpdate("t1", input={"path": "/cache/work/c1"}), pairs)
    assert update == ToolCallUpdate("t1", input={"path": "/work/child"})


def test_a_nodes_spec_has_the_nodes_paths_and_stays_fenced() -> None:
    spec = AgentSpec(
        cwd="/work/repo.children/1-a",
        env={"X": "1"},
        read_only_roots=("/work/repo",),
        temp_dir="/work/repo.children/1-a.tmp",
        fence=Fence(network="none", protected=("/work/repo/.git/HEAD",)),
    )
    there = node_spec(
        spec,
        worktree="/cache/work/c1",
        repository="/cache/repos/r.git",
        temp_dir="/cache/work/c1.tmp",
        env={"KEY": "k"},
        protected=("/cache/repos/r.git/HEAD",),
    )
    assert there.cwd == "/cache/work/c1" and there.env == {"KEY": "k"}
    assert there.read_only_roots == ("/cache/repos/r.git",)
    assert there.temp_dir == "/cache/work/c1.tmp"
    assert there.fence == Fence(network="none", protected=("/cache/repos/r.git/HEAD",))
    plain = node_spec(
        AgentSpec(cwd="/x"), worktree="/w", repository="/r", temp_dir="/t", env={}, protected=()
    )
    assert plain.fence is None and plain.temp_dir is None and plain.read_only_roots == ()


# --- commits both ways ---------------------------------------------------------------------


def test_offered_commits_are_recent_ones_then_ever_sparser_back_to_the_root() -> None:
    short = [f"c{i}" for i in range(5)]
    assert bundles.have_candidates(short) == short
    long = [f"c{i}" for i in range(10_000)]
    offered = bundles.have_candidates(long)
    assert offered[: bundles.RECENT] == long[: bundles.RECENT]
    assert offered[-1] == "c9999" and len(offered) <= bundles.MOST
    positions = [long.index(c) for c in offered]
    older = positions[bundles.RECENT - 1 :]
    gaps = [b - a for a, b in itertools.pairwise(older)]
    assert gaps == sorted(gaps[:-1]) + gaps[-1:]  # growing (the root's gap aside)


def test_a_bundle_carries_only_what_the_other_side_lacks(
    tmp_path: Path, no_user_git_config: dict[str, str]
) -> None:
    here = make_repo(tmp_path / "here", {"a.txt": "a\n"})
    first = git(here, "rev-parse", "HEAD").strip()
    (here / "a.txt").write_text("b\n")
    second = commit_all(here, "second")
    there = tmp_path / "there.git"
    git(tmp_path, "init", "-q", "--bare", str(there))
    assert bundles.has_commits(there, [first, second]) == []
    whole = bundles.make_bundle(here, {"head": first}, [])
    assert whole is not None
    assert bundles.take_bundle(there, whole) == [first]
    assert bundles.has_commits(there, [second, first]) == [first]
    have = bundles.has_commits(there, bundles.have_candidates(bundles.ancestry(here, second)))
    assert have == [first]
    rest = bundles.make_bundle(here, {"head": second}, have)
    assert rest is not None and len(rest) < len(whole) + 200
    header = rest.split(b"\n\n", 1)[0].decode()
    assert f"-{first}" in header  # a thin bundle: it needs what the other side has
    bundles.take_bundle(there, rest)
    assert bundles.has_commits(there, [second]) == [second]
    assert bundles.make_bundle(here, {"head": second}, [second]) is None
    # No ref of the other side's moved, and none of ours was left behind.
    assert git(there, "for-each-ref").strip() == ""
    assert "coven-ls" not in git(here, "for-each-ref")


def test_a_nodes_work_comes_back_as_commits_and_uncommitted_changes(
    tmp_path: Path, no_user_git_config: dict[str, str]
) -> None:
    """The node's worktree (a commit, an edit, a new file, a deletion, an included copy) is
    made the local worktree's: same HEAD, the rest uncommitted, the copies left alone."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n", "gone.txt": "g\n", ".gitignore": ".env\n"})
    head = git(repo, "rev-parse", "HEAD").strip()
    local = tmp_path / "local"
    git(repo, "worktree", "add", "-q", "-b", "coven/c", str(local))
    (local / ".env").write_text("local secret\n")
    cache = tmp_path / "cache"
    bare = node_cache.origin_repo(cache, "origin")
    shipped = bundles.make_bundle(local, {"head": head}, [])
    assert shipped is not None
    bundles.take_bundle(bare, shipped)
    node = node_cache.make_worktree(bare, cache, "c1", head, "coven/c")
    data = b"node secret\n"
    digest = hashlib.sha256(data).hexdigest()
    assert node_cache.missing_contents(cache, [digest]) == [digest]
    node_cache.store_contents(cache, {digest: data})
    assert node_cache.missing_contents(cache, [digest]) == []
    node_cache.place_included(cache, node, [IncludedFile(".env", digest, 0o600)])
    assert (node / ".env").read_bytes() == data
    # The child works on the node.
    (node / "b.txt").write_text("committed\n")
    git(node, "add", "b.txt")
    git(node, "commit", "-qm", "child")
    (node / "a.txt").write_text("edited\n")
    (node / "new.txt").write_text("new\n")
    (node / "gone.txt").unlink()
    index_before = (Path(git(node, "rev-parse", "--git-dir").strip()) / "index").read_bytes()
    work = node_cache.work_item(node, [head], b"{}", "conv")
    assert (Path(git(node, "rev-parse", "--git-dir").strip()) / "index").read_bytes() == (
        index_before
    )
    assert work.state is not None and work.bundle is not None
    assert ".env" not in git(node, "ls-tree", "-r", "--name-only", work.state)
    local_work.apply_work(str(local), work)
    assert git(local, "rev-parse", "HEAD").strip() == work.head
    assert git(local, "log", "-1", "--format=%s").strip() == "child"
    assert sorted(git(local, "status", "--porcelain").splitlines()) == [
        " D gone.txt",
        " M a.txt",
        "?? new.txt",
    ]
    assert (local / "a.txt").read_text() == "edited\n"
    assert (local / ".env").read_text() == "local secret\n"
    # A second turn sends only what is new since.
    (node / "a.txt").write_text("again\n")
    again = node_cache.work_item(node, [head, work.head, work.state], None, None)
    assert again.head == work.head and again.state not in (None, work.state)
    local_work.apply_work(str(local), again)
    assert (local / "a.txt").read_text() == "again\n"


def test_the_node_cache_prunes_the_least_recently_used_first(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    contents = {hashlib.sha256(b"%d" % i * 100).hexdigest(): b"%d" % i * 100 for i in range(4)}
    node_cache.store_contents(cache, contents)
    digests = list(contents)
    for age, digest in enumerate(digests):  # the first is the oldest
        blob = cache / "blobs" / digest[:2] / digest
        os.utime(blob, (1000 + age, 1000 + age))
    freed = node_cache.prune(cache, 250, keep=[digests[0]])
    assert freed == 200
    assert node_cache.missing_contents(cache, digests) == sorted(digests[1:3])
    assert node_cache.prune(cache, 10_000) == 0
    # Repositories: the one a child starts from now stays, an idle one goes.
    busy, idle = node_cache.origin_repo(cache, "busy"), node_cache.origin_repo(cache, "idle")
    assert node_cache.prune(cache, 0, keep=digests, keep_repo=busy) > 0
    assert busy.is_dir() and not idle.exists()


def test_included_files_are_listed_with_their_digests(
    tmp_path: Path, no_user_git_config: dict[str, str]
) -> None:
    repo = make_repo(
        tmp_path / "repo", {".gitignore": ".env\ndeps/\n", ".worktreeinclude": ".env\ndeps/\n"}
    )
    (repo / ".env").write_text("S=1\n")
    (repo / "deps").mkdir()
    (repo / "deps" / "lib.js").write_text("x\n")
    (repo / "deps" / "link").symlink_to("lib.js")
    files, where = local_work.included_files(str(repo))
    by_path = {f.path: f for f in files}
    assert set(by_path) == {".env", "deps/lib.js", "deps/link"}
    assert by_path["deps/link"].link == "lib.js" and by_path["deps/link"].digest is None
    digest = by_path[".env"].digest
    assert digest == hashlib.sha256(b"S=1\n").hexdigest() and where[digest] == repo / ".env"


# --- conversations -------------------------------------------------------------------------


def test_a_claude_conversation_travels_as_its_session_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "claude"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config))
    parent = str(uuid.uuid4())
    conversations.place_session(config, "/work/repo", parent, b'{"x": 1}\n')
    spec = AgentSpec(cwd="/work/repo.children/1", start=Copy(parent, None, "new"))
    assert conversations.shipped_conversation("claude", spec) == (parent, b'{"x": 1}\n')
    assert conversations.shipped_conversation("codex", AgentSpec(cwd="/w", start=New())) == (
        None,
        None,
    )
    with pytest.raises(AgentStartError, match="not found"):
        conversations.shipped_conversation(
            "claude", AgentSpec(cwd="/w", start=Resume(str(uuid.uuid4())))
        )


@pytest.mark.parametrize("kind", ["codex", "acp"])
def test_other_agents_conversations_do_not_travel_yet(kind: str) -> None:
    with pytest.raises(AgentStartError, match='context: "transcript"'):
        conversations.shipped_conversation(kind, AgentSpec(cwd="/w", start=Copy("c", None, None)))
