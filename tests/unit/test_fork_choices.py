"""A fork's choices as one value: made whole by one function (core/fork/choices.py), passed whole,
stored as one column, and a store written before that (schema 12) opened with every choice of
its forks kept."""

from __future__ import annotations

import dataclasses
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest

from coven_ls import protocol
from coven_ls.core import store as store_module
from coven_ls.core.fork.choices import ForkSettings, check, from_row, overlay, resolve, to_row
from coven_ls.core.session import SessionConfig
from coven_ls.core.store import database_path
from coven_ls.protocol import Kind
from coven_ls.protocol.schema import build_schema
from coven_ls.protocol.types import ForkChoices, ForkLimits

from ..fakes import copies, started_from
from .test_hub_unit import PARENT_AGENT, results_turn, running_hub, settings

FIXTURE = Path(__file__).parents[1] / "fixtures" / "stores" / "schema12-forks.sql"
SESSION_LIMITS = ForkLimits(childTokens=5000, childCostUsd=2.0)

# --- the pure half -------------------------------------------------------------------------------


def test_a_fork_that_chooses_nothing_runs_with_its_sessions_settings() -> None:
    config = SessionConfig(
        cwd="/w",
        agent="codex",
        fork_isolation="shared",
        merge_mode="review",
        worktree_setup="make setup",
        fork_limits=SESSION_LIMITS,
    )
    chosen = resolve(ForkChoices(), config)
    assert (chosen.isolation, chosen.merge_mode, chosen.worktree_setup) == (
        "shared",
        "review",
        "make setup",
    )
    assert (chosen.agent, chosen.context, chosen.own_agent, chosen.native) == (
        "codex",
        "inherit",
        True,
        True,
    )
    assert chosen.limits == SESSION_LIMITS


def test_each_choice_replaces_the_sessions_setting() -> None:
    config = SessionConfig(cwd="/w", fork_limits=SESSION_LIMITS)
    choices = ForkChoices(
        isolation="shared",
        mergeMode="review",
        worktreeSetup="",
        context="fresh",
        agent="codex",
        limits=ForkLimits(childTokens=0, childSeconds=60),
    )
    chosen = resolve(choices, config)
    assert (chosen.isolation, chosen.merge_mode, chosen.worktree_setup) == ("shared", "review", "")
    assert (chosen.agent, chosen.context, chosen.own_agent, chosen.native) == (
        "codex",
        "fresh",
        False,
        False,
    )
    assert chosen.limits == ForkLimits(childCostUsd=2.0, childSeconds=60)  # 0: that one lifted


def test_children_of_another_agent_start_from_a_transcript_unless_told() -> None:
    config = SessionConfig(cwd="/w")  # a Claude session
    assert resolve(ForkChoices(agent="codex"), config).context == "transcript"
    assert resolve(ForkChoices(agent="claude"), config).context == "inherit"
    assert resolve(ForkChoices(agent="codex", context="fresh"), config).context == "fresh"
    with pytest.raises(protocol.CovenError) as refused:
        check(protocol.FORK, ForkChoices(agent="codex", context="inherit"), "claude")
    assert refused.value.code == -32602 and "'transcript'" in refused.value.message
    check(protocol.FORK, ForkChoices(agent="claude", context="inherit"), "claude")


def test_every_choice_on_the_wire_is_resolved() -> None:
    """A choice added to ForkChoices (the wire's and the store's) needs its line in `resolve`."""
    snake = {
        re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower() for name in ForkChoices.__struct_fields__
    }
    settled = {f.name for f in dataclasses.fields(ForkSettings)} - {"own_agent"}
    assert snake == settled


def test_choices_given_later_replace_the_forks_own_a_limit_at_a_time() -> None:
    own = ForkChoices(context="fresh", limits=ForkLimits(childTokens=10, childSeconds=5))
    given = ForkChoices(agent="codex", limits=ForkLimits(childTokens=0, forkCostUsd=1.0))
    assert overlay(own, given) == ForkChoices(
        context="fresh",
        agent="codex",
        limits=ForkLimits(childTokens=0, childSeconds=5, forkCostUsd=1.0),
    )
    assert overlay(own, ForkChoices()) == own


def test_the_choices_are_stored_as_the_wire_has_them() -> None:
    choices = ForkChoices(worktreeSetup="", agent="codex", limits=ForkLimits(childTokens=0))
    row = to_row(choices)
    assert row == {"worktreeSetup": "", "agent": "codex", "limits": {"childTokens": 0}}
    assert from_row(json.loads(json.dumps(row))) == choices
    assert to_row(ForkChoices()) is None and from_row(None) == ForkChoices()


