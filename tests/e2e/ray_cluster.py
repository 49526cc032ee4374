"""A real Ray cluster for the tests (issue #33): a head and a second worker node on this machine,
each started by `ray start --block` in a process group of its own, with its own temporary
folder, free ports, no dashboard and no usage statistics, and a HOME of the test's.

The worker node offers a custom resource (`WORKER_RESOURCE`) the head does not, so a child that
asks for it really runs on the other node. Teardown kills the two process groups (and anything
left that carries this cluster's marker in its environment): never `ray stop`, which stops every
Ray on the machine, other tests' and other users' too.

`started_cluster` is a context manager (a module-scoped fixture wraps it); it skips, saying why,
when Ray is not installed."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# What the worker node offers and the head does not: children ask for it.
WORKER_RESOURCE = "coven_test_worker"
# How long a node may take to join (`ray start` takes ~13 s on a quiet 2-core machine).
START_SECONDS = 120.0


def ray_command() -> str:
    """The `ray` command of the Python running the tests (its venv's), or a skip."""
    try:
        import ray  # type: ignore[import-untyped]  # noqa: F401
    except ImportError:
        pytest.skip("Ray is not installed (pip install 'coven-ls[ray]')")
    found = Path(sys.executable).parent / "ray"
    if not found.is_file():
        pytest.skip(f"Ray is importable but its `ray` command is not beside {sys.executable}")
    return str(found)


def free_ports(count: int) -> list[int]:
    """Ports free now (held open together so that they differ)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class RayTestCluster:
    address: str  # the head's GCS address, what `ray.init(address=...)` takes
    folder: Path  # everything of the cluster's: temp folders, HOMEs, logs
    marker: str  # in every cluster process's environment
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    node_env: dict[str, str] = field(default_factory=dict)  # the worker node's environment
    client_address: str = ""  # the head's Ray client port, `ray://127.0.0.1:P`

    def kill_worker(self) -> None:
        """Kill the worker node outright (its raylet, its workers, its children's agents)."""
        self._kill("worker")

    def _kill(self, name: str) -> None:
        process = self.processes.get(name)
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)

    def left_running(self) -> list[int]:
        """Processes of this cluster still alive (by its marker): none after `stop`."""
        needle = self.marker.encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                if needle in (entry / "environ").read_bytes():
                    if "\nState:\tZ" not in (entry / "status").read_text():
                        found.append(int(entry.name))
            except OSError:
                continue
        return found

    def stop(self) -> None:
        for name in ("worker", "head"):
            self._kill(name)
        # Anything that left its group (a daemonised helper) still has the marker.
        deadline = time.monotonic() + 20
        while (left := self.left_running()) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)


def _start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, killed whole
        )


def _node_ports(ports: list[int]) -> list[str]:
    node_manager, object_manager, agent_grpc, agent_http, metrics, runtime_env = ports[:6]
    workers = ",".join(str(p) for p in ports[6:])
    return [
        f"--node-manager-port={node_manager}",
        f"--object-manager-port={object_manager}",
        f"--dashboard-agent-grpc-port={agent_grpc}",
        f"--dashboard-agent-listen-port={agent_http}",
        f"--metrics-export-port={metrics}",
        f"--runtime-env-agent-port={runtime_env}",
        f"--worker-port-list={workers}",
    ]


def _wait_for_nodes(cluster: RayTestCluster, env: dict[str, str], count: int) -> None:
    """Until the cluster has `count` live nodes, asked by a separate driver (this process's
    own `ray.init` is the code under test's)."""
    probe = (
        "import ray, sys, time\n"
        f"ray.init(address={cluster.address!r}, log_to_driver=False)\n"
        f"deadline = time.monotonic() + {START_SECONDS}\n"
        f"while sum(n['Alive'] for n in ray.nodes()) < {count}:\n"
        "    if time.monotonic() > deadline: sys.exit('nodes did not join')\n"
        "    time.sleep(0.3)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env=env,
        capture_output=True,
        timeout=START_SECONDS + 30,
        check=False,
    )
    if done.returncode:
        logs = "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
            for p in cluster.folder.glob("*.log")
        )
        raise AssertionError(
            f"the test Ray cluster did not come up: {done.stderr.decode(errors='replace')}\n{logs}"
        )


@contextlib.contextmanager
def started_cluster(node_env: dict[str, str] | None = None) -> Iterator[RayTestCluster]:
    """A head (1 CPU, nothing custom) and a worker node (2 CPUs, `WORKER_RESOURCE`: 8), both
    on 127.0.0.1, the head with a Ray client port (`client_address`); `node_env` is added to
    the worker node's environment (where its children's agents find their config)."""
    ray = ray_command()
    # Short: Ray's unix sockets live under the temp folder (a socket path holds 107 bytes).
    folder = Path(tempfile.mkdtemp(prefix="cvr-"))
    marker = f"COVEN_RAY_TEST_CLUSTER={folder}"
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    base.update(
        COVEN_RAY_TEST_CLUSTER=str(folder),
        RAY_USAGE_STATS_ENABLED="0",
        # Nothing of the user's: Ray writes under HOME (~/.ray) and reads its config there.
        HOME=str(folder / "home"),
    )
    (folder / "home").mkdir()
    ports = free_ports(2 + 2 * 14)
    gcs, client = ports[0], ports[29]
    cluster = RayTestCluster(
        address=f"127.0.0.1:{gcs}",
        folder=folder,
        marker=marker,
        client_address=f"ray://127.0.0.1:{client}",
    )
    try:
        head_env = dict(base)
        cluster.processes["head"] = _start(
            [
                ray, "start", "--head", "--block", "--node-ip-address=127.0.0.1",
                f"--port={gcs}", f"--ray-client-server-port={client}",
                f"--temp-dir={folder / 'head'}", "--num-cpus=1",
                "--include-dashboard=false", "--disable-usage-stats",
                *_node_ports(ports[1:15]),
            ],
            head_env,
            folder / "head.log",
        )  # fmt: skip
        worker_home = folder / "worker-home"
        worker_home.mkdir()
        worker_env = {**base, "HOME": str(worker_home), **(node_env or {})}
        cluster.node_env = worker_env
        cluster.processes["worker"] = _start(
            [
                ray, "start", "--block", f"--address={cluster.address}",
                "--node-ip-address=127.0.0.1", f"--temp-dir={folder / 'worker'}",
                "--num-cpus=2", f'--resources={{"{WORKER_RESOURCE}": 8}}',
                *_node_ports(ports[15:29]),
            ],
            worker_env,
            folder / "worker.log",
        )  # fmt: skip
        _wait_for_nodes(cluster, head_env, 2)
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)
