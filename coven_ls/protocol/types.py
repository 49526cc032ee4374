"""The shapes on the wire: statuses, options, capabilities, every request's params and result, and
`SessionInfo`. Events are in `events.py`, the method table in `methods.py`.

Each class is a msgspec Struct whose field docstrings become the JSON Schema's descriptions (and
the generated TypeScript's doc comments): read this file as the reference.
"""

from __future__ import annotations

from typing import Any, Literal

# The cluster shapes live in cluster.py, the base and numbers in wire.py, re-exported here.
from .cluster import ClusterOptions as ClusterOptions
from .cluster import ClusterPlacement as ClusterPlacement
from .cluster import RayClusterOptions as RayClusterOptions

# The enumerations live in enums.py; every wire type's module imports them from here.
from .enums import *  # noqa: F403
from .errors import invalid_params
from .wire import NonNegativeFloat as NonNegativeFloat
from .wire import NonNegativeInt as NonNegativeInt
from .wire import PositiveInt as PositiveInt
from .wire import Wire as Wire

# The version of the coven/* protocol this server speaks, sent in `initialize`'s result. Raised
# by one on a breaking change (a field removed or renamed, a meaning changed, a method or event
# kind a client must handle added); additions a client may ignore (an optional field, a new event
# kind) leave it as it is.
PROTOCOL_VERSION = 2


# --- initialize ----------------------------------------------------------------------------------


class ForkLimits(Wire, omit_defaults=True):
    """What a fork's children may spend. Each is optional: absent (or null) takes the session's
    setting (`initializationOptions.forkLimits`), 0 means no limit. A child that reaches a limit
    is stopped (status `cancelled`): its task is reported with `stopped: "limit"` and the limit's
    name, its file changes stay on its branch, and the parent goes on with what the others did."""

    childTokens: NonNegativeInt | None = None
    """tokens one child may use, every kind added up (input, output, cache read, cache
    creation); checked after each model call"""
    childCostUsd: NonNegativeFloat | None = None
    """what one child may cost, in USD (the CLI's figure once a turn ends; during a turn, its
    model calls priced by coven-ls's table); checked after each model call"""
    childSeconds: NonNegativeFloat | None = None
    """how long one child may run, from its start (time spent `queued` does not count)"""
    forkCostUsd: NonNegativeFloat | None = None
    """what the whole fork may cost, in USD: every child, their background tasks and their own
    forks; when it is reached, every child still at work is stopped"""


class AcpAgentConfig(Wire, omit_defaults=True):
    """How to start an agent that speaks the Agent Client Protocol (an entry of
    `initializationOptions.agents`)."""

    command: list[str]
    """the program and its arguments (`["opencode", "acp"]`); the program is looked up on PATH"""
    env: dict[str, str] | None = None
    """variables added to the server's environment for the agent's process"""
    mode: str | None = None
    """the agent's session mode to put its sessions in (one of the modes its `session/new`
    lists); default: the first of `default`, `read-only`, `ask` it lists, else its own: a mode
    that asks before it runs a command, so that permission questions reach the user"""


