"""What worktree children add to a fork's estimate: what their CLI adds to each one's first
request, where it works now and, fenced, its sandbox (core/fork/estimate.note_tokens,
agents/claude/notes.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from coven_ls.agents.claude import fence as claude_fence
from coven_ls.agents.claude import notes
from coven_ls.core.fork.choices import ForkSettings
from coven_ls.core.fork.estimate import ANY_FORK_ID, note_tokens
from coven_ls.core.fork.fence import SandboxSupport
from coven_ls.core.models import MODELS, context_usage, estimate_fork

from ..gitrepo import make_repo


class Agent:
    """A child backend whose sandbox is `problem`-free or not, and whose note is its path's
    length, 1,000 more fenced (so the test sees what it was asked about)."""

    def __init__(self, problem: str | None = None) -> None:
        self.problem = problem
        self.asked: list[tuple[str, str, bool]] = []

    def sandbox_support(self) -> SandboxSupport:
        return SandboxSupport(by="claude", problem=self.problem)

    def first_request_tokens(self, cwd: str, repository: str, fenced: bool) -> int:
        self.asked.append((cwd, repository, fenced))
        return len(cwd) + (1000 if fenced else 0)


def settings(**kw: Any) -> ForkSettings:
    base: dict[str, Any] = dict(
        isolation=None,
        merge_mode="auto",
        worktree_setup="auto",
        agent="claude",
        context="inherit",
        limits=None,
        own_agent=True,
    )
    return ForkSettings(**(base | kw))


def parent(cwd: Path, state: Path, mode: str | None = None) -> Any:
    return SimpleNamespace(
        config=SimpleNamespace(cwd=str(cwd), state_dir=str(state), permission_mode=mode)
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"src/main.py": "print()\n"})


def test_worktree_children_each_add_their_agents_note(repo: Path, tmp_path: Path) -> None:
    agent = Agent()
    tasks = ["Write the docs", "Fix: the bugs"]
    got = note_tokens(parent(repo / "src", tmp_path / "state"), tasks, settings(), agent, "f-1")
    # Each child's worktree as the fork will make it, the session's subfolder within it, fenced.
    root = tmp_path / "state" / "worktrees" / "f-1"
    assert agent.asked == [
        (str(root / "1-write-the-docs" / "src"), str(repo), True),
        (str(root / "2-fix-the-bugs" / "src"), str(repo), True),
    ]
    assert got == sum(1000 + len(cwd) for cwd, _, _ in agent.asked)


@pytest.mark.parametrize("why", ["off", "unavailable", "bypassPermissions", "required"])
def test_worktree_children_that_will_not_be_fenced_are_noted_unfenced(
    repo: Path, tmp_path: Path, why: str
) -> None:
    """`required` where the sandbox is missing: such a fork does not start (FenceRequired when
    it is approved); its estimate is unfenced."""
    problem = "bubblewrap (bwrap) not found" if why in ("unavailable", "required") else None
    agent = Agent(problem)
    chosen = settings(child_sandbox={"off": "off", "required": "required"}.get(why, "auto"))
    mode = "bypassPermissions" if why == "bypassPermissions" else None
    if why == "bypassPermissions":
        agent.sandbox_support = lambda: SandboxSupport(  # type: ignore[method-assign]
            by="codex", always_on=True, unfenced_modes=("bypassPermissions",)
        )
    assert note_tokens(parent(repo, tmp_path, mode), ["A", "B"], chosen, agent) > 0
    assert [fenced for _, _, fenced in agent.asked] == [False, False]


@pytest.mark.parametrize("why", ["shared", "no repository", "no note"])
def test_children_sharing_the_folder_or_of_a_silent_agent_add_nothing(
    repo: Path, tmp_path: Path, why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Whatever repository the folders above the test's may be in, git does not look there.
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    agent: object = Agent()
    if why == "no note":  # an agent with a sandbox that does not say what it adds (codex)
        agent = SimpleNamespace(sandbox_support=lambda: SandboxSupport(by="codex", always_on=True))
    chosen = settings(isolation="shared" if why == "shared" else None)
    cwd = tmp_path if why == "no repository" else repo
    assert note_tokens(parent(cwd, tmp_path / "s"), ["A", "B"], chosen, agent) == 0


def test_the_note_is_written_to_the_cache_by_resuming_children_else_read_in_full() -> None:
    usage = context_usage(100_000, "claude-sonnet-4-5")
    sonnet = MODELS["claude-sonnet-4-5"]
    cached = estimate_fork(usage, 2, brief_tokens=300, answer_tokens=1_000, note_tokens=4_000)
    assert (cached.tokens, cached.writeTokens) == (200_000, 2_000 + 300 + 4_000)
    assert cached.costUsd == pytest.approx(
        (200_000 * sonnet.cache_read + 6_300 * sonnet.cache_write) / 1_000_000
    )
    fresh = estimate_fork(usage, 2, "fresh", brief_tokens=300, note_tokens=4_000)
    assert (fresh.tokens, fresh.writeTokens) == (4_300, 0)


def test_claudes_note_follows_the_paths_it_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    """Measured with Claude Code 2.1.332 (agents/claude/notes.py): the environment update 849
    characters in a bench's child, its sandbox section 7,091 more; 952 and 8,956 in a test's."""
    monkeypatch.setattr(claude_fence, "_temp_base", lambda: "/tmp")
    monkeypatch.setattr(claude_fence.os, "getpid", lambda: 28725)
    run = "/tmp/cache-bench-fhybh6z5"
    bench = (f"{run}/state/worktrees/f-ab72c5eb83e7/1-task-1", f"{run}/workspace")
    env = {"HOME": run, "CLAUDE_CONFIG_DIR": f"{run}/claude-config"}
    assert notes.first_request_tokens(*bench, False, env) == (849 + 3) // 4
    assert notes.first_request_tokens(*bench, True, env) == pytest.approx((849 + 7091) / 4, abs=3)
    monkeypatch.setattr(claude_fence.os, "getpid", lambda: 8051)
    run = "/tmp/pytest-of-root/pytest-692/test_an_inherit_forks_estimate1"
    test = (
        f"{run}/xdg-state/coven-ls/worktrees/f-cab26f742ec8/1-write-the-docs",
        f"{run}/server0/workspace",
    )
    env = {"HOME": "/root", "CLAUDE_CONFIG_DIR": f"{run}/server0/claude-config"}
    assert notes.first_request_tokens(*test, False, env) == (952 + 3) // 4
    assert notes.first_request_tokens(*test, True, env) == pytest.approx((952 + 8956) / 4, abs=3)
    # Without CLAUDE_CONFIG_DIR, the CLI's config folder is ~/.claude.
    bare = notes.first_request_tokens("/w/1-a", "/r", True, {"HOME": "/h", "CLAUDE_CONFIG_DIR": ""})
    assert bare == notes.first_request_tokens(
        "/w/1-a", "/r", True, {"HOME": "/h", "CLAUDE_CONFIG_DIR": "/h/.claude"}
    )


def test_a_fork_without_an_id_yet_is_estimated_with_one_as_long() -> None:
    assert len(ANY_FORK_ID) == len("f-cab26f742ec8")
