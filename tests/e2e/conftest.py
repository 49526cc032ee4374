"""Fixtures of the end-to-end tests that are theirs alone."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


def path_without(program: str, path: str, shadows: Path) -> str:
    """`path` with every folder that holds `program` replaced by a folder of links to all its
    other entries: the same commands, but `program` is not found. (On a merged /usr, /bin and
    /usr/bin both hold it.)"""
    folders = []
    for index, folder in enumerate(path.split(os.pathsep)):
        if not folder or not (Path(folder) / program).exists():
            folders.append(folder)
            continue
        shadow = shadows / f"{index}-{Path(folder).name or 'root'}"
        shadow.mkdir(parents=True, exist_ok=True)
        for entry in Path(folder).iterdir():
            if entry.name != program and not (shadow / entry.name).exists():
                (shadow / entry.name).symlink_to(entry)
        folders.append(str(shadow))
    return os.pathsep.join(folders)


@pytest.fixture(scope="session")
def path_without_bwrap(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = path_without("bwrap", os.environ.get("PATH", ""), tmp_path_factory.mktemp("no-bwrap"))
    assert shutil.which("bwrap", path=path) is None
    return path


@pytest.fixture(params=["bubblewrap", "no-bubblewrap"])
def bubblewrap(request: pytest.FixtureRequest, path_without_bwrap: str) -> dict[str, str]:
    """The environment for a codex with bubblewrap and one without: codex (0.163.0) looks for
    `bwrap` on PATH and runs each sandboxed command through it (`bwrap … codex-linux-sandbox`);
    when there is none it uses the copy of bubblewrap it carries. scripts/test.sh installs the
    Debian package when it runs as root (CI); elsewhere the first case is skipped without it."""
    if request.param == "no-bubblewrap":
        return {"PATH": path_without_bwrap}
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap)")
    return {"PATH": os.environ.get("PATH", "")}
