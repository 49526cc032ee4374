"""`coven-ls doctor`'s `cluster` finding, when `initializationOptions.cluster` is given
(`--cluster`): is Ray installed, does the cluster's address answer, and what nodes and resources
it has (docs/cluster.md). Ray is imported only by the probe, a child process (`python -m
coven_ls.doctor.ray_probe`) ended after PROBE_SECONDS: connecting to an address nobody answers
retries for a minute, and whatever Ray prints must not reach the doctor's stdout (`--json`)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable
from importlib import metadata

import msgspec

from .. import protocol
from ..protocol.doctor import Finding

PROBE_SECONDS = 30.0
TITLE = "Ray cluster (fork children placed on it)"
INSTALL = "pip install 'coven-ls[ray]'"
AUTH_FIX = (
    "Set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) with the cluster's token "
    "in the environment coven-ls starts in (docs/cluster.md#authentication-and-a-private-network)."
)


class RayOptions(msgspec.Struct):
    """What the doctor reads of `cluster.ray` (the server checks the rest)."""

    address: str
    resources: dict[str, float] | None = None


class ClusterOptions(msgspec.Struct):
    ray: RayOptions | None = None


class Node(msgspec.Struct):
    host: str
    alive: bool
    resources: dict[str, float]


class Probe(msgspec.Struct):
    """What the probe process found: the nodes, or why it could not connect."""

    ray: str
    seconds: float = 0.0
    nodes: list[Node] = msgspec.field(default_factory=list)
    error: str | None = None


Prober = Callable[[str, float], Probe]


def parse_cluster(text: str) -> ClusterOptions:
    """`--cluster`: a JSON object as `initializationOptions.cluster`."""
    try:
        return msgspec.json.decode(text, type=ClusterOptions)
    except msgspec.ValidationError as exc:
        problem = f"is not a cluster ({exc})"
    except msgspec.DecodeError as exc:
        problem = f"is not JSON ({exc})"
    raise protocol.CovenError(
        protocol.ErrorCode.InvalidParams,
        f"--cluster {problem}: give an object as initializationOptions.cluster, "
        '\'{"ray": {"address": "head:6379"}}\'.',
    )


def check_cluster(options: ClusterOptions, prober: Prober | None = None) -> Finding:
    target = options.ray
    if target is None:
        return Finding("cluster", "error", TITLE, "cluster names no engine", 'Give "ray": {…}.')
    if importlib.util.find_spec("ray") is None:
        return Finding(
            "cluster", "error", TITLE,
            "the cluster is configured, but Ray is not installed here",
            f"{INSTALL} (the same Ray version as the cluster's nodes).",
        )  # fmt: skip
    version = metadata.version("ray")
    if target.address.startswith("ray://") and importlib.util.find_spec("grpc") is None:
        return Finding(
            "cluster", "error", TITLE,
            f"ray {version} is installed without its client (grpcio), which a ray:// address "
            "needs",
            f"pip install 'ray[client]=={version}', or give the cluster's own address "
            "(head:6379) from a machine that reaches it.",
        )  # fmt: skip
    probe = (prober or run_probe)(target.address, PROBE_SECONDS)
    return finding(target, probe)


def finding(target: RayOptions, probe: Probe) -> Finding:
    """The finding for what the probe said of the cluster at `target.address`."""
    where = f"ray {probe.ray}; {target.address}"
    if probe.error is not None:
        fix = (
            f"Check that {target.address} is the cluster's address and the cluster runs (`ray "
            "status` on the head lists its nodes), and that this machine reaches it (a private "
            "network, a VPN or an SSH tunnel: docs/cluster.md); coven-ls never starts a Ray of "
            "its own."
        )
        if "auth" in probe.error.lower() or "token" in probe.error.lower():
            fix = AUTH_FIX
        elif "version" in probe.error.lower():
            fix = f"Install the cluster's Ray version here ({INSTALL} pins the one coven-ls uses)."
        elif target.address.startswith("ray://") and "timeout" in probe.error.lower():
            # Ray's client says nothing of a refused token: it times out (measured, Ray 2.60).
            fix += (
                " Through ray:// a refused token ends in a timeout too; for a cluster with token "
                "authentication: " + AUTH_FIX
            )
        return Finding("cluster", "error", TITLE, f"{where}: {probe.error}", fix)
    alive = [n for n in probe.nodes if n.alive]
    found = (
        f"{where} answered in {probe.seconds:.1f} s: {len(alive)} node(s) alive"
        f"{'' if len(alive) == len(probe.nodes) else f' ({len(probe.nodes) - len(alive)} dead)'}"
        f"; in all {_resources(_total(alive))}"
    )
    asked = target.resources or {"CPU": 1.0}
    fits = [n for n in alive if all(n.resources.get(k, 0.0) >= v for k, v in asked.items())]
    if not fits:
        return Finding(
            "cluster", "warning", TITLE,
            f"{found}; no node has what each child asks ({_resources(asked)}), so cluster "
            "children would wait",
            "Start nodes with those resources (`ray start … --resources='{\"coven\": 8}'`), or "
            "change cluster.ray.resources.",
        )  # fmt: skip
    hosts = ", ".join(sorted({n.host for n in fits}))
    return Finding("cluster", "ok", TITLE, f"{found}; children fit on {hosts}")


def _total(nodes: list[Node]) -> dict[str, float]:
    total: dict[str, float] = {}
    for node in nodes:
        for key, value in node.resources.items():
            total[key] = total.get(key, 0.0) + value
    return total


def _resources(resources: dict[str, float]) -> str:
    """`CPU 8, memory 30.0 GiB, coven 4`: Ray's own bookkeeping resources (node:…,
    object_store_memory) left out."""
    shown = []
    for key, value in sorted(resources.items(), key=lambda kv: (kv[0] != "CPU", kv[0])):
        if key.startswith("node:") or key == "object_store_memory":
            continue
        if key == "memory":
            shown.append(f"memory {value / 2**30:.1f} GiB")
        else:
            shown.append(f"{key} {value:g}")
    return ", ".join(shown) or "no resources"


def run_probe(address: str, timeout: float) -> Probe:
    """Runs coven_ls.doctor.ray_probe for `address`, ended after `timeout` seconds. A cluster that
    refuses the token says so only in Ray's log lines (stderr), while ray.init retries and then
    raises a plain ConnectionError: that reason is added to the error."""
    version = metadata.version("ray")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "coven_ls.doctor.ray_probe", address],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        said = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        return Probe(version, error=f"no answer in {timeout:.0f} s{_refused(said)}")
    try:
        probe = msgspec.json.decode(done.stdout, type=Probe)
    except msgspec.MsgspecError:
        last = [line for line in done.stderr.splitlines() if line.strip()][-3:]
        error = f"the probe failed (exit code {done.returncode}): " + " / ".join(last)
        return Probe(version, error=error + _refused(done.stderr))
    if probe.error is not None:
        probe.error += _refused(done.stderr)
    return probe


def _refused(stderr: str) -> str:
    if "InvalidAuthToken" in stderr or "Unauthenticated" in stderr:
        return " (the cluster refused this token: Authentication token is missing or incorrect)"
    return ""