class InitializationOptions(Wire, omit_defaults=True):
    """`initialize`'s `initializationOptions`; all optional."""

    claudePath: str | None = None
    """the `claude` binary to run (default: `$COVEN_CLAUDE_PATH`, else the one bundled in
    claude-agent-sdk, else `claude` on PATH)"""
    agent: AgentName = "claude"
    """the agent of sessions that do not name one: `claude` (Claude Code), `codex`, or a name of
    `agents`"""
    agents: dict[str, AcpAgentConfig] | None = None
    """agents that speak the Agent Client Protocol, by the name sessions give in `agent`
    (`claude` and `codex` are reserved); see ACP agents"""
    codexPath: str | None = None
    """the `codex` binary to run for Codex sessions (default: `$COVEN_CODEX_PATH`, else the one
    in the openai-codex-cli-bin wheel, `pip install coven-ls[codex]`, else `codex` on PATH)"""
    model: str | None = None
    """model for sessions that do not name one (default: the CLI's own)"""
    permissionMode: PermissionMode | None = None
    """permission mode for sessions that do not name one (default: the agent's own)"""
    forkMode: ForkMode = "approve"
    """fork mode for sessions that do not name one"""
    permissionTimeoutSeconds: float = 300.0
    """how long a tool permission request waits for the user before it is denied (0 or less:
    denied at once)"""
    maxChildren: PositiveInt = 8
    """the most tasks one fork may have"""
    maxParallel: PositiveInt = 4
    """how many fork children run a turn at once, across the whole server (every fork, nested
    ones included); the rest wait, `queued`, in order (a CLI process takes ~200 MiB and about a
    second of CPU to start; a child's CLI stops with its turn and frees its slot). With several
    clients, the last one to connect that names it sets it (one that leaves it out, a terminal
    attaching with `coven-ls chat --tcp`, say, changes nothing)"""
    maxDepth: NonNegativeInt = 1
    """how deep model-driven forks nest: with 1, a child's `<fork>` tag is ignored and left in
    its answer; with 2, children fork like their parent; 0 turns model-driven forks off"""
    stateDir: str | None = None
    """where the session databases live (one per workspace root, see Persistence), and fork
    children's worktrees (`<stateDir>/worktrees/`). Default: `$XDG_STATE_HOME/coven-ls`, else
    `~/.local/state/coven-ls`"""
    forkIsolation: Isolation | None = None
    """where fork children work: `worktree` (a git worktree each, merged back) or `shared` (the
    parent's folder). Default: `worktree` when the session's cwd is in a git repository with at
    least one commit, else `shared`"""
    worktreePool: NonNegativeInt = 4
    """how many spare worktrees the server keeps ready for each repository that has had a
    worktree fork, made while it idles, so that the next fork's children get theirs at once
    (each is brought to that fork's snapshot first: a child never sees an older tree). Each
    takes about a checkout's disk (`coven-ls doctor` shows it). 0: none, and the pools the state
    folder holds are removed when the server starts"""
    childIdleTimeoutSeconds: NonNegativeFloat = 900.0
    """a fork child whose CLI says nothing for this long in a turn (frozen, or stuck on a hung
    connection) is stopped and its task reported as failed, so that its fork ends (0: never).
    Time spent waiting for the user's permission answer does not count"""
    mergeMode: MergeMode = "auto"
    """how a worktree fork's changes come back: `auto` (merged when the fork ends) or `review`
    (the fork waits, `reviewing`, until the user applies or discards each child's changes)"""
    childSandbox: ChildSandbox = "auto"
    """whether fork children run fenced by the operating system (see Child sandbox): `auto`
    (where their agent's sandbox is available, else unfenced, saying why), `required` (a fork
    whose children cannot be fenced fails) or `off`"""
    childSandboxNetwork: SandboxNetwork = "full"
    """what a fenced child's commands reach: `full`, `loopback` (their own) or `none`"""
    worktreeSetup: str = "auto"
    """a shell command (`sh -c`) run in each fork child's new worktree, after the
    `.worktreeinclude` copies and before the child starts; `auto`: the setup the repository has
    for another tool (`.cursor/worktrees.json`, then `conductor.json`, then
    `.codex/environments/environment.toml`), once the user allowed it; `""`: none"""
    worktreeSetupTimeoutSeconds: NonNegativeFloat = 600.0
    """a worktree setup still running after this long is stopped (its process group killed) and
    fails its child (0: never)"""
    forkLimits: ForkLimits | None = None
    """what fork children may spend (see ForkLimits): every fork of the sessions this client
    starts, the model's included, unless `coven/fork` or `coven/decideFork` say otherwise for
    one fork"""
    cluster: ClusterOptions | None = None
    """a cluster fork children may be placed on (see Cluster placement); absent: every child runs
    on this machine. Read once per server, from the first client that gives it"""
    placement: Placement = "local"
    """where fork children run: `local` (on this machine), `cluster` (on the nodes of
    `cluster`; a fork fails when it cannot be reached) or `auto` (here up to `maxParallel` of a
    fork's children, the rest on the cluster; when the cluster cannot be reached, all here,
    saying why). `cluster` and `auto` need `cluster`, and worktree isolation"""
    token: str | None = None
    """the server's token, which a `--tcp` server requires (its `--token-file`, `$COVEN_TOKEN`,
    or the one it generated and printed; see Starting the server); ignored on stdio. Never
    logged nor sent back"""

    def __post_init__(self) -> None:
        if self.placement != "local" and self.cluster is None:
            raise invalid_params(
                "initializationOptions",
                f"placement '{self.placement}' needs a cluster to place children on: set "
                'cluster (e.g. {"ray": {"address": "ray://head:10001"}}) or use \'local\'',
                "placement",
            )
        for name, config in (self.agents or {}).items():
            if name in RESERVED_AGENT_NAMES:
                raise invalid_params(
                    "initializationOptions",
                    f"agents.{name}: '{name}' is reserved for the agent coven-ls hosts itself; "
                    "give this ACP agent another name",
                    "agents",
                )
            if not config.command or not config.command[0]:
                raise invalid_params(
                    "initializationOptions",
                    f'agents.{name}.command must name a program (e.g. ["opencode", "acp"])',
                    "agents",
                )


