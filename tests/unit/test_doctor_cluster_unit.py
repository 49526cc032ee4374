"""`coven-ls doctor`'s `cluster` finding (coven_ls/doctor/cluster.py) with a fake probe in place
of a Ray connection, and the probe process's own answer when nothing listens at the address."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from coven_ls import protocol
from coven_ls.doctor import cluster
from coven_ls.doctor.checks import main
from coven_ls.doctor.cluster import (
    ClusterOptions,
    Node,
    Probe,
    RayOptions,
    check_cluster,
    finding,
    parse_cluster,
)
from coven_ls.doctor.ray_probe import _unreachable

ROOT = Path(__file__).resolve().parents[2]
RAY_INSTALLED = importlib.util.find_spec("ray") is not None
GIB = 2.0**30

HEAD = Node("head", True, {"CPU": 8.0, "memory": 30 * GIB, "node:10.0.0.1": 1.0, "coven": 4.0})
WORKER = Node("worker-1", True, {"CPU": 4.0, "memory": 14 * GIB, "object_store_memory": 1e9})
LOST = Node("worker-2", False, {})


def options(address: str = "head:6379", **resources: float) -> ClusterOptions:
    return ClusterOptions(RayOptions(address, resources or None))


def test_the_option_is_read_as_initialization_options_cluster() -> None:
    parsed = parse_cluster(
        '{"ray": {"address": "ray://head:10001", "env": ["ANTHROPIC_API_KEY"],'
        ' "resources": {"CPU": 1, "coven": 1}, "maxChildren": 8}}'
    )
    assert parsed.ray == RayOptions("ray://head:10001", {"CPU": 1.0, "coven": 1.0})
    with pytest.raises(protocol.CovenError, match=r"--cluster is not JSON .*initializationOptions"):
        parse_cluster("{ray")
    with pytest.raises(protocol.CovenError, match=r"--cluster is not a cluster .*address"):
        parse_cluster('{"ray": {"resources": {}}}')


def test_a_bad_cluster_option_ends_the_doctor_with_exit_code_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(".", None, None, True, cluster='{"ray": 7}') == 2
    out, err = capsys.readouterr()
    assert out == "" and "coven-ls doctor: --cluster is not a cluster" in err


def test_ray_not_installed_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        cluster.importlib.util, "find_spec", lambda name: None if name == "ray" else real(name)
    )

    def never(address: str, timeout: float) -> Probe:
        raise AssertionError("no probe without ray")

    found = check_cluster(options(), never)
    assert found.id == "cluster" and found.status == "error"
    assert "Ray is not installed" in found.found
    assert found.fix is not None and "pip install 'coven-ls[ray]'" in found.fix


@pytest.mark.skipif(not RAY_INSTALLED, reason="ray is not installed (pip install 'coven-ls[ray]')")
def test_a_ray_client_address_without_grpc_says_what_it_needs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        cluster.importlib.util, "find_spec", lambda name: None if name == "grpc" else real(name)
    )
    found = check_cluster(options("ray://head:10001"), lambda a, t: Probe("2.60.0"))
    assert found.status == "error" and "without its client (grpcio)" in found.found
    assert found.fix is not None and "ray[client]==" in found.fix
    # A cluster address does not need the client.
    assert (
        check_cluster(options("head:6379"), lambda a, t: Probe("2.60.0", nodes=[HEAD])).status
        == "ok"
    )


@pytest.mark.skipif(not RAY_INSTALLED, reason="ray is not installed (pip install 'coven-ls[ray]')")
def test_the_probe_is_asked_about_the_address_with_a_timeout() -> None:
    asked: list[tuple[str, float]] = []

    def probe(address: str, timeout: float) -> Probe:
        asked.append((address, timeout))
        return Probe("2.60.0", seconds=1.5, nodes=[HEAD])

    found = check_cluster(options("10.0.0.1:6379"), probe)
    assert asked == [("10.0.0.1:6379", cluster.PROBE_SECONDS)]
    assert found.status == "ok"


def test_nodes_and_their_resources_are_said() -> None:
    found = finding(RayOptions("head:6379"), Probe("2.60.0", 2.1, [HEAD, WORKER, LOST]))
    assert found.status == "ok" and found.fix is None
    assert found.found == (
        "ray 2.60.0; head:6379 answered in 2.1 s: 2 node(s) alive (1 dead); in all CPU 12, "
        "coven 4, memory 44.0 GiB; children fit on head, worker-1"
    )


def test_resources_no_node_has_are_a_warning() -> None:
    target = RayOptions("head:6379", {"CPU": 1.0, "gpu_box": 1.0})
    found = finding(target, Probe("2.60.0", 2.0, [HEAD, WORKER]))
    assert found.status == "warning"
    assert "no node has what each child asks (CPU 1, gpu_box 1)" in found.found
    assert found.fix is not None and "--resources" in found.fix
    # Only the nodes with the custom resource take children.
    fits = finding(RayOptions("head:6379", {"coven": 1.0}), Probe("2.60.0", 2.0, [HEAD, WORKER]))
    assert fits.status == "ok" and fits.found.endswith("children fit on head")
    # A dead node's resources do not count.
    dead = Node("worker-2", False, {"CPU": 4.0, "gpu_box": 1.0})
    assert finding(target, Probe("2.60.0", 2.0, [WORKER, dead])).status == "warning"


def test_an_unreachable_cluster_is_an_error_that_says_what_to_check() -> None:
    found = finding(RayOptions("head:6379"), Probe("2.60.0", error="no answer in 30 s"))
    assert found.status == "error" and found.found == "ray 2.60.0; head:6379: no answer in 30 s"
    assert found.fix is not None and "`ray status` on the head" in found.fix
    assert "never starts a Ray of its own" in found.fix


def test_a_ray_client_timeout_may_be_a_refused_token_too() -> None:
    error = "ConnectionError: ray client connection timeout"
    found = finding(RayOptions("ray://head:10001"), Probe("2.60.0", error=error))
    assert found.status == "error" and found.fix is not None
    assert "Check that ray://head:10001 is the cluster's address" in found.fix
    assert found.fix.endswith(cluster.AUTH_FIX)
    refused = "nothing answers at head:10001 (Connection refused)"
    nobody = finding(RayOptions("ray://head:10001"), Probe("2.60.0", error=refused))
    assert nobody.fix is not None and "token" not in nobody.fix


def test_a_refused_token_says_how_to_pass_one() -> None:
    error = (
        "ConnectionError: Failed to connect to Ray cluster at head:6379 (the cluster refused "
        "this token: Authentication token is missing or incorrect)"
    )
    found = finding(RayOptions("head:6379"), Probe("2.60.0", error=error))
    assert found.status == "error" and found.fix == cluster.AUTH_FIX
    assert "RAY_AUTH_MODE=token" in found.fix and "RAY_AUTH_TOKEN" in found.fix


def test_what_the_probe_process_said_on_stderr_about_a_token_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    said = "[W gcs_client.cc:210] Unauthenticated: RPC error: InvalidAuthToken: missing\n"
    answer = '{"ray": "2.60.0", "error": "ConnectionError: Failed to connect"}\n'

    def run(*args: object, **kwargs: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess([], 0, answer, said)

    monkeypatch.setattr(cluster.subprocess, "run", run)
    monkeypatch.setattr(cluster.metadata, "version", lambda name: "2.60.0")
    probe = cluster.run_probe("head:6379", 1.0)
    assert probe.error is not None and "refused this token" in probe.error

    def slow(*args: object, **kwargs: object) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired([], 1.0, output=b"", stderr=said.encode())

    monkeypatch.setattr(cluster.subprocess, "run", slow)
    late = cluster.run_probe("head:6379", 1.0)
    assert late.error is not None and late.error.startswith("no answer in 1 s")
    assert "refused this token" in late.error


def test_an_address_nobody_answers_is_said_before_ray_is_asked() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    said = _unreachable(f"127.0.0.1:{port}")
    assert said is not None and said.startswith(f"nothing answers at 127.0.0.1:{port}")
    assert _unreachable(f"ray://127.0.0.1:{port}") is not None
    assert (
        _unreachable("head") == "'head' is not an address: give host:port, ray://host:port or auto"
    )
    assert _unreachable("auto") is None
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        assert _unreachable(f"127.0.0.1:{listening.getsockname()[1]}") is None


@pytest.mark.skipif(not RAY_INSTALLED, reason="ray is not installed (pip install 'coven-ls[ray]')")
def test_the_probe_process_answers_one_json_line_on_stdout() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = subprocess.run(
        [sys.executable, "-m", "coven_ls.doctor.ray_probe", f"127.0.0.1:{port}"],
        capture_output=True, text=True, timeout=60, check=True, cwd=ROOT,
    )  # fmt: skip
    answer = json.loads(done.stdout)
    assert answer["error"].startswith(f"nothing answers at 127.0.0.1:{port}")
    assert done.stdout.count("\n") == 1
