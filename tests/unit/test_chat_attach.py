"""Where `coven-ls chat --tcp` finds the server's token: never the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from coven_ls.cli import main
from coven_ls.term.attach import AttachError, token_for


def private(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_the_token_file_then_the_environment_then_the_servers_own_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    given = private(tmp_path / "token", "from-the-file\n")
    env = {"COVEN_TOKEN": " from-the-env "}
    assert token_for(7000, str(given), env) == "from-the-file"
    assert token_for(7000, None, env) == "from-the-env"
    (tmp_path / "run" / "coven-ls").mkdir(parents=True)
    private(tmp_path / "run" / "coven-ls" / "tcp-7000.token", "generated\n")
    assert token_for(7000, None, {}) == "generated"
    with pytest.raises(AttachError, match=r"no token for the server on port 7001.*--token-file"):
        token_for(7001, None, {})


def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    shared = private(tmp_path / "token", "secret\n", 0o644)
    with pytest.raises(AttachError, match="chmod 600"):
        token_for(7000, str(shared), {})


def test_token_file_goes_with_tcp(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chat", "--token-file", "/nowhere"]) == 2
    assert "--token-file goes with --tcp" in capsys.readouterr().err