class CovenClientCapabilities(Wire, omit_defaults=True):
    """`capabilities.experimental.coven` in `initialize`: what the client does itself. A client
    that sends this object (even empty) is coven-aware: it renders `coven/event` itself, so it
    gets no `window/logMessage` lines and no `executeCommandProvider`."""

    permissions: bool = False
    """the client answers `coven/requestPermission` (else: `window/showMessageRequest`)"""
    forks: bool = False
    """the client shows `forkProposed` itself and answers with `coven/decideFork`"""
    progress: bool = True
    """false: no work-done progress for this connection"""
    review: bool = False
    """the client shows a fork's changes for review itself (`coven/getChanges`,
    `coven/applyChanges`, `coven/discardChanges`); else it is asked with
    `window/showMessageRequest`"""


class AgentOffer(Wire):
    """An agent a client may start sessions of (`capabilities.experimental.coven.agents`)."""

    name: AgentName
    """what `agent` takes: `claude`, `codex`, or an ACP agent's name"""
    kind: Literal["claude", "codex", "acp"]
    """what hosts it: Claude Code, Codex's app-server, or an agent that speaks ACP"""
    fork: Literal["inherit", "transcript"] | None
    """how its fork children of the same agent continue their parent's context by default:
    `inherit` (a native copy of the conversation), `transcript` (an ACP agent without
    `session/fork`: the conversation written into each child's first prompt; `inherit` is
    refused); null: not known yet (an ACP agent this server has not started: it is asked when a
    fork needs it)"""
    cost: bool | None
    """whether its turns say what they cost (`costUsd`); null: not known until one of its turns
    has ended in this server"""


class CovenServerCapabilities(Wire):
    """`capabilities.experimental.coven` in `initialize`'s result: what the server speaks."""

    protocolVersion: PositiveInt
    """the coven/* protocol's version (2 since `agents` became a list of objects), raised on every
    breaking change: a client written for another version should say so rather than misread what
    it is sent"""
    cluster: str | None = None
    """the cluster this server may place fork children on (`ray`): a client offers the
    `placement` choice only when it is set; null (absent from an older server): none is
    configured, or this coven-ls cannot use the one configured"""
    agents: list[AgentOffer] | None = None
    """the agents whose binary this server finds for this client (its `claudePath`/`codexPath`,
    the environment, the bundled wheels, PATH; an ACP agent's command), without running it:
    which ones a client may offer when it starts a session, and what each can do"""


# --- params --------------------------------------------------------------------------------------


class NoParams(Wire):
    """A request that takes no parameters (`params` may be omitted, `{}` or null)."""


class StartSessionParams(Wire):
    prompt: str
    """the first user message (not blank)"""
    cwd: str | None = None
    """working directory (must exist); default: the workspace root"""
    model: str | None = None
    """model; default: `initializationOptions.model`"""
    permissionMode: PermissionMode | None = None
    """as in `initializationOptions`"""
    forkMode: ForkMode | None = None
    """as in `initializationOptions`"""
    title: str | None = None
    """shown in session lists; default: the prompt's first line (80 characters at most)"""
    agent: AgentName | None = None
    """the agent that runs the session: `claude`, `codex` or a name of
    `initializationOptions.agents`; default: `initializationOptions.agent`"""


class SendMessageParams(Wire):
    sessionId: str
    """the session"""
    text: str
    """the message (not blank)"""


class SessionIdParams(Wire):
    sessionId: str
    """the session"""


