"""What `coven-ls doctor --json` prints: its findings, on the wire like the rest of the protocol
(the schema and protocol.md take them from here)."""

from __future__ import annotations

from typing import Literal

from .types import Wire

FindingStatus = Literal["ok", "warning", "error"]


class Finding(Wire, omit_defaults=True):
    """One thing `coven-ls doctor` checked."""

    id: str
    """what was checked: `python`, `packages`, `claude`, `auth`, `claudeSandbox`, `codex`,
    `codexSandbox`, `acpAgent` (one per ACP agent, named in `title`), `git`, `stateDir`,
    `database`, `worktreePool`, `cluster` (with `--cluster`: Ray installed, the address answering,
    its nodes and resources)"""
    status: FindingStatus
    """`error`: a session cannot run until it is fixed; `warning`: sessions run, something is
    missing (worktrees, saving)"""
    title: str
    """what was checked, for a person"""
    found: str
    """what was found (versions, paths, reasons)"""
    fix: str | None = None
    """what to do about it, when it is not ok"""


class DoctorReport(Wire):
    """`coven-ls doctor --json`: the exit code is 0 when `ok`, 1 otherwise."""

    ok: bool
    """no finding is an `error`"""
    version: str
    """coven-ls's own"""
    findings: list[Finding]
    """one per check, in the order they ran"""
