"""`coven-ls doctor --cluster` against a real one-node Ray cluster the module starts (`ray start
--head --block` in its own process group, its own temporary folder, HOME and free ports; ended by
killing that group, never `ray stop`, which would end every Ray on the machine)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from coven_ls.doctor import cluster
from coven_ls.doctor.cluster import ClusterOptions, RayOptions, check_cluster
from coven_ls.testing.scripted_model import ScriptedModel

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None,
    reason="ray is not installed (pip install 'coven-ls[ray]')",
)

START_SECONDS = 180.0
TOKEN = "coven-doctor-test-token-0123456789abcdef"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _cluster(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Iterator[str]:
    """The address of a one-node cluster (1 CPU, 2 of a custom resource `coven`) started with
    `env`."""
    # Ray's socket paths must stay under 108 characters: a short folder of its own.
    temp = Path(tmp_path_factory.mktemp("ray-head"))
    short = Path(tempfile.mkdtemp(prefix="cdr-", dir="/tmp"))
    home = temp / "home"
    home.mkdir()
    port = _free_port()
    log_path = temp / "head.log"
    ray = str(Path(sys.executable).with_name("ray"))
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [
                ray, "start", "--head", "--block", f"--port={port}", f"--temp-dir={short}",
                "--num-cpus=1", '--resources={"coven": 2}', "--include-dashboard=false",
                "--disable-usage-stats", "--node-ip-address=127.0.0.1",
            ],
            env={**os.environ, "HOME": str(home), **env},
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + START_SECONDS
        while "Ray runtime started" not in log_path.read_text(errors="replace"):
            assert process.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, f"no head in {START_SECONDS:.0f} s"
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:  # `ray start --block` may take half a minute to stop its daemons: not waited for
            process.wait(5)
        except subprocess.TimeoutExpired:
            pass
        try:  # what ignored SIGTERM (Ray's workers and daemons are in the group)
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
        shutil.rmtree(short, ignore_errors=True)


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with _cluster(tmp_path_factory, {"RAY_AUTH_MODE": "disabled"}) as address:
        yield address


@pytest.fixture(scope="module")
def token_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A cluster with Ray's token authentication."""
    with _cluster(tmp_path_factory, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN}) as address:
        yield address


def test_a_running_cluster_is_found_with_its_nodes_and_resources(head: str) -> None:
    found = check_cluster(ClusterOptions(RayOptions(head, {"CPU": 1.0, "coven": 1.0})))
    assert found.id == "cluster" and found.status == "ok", found
    assert f"; {head} answered in " in found.found
    assert "1 node(s) alive; in all CPU 1, coven 2, memory" in found.found
    assert "; children fit on " in found.found
    asked_too_much = check_cluster(ClusterOptions(RayOptions(head, {"coven": 3.0})))
    assert asked_too_much.status == "warning" and "(coven 3)" in asked_too_much.found


def test_the_doctors_stdout_is_its_json_alone(
    head: str, tmp_path: Path, model: ScriptedModel
) -> None:
    env = {
        **model.cli_environ(tmp_path / "claude-config"),
        "HOME": str(tmp_path / "home"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    cluster = json.dumps({"ray": {"address": head, "resources": {"coven": 1}}})
    done = subprocess.run(
        [sys.executable, "-m", "coven_ls", "doctor", "--json", "--root", str(tmp_path),
         "--cluster", cluster],
        env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    report = json.loads(done.stdout)  # the whole of stdout: nothing of Ray's around it
    assert done.stdout.count("\n") == 1, done.stdout
    findings = {f["id"]: f for f in report["findings"]}
    assert findings["cluster"]["status"] == "ok", findings["cluster"]
    assert report["findings"][-1]["id"] == "cluster"


def test_a_refused_token_is_named_with_how_to_pass_one(
    token_head: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = ClusterOptions(RayOptions(token_head, {"coven": 1.0}))
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN", TOKEN)  # a token without RAY_AUTH_MODE=token is not sent
    refused = check_cluster(options)
    assert refused.status == "error", refused
    assert "the cluster refused this token" in refused.found
    assert refused.fix == cluster.AUTH_FIX
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    accepted = check_cluster(options)
    assert accepted.status == "ok", accepted