class ForkChoices(Wire, kw_only=True):
    """How a fork's children work: the choices `coven/fork` and `coven/decideFork` (with
    `approve: true`) share, each optional (absent or null: the session's setting). One fork keeps
    them whole: stored with it, a resumed fork goes on with them."""

    isolation: Isolation | None = None
    """for this fork: `initializationOptions.forkIsolation`'s choice instead"""
    mergeMode: MergeMode | None = None
    """for this fork: `initializationOptions.mergeMode`'s choice instead"""
    worktreeSetup: str | None = None
    """for this fork: `initializationOptions.worktreeSetup`'s choice instead (`""`: no setup)"""
    context: ForkContext | None = None
    """what the children start from: `inherit` (the parent's conversation, resumed natively;
    the default for children of the parent's agent where it can copy its conversation), `fresh`
    (a new session with only the child's brief and task) or `transcript` (a new session whose
    first prompt holds the parent's conversation written out, with cuts: thinking left out, tool
    results over 1,500 characters cut, the oldest messages cut past 100,000 tokens; the default
    for children of another agent, and of an ACP agent without `session/fork`, which cannot take
    `inherit`)"""
    agent: AgentName | None = None
    """the agent every child runs: `claude`, `codex` or an ACP agent's name (default: the
    parent's); another agent than the parent's cannot take `context: inherit`"""
    limits: ForkLimits | None = None
    """for this fork: each limit given replaces `initializationOptions.forkLimits`' (0: none)"""
    childSandbox: ChildSandbox | None = None
    """for this fork: `initializationOptions.childSandbox`'s instead"""
    childSandboxNetwork: SandboxNetwork | None = None
    """for this fork: `initializationOptions.childSandboxNetwork`'s instead"""
    placement: Placement | None = None
    """for this fork: `initializationOptions.placement`'s instead (`cluster` and `auto` need a
    cluster configured: `capabilities.experimental.coven.cluster`)"""

    def choices(self) -> ForkChoices:
        """Only the fork's choices (of params that extend them)."""
        return ForkChoices(**{name: getattr(self, name) for name in ForkChoices.__struct_fields__})


# A method's params that extend ForkChoices list their own fields first, then the choices (the
# schema puts them in that order: see schema._own_fields_first).


class ForkParams(ForkChoices, kw_only=True):
    sessionId: str
    """the session to fork"""
    tasks: list[str]
    """task labels: 1 to `maxChildren`, each non-blank and under 200 characters"""
    atMessageId: str | None = None
    """fork from this assistant message (a `messageId` of the session's events) instead of the
    end"""


class BranchParams(Wire):
    sessionId: str
    """the session to branch"""
    atMessageId: str | None = None
    """branch at this assistant message (a `messageId` of the session's events) instead of the
    end"""
    prompt: str | None = None
    """sent to the branch as its first message; without it the branch waits, idle, for one"""


class DecideForkParams(ForkChoices, kw_only=True):
    forkId: str
    """from the `forkProposed` event"""
    approve: bool
    """true: start it; false: reject it (the model is told)"""
    tasks: list[str] | None = None
    """with `approve: true` only: the task list to run instead"""
    reason: str | None = None
    """with `approve: false`: told to the model"""


class EstimateForkParams(Wire):
    forkId: str
    """a proposed fork (from the `forkProposed` event)"""
    tasks: list[str] | None = None
    """the task list the user would approve instead (as on `coven/decideFork`)"""
    context: ForkContext | None = None
    """as on `coven/decideFork`"""
    agent: AgentName | None = None
    """as on `coven/decideFork`"""
    placement: Placement | None = None
    """as on `coven/decideFork` (checked as it would be there; the estimate is the same
    wherever the children run)"""


class EstimateForkResult(Wire):
    estimate: ForkEstimate | None
    """what the fork would cost with these choices (as `forkProposed`'s `estimate`); null before
    the parent's first model request"""


class ForkIdParams(Wire):
    forkId: str
    """the fork"""


class DeleteSessionParams(Wire):
    sessionId: str
    """the session to delete, with its subtree"""
    purge: bool = False
    """also delete what the agent stored of the conversations (Claude Code's transcripts, Codex's
    threads, an ACP agent's sessions where it has `session/delete`)"""
    discardWork: bool = False
    """also delete the branches of fork children that hold work never applied (a conflict, a
    failed or cancelled child's work, changes waiting for review, later work); without it they
    are kept, and listed in the answer's `keptBranches`"""


