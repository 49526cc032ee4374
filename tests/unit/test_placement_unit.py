"""Fork children placed on a cluster (issue #33), against a fake `Cluster` (tests/fake_cluster.py)
that wraps the fake backend: the `placement` choice and the `cluster` option, `auto` spilling
over to the cluster past `maxParallel`, the cluster's own slots, the errors before anything is
made, a cluster that cannot be reached, where a child runs on the wire and across a restart."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from coven_ls import protocol
from coven_ls.agents import REGISTRY
from coven_ls.core.agent import events as agent_events
from coven_ls.core.fork.choices import from_row, resolve
from coven_ls.core.fork.placement import HERE, Placements
from coven_ls.core.hub import ClientSettings, Hub
from coven_ls.core.session import SessionConfig
from coven_ls.core.session.mapping import to_payloads
from coven_ls.core.slots import Slots
from coven_ls.protocol import Kind, events
from coven_ls.protocol.types import (
    ClusterOptions,
    ClusterPlacement,
    ForkChoices,
    InitializationOptions,
    RayClusterOptions,
)

from ..fake_cluster import FakeCluster
from ..fakes import FakeBackend, Gate
from ..gitrepo import make_repo
from .test_hub_unit import LIMIT, RecordingClient, Rig, idle_parent, model, results_turn, start

RAY = ClusterOptions(ray=RayClusterOptions(address="ray://head:10001", env=["ANTHROPIC_API_KEY"]))
FOUR = ["alpha", "beta", "gamma", "delta"]
ON_NODE = {"cluster": "ray", "node": None, "nodeId": None}


@asynccontextmanager
async def cluster_hub(
    settings: ClientSettings,
    cluster: FakeCluster | None,
    tasks: list[str] = FOUR,
    gates: dict[str, Gate] | None = None,
) -> AsyncIterator[Rig]:
    """test_hub_unit's running_hub, its hub handed a cluster factory (None: no cluster support)."""
    backend = FakeBackend()
    backend.default_reply = model(tasks, gates or {})
    async with anyio.create_task_group() as tg:
        factory = None if cluster is None else cluster.factory
        hub = Hub(tg, REGISTRY.with_backends(lambda *_: backend), factory)
        store = (await hub.open_store(settings))[0] if settings.options.stateDir else None
        client = RecordingClient(settings, store)
        hub.attach(client)
        rig = Rig(hub, client, backend, tg)
        try:
            yield rig
        finally:
            with anyio.move_on_after(LIMIT):
                await hub.close_all()
            tg.cancel_scope.cancel()


def options(tmp_path: Path, **given: Any) -> ClientSettings:
    """A repository's settings (worktree children), with a Ray cluster unless told otherwise."""
    repo = make_repo(tmp_path / "repo", {}, message="one")
    given.setdefault("cluster", RAY)
    given.setdefault("stateDir", str(tmp_path / "state"))
    return ClientSettings(str(repo), InitializationOptions(**given), frozenset(given))


def children_of(started: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["label"]: c for c in started["children"]}


def listed(rig: Rig, session_id: str) -> protocol.SessionInfo:
    return next(i for i in rig.hub.list_sessions() if i.sessionId == session_id)


# --- the choice and the option --------------------------------------------------------------------


def test_placement_is_a_fork_choice_over_the_sessions_setting() -> None:
    config = SessionConfig.from_options(InitializationOptions(cluster=RAY, placement="auto"), "/")
    assert resolve(ForkChoices(), config).placement == "auto"
    assert resolve(ForkChoices(placement="cluster"), config).placement == "cluster"
    assert resolve(ForkChoices(), SessionConfig(cwd="/")).placement == "local"
    # Stored with the fork like every choice: what the wire sends, what the store keeps.
    choices = msgspec.json.decode(b'{"placement": "cluster"}', type=ForkChoices)
    assert choices.placement == "cluster"


