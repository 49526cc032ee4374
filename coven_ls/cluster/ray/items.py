"""What travels between the server and a child's actor on a node: the start it is shipped
(`Shipment`), and what its stream sends back (`Placed` first, then `Ready` or `Ended`, then
agent events, permission questions and the work of each turn). Plain dataclasses: Ray pickles
them, and both ends import them from the same coven-ls version."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...core.agent import AgentEvent, AgentSpec
from ...protocol.types import InitializationOptions, PermissionOption


@dataclass(frozen=True)
class IncludedFile:
    """A `.worktreeinclude` file of the child's worktree: its path in the worktree, its
    content's digest (the node caches contents by it) and mode; or a link and its target."""

    path: str
    digest: str | None  # None: a symbolic link
    mode: int = 0o644
    link: str | None = None


@dataclass(frozen=True)
class Shipment:
    """Everything a node needs to start a child's agent as it would start here."""

    name: str  # the child's, unique on the cluster (its actor's and worktree's name)
    agent: str  # the registry's name of the agent ("claude", "codex", an ACP agent's)
    options: InitializationOptions  # the server's, for the agent's backend (its binary, ...)
    spec: AgentSpec  # as the core made it, with this machine's paths; `env` already chosen
    origin: str  # which repository the child's commits come from (the node's cache key)
    head: str  # the commit the child starts from (the local worktree's HEAD)
    branch: str | None  # the child's branch here, which it gets there too
    bundle: bytes | None  # the commits the node lacks, as a git bundle (None: it has them)
    bundle_ref: str | None  # the bundle's ref that points at `head`
    included: tuple[IncludedFile, ...] = ()
    contents: dict[str, bytes] = field(default_factory=dict)  # the included files the node
    # lacks, by digest
    conversation: bytes | None = None  # the conversation it continues (Claude's session file)
    conversation_id: str | None = None
    cache_bytes: int | None = None  # the node's cache limit (`RayTarget.node_cache_bytes`)


@dataclass(frozen=True)
class Placed:
    """Where the actor runs."""

    node: str  # its host name or address
    node_id: str | None
    version: str  # the node's coven-ls version


@dataclass(frozen=True)
class Ready:
    """The agent started on the node, in `cwd` there."""

    cwd: str
    reports_ended_tasks: bool = False  # the agent's own (`Agent.reports_ended_tasks`)


@dataclass(frozen=True)
class Event:
    event: AgentEvent


@dataclass(frozen=True)
class Question:
    """The agent asks whether a tool may run; `Agent.answer(id, ...)` carries the decision."""

    id: str
    tool_name: str
    tool_input: dict[str, object]
    tool_use_id: str | None
    options: tuple[PermissionOption, ...] = ()


@dataclass(frozen=True)
class Work:
    """The child's work so far, sent before its turn's end: its branch's commits (`head`) and
    its uncommitted changes (`state`, a commit of its worktree on top of `head`; None: none),
    as a bundle of what the server lacks; and its conversation (Claude's session file)."""

    head: str
    state: str | None
    bundle: bytes | None
    refs: tuple[str, ...]  # the bundle's refs
    conversation: bytes | None = None
    conversation_id: str | None = None


@dataclass(frozen=True)
class Ended:
    """The agent ended: `error` says why when it failed (`starting`: before it was ready)."""

    error: str | None = None
    starting: bool = False


StreamItem = Placed | Ready | Event | Question | Work | Ended