class GetEventsParams(Wire):
    sessionId: str
    """the session"""
    afterSeq: NonNegativeInt = 0
    """events with a greater `seq` (0: all of them)"""
    limit: PositiveInt | None = None
    """at most this many events, the first ones after `afterSeq` (absent: every one); fewer
    means that the log ends there"""


PermissionOptionKind = Literal["allow_once", "allow_always", "reject_once", "reject_always"]


class PermissionOption(Wire):
    """One of the answers an ACP agent offers to its permission question (ACP's
    `PermissionOption`); agents name them differently, their `kind` says what each means."""

    optionId: str
    """the agent's id for it, given back as the answer's `optionId`"""
    kind: PermissionOptionKind
    """`allow_once`, `allow_always`, `reject_once` or `reject_always`"""
    name: str
    """what the agent calls it, to show the user"""


class RequestPermissionParams(Wire, omit_defaults=True):
    """`coven/requestPermission` (server → client)."""

    sessionId: str
    """the session whose CLI asks"""
    toolName: str
    """the tool (`Bash`, `Edit`, …)"""
    input: dict[str, Any]
    """the tool's input as the model wrote it"""
    toolUseId: str | None
    """the `toolUseId` of the `toolUse` event it belongs to"""
    options: list[PermissionOption] | None = None
    """the answers the agent offers (ACP agents only; absent for Claude and Codex): the client
    shows them and answers with the one picked as `optionId`"""


# --- results -------------------------------------------------------------------------------------


class EmptyResult(Wire):
    """An empty object: the request was done."""


class StartSessionResult(Wire):
    sessionId: str
    """the new session's id"""


class SendMessageResult(Wire):
    queued: bool
    """whether the message waits behind other turns"""
    position: NonNegativeInt
    """how many turns are ahead of it (0: it starts now)"""


class CancelResult(Wire):
    droppedMessages: NonNegativeInt
    """how many queued messages were dropped"""


class ForkResult(Wire):
    forkId: str
    """the new fork's id (its events carry it)"""


class BranchResult(Wire):
    sessionId: str
    """the branch: a new session"""


class KeptBranch(Wire):
    """A deleted fork child's branch, kept because it holds work never applied. Recorded by the
    server (no restart removes it); `coven-ls prune --discard-work` deletes it."""

    branch: str
    """e.g. `coven/<forkId>/<n>-<label>`"""
    repository: str
    """the work tree whose repository has the branch"""
    commit: str
    """the branch's commit, which holds the work"""
    base: str
    """the commit the work counts from (`git diff <base> <commit>` shows it)"""
    sessionId: str
    """the deleted child's"""
    label: str
    """the child's task label"""
    reason: str
    """what it holds, e.g. "changes that conflicted with the working tree" """


class DeleteSessionResult(Wire):
    deletedSessionIds: list[str]
    """the session first, then its subtree"""
    keptBranches: list[KeptBranch] = []
    """branches kept for their unapplied work (empty with `discardWork: true`)"""


class Usage(Wire):
    """Tokens, as the CLI counts them (its result's `usage`)."""

    inputTokens: NonNegativeInt = 0
    """input tokens not read from or written to the cache"""
    outputTokens: NonNegativeInt = 0
    """tokens the model wrote"""
    cacheReadTokens: NonNegativeInt = 0
    """input tokens read from the prompt cache"""
    cacheCreationTokens: NonNegativeInt = 0
    """input tokens written to the prompt cache"""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.inputTokens + other.inputTokens,
            self.outputTokens + other.outputTokens,
            self.cacheReadTokens + other.cacheReadTokens,
            self.cacheCreationTokens + other.cacheCreationTokens,
        )


class ContextUsage(Wire):
    """How full a session's context is: its last model request against its model's window."""

    tokens: NonNegativeInt
    """the last model request's input: input, cache read and cache creation tokens (a
    subagent's requests do not count)"""
    window: NonNegativeInt | None
    """the model's context window in tokens; null for a model coven-ls's price table does not
    know (then show the tokens only and say the model is unknown)"""
    model: str | None
    """the model that served that request, as the agent reports it"""