def test_the_cluster_option_says_what_is_wrong() -> None:
    with pytest.raises(protocol.CovenError) as no_cluster:
        InitializationOptions(placement="cluster")
    assert no_cluster.value.data == {"field": "placement"}
    assert "set cluster" in no_cluster.value.message
    with pytest.raises(protocol.CovenError) as empty:
        protocol.parse("initializationOptions", InitializationOptions, {"cluster": {}})
    assert empty.value.data == {"field": "cluster"} and "cluster.ray" in empty.value.message
    parsed = protocol.parse(
        "initializationOptions",
        InitializationOptions,
        {"cluster": {"ray": {"address": "head:6379", "maxChildren": 3}}, "placement": "auto"},
    )
    assert parsed.cluster is not None and parsed.cluster.ray is not None
    ray = parsed.cluster.ray
    assert (ray.address, ray.maxChildren, ray.reattachSeconds) == ("head:6379", 3, 600.0)
    assert (ray.env, ray.resources, ray.nodeCacheBytes) == ([], None, 2_000_000_000)


def test_a_placed_agent_event_is_a_placed_event() -> None:
    [placed] = to_payloads(agent_events.Placed("host-2", "abc"))
    assert placed == events.Placed(node="host-2", nodeId="abc")


async def test_auto_places_children_past_max_parallel_on_the_cluster() -> None:
    cluster = FakeCluster()
    placements = Placements(Slots(2), cluster.factory)
    placements.configure(RAY)
    plan = await placements.plan("auto", 4)
    assert [w.cluster for w in plan.places] == [None, None, cluster, cluster]
    assert plan.reason is None
    assert (await placements.plan("auto", 2)).places == [HERE, HERE]
    assert cluster.asked == 1  # a fork that fits here does not ask the cluster
    assert [w.cluster for w in (await placements.plan("cluster", 2)).places] == [cluster] * 2
    assert (await placements.plan("local", 3)).places == [HERE] * 3


# --- forks on a cluster ---------------------------------------------------------------------------


@pytest.mark.usefixtures("no_user_git_config")
async def test_auto_runs_max_parallel_here_and_the_rest_on_the_cluster(tmp_path: Path) -> None:
    """maxParallel 2, four tasks: two children here, two on the cluster, each of those saying
    where it runs (forkStarted, `placed`, SessionInfo), all merged back; a restarted server
    still shows where they ran."""
    cluster = FakeCluster()
    settings = options(tmp_path, forkMode="auto", placement="auto", maxParallel=2)
    async with cluster_hub(settings, cluster) as rig:
        parent = await start(rig)
        started = await rig.client.wait_for(Kind.FORK_STARTED, parent)
        finished = await rig.client.wait_for(Kind.FORK_FINISHED, parent)
        await results_turn(rig, parent)
        refs = children_of(started)
        placed = {
            label: [e for e in rig.client.of(ref["sessionId"]) if e["kind"] == Kind.PLACED]
            for label, ref in refs.items()
        }
        infos = {label: listed(rig, ref["sessionId"]) for label, ref in refs.items()}
        parent_id = parent.id
    assert started["placement"] == "auto" and "placementReason" not in started
    assert [refs[label].get("placement") for label in FOUR] == [None, None, ON_NODE, ON_NODE]
    assert [r["ok"] for r in finished["results"]] == [True] * 4
    # Only the cluster's children ran through its backend; each said where once, first.
    assert sorted(Path(spec.cwd).name for spec in cluster.opened) == ["3-gamma", "4-delta"]
    assert [len(placed[label]) for label in FOUR] == [0, 0, 1, 1]
    for label in ("gamma", "delta"):
        [event] = placed[label]
        assert (event["node"], event["cluster"], event["nodeId"]) == ("host-2", "ray", "id-host-2")
        kinds = [e["kind"] for e in rig.client.of(refs[label]["sessionId"])]
        assert kinds.index(Kind.PLACED) < kinds.index(Kind.AGENT)
        assert infos[label].placement == ClusterPlacement(
            cluster="ray", node="host-2", nodeId="id-host-2"
        )
        assert infos[label].worktree is not None  # a worktree child like any other
    assert infos["alpha"].placement is None and infos["beta"].placement is None
    assert cluster.backends[0][1].cluster == RAY  # made with the options of the parent's client
    assert cluster.options == RAY and cluster.closed  # a clean stop ends its children there

    async with cluster_hub(settings, None) as rig:  # a restart, even one without a cluster
        restored = {label: listed(rig, ref["sessionId"]) for label, ref in refs.items()}
        assert rig.hub.get(parent_id).status == "idle"
    assert restored["gamma"].placement == infos["gamma"].placement
    assert restored["alpha"].placement is None


