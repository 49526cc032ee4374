"""The one table of what clients print (protocol/labels.json): it covers the protocol's values,
and the copies generated from it for the clients are current."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

from coven_ls.protocol import labels
from coven_ls.protocol.describe import api_retry, describe
from coven_ls.protocol.events import ApiRetry, StatusChanged, event_dict
from coven_ls.protocol.types import STATUSES, FileStatus

ROOT = Path(__file__).resolve().parents[2]


def test_every_status_and_file_status_has_its_words() -> None:
    assert list(labels.STATUS_MARKS) == list(STATUSES)
    assert list(labels.STATUS_LABELS) == list(STATUSES)
    assert set(labels.FILE_MARKS) == set(get_args(FileStatus))


def test_describe_prints_the_tables_words() -> None:
    for status, mark in labels.STATUS_MARKS.items():
        assert describe(event_dict("s", 1, "t", StatusChanged(status))) == f"{mark} {status}"  # type: ignore[arg-type]
    for code, name in labels.API_FAILURES.items():
        retry = ApiRetry(attempt=1, maxRetries=3, retryDelayMs=500, errorStatus=code)
        assert api_retry(retry) == f"⟳ {name} — retrying in 0.5 s (1/3)"


def test_the_neovim_plugins_copy_is_current() -> None:
    assert labels.main(["--check"]) == 0, "run: python -m coven_ls.protocol.labels"
    assert labels.LUA_PATH.read_text() == labels.lua_module()


def test_the_vscode_clients_copy_has_every_entry() -> None:
    """(`npm test` checks it is exactly what scripts/gen-protocol.mjs makes.)"""
    generated = (ROOT / "client-vscode" / "src" / "labels.gen.ts").read_text()
    for table in ("statusMarks", "statusLabels", "apiFailures", "fileMarks"):
        assert f"export const {table}:" in generated
    for status, words in labels.STATUS_LABELS.items():
        assert re.search(rf'\b{status}: "{re.escape(words)}",', generated), status


def test_no_client_keeps_a_hand_copy() -> None:
    tree_lua = (ROOT / "editors" / "nvim" / "lua" / "coven" / "tree.lua").read_text()
    present = (ROOT / "client-vscode" / "src" / "present.ts").read_text()
    for code in labels.API_FAILURES:
        assert f"[{code}]" not in tree_lua and f"=== {code}" not in present, code
    assert "rate-limited" not in tree_lua and "rate-limited" not in present
    assert "STATUS_MARKS = {" not in tree_lua and "idle: 'done'" not in present
    assert "require('coven.labels')" in tree_lua and "from './labels.gen'" in present