class ForkEstimate(Wire):
    """What a fork would cost its children before any of them does anything: each child pays
    for the parent's context once, at the price it pays for it."""

    contextTokens: NonNegativeInt
    """the parent's context (its `contextUsage.tokens`)"""
    window: NonNegativeInt | None
    """the parent's model's context window; null for a model the table does not know"""
    model: str | None
    """the parent's model"""
    children: NonNegativeInt
    """how many children the fork starts"""
    tokens: NonNegativeInt
    """what the children read before they start: for `inherit`, `children` × `contextTokens`;
    for `fresh`, only their briefs and tasks (about 4 characters a token); for `transcript`,
    each the parent's conversation after its cuts (about `contextTokens`, at most 100,000) and
    its brief; for fresh and transcript children in worktrees, also what their agent adds to
    their first request (see `writeTokens`)"""
    pricedAs: Literal["cacheRead", "input"]
    """the price each child pays for those tokens: `cacheRead` for children that resume the
    parent's conversation natively (its prompt cache is warm), `input` (full price) for fresh,
    transcript, Codex or another agent's children"""
    costUsd: float | None
    """`tokens` at that price of the children's model, and `writeTokens` at its cache-write
    price; null when the table does not know the model (say so and show the tokens only)"""
    pricesAsOf: str
    """the date of coven-ls's price table (`YYYY-MM-DD`)"""
    warning: str | None
    """set when the parent's context is past 80% of its window, e.g. "the parent's context is
    85% full (170,000 of 200,000 tokens)"; else null"""
    context: ForkContext = "inherit"
    """what the children start from, as this estimate assumes (the fork's `context`)"""
    writeTokens: NonNegativeInt = 0
    """with `pricedAs: cacheRead`: what the children write to the prompt cache as they start,
    all together: each its copy of the parent's last answer (the parent's last request did not
    hold it) and its brief, and, for children in worktrees, what their agent adds to their
    first request (Claude Code: where the child works now, about 250 tokens, and when the
    children will be fenced, `childSandbox`, the sandbox and the paths it holds, about 2,000
    more); 0 otherwise"""


class ChangedFile(Wire):
    """A file a fork child changed, from the fork's snapshot to its work."""

    path: str
    """relative to the repository's top folder, `/`-separated"""
    status: FileStatus
    """how it changed"""
    oldPath: str | None
    """a rename's source; null unless `renamed`"""
    binary: bool
    """a binary file: no line counts, no text"""
    linesAdded: NonNegativeInt
    """0 for a binary file"""
    linesRemoved: NonNegativeInt
    """0 for a binary file"""


class ConflictFile(Wire):
    path: str
    """relative to the repository's top folder, `/`-separated"""
    reason: str
    """e.g. "changed on the same lines in the working tree and by the child" """


class Sandbox(Wire):
    """How the operating system holds a fork child (see Child sandbox)."""

    fenced: bool
    """true: its commands write only its worktree and its own temporary folder"""
    by: str | None
    """what holds it: `claude` (Claude Code's sandbox), `codex` (codex's); null when unfenced"""
    reason: str | None
    """why it is unfenced; else null"""
    network: SandboxNetwork | None = None
    """a fenced child's: what its commands reach"""


class Worktree(Wire):
    """A fork child's git worktree."""

    path: str
    """the worktree's top folder (the child's `cwd` is in it, at the parent's relative place)"""
    branch: str
    """the child's branch: `coven/<forkId>/<n>-<label>`"""
    base: str
    """the commit the child started from: the parent's HEAD plus its uncommitted and untracked
    changes when the fork started"""
    repository: str
    """the parent's work tree, where the changes are merged"""


class Changes(Wire):
    """A worktree child's changes and what became of them."""

    merge: MergeState
    """what became of them: `pending` (not brought back yet), `applied` (in the parent's working
    tree), `conflict` (not applied: they clash with what is there), `discarded` (the user said
    no), `kept` (the child failed or was cancelled: its partial work stays on its branch),
    `unchanged` (no file changed)"""
    files: list[ChangedFile]
    """in path order"""
    linesAdded: NonNegativeInt
    """over every file"""
    linesRemoved: NonNegativeInt
    """over every file"""
    conflicts: list[ConflictFile]
    """with `merge: conflict`: the files that did not merge"""
    commit: str | None
    """the commit holding the child's work on its branch; null when it changed nothing"""


class StopTaskParams(Wire):
    sessionId: str
    """the session whose agent runs the task"""
    taskId: str
    """from a `task` event"""


class BranchedFrom(Wire):
    """Where a branch left its parent's conversation."""

    atMessageId: str | None
    """the parent's assistant message it was branched at; null: the parent's whole conversation
    as it stood"""


