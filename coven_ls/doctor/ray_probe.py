"""The child process `coven-ls doctor` asks about a Ray cluster (doctor/cluster.py): it connects
as a driver, lists the nodes, writes one `Probe` as JSON to its stdout and disconnects. Ray's own
output goes to stderr: fd 1 points there before Ray is imported, the JSON goes to a copy of the
original fd 1.

    python -m coven_ls.doctor.ray_probe ADDRESS
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from importlib import metadata

import msgspec

from .cluster import Node, Probe

REACH_SECONDS = 5.0


def main(address: str) -> int:
    result = os.dup(1)
    os.dup2(2, 1)
    probe = _probe(address)
    os.write(result, msgspec.json.encode(probe) + b"\n")
    return 0


def _probe(address: str) -> Probe:
    version = metadata.version("ray")
    unreachable = _unreachable(address)
    if unreachable is not None:
        return Probe(version, error=unreachable)
    started = time.monotonic()
    import ray

    try:
        ray.init(
            address=address, namespace="coven-ls-doctor", log_to_driver=False,
            logging_level=logging.WARNING,
        )  # fmt: skip
    except Exception as exc:  # whatever Ray raises is the finding: it is shown, not swallowed
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        return Probe(version, error=f"{type(exc).__name__}: {' '.join(lines)[:600]}")
    seconds = time.monotonic() - started
    try:
        nodes = [
            Node(
                host=str(n.get("NodeManagerHostname") or n.get("NodeManagerAddress") or "?"),
                alive=bool(n.get("Alive")),
                resources={k: float(v) for k, v in (n.get("Resources") or {}).items()},
            )
            for n in ray.nodes()  # type: ignore[no-untyped-call]
        ]
    finally:
        ray.shutdown()
    return Probe(version, seconds=round(seconds, 1), nodes=nodes)


def _unreachable(address: str) -> str | None:
    """Why nothing answers at a `host:port` or `ray://host:port` address (a quick TCP connect,
    before Ray's own minute of retries), or None; `auto` is Ray's to find."""
    if address == "auto":
        return None
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return f"{address!r} is not an address: give host:port, ray://host:port or auto"
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=REACH_SECONDS):
            return None
    except OSError as exc:
        return f"nothing answers at {host}:{port} ({exc.strerror or exc})"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
