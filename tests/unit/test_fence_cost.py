"""What fenced fork children add to the estimate: the CLI's note on the sandbox in each child's
first request (core/fork/estimate.fence_tokens, agents/claude/fence.note_tokens)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from coven_ls.agents.claude import fence as claude_fence
from coven_ls.core.fork.choices import ForkSettings
from coven_ls.core.fork.estimate import ANY_FORK_ID, fence_tokens
from coven_ls.core.fork.fence import SandboxSupport
from coven_ls.core.models import MODELS, context_usage, estimate_fork


class Agent:
    """A child backend whose sandbox is `problem`-free or not, and whose note is its path's
    length (so the test sees which paths it was asked about)."""

    def __init__(self, problem: str | None = None) -> None:
        self.problem = problem
        self.asked: list[tuple[str, str]] = []

    def sandbox_support(self) -> SandboxSupport:
        return SandboxSupport(by="claude", problem=self.problem)

    def sandbox_note_tokens(self, cwd: str, repository: str) -> int:
        self.asked.append((cwd, repository))
        return 1000 + len(cwd)


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
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    (tmp_path / "repo" / "src").mkdir()
    return tmp_path / "repo"


def test_fenced_worktree_children_each_add_their_agents_note(repo: Path, tmp_path: Path) -> None:
    agent = Agent()
    tasks = ["Write the docs", "Fix: the bugs"]
    got = fence_tokens(parent(repo / "src", tmp_path / "state"), tasks, settings(), agent, "f-1")
    # Each child's worktree as the fork will make it, the session's subfolder within it.
    root = tmp_path / "state" / "worktrees" / "f-1"
    assert agent.asked == [
        (str(root / "1-write-the-docs" / "src"), str(repo)),
        (str(root / "2-fix-the-bugs" / "src"), str(repo)),
    ]
    assert got == sum(1000 + len(cwd) for cwd, _ in agent.asked)


@pytest.mark.parametrize(
    "why",
    ["shared", "off", "unavailable", "no repository", "bypassPermissions", "no note"],
)
def test_children_that_will_not_be_fenced_add_nothing(
    repo: Path, tmp_path: Path, why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Whatever folders above the test's are (a stray /tmp/.git), as git would not look there.
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    agent: object = Agent("bubblewrap (bwrap) not found" if why == "unavailable" else None)
    chosen = settings(
        isolation="shared" if why == "shared" else None,
        child_sandbox="off" if why == "off" else "auto",
    )
    cwd = tmp_path if why == "no repository" else repo
    if why == "no note":  # an agent with a sandbox that does not say what it adds (codex)
        agent = SimpleNamespace(sandbox_support=lambda: SandboxSupport(by="codex", always_on=True))
    mode = "bypassPermissions" if why == "bypassPermissions" else None
    if why == "bypassPermissions":
        agent = SimpleNamespace(
            sandbox_support=lambda: SandboxSupport(
                by="codex", always_on=True, unfenced_modes=("bypassPermissions",)
            ),
            sandbox_note_tokens=lambda cwd, repository: 1000,
        )
    assert fence_tokens(parent(cwd, tmp_path / "s", mode), ["A", "B"], chosen, agent) == 0


def test_required_where_the_sandbox_is_missing_adds_nothing(repo: Path, tmp_path: Path) -> None:
    """Such a fork does not start (FenceRequired when it is approved); its estimate is unfenced."""
    chosen = settings(child_sandbox="required")
    assert fence_tokens(parent(repo, tmp_path), ["A"], chosen, Agent("missing")) == 0
    assert fence_tokens(parent(repo, tmp_path), ["A"], chosen, Agent()) > 0


def test_the_note_is_written_to_the_cache_by_resuming_children_else_read_in_full() -> None:
    usage = context_usage(100_000, "claude-sonnet-4-5")
    sonnet = MODELS["claude-sonnet-4-5"]
    cached = estimate_fork(usage, 2, brief_tokens=300, answer_tokens=1_000, fence_tokens=4_000)
    assert (cached.tokens, cached.writeTokens) == (200_000, 2_000 + 300 + 4_000)
    assert cached.costUsd == pytest.approx(
        (200_000 * sonnet.cache_read + 6_300 * sonnet.cache_write) / 1_000_000
    )
    fresh = estimate_fork(usage, 2, "fresh", brief_tokens=300, fence_tokens=4_000)
    assert (fresh.tokens, fresh.writeTokens) == (4_300, 0)


def test_claudes_note_follows_the_paths_it_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    """Measured with Claude Code 2.1.332 (agents/claude/fence.py): 7,091 characters of sandbox
    section in a bench's child, 8,956 in a test's."""
    monkeypatch.setattr(claude_fence, "_temp_base", lambda: "/tmp")
    monkeypatch.setattr(claude_fence.os, "getpid", lambda: 28725)
    bench = claude_fence.note_tokens(
        "/tmp/cache-bench-fhybh6z5/state/worktrees/f-ab72c5eb83e7/1-task-1",
        "/tmp/cache-bench-fhybh6z5/workspace",
        {
            "HOME": "/tmp/cache-bench-fhybh6z5",
            "CLAUDE_CONFIG_DIR": "/tmp/cache-bench-fhybh6z5/claude-config",
        },
    )
    assert bench == pytest.approx(7091 / 4, abs=3)
    monkeypatch.setattr(claude_fence.os, "getpid", lambda: 8051)
    run = "/tmp/pytest-of-root/pytest-692/test_an_inherit_forks_estimate1"
    test = claude_fence.note_tokens(
        f"{run}/xdg-state/coven-ls/worktrees/f-cab26f742ec8/1-write-the-docs",
        f"{run}/server0/workspace",
        {"HOME": "/root", "CLAUDE_CONFIG_DIR": f"{run}/server0/claude-config"},
    )
    assert test == pytest.approx(8956 / 4, abs=3)
    # Without CLAUDE_CONFIG_DIR, the CLI's config folder is ~/.claude.
    home_only = claude_fence.note_tokens("/w/1-a", "/r", {"HOME": "/h", "CLAUDE_CONFIG_DIR": ""})
    assert home_only == claude_fence.note_tokens(
        "/w/1-a", "/r", {"HOME": "/h", "CLAUDE_CONFIG_DIR": "/h/.claude"}
    )


def test_a_fork_without_an_id_yet_is_estimated_with_one_as_long() -> None:
    assert len(ANY_FORK_ID) == len("f-cab26f742ec8")