def test_the_params_carry_the_choices_as_flat_fields() -> None:
    """coven/fork's and coven/decideFork's JSON is what it was: the choices beside the rest."""
    fork = msgspec.json.decode(
        b'{"sessionId": "s", "tasks": ["a"], "mergeMode": "review", "limits": {"childTokens": 5}}',
        type=protocol.ForkParams,
    )
    assert fork.choices() == ForkChoices(mergeMode="review", limits=ForkLimits(childTokens=5))
    decide = msgspec.json.decode(
        b'{"forkId": "f", "approve": true, "context": "fresh"}', type=protocol.DecideForkParams
    )
    assert decide.choices() == ForkChoices(context="fresh")
    # The schema lists each method's own fields first, then the choices, as before.
    defs = build_schema()["$defs"]
    assert list(defs["ForkParams"]["properties"]) == [
        "sessionId",
        "tasks",
        "atMessageId",
        *ForkChoices.__struct_fields__,
    ]
    assert list(defs["DecideForkParams"]["properties"])[:4] == [
        "forkId",
        "approve",
        "tasks",
        "reason",
    ]


def children(agents: list[Any]) -> list[Any]:
    """The fake agents that were given a fork child's assignment."""
    return [a for a in agents if a.sent and "You were assigned" in a.sent[0]]


# --- a store written before the choices were one column (schema 12) ------------------------------


def old_store(root: Path, state: Path) -> None:
    """The fixture's store where a server for `root` looks for it."""
    path = database_path(str(root), str(state))
    path.parent.mkdir(parents=True)
    db = sqlite3.connect(path)
    db.executescript(FIXTURE.read_text(encoding="utf-8").replace("@ROOT@", str(root)))
    db.close()


async def test_a_store_of_schema_12_keeps_every_choice_of_a_proposed_and_a_running_fork(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    old_store(tmp_path, state)
    cfg = settings(tmp_path, forkMode="approve", stateDir=str(state))
    async with running_hub(cfg) as rig:
        [proposed] = [f for f in rig.hub.forks.forks.values() if f.state == "proposed"]
        [cut_off] = [f for f in rig.hub.forks.forks.values() if f.state == "interrupted"]
        # What coven/fork asked for the running one, every choice of it.
        choices = cut_off.choices
        assert (
            choices.isolation,
            choices.mergeMode,
            choices.worktreeSetup,
            choices.context,
            choices.agent,
        ) == ("shared", "review", "echo set-up", "fresh", "codex")
        chosen = cut_off.settings
        assert (chosen.isolation, chosen.merge_mode, chosen.worktree_setup) == (
            "shared",
            "review",
            "echo set-up",
        )
        assert (chosen.context, chosen.agent) == ("fresh", "codex")
        # The limits in force then (its childTokens: 0 lifted the session's), and the same now.
        assert chosen.limits == ForkLimits(childCostUsd=2.0, childSeconds=60)
        # The proposal: no choice made yet, the session's limits.
        assert proposed.settings.limits == SESSION_LIMITS
        assert (proposed.settings.context, proposed.settings.agent) == ("inherit", "claude")
        assert proposed.parent.status == "awaitingApproval"

        # The running one resumes as it was started: fresh codex children.
        rig.hub.forks.resume(cut_off.id)
        finished = await rig.client.wait_for(Kind.FORK_FINISHED, cut_off.parent)
        await results_turn(rig, cut_off.parent)
        assert [r["ok"] for r in finished["results"]] == [True, True]
        resumed = children(rig.backend.agents)
        assert len(resumed) == 2
        assert all(started_from(a.spec) is None and not copies(a.spec) for a in resumed)
        assert all("You start afresh" in a.sent[0] for a in resumed)
        assert {c.config.agent for c in rig.hub.children_of(cut_off.parent)} == {"codex"}

        # The proposal is approved as any other, its children inheriting the conversation.
        rig.hub.forks.decide(proposed.id, True)
        started = await rig.client.wait_for(Kind.FORK_STARTED, proposed.parent)
        finished = await rig.client.wait_for(Kind.FORK_FINISHED, proposed.parent)
        assert [r["ok"] for r in finished["results"]] == [True, True]
        assert started["limits"] == msgspec.to_builtins(SESSION_LIMITS)
        assert "context" not in started and "agent" not in started
        inherited = [a for a in children(rig.backend.agents) if a not in resumed]
        assert inherited and all(
            started_from(a.spec) == PARENT_AGENT and copies(a.spec) for a in inherited
        )

    # Stored again as one column; the old ones are gone, and so is `requested`.
    path = database_path(str(tmp_path), str(state))
    db = sqlite3.connect(path)
    try:
        columns = [row[1] for row in db.execute("PRAGMA table_info(forks)")]
        rows = dict(db.execute("SELECT fork_id, isolation FROM forks").fetchall())
        version = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    finally:
        db.close()
    assert list(columns) == list(store_module.FORK_COLUMNS)
    assert version == (str(store_module.SCHEMA_VERSION),)
    assert "requested" not in json.loads(rows[cut_off.id])
