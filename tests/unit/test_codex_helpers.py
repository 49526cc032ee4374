"""The helper folder the codex app-server gets first on PATH (codex-linux-sandbox & co.)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from coven_ls.agents.codex.appserver import HELPER_NAMES, make_helper_aliases

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def fake_binary(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x7fELF" + b"\0" * 60)
    return path


def test_a_binary_gets_one_private_folder_of_links_under_its_helper_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    binary = fake_binary(tmp_path / "bin" / "codex")
    (tmp_path / "codex").symlink_to(binary)  # found through a link: the binary itself is named
    folder = make_helper_aliases(str(tmp_path / "codex"))
    assert folder is not None and folder.is_relative_to(tmp_path / "cache" / "coven-ls")
    assert sorted(p.name for p in folder.iterdir()) == sorted(HELPER_NAMES)
    assert all((folder / name).resolve() == binary for name in HELPER_NAMES)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert "codex-linux-sandbox" in HELPER_NAMES
    # Made once: the next app-server of the binary finds it; a stale link is put right.
    (folder / "apply_patch").unlink()
    (folder / "apply_patch").symlink_to(tmp_path / "elsewhere")
    assert make_helper_aliases(str(binary)) == folder
    assert os.readlink(folder / "apply_patch") == str(binary)
    assert sorted(p.name for p in folder.iterdir()) == sorted(HELPER_NAMES)
    # Another binary, another folder.
    other = make_helper_aliases(str(fake_binary(tmp_path / "other" / "codex")))
    assert other is not None and other != folder


def test_a_wrapper_script_a_missing_file_or_no_room_gets_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "codex"
    script.write_text("#!/usr/bin/env node\n")
    assert make_helper_aliases(str(script)) is None
    assert make_helper_aliases(str(tmp_path / "absent")) is None
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))
    assert make_helper_aliases(str(fake_binary(tmp_path / "bin" / "codex"))) is None
