"""A session's config is made from its client's `initializationOptions` in one place
(`SessionConfig.from_options`): what a start names wins, the rest is the options'."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from coven_ls import protocol
from coven_ls.core.session import SessionConfig
from coven_ls.protocol import Kind
from coven_ls.protocol.types import ForkLimits

from .test_hub_unit import running_hub, settings

OPTIONS = protocol.InitializationOptions(
    agent="codex",
    model="m-options",
    permissionMode="plan",
    forkMode="auto",
    maxChildren=3,
    maxParallel=2,
    maxDepth=2,
    stateDir="/state",
    forkIsolation="shared",
    worktreePool=1,
    childIdleTimeoutSeconds=7.0,
    mergeMode="review",
    worktreeSetup="make setup",
    worktreeSetupTimeoutSeconds=9.0,
    forkLimits=ForkLimits(childTokens=0, childCostUsd=1.5),
)


def test_every_option_a_session_runs_with_comes_from_the_options() -> None:
    config = SessionConfig.from_options(OPTIONS, "/w")
    assert dataclasses.asdict(config) == dataclasses.asdict(
        SessionConfig(
            cwd="/w",
            agent="codex",
            model="m-options",
            permission_mode="plan",
            fork_mode="auto",
            max_children=3,
            max_parallel=2,
            max_depth=2,
            state_dir="/state",
            fork_isolation="shared",
            worktree_pool=1,
            child_idle_timeout=7.0,
            merge_mode="review",
            worktree_setup="make setup",
            worktree_setup_timeout=9.0,
            fork_limits=ForkLimits(childCostUsd=1.5),  # 0: no limit, left out
        )
    )


def test_what_a_start_names_wins_over_the_options() -> None:
    config = SessionConfig.from_options(
        OPTIONS, "/w", agent="claude", model="m-start", permission_mode="default", fork_mode="off"
    )
    assert (config.agent, config.model, config.permission_mode, config.fork_mode) == (
        "claude",
        "m-start",
        "default",
        "off",
    )
    # Options a client left out are the defaults.
    assert SessionConfig.from_options(protocol.InitializationOptions(), "/w") == SessionConfig(
        cwd="/w"
    )


async def test_a_restored_session_keeps_what_it_stored_and_takes_the_rest_from_its_client(
    tmp_path: Path,
) -> None:
    state = str(tmp_path / "state")
    first = settings(tmp_path, stateDir=state, model="m-1", maxChildren=3, mergeMode="review")
    async with running_hub(first) as rig:
        session = await rig.hub.start_session(
            rig.client, protocol.StartSessionParams(prompt="hello", forkMode="off")
        )
        await rig.client.wait_for(Kind.STATUS, session, status="idle")
        assert (session.config.model, session.config.max_children) == ("m-1", 3)
    later = settings(tmp_path, stateDir=state, model="m-2", maxChildren=5, mergeMode="auto")
    async with running_hub(later) as rig:
        restored = rig.hub.get(session.id).config
    assert (restored.model, restored.max_children, restored.fork_mode) == ("m-1", 3, "off")
    assert restored.merge_mode == "auto"  # not stored: the client's of now
