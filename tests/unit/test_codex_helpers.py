"""The helper folder the codex app-server gets first on PATH (codex-linux-sandbox & co.)."""

from __future__ import annotations

import shutil
import stat
import sys
from pathlib import Path

import pytest

from coven_ls.agents.codex.appserver import HELPER_NAMES, make_helper_aliases

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def test_a_binary_gets_a_private_folder_of_links_under_its_helper_names(tmp_path: Path) -> None:
    binary = tmp_path / "bin" / "codex"
    binary.parent.mkdir()
    binary.write_bytes(b"\x7fELF" + b"\0" * 60)
    (tmp_path / "codex").symlink_to(binary)  # found through a link: the binary itself is named
    folder = make_helper_aliases(str(tmp_path / "codex"))
    assert folder is not None
    try:
        assert sorted(p.name for p in folder.iterdir()) == sorted(HELPER_NAMES)
        assert all((folder / name).resolve() == binary for name in HELPER_NAMES)
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert "codex-linux-sandbox" in HELPER_NAMES
    finally:
        shutil.rmtree(folder)


def test_a_wrapper_script_or_a_missing_file_gets_none(tmp_path: Path) -> None:
    script = tmp_path / "codex"
    script.write_text("#!/usr/bin/env node\n")
    assert make_helper_aliases(str(script)) is None
    assert make_helper_aliases(str(tmp_path / "absent")) is None