@pytest.mark.usefixtures("no_user_git_config")
async def test_cluster_children_take_the_clusters_slots_not_max_parallel(tmp_path: Path) -> None:
    cluster = FakeCluster(max_children=1)
    gates = {"alpha": Gate(), "beta": Gate()}
    settings = options(tmp_path, forkMode="auto", placement="cluster", maxParallel=4)
    async with cluster_hub(settings, cluster, ["alpha", "beta"], gates) as rig:
        parent = await start(rig)
        refs = children_of(await rig.client.wait_for(Kind.FORK_STARTED, parent))
        ids = {ref["sessionId"]: label for label, ref in refs.items()}
        # Whichever child is ready first takes the cluster's one slot; the other waits for it.
        queued = await rig.client.until(
            lambda e: e["kind"] == Kind.QUEUE_POSITION and e["sessionId"] in ids
        )
        waiting = ids[queued["sessionId"]]
        [running] = [label for label in refs if label != waiting]
        await gates[running].wait_reached(LIMIT)
        # The cluster's one slot is taken; the server's four are all free.
        assert rig.hub.slots.running == 0
        assert listed(rig, queued["sessionId"]).queuePosition == 1
        assert not gates[waiting].reached.is_set()
        gates[running].open()
        await gates[waiting].wait_reached(LIMIT)
        gates[waiting].open()
        finished = await rig.client.wait_for(Kind.FORK_FINISHED, parent)
    assert [r["ok"] for r in finished["results"]] == [True, True]
    assert len(cluster.opened) == 2


@pytest.mark.usefixtures("no_user_git_config")
async def test_an_unreachable_cluster_fails_a_cluster_fork_before_anything_is_made(
    tmp_path: Path,
) -> None:
    cluster = FakeCluster(down="no Ray cluster answers at ray://head:10001")
    settings = options(tmp_path, forkMode="auto", placement="cluster")
    async with cluster_hub(settings, cluster, ["alpha", "beta"]) as rig:
        parent = await start(rig)
        rejected = await rig.client.wait_for(Kind.FORK_REJECTED, parent)
        errors = [e["message"] for e in rig.client.of(parent) if e["kind"] == Kind.ERROR]
        await rig.client.wait_for(Kind.PROMPT, parent, origin="forkRejected")
    assert "the ray cluster: no Ray cluster answers at ray://head:10001" in rejected["reason"]
    assert errors and "no Ray cluster answers" in errors[0]
    assert not cluster.opened and not (tmp_path / "state" / "worktrees").exists()


@pytest.mark.usefixtures("no_user_git_config")
async def test_auto_with_an_unreachable_cluster_runs_every_child_here_and_says_so(
    tmp_path: Path,
) -> None:
    cluster = FakeCluster(down="no Ray cluster answers at ray://head:10001")
    settings = options(tmp_path, forkMode="auto", placement="auto", maxParallel=1)
    async with cluster_hub(settings, cluster, ["alpha", "beta"]) as rig:
        parent = await start(rig)
        started = await rig.client.wait_for(Kind.FORK_STARTED, parent)
        finished = await rig.client.wait_for(Kind.FORK_FINISHED, parent)
    assert started["placementReason"] == (
        "the ray cluster cannot take children (no Ray cluster answers at ray://head:10001), so "
        "all run on this machine"
    )
    assert all("placement" not in c for c in started["children"])
    assert [r["ok"] for r in finished["results"]] == [True, True]
    assert not cluster.opened


# --- refused before anything is made --------------------------------------------------------------


async def test_placement_cluster_without_a_cluster_is_invalid_params(tmp_path: Path) -> None:
    settings = ClientSettings(str(tmp_path), InitializationOptions(forkMode="approve"))
    async with cluster_hub(settings, FakeCluster()) as rig:
        assert rig.hub.placements.cluster_name is None  # the options name none
        session = await idle_parent(rig)
        with pytest.raises(protocol.CovenError) as by_hand:
            await rig.hub.forks.fork_by_hand(session, ["a"], None, ForkChoices(placement="cluster"))
        parent = await start(rig)
        proposed = await rig.client.wait_for(Kind.FORK_PROPOSED, parent)
        cluster = ForkChoices(placement="cluster")
        with pytest.raises(protocol.CovenError) as estimated:
            await rig.hub.forks.estimate(proposed["forkId"], None, cluster)
        with pytest.raises(protocol.CovenError) as decided:
            rig.hub.forks.decide(proposed["forkId"], True, None, None, cluster)
        assert rig.hub.forks.get(proposed["forkId"]).state == "proposed"  # nothing started
        # `auto` with no cluster is not refused: every child runs here.
        await rig.hub.forks.estimate(proposed["forkId"], None, ForkChoices(placement="auto"))
    for error, method in ((by_hand, "fork"), (estimated, "estimateFork"), (decided, "decideFork")):
        assert error.value.code == protocol.ErrorCode.InvalidParams
        assert error.value.data == {"field": "placement"}
        assert error.value.message.startswith(f"coven/{method}: 'placement': 'cluster' needs")
        assert "set initializationOptions.cluster" in error.value.message