class ForkRef(Wire):
    """A fork and its state."""

    forkId: str
    """the fork (what `coven/decideFork`, `coven/resumeFork` and the fork events name)"""
    state: ForkState
    """its state now (see Fork states)"""


class SessionInfo(Wire):
    """One session as `coven/listSessions` lists it; every field is always present (null when
    unset)."""

    sessionId: str
    """coven-ls's id for the session (`s-…`)"""
    parentId: str | None
    """the parent's `sessionId` for a fork child or a branch, else null"""
    forkId: str | None
    """the fork a child belongs to, else null"""
    label: str | None
    """a fork child's task label (also its `title`), else null"""
    title: str
    """shown in session lists: `coven/startSession`'s `title`, else the prompt's first line"""
    status: Status
    """its status now"""
    cwd: str
    """its working directory (a worktree child's is in its worktree)"""
    model: str | None
    """null when the CLI's default is used"""
    permissionMode: PermissionMode | None
    """null when the agent's own default is used"""
    forkMode: ForkMode
    """whether the model's `<fork>` tags fork it, after approval or not"""
    agentSessionId: str | None
    """the CLI's session id (a Codex session's thread id); null until the CLI has started"""
    agent: AgentName
    """the agent that runs the session: `claude`, `codex` or a name of
    `initializationOptions.agents`"""
    createdAt: str
    """when it was created (UTC ISO 8601)"""
    costUsd: float
    """the session's total cost as the CLI reports it"""
    queued: NonNegativeInt
    """messages waiting to run"""
    queuePosition: int | None
    """a fork child waiting for a slot (`maxParallel`): its place in the line, 1 for the next to
    start; else null"""
    usage: Usage
    """the session's own tokens, every turn added up"""
    treeUsage: Usage
    """the session's tokens and those of its fork children, theirs, and so on"""
    backgroundTasks: list[str]
    """ids of the CLI's background tasks that still run (see the `task` event)"""
    isolation: Isolation | None
    """a fork child's: where it works (null for a top-level session)"""
    isolationReason: str | None
    """with `isolation: shared`, why it is not a worktree (e.g. "not a git repository"); else
    null"""
    worktree: Worktree | None
    """a worktree child's worktree, else null"""
    changes: Changes | None
    """a worktree child's changes once it has ended, else null"""
    branchedFrom: BranchedFrom | None
    """a branch's (`coven/branch`): where it left its parent; null for any other session"""
    lastFork: ForkRef | None = None
    """the latest fork of this session (as the parent) and its state now; null when it never
    forked"""
    contextUsage: ContextUsage | None = None
    """how full its context is (its last model request against its model's window); null
    before its first model request"""
    sandbox: Sandbox | None = None
    """a fork child's: how the operating system holds it; else null"""
    placement: ClusterPlacement | None = None
    """a fork child placed on a cluster: which, and the node it runs on; null for every session
    that runs on this machine"""


class ListSessionsResult(Wire):
    sessions: list[SessionInfo]
    """every session this server knows, in the order they were created"""


class GetChangesParams(Wire):
    sessionId: str
    """a fork child that worked in a worktree"""
    path: str | None = None
    """also return this file's text before and after (a `path` of `files`)"""


class FileText(Wire):
    path: str
    """the file, as in `files`"""
    oldPath: str | None
    """a rename's source, else null"""
    binary: bool
    """true: the texts are null (show "binary file")"""
    base: str | None
    """the file in the fork's snapshot (at `oldPath` for a rename); null when added or binary"""
    child: str | None
    """the file in the child's work; null when deleted or binary"""


class GetChangesResult(Wire):
    sessionId: str
    """the child"""
    worktree: Worktree
    """its worktree"""
    changes: Changes
    """its changes, and what became of them"""
    file: FileText | None
    """the file `path` asked for, else null"""


class ApplyChangesResult(Wire):
    changes: Changes
    """`merge` is `applied`, or `conflict` with the files (nothing was written then)"""


class RequestPermissionResult(Wire):
    """The client's answer to `coven/requestPermission`."""

    allow: bool
    """the tool may run"""
    message: str | None = None
    """what the model is told when the tool is denied"""
    optionId: str | None = None
    """the option picked, one of the question's `options` (its kind then decides, whatever
    `allow` says); absent: `allow` means allow once or reject once, mapped by the options' kinds"""
