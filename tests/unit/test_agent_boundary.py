"""Only the Claude adapter (coven_ls/agents/claude/) imports claude-agent-sdk: the core reads
coven's own agent events (coven_ls/core/agent/events.py), and every other agent is one more
adapter. Imports are read with `ast`, so a late import inside a function counts too.

Exempt, outside the package: tests/ (tests/fakes.py is a scripted Claude Code and builds the
SDK's messages, which it reads through the Claude adapter; tests of that adapter build them too)
and bench/relay.py (it measures the bare SDK against coven-ls)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "coven_ls"
ADAPTER = PACKAGE / "agents" / "claude"
SDK = "claude_agent_sdk"


def sdk_imports(path: Path) -> list[int]:
    """The lines of `path` that import claude-agent-sdk (or a module of it)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        if any(name == SDK or name.startswith(SDK + ".") for name in names):
            lines.append(node.lineno)
    return lines


def test_only_the_claude_adapter_imports_claude_agent_sdk() -> None:
    outside = {
        f"{path.relative_to(PACKAGE.parent)}:{line}"
        for path in PACKAGE.rglob("*.py")
        if ADAPTER not in path.parents
        for line in sdk_imports(path)
    }
    assert not outside, (
        f"claude-agent-sdk is imported outside coven_ls/agents/claude: {sorted(outside)}; "
        "read what Claude says in the adapter and pass coven's agent events on"
    )


def test_the_check_sees_an_import_of_the_sdk(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import os\n"
        "def f():\n"
        "    from claude_agent_sdk.types import X\n"
        "import claude_agent_sdk as sdk\n"
        "from .claude_agent_sdk import y\n"
    )
    assert sorted(sdk_imports(module)) == [3, 4]
    assert sdk_imports(ADAPTER / "events.py")  # the adapter does import it
