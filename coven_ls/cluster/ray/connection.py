"""Connecting to the Ray cluster: lazily, once per server, as a driver in the `coven-ls`
namespace, with nothing of Ray's reaching this process's stdout (a server's stdout carries
JSON-RPC): what Ray prints at connecting goes to stderr, and its workers' output is not
forwarded here (`log_to_driver=False`)."""

from __future__ import annotations

import contextlib
import sys
from types import ModuleType
from typing import Any

from ... import __version__

NAMESPACE = "coven-ls"

INSTALL_HINT = "Install it with `pip install 'coven-ls[ray]'` (on the server and on every node)."


def import_ray() -> ModuleType:
    """The `ray` module, or a RuntimeError that says how to install it."""
    try:
        with contextlib.redirect_stdout(sys.stderr):
            import ray
    except ImportError as exc:
        raise RuntimeError(f"Ray is not installed here: {exc}. {INSTALL_HINT}") from exc
    return ray


def connect(address: str) -> None:
    """`ray.init` to the cluster at `address`, unless this process is connected already.
    Blocking (seconds): call from a worker thread. Python-level prints of any thread go to
    stderr meanwhile; Ray's C++ side logs to stderr and its files."""
    ray = import_ray()
    if ray.is_initialized():
        return
    with contextlib.redirect_stdout(sys.stderr):
        ray.init(
            address=address,
            namespace=NAMESPACE,
            log_to_driver=False,
            logging_level="WARNING",
            configure_logging=True,
        )


def version_problem(facts: dict[str, Any], address: str) -> str | None:
    """Why a node whose `node_facts` are these cannot take children (a coven-ls of another
    version), for a person; None when it can."""
    theirs = facts.get("version")
    if theirs != __version__:
        return (
            f"The Ray node {facts.get('node')} of the cluster at {address} runs coven-ls "
            f"{theirs}, this server {__version__}: every node needs the same version "
            "(pip install 'coven-ls[ray]==" + __version__ + "')."
        )
    return None


def first_line(exc: BaseException) -> str:
    """An exception's message, its first meaningful line (Ray's run to pages)."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__
