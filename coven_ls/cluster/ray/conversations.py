"""How a child's conversation travels with it. Claude Code keeps one as a session file,
`<CLAUDE_CONFIG_DIR>/projects/<its cwd, each non-alphanumeric character a dash>/<id>.jsonl`: the
file a `Copy` or `Resume` continues is shipped and put under the node's folder for the child's
cwd there, and after each turn the child's own comes back under the folder for its cwd here (so
a later `Resume`, a transcript child or a review reads it here). Codex's and ACP agents'
conversations do not travel (yet): a child of theirs on a cluster starts a new one (a
transcript child). Blocking (files)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ...core.agent import AgentSpec, AgentStartError, Copy, New, Resume


def config_dir(env: Mapping[str, str]) -> Path:
    """Claude Code's folder for an agent started with `env` (over this process's)."""
    found = env.get("CLAUDE_CONFIG_DIR") or os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(found) if found else Path(os.path.expanduser("~/.claude"))


def project_folder(cwd: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in cwd)


def session_file(config: Path, cwd: str, conversation_id: str) -> Path:
    if not conversation_id.replace("-", "").isalnum():
        raise ValueError(f"not a conversation id: {conversation_id!r}")
    return config / "projects" / project_folder(cwd) / f"{conversation_id}.jsonl"


def find_session(config: Path, conversation_id: str, cwd: str | None = None) -> Path | None:
    """The session file of `conversation_id`: under `cwd`'s folder first, else any project's
    (a fork child's copy continues its parent's, which ran elsewhere)."""
    if cwd is not None:
        first = session_file(config, cwd, conversation_id)
        if first.is_file():
            return first
    for found in sorted((config / "projects").glob(f"*/{conversation_id}.jsonl")):
        return found
    return None


def place_session(config: Path, cwd: str, conversation_id: str, data: bytes) -> Path:
    path = session_file(config, cwd, conversation_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    scratch.write_bytes(data)
    os.replace(scratch, path)
    return path


def continued(spec: AgentSpec) -> str | None:
    """The conversation `spec` continues (a copy's original, a resumed one); None for new."""
    match spec.start:
        case Copy(conversation_id=conversation) | Resume(conversation_id=conversation):
            return conversation
        case New():
            return None
    raise AssertionError(f"unknown start {spec.start!r}")


def shipped_conversation(kind: str, spec: AgentSpec) -> tuple[str | None, bytes | None]:
    """The conversation a start continues, as it travels: (its id, its session file). Raises
    AgentStartError for an agent whose conversations do not travel, or a file not found."""
    conversation = continued(spec)
    if conversation is None:
        return None, None
    if kind != "claude":
        raise AgentStartError(
            f"A {kind} agent's conversation cannot be carried to a cluster node yet, so this "
            "child cannot continue its parent's conversation there: fork with "
            '`context: "transcript"` (the child is given the conversation written out) or '
            'place it locally (`placement: "local"`).'
        )
    found = find_session(config_dir(spec.env), conversation, spec.cwd)
    if found is None:
        raise AgentStartError(
            f"Claude Code's session file of conversation {conversation} was not found under "
            f"{config_dir(spec.env) / 'projects'}, so it cannot be carried to the node."
        )
    return conversation, found.read_bytes()
