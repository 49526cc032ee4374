"""What the installed Ray does, measured (docs/cluster.md quotes it): starts heads of its own,
connects to them from child processes whose stdout is a pipe, and reports what reached that
process's fd 1, which ports the head listens on, and whether token authentication is on.

    .venv/bin/python scripts/ray_facts.py [--json]

Each head is `ray start --head --block` in its own process group, with its own temporary
folder, HOME (Ray reads and writes ~/.ray/auth_token) and free ports, and is ended by killing
that group: never `ray stop`, which ends every Ray on the machine (other users' too).
"""

from __future__ import annotations

import argparse
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
from typing import Any

RAY = str(Path(sys.executable).with_name("ray"))
TOKEN = "0123456789abcdef0123456789abcdef"

# The connecting process: its fd 1 is a pipe the parent reads; what it has to say goes to the
# descriptor argv[3].
CONNECT = r"""
import json, os, sys, time
address, mode = sys.argv[1], sys.argv[2]
out = os.fdopen(int(sys.argv[3]), "w")
import ray
kwargs = {}
if mode == "quiet":
    kwargs = {"log_to_driver": False, "logging_level": "WARNING"}
if mode == "unconfigured":
    kwargs = {"log_to_driver": False, "configure_logging": False}
started = time.monotonic()
try:
    ray.init(address=address, **kwargs)
except Exception as exc:
    out.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:400]}))
    out.flush()
    sys.exit(0)
connected = time.monotonic() - started

@ray.remote(num_cpus=0)
def speak():
    print("a task's print")
    sys.stderr.write("a task's stderr\n")
    return os.getpid()

ray.get(speak.remote())

@ray.remote(num_cpus=0)
class Streamer:
    async def count(self, n):
        for i in range(n):
            yield i

try:
    streamer = Streamer.remote()
    generator = streamer.count.options(num_returns="streaming").remote(3)
    streamed = [ray.get(ref) for ref in generator]
except Exception as exc:
    streamed = f"{type(exc).__name__}: {exc}"[:300]
time.sleep(2)  # worker output reaches the driver asynchronously
nodes = [
    {"alive": n["Alive"], "resources": n["Resources"]} for n in ray.nodes()
]
out.write(json.dumps({"connectSeconds": round(connected, 1), "nodes": nodes, "streamed": streamed}))
out.flush()  # before ray.shutdown(), which may end the process without flushing it
ray.shutdown()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def head(env: dict[str, str], client: bool) -> Iterator[dict[str, Any]]:
    temp = Path(tempfile.mkdtemp(prefix="rf-", dir="/tmp"))  # Ray's socket paths must be short
    home = temp / "home"
    home.mkdir()
    port, client_port = free_port(), free_port()
    command = [
        RAY, "start", "--head", "--block", f"--port={port}", f"--temp-dir={temp / 'ray'}",
        "--num-cpus=1", "--include-dashboard=false", "--disable-usage-stats",
        "--node-ip-address=127.0.0.1",
    ]  # fmt: skip
    if client:
        command.append(f"--ray-client-server-port={client_port}")
    full_env = {**os.environ, "HOME": str(home), **env}
    log = (temp / "head.log").open("w")
    process = subprocess.Popen(
        command, env=full_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"ray start ended: {(temp / 'head.log').read_text()[-2000:]}")
            if "Ray runtime started" in (temp / "head.log").read_text(errors="replace"):
                break
            time.sleep(0.3)
        else:
            raise RuntimeError("ray start did not start in 120 s")
        yield {
            "address": f"127.0.0.1:{port}",
            "client": f"ray://127.0.0.1:{client_port}",
            "home": str(home),
            "pgid": process.pid,
            "log": temp / "head.log",
        }
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        # Ray's workers and daemons join the group; what ignored SIGTERM goes now.
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def listening(pgid: int) -> list[str]:
    """The TCP ports the head's process group listens on, with the process holding each."""
    pids = {p for p in os.listdir("/proc") if p.isdigit() and _pgid(int(p)) == pgid}
    found = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=False).stdout
    rows = []
    for line in found.splitlines():
        if any(f"pid={pid}," in line for pid in pids):
            parts = line.split()
            name = line.split('(("', 1)[1].split('"', 1)[0] if '(("' in line else "?"
            rows.append(f"{parts[3]} {name}")
    return sorted(set(rows))


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return -1


def connect(address: str, mode: str, env: dict[str, str]) -> dict[str, Any]:
    read, write = os.pipe()
    done = subprocess.run(
        [sys.executable, "-c", CONNECT, address, mode, str(write)],
        env={**os.environ, **env}, capture_output=True, text=True, pass_fds=(write,),
        timeout=180, check=False,
    )  # fmt: skip
    os.close(write)
    with os.fdopen(read) as said:
        result: dict[str, Any] = json.loads(said.read() or '{"error": "said nothing"}')
    result["exitCode"] = done.returncode
    result["stdout"] = done.stdout
    result["stderr"] = [line for line in done.stderr.splitlines() if line.strip()][:12]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import ray

    client = True
    try:
        import grpc  # noqa: F401  (ray[client]: the ray:// client and its server)
    except ImportError:
        client = False
    facts: dict[str, Any] = {"ray": ray.__version__, "rayClientInstalled": client}
    with head({}, client) as h:
        env = {"HOME": h["home"]}
        facts["defaultHead"] = {
            "gcsAndClientPorts": [h["address"], h["client"] if client else None],
            "ports": listening(h["pgid"]),
            "log": [line for line in Path(h["log"]).read_text().splitlines() if "oken" in line],
        }
        for mode in ("default", "quiet", "unconfigured"):
            facts[f"driver/{mode}"] = connect(h["address"], mode, env)
        if client:
            for mode in ("default", "quiet"):
                facts[f"client/{mode}"] = connect(h["client"], mode, env)
    token = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN}
    with head(token, client) as h:
        env = {"HOME": h["home"]}
        facts["tokenHead/noToken"] = connect(h["address"], "quiet", env)
        facts["tokenHead/tokenOnly"] = connect(
            h["address"], "quiet", {**env, "RAY_AUTH_TOKEN": TOKEN}
        )
        facts["tokenHead/wrongToken"] = connect(
            h["address"], "quiet", {**env, **token, "RAY_AUTH_TOKEN": "f" * 32}
        )
        facts["tokenHead/token"] = connect(h["address"], "quiet", {**env, **token})
        if client:
            facts["tokenHead/client/noToken"] = connect(h["client"], "quiet", env)
            facts["tokenHead/client/token"] = connect(h["client"], "quiet", {**env, **token})
    if args.json:
        print(json.dumps(facts, indent=1))
    else:
        for key, value in facts.items():
            print(f"{key}: {json.dumps(value, indent=1)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
