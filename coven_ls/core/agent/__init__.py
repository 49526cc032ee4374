"""The boundary between the core and the agents it hosts: what an agent is to a session
(interface.py: `Agent`, `Backend`, `AgentSpec` and its `Start`), what it says (events.py: coven's
own agent events, the one vocabulary the core reads), how it fails (errors.py) and how its process
is tied to ours (launcher.py). Each agent's adapter lives in coven_ls/agents and is the one place
that knows its program."""

from .errors import (
    STDERR_GRACE_SECONDS,
    AgentFailed,
    AgentStartError,
    TaskNotRunning,
    describe_failure,
    meaningful_lines,
)
from .events import AgentEvent
from .interface import (
    Abilities,
    Agent,
    AgentKind,
    AgentSpec,
    Backend,
    Conversation,
    Copy,
    Decision,
    Entry,
    EntryKind,
    Fence,
    GitFence,
    New,
    PermissionAsker,
    Resume,
    Start,
)
from .launcher import launcher_path

__all__ = [
    "STDERR_GRACE_SECONDS",
    "Abilities",
    "Agent",
    "AgentEvent",
    "AgentFailed",
    "AgentKind",
    "AgentSpec",
    "AgentStartError",
    "Backend",
    "Conversation",
    "Copy",
    "Decision",
    "Entry",
    "EntryKind",
    "Fence",
    "GitFence",
    "New",
    "PermissionAsker",
    "Resume",
    "Start",
    "TaskNotRunning",
    "describe_failure",
    "launcher_path",
    "meaningful_lines",
]