async def test_a_cluster_this_server_cannot_use_is_said_and_none_is_offered(
    tmp_path: Path,
) -> None:
    """Options that name a cluster on a server without cluster support (no factory): the user is
    told what to install, and a fork that asks for the cluster is refused, saying so."""
    settings = ClientSettings(
        str(tmp_path), InitializationOptions(cluster=RAY, placement="auto"), frozenset({"cluster"})
    )
    async with cluster_hub(settings, None) as rig:
        assert rig.hub.placements.cluster_name is None
        [(message, warning)] = rig.client.messages
        session = await idle_parent(rig)
        with pytest.raises(protocol.CovenError) as refused:
            await rig.hub.forks.fork_by_hand(session, ["a"], None, ForkChoices(placement="cluster"))
    assert warning and "pip install 'coven-ls[ray]'" in message
    assert "no cluster support" in refused.value.message


async def test_a_cluster_that_cannot_be_made_is_said(tmp_path: Path) -> None:
    def broken(options: ClusterOptions) -> Any:
        raise ValueError("'ray://' needs a host")

    settings = ClientSettings(str(tmp_path), InitializationOptions(cluster=RAY))
    async with anyio.create_task_group() as tg:
        hub = Hub(tg, REGISTRY, broken)
        client = RecordingClient(settings, None)
        hub.attach(client)
        tg.cancel_scope.cancel()
    [(message, warning)] = client.messages
    assert warning and "could not be set up: 'ray://' needs a host" in message
    assert hub.placements.cluster_name is None


async def test_a_cluster_fork_of_children_sharing_the_folder_is_refused(tmp_path: Path) -> None:
    settings = ClientSettings(str(tmp_path), InitializationOptions(cluster=RAY))
    async with cluster_hub(settings, FakeCluster()) as rig:
        assert rig.hub.placements.cluster_name == "ray"
        session = await idle_parent(rig)
        choices = ForkChoices(placement="cluster", isolation="shared")
        with pytest.raises(protocol.CovenError) as shared:
            await rig.hub.forks.fork_by_hand(session, ["a"], None, choices)
    assert shared.value.data == {"field": "placement"}
    assert "needs worktree isolation" in shared.value.message


async def test_a_cluster_fork_outside_a_repository_fails_and_auto_stays_here(
    tmp_path: Path,
) -> None:
    """Not a git repository: the children would share the folder, so `cluster` fails the fork
    and `auto` keeps them on this machine, saying why."""
    cluster = FakeCluster()
    settings = ClientSettings(
        str(tmp_path),
        InitializationOptions(cluster=RAY, maxParallel=1),
        frozenset({"cluster", "maxParallel"}),
    )
    async with cluster_hub(settings, cluster, ["alpha", "beta"]) as rig:
        session = await idle_parent(rig)
        await rig.hub.forks.fork_by_hand(session, FOUR[:2], None, ForkChoices(placement="cluster"))
        rejected = await rig.client.wait_for(Kind.FORK_REJECTED, session)
        # Stored with the fork like its other choices (a resumed fork goes on with them).
        row = rig.hub.forks.get(rejected["forkId"]).record()
        await rig.client.wait_for(Kind.STATUS, session, after=rejected["seq"], status="idle")
        await rig.hub.forks.fork_by_hand(session, FOUR[:2], None, ForkChoices(placement="auto"))
        started = await rig.client.wait_for(Kind.FORK_STARTED, session)
        await rig.client.wait_for(Kind.FORK_FINISHED, session)
    assert "cannot run on the cluster without worktrees" in rejected["reason"]
    assert row["choices"] == {"placement": "cluster"}
    assert from_row(row["choices"]).placement == "cluster"
    assert started["isolation"] == "shared"
    assert started["placementReason"].startswith("children run on the cluster only in worktrees")
    assert not cluster.opened
