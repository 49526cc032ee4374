"""What clients print for the protocol's values (status marks and words, API failure names, file
marks), read from one table, `labels.json`, shipped beside the schema.

The clients get the same table generated into their own language, so that no copy is kept by
hand: the VS Code client's `src/labels.gen.ts` (`npm run gen:protocol`) and the Neovim plugin's
`lua/coven/labels.lua` (`python -m coven_ls.protocol.labels`; `--check` says whether it is
current, as the unit tests do).
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

TABLE: dict[str, Any] = json.loads(resources.files(__package__).joinpath("labels.json").read_text())

STATUS_MARKS: dict[str, str] = TABLE["statusMarks"]
"""a session status as one character, for text trees"""
STATUS_LABELS: dict[str, str] = TABLE["statusLabels"]
"""a session status in words, where a client has room for them"""
API_FAILURES: dict[int, str] = {int(k): v for k, v in TABLE["apiFailures"].items()}
"""what a failed model call's HTTP status means, when it has a name"""
FILE_MARKS: dict[str, str] = TABLE["fileMarks"]
"""a changed file's status as one letter, as git shows it"""

LUA_PATH = Path(__file__).resolve().parents[2] / "editors" / "nvim" / "lua" / "coven" / "labels.lua"


def _lua_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string of these is a Lua string too


def _lua_key(key: str) -> str:
    return f"[{key}]" if key.isdigit() else key if key.isidentifier() else f"[{_lua_string(key)}]"


def lua_module() -> str:
    """The table as a Lua module (what the Neovim plugin requires as `coven.labels`)."""
    lines = [
        "-- generated from coven_ls/protocol/labels.json by `python -m coven_ls.protocol.labels`;",
        "-- do not edit (the unit tests fail while it is stale).",
        "return {",
    ]
    for name, table in TABLE.items():
        if name.startswith("$"):
            continue
        lines.append(f"  {name} = {{")
        lines.extend(f"    {_lua_key(k)} = {_lua_string(v)}," for k, v in table.items())
        lines.append("  },")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the Neovim plugin's labels.lua.")
    parser.add_argument("--check", action="store_true", help="exit 1 if it is not current")
    args = parser.parse_args(argv)
    text = lua_module()
    if args.check:
        current = LUA_PATH.read_text() if LUA_PATH.exists() else ""
        if current != text:
            print(f"{LUA_PATH} is stale: run python -m coven_ls.protocol.labels", file=sys.stderr)
            return 1
        return 0
    LUA_PATH.write_text(text)
    print(f"wrote {LUA_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
