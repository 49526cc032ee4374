"""An ACP agent's permission question as coven asks it: the options it offers, and the tool input
shown to the user and read by the worktree checks (core/workspace/isolation.py), which know
Claude's and Codex's inputs (`file_path`, `changes`, a `command` string) rather than each ACP
agent's own spelling of them."""

from __future__ import annotations

import shlex
from typing import Any, get_args

from acp.schema import PermissionOption

from ...protocol.types import PermissionOption as OfferedOption
from ...protocol.types import PermissionOptionKind

OPTION_KINDS = frozenset(get_args(PermissionOptionKind))
# Where agents put the path an edit writes: claude-agent-acp `file_path`, opencode `filePath`.
PATH_KEYS = ("file_path", "filePath", "path")


def offered(options: list[PermissionOption]) -> list[OfferedOption]:
    """The agent's options, as the question carries them (one of a kind ACP does not define
    cannot be mapped, so it is not offered)."""
    return [
        OfferedOption(optionId=o.option_id, kind=o.kind, name=o.name)
        for o in options
        if o.kind in OPTION_KINDS
    ]


def question_input(name: str, tool_call: Any, known: dict[str, Any]) -> dict[str, Any]:
    """The tool's input as the question shows it: the agent's raw input, with its title as the
    `description`, an edit's paths as `file_path` (one) or `changes` (several), and a command
    given as a list of arguments as one string, so that a worktree child's edits and commands
    outside its worktree are refused as Claude's are."""
    tool_input = dict(tool_call.raw_input) if isinstance(tool_call.raw_input, dict) else known
    tool_input = dict(tool_input)
    if tool_call.title and "description" not in tool_input:
        tool_input["description"] = tool_call.title
    if name == "Edit" and "file_path" not in tool_input:
        paths = _edit_paths(tool_call, tool_input)
        if len(paths) == 1:
            tool_input["file_path"] = paths[0]
        elif paths and "changes" not in tool_input:
            tool_input["changes"] = [{"path": p} for p in paths]
    command = tool_input.get("command")
    if name == "Bash" and isinstance(command, list) and all(isinstance(a, str) for a in command):
        tool_input["command"] = shlex.join(command)
    return tool_input


def _edit_paths(tool_call: Any, tool_input: dict[str, Any]) -> list[str]:
    paths = [tool_input[k] for k in PATH_KEYS if isinstance(tool_input.get(k), str)]
    for item in tool_call.content or []:
        path = getattr(item, "path", None)  # a diff's
        if isinstance(path, str):
            paths.append(path)
    paths += [str(loc.path) for loc in tool_call.locations or []]
    return list(dict.fromkeys(paths))
