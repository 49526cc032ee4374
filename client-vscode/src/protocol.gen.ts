// generated from coven_ls/protocol/schema.json by scripts/gen-protocol.mjs; do not edit.
// Regenerate with `npm run gen:protocol` (after `python -m coven_ls.protocol.schema` when the
// Python types changed); `npm test` fails while this file is stale.

export type PermissionMode = 'default' | 'acceptEdits' | 'plan' | 'bypassPermissions' | 'dontAsk' | 'auto';
export type ForkMode = 'auto' | 'approve' | 'off';
/**
 * A session's status (protocol.md, Statuses).
 */
export type Status =
  | 'queued'
  | 'starting'
  | 'running'
  | 'idle'
  | 'awaitingApproval'
  | 'forking'
  | 'reviewing'
  | 'failed'
  | 'cancelled'
  | 'closed'
  | 'interrupted';
/**
 * A fork's state (protocol.md, Fork states); the fork events and `SessionInfo.lastFork` carry it.
 */
export type ForkState = 'proposed' | 'running' | 'reviewing' | 'rejected' | 'finished' | 'interrupted';
/**
 * A `coven/event` notification's params: the envelope and one kind's fields.
 */
export type Event =
  | StatusChangedEvent
  | PromptEvent
  | AgentStartedEvent
  | QueuePositionEvent
  | TextEvent
  | ThinkingEvent
  | ToolUseEvent
  | ToolResultEvent
  | PermissionRequestEvent
  | PermissionDecisionEvent
  | TurnResultEvent
  | ApiRetryEvent
  | TaskEvent
  | ErrorEvent
  | ModeChangedEvent
  | PlanEvent
  | ToolUpdateEvent
  | AgentRestartedEvent
  | PlacedEvent
  | ForkProposedEvent
  | ForkRejectedEvent
  | ForkStartedEvent
  | ForkFinishedEvent
  | ForkErrorEvent
  | ForkInterruptedEvent
  | ForkResumedEvent
  | ForkReviewingEvent
  | ChangesEventEvent
  | WorktreeEnvEvent
  | SetupOutputEvent
  | SetupEndedEvent
  | SpendEvent
  | DeletedEvent;
/**
 * Who wrote a turn's message.
 */
export type Origin = 'user' | 'fork' | 'forkResults' | 'forkError' | 'forkRejected' | 'task';
export type ForkSource = 'model' | 'user';
/**
 * Every event kind this version sends.
 */
export type EventKind =
  | 'status'
  | 'prompt'
  | 'agent'
  | 'queuePosition'
  | 'text'
  | 'thinking'
  | 'toolUse'
  | 'toolResult'
  | 'permissionRequest'
  | 'permissionDecision'
  | 'turnResult'
  | 'apiRetry'
  | 'task'
  | 'error'
  | 'modeChanged'
  | 'plan'
  | 'toolUpdate'
  | 'agentRestarted'
  | 'placed'
  | 'forkProposed'
  | 'forkRejected'
  | 'forkStarted'
  | 'forkFinished'
  | 'forkError'
  | 'forkInterrupted'
  | 'forkResumed'
  | 'forkReviewing'
  | 'changes'
  | 'worktreeEnv'
  | 'setupOutput'
  | 'setupEnded'
  | 'spend'
  | 'deleted';
/**
 * A session in one of these takes no more messages.
 */
export type FinalStatus = 'cancelled' | 'closed';
/**
 * A fork child in one of these has stopped working on its task.
 */
export type SettledStatus = 'idle' | 'failed' | 'cancelled' | 'closed' | 'interrupted';
/**
 * A session in one of these when the server stopped comes back `interrupted`.
 */
export type BusyStatus = 'queued' | 'starting' | 'running' | 'forking' | 'awaitingApproval';

/**
 * The coven-ls wire protocol (protocol.md). Generated from coven_ls/protocol by `python -m coven_ls.protocol.schema`; do not edit.
 */
export interface CovenProtocol {
  Requests?: Requests;
  ServerRequests?: ServerRequests;
  Notifications?: Notifications;
  Event?: Event;
  EventKind?: EventKind;
  ErrorCode?: ErrorCode;
  Status?: Status;
  FinalStatus?: FinalStatus;
  SettledStatus?: SettledStatus;
  BusyStatus?: BusyStatus;
  ForkMode?: ForkMode;
  PermissionMode?: PermissionMode;
  Origin?: Origin;
  ForkSource?: ForkSource;
  ForkState?: ForkState;
  InitializationOptions?: InitializationOptions;
  CovenClientCapabilities?: CovenClientCapabilities;
  CovenServerCapabilities?: CovenServerCapabilities;
  SessionInfo?: SessionInfo;
  DoctorReport?: DoctorReport;
}
/**
 * Client → server requests: params and result of each.
 */
export interface Requests {
  /**
   * Starts a session and its first turn; returns as soon as the session exists
   */
  'coven/startSession': {
    params: StartSessionParams;
    result: StartSessionResult;
  };
  /**
   * A follow-up user turn, queued while the session is busy
   */
  'coven/sendMessage': {
    params: SendMessageParams;
    result: SendMessageResult;
  };
  /**
   * Interrupts the running turn (or a proposed or running fork) and drops queued messages
   */
  'coven/cancel': {
    params: SessionIdParams;
    result: CancelResult;
  };
  /**
   * Ends the session and its agent process; it stays listed, `closed`
   */
  'coven/closeSession': {
    params: SessionIdParams;
    result: EmptyResult;
  };
  /**
   * Every session this server knows, in the order they were created
   */
  'coven/listSessions': {
    params: NoParams;
    result: ListSessionsResult;
  };
  /**
   * A session's stored events after a `seq`, and the blocks streaming now
   */
  'coven/getEvents': {
    params: GetEventsParams;
    result: GetEventsResult;
  };
  /**
   * Forks an idle session by hand into one child per task
   */
  'coven/fork': {
    params: ForkParams;
    result: ForkResult;
  };
  /**
   * A new session holding the session's conversation (up to a message), in its folder
   */
  'coven/branch': {
    params: BranchParams;
    result: BranchResult;
  };
  /**
   * Approves (perhaps with other tasks) or rejects a fork the model proposed
   */
  'coven/decideFork': {
    params: DecideForkParams;
    result: EmptyResult;
  };
  /**
   * What a proposed fork would cost with other tasks, context or agent
   */
  'coven/estimateFork': {
    params: EstimateForkParams;
    result: EstimateForkResult;
  };
  /**
   * Re-runs the unfinished children of a fork a restart interrupted
   */
  'coven/resumeFork': {
    params: ForkIdParams;
    result: EmptyResult;
  };
  /**
   * Gives the parent of an interrupted fork what finished
   */
  'coven/abandonFork': {
    params: ForkIdParams;
    result: EmptyResult;
  };
  /**
   * Removes a session and its whole subtree from the server and its store
   */
  'coven/deleteSession': {
    params: DeleteSessionParams;
    result: DeleteSessionResult;
  };
  /**
   * Stops one of the CLI's background tasks (a subagent)
   */
  'coven/stopTask': {
    params: StopTaskParams;
    result: EmptyResult;
  };
  /**
   * A worktree child's changes, and one file's texts before and after
   */
  'coven/getChanges': {
    params: GetChangesParams;
    result: GetChangesResult;
  };
  /**
   * Merges a reviewed child's changes into the parent's working tree now
   */
  'coven/applyChanges': {
    params: SessionIdParams;
    result: ApplyChangesResult;
  };
  /**
   * Leaves a reviewed child's changes out of the parent's working tree
   */
  'coven/discardChanges': {
    params: SessionIdParams;
    result: EmptyResult;
  };
}
export interface StartSessionParams {
  /**
   * the first user message (not blank)
   */
  prompt: string;
  /**
   * working directory (must exist); default: the workspace root
   */
  cwd?: string | null;
  /**
   * model; default: `initializationOptions.model`
   */
  model?: string | null;
  /**
   * as in `initializationOptions`
   */
  permissionMode?: PermissionMode | null;
  /**
   * as in `initializationOptions`
   */
  forkMode?: ForkMode | null;
  /**
   * shown in session lists; default: the prompt's first line (80 characters at most)
   */
  title?: string | null;
  /**
   * the agent that runs the session: `claude`, `codex` or a name of `initializationOptions.agents`; default: `initializationOptions.agent`
   */
  agent?: string | null;
}
export interface StartSessionResult {
  /**
   * the new session's id
   */
  sessionId: string;
}
export interface SendMessageParams {
  /**
   * the session
   */
  sessionId: string;
  /**
   * the message (not blank)
   */
  text: string;
}
export interface SendMessageResult {
  /**
   * whether the message waits behind other turns
   */
  queued: boolean;
  /**
   * how many turns are ahead of it (0: it starts now)
   */
  position: number;
}
export interface SessionIdParams {
  /**
   * the session
   */
  sessionId: string;
}
export interface CancelResult {
  /**
   * how many queued messages were dropped
   */
  droppedMessages: number;
}
/**
 * An empty object: the request was done.
 */
export interface EmptyResult {}
/**
 * A request that takes no parameters (`params` may be omitted, `{}` or null).
 */
export interface NoParams {}
export interface ListSessionsResult {
  /**
   * every session this server knows, in the order they were created
   */
  sessions: SessionInfo[];
}
/**
 * One session as `coven/listSessions` lists it; every field is always present (null when unset).
 */
export interface SessionInfo {
  /**
   * coven-ls's id for the session (`s-…`)
   */
  sessionId: string;
  /**
   * the parent's `sessionId` for a fork child or a branch, else null
   */
  parentId: string | null;
  /**
   * the fork a child belongs to, else null
   */
  forkId: string | null;
  /**
   * a fork child's task label (also its `title`), else null
   */
  label: string | null;
  /**
   * shown in session lists: `coven/startSession`'s `title`, else the prompt's first line
   */
  title: string;
  /**
   * its status now
   */
  status: Status;
  /**
   * its working directory (a worktree child's is in its worktree)
   */
  cwd: string;
  /**
   * null when the CLI's default is used
   */
  model: string | null;
  /**
   * null when the agent's own default is used
   */
  permissionMode: PermissionMode | null;
  /**
   * whether the model's `<fork>` tags fork it, after approval or not
   */
  forkMode: ForkMode;
  /**
   * the CLI's session id (a Codex session's thread id); null until the CLI has started
   */
  agentSessionId: string | null;
  /**
   * the agent that runs the session: `claude`, `codex` or a name of `initializationOptions.agents`
   */
  agent: string;
  /**
   * when it was created (UTC ISO 8601)
   */
  createdAt: string;
  /**
   * the session's total cost as the CLI reports it
   */
  costUsd: number;
  /**
   * messages waiting to run
   */
  queued: number;
  /**
   * a fork child waiting for a slot (`maxParallel`): its place in the line, 1 for the next to start; else null
   */
  queuePosition: number | null;
  /**
   * the session's own tokens, every turn added up
   */
  usage: Usage;
  /**
   * the session's tokens and those of its fork children, theirs, and so on
   */
  treeUsage: Usage;
  /**
   * ids of the CLI's background tasks that still run (see the `task` event)
   */
  backgroundTasks: string[];
  /**
   * a fork child's: where it works (null for a top-level session)
   */
  isolation: ('shared' | 'worktree') | null;
  /**
   * with `isolation: shared`, why it is not a worktree (e.g. "not a git repository"); else null
   */
  isolationReason: string | null;
  /**
   * a worktree child's worktree, else null
   */
  worktree: Worktree | null;
  /**
   * a worktree child's changes once it has ended, else null
   */
  changes: Changes | null;
  /**
   * a branch's (`coven/branch`): where it left its parent; null for any other session
   */
  branchedFrom: BranchedFrom | null;
  /**
   * the latest fork of this session (as the parent) and its state now; null when it never forked
   */
  lastFork?: ForkRef | null;
  /**
   * how full its context is (its last model request against its model's window); null before its first model request
   */
  contextUsage?: ContextUsage | null;
  /**
   * a fork child's: how the operating system holds it; else null
   */
  sandbox?: Sandbox | null;
  /**
   * a fork child placed on a cluster: which, and the node it runs on; null for every session that runs on this machine
   */
  placement?: ClusterPlacement | null;
}
/**
 * Tokens, as the CLI counts them (its result's `usage`).
 */
export interface Usage {
  /**
   * input tokens not read from or written to the cache
   */
  inputTokens?: number;
  /**
   * tokens the model wrote
   */
  outputTokens?: number;
  /**
   * input tokens read from the prompt cache
   */
  cacheReadTokens?: number;
  /**
   * input tokens written to the prompt cache
   */
  cacheCreationTokens?: number;
}
/**
 * A fork child's git worktree.
 */
export interface Worktree {
  /**
   * the worktree's top folder (the child's `cwd` is in it, at the parent's relative place)
   */
  path: string;
  /**
   * the child's branch: `coven/<forkId>/<n>-<label>`
   */
  branch: string;
  /**
   * the commit the child started from: the parent's HEAD plus its uncommitted and untracked changes when the fork started
   */
  base: string;
  /**
   * the parent's work tree, where the changes are merged
   */
  repository: string;
}
/**
 * A worktree child's changes and what became of them.
 */
export interface Changes {
  /**
   * what became of them: `pending` (not brought back yet), `applied` (in the parent's working tree), `conflict` (not applied: they clash with what is there), `discarded` (the user said no), `kept` (the child failed or was cancelled: its partial work stays on its branch), `unchanged` (no file changed)
   */
  merge: 'applied' | 'conflict' | 'discarded' | 'kept' | 'pending' | 'unchanged';
  /**
   * in path order
   */
  files: ChangedFile[];
  /**
   * over every file
   */
  linesAdded: number;
  /**
   * over every file
   */
  linesRemoved: number;
  /**
   * with `merge: conflict`: the files that did not merge
   */
  conflicts: ConflictFile[];
  /**
   * the commit holding the child's work on its branch; null when it changed nothing
   */
  commit: string | null;
}
/**
 * A file a fork child changed, from the fork's snapshot to its work.
 */
export interface ChangedFile {
  /**
   * relative to the repository's top folder, `/`-separated
   */
  path: string;
  /**
   * how it changed
   */
  status: 'added' | 'deleted' | 'modified' | 'renamed';
  /**
   * a rename's source; null unless `renamed`
   */
  oldPath: string | null;
  /**
   * a binary file: no line counts, no text
   */
  binary: boolean;
  /**
   * 0 for a binary file
   */
  linesAdded: number;
  /**
   * 0 for a binary file
   */
  linesRemoved: number;
}
export interface ConflictFile {
  /**
   * relative to the repository's top folder, `/`-separated
   */
  path: string;
  /**
   * e.g. "changed on the same lines in the working tree and by the child"
   */
  reason: string;
}
/**
 * Where a branch left its parent's conversation.
 */
export interface BranchedFrom {
  /**
   * the parent's assistant message it was branched at; null: the parent's whole conversation as it stood
   */
  atMessageId: string | null;
}
/**
 * A fork and its state.
 */
export interface ForkRef {
  /**
   * the fork (what `coven/decideFork`, `coven/resumeFork` and the fork events name)
   */
  forkId: string;
  /**
   * its state now (see Fork states)
   */
  state: ForkState;
}
/**
 * How full a session's context is: its last model request against its model's window.
 */
export interface ContextUsage {
  /**
   * the last model request's input: input, cache read and cache creation tokens (a subagent's requests do not count)
   */
  tokens: number;
  /**
   * the model's context window in tokens; null for a model coven-ls's price table does not know (then show the tokens only and say the model is unknown)
   */
  window: number | null;
  /**
   * the model that served that request, as the agent reports it
   */
  model: string | null;
}
/**
 * How the operating system holds a fork child (see Child sandbox).
 */
export interface Sandbox {
  /**
   * true: its commands write only its worktree and its own temporary folder
   */
  fenced: boolean;
  /**
   * what holds it: `claude` (Claude Code's sandbox), `codex` (codex's); null when unfenced
   */
  by: string | null;
  /**
   * why it is unfenced; else null
   */
  reason: string | null;
  /**
   * a fenced child's: what its commands reach
   */
  network?: ('full' | 'loopback' | 'none') | null;
}
/**
 * Where a fork child placed on a cluster runs (a child that runs on this machine has none).
 */
export interface ClusterPlacement {
  /**
   * the cluster's name, as `initializationOptions.cluster` names it (`ray`)
   */
  cluster: string;
  /**
   * the node it runs on, for a person (its host name or address); null until the cluster has placed it (a `placed` event says when)
   */
  node: string | null;
  /**
   * the cluster's own id of that node, when it has one
   */
  nodeId?: string | null;
}
export interface GetEventsParams {
  /**
   * the session
   */
  sessionId: string;
  /**
   * events with a greater `seq` (0: all of them)
   */
  afterSeq?: number;
  /**
   * at most this many events, the first ones after `afterSeq` (absent: every one); fewer means that the log ends there
   */
  limit?: number | null;
}
export interface GetEventsResult {
  /**
   * stored events, in `seq` order (see `coven/event`)
   */
  events: Event[];
  /**
   * blocks of the session that are streaming now, so that a client that comes in mid-message can show the text so far (then apply `coven/delta`s with a greater `afterSeq`)
   */
  partial?: PartialBlock[];
}
/**
 * The session's status changed.
 */
export interface StatusChangedEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'status';
  /**
   * the session's new status
   */
  status: Status;
}
/**
 * A turn starts with this user message.
 */
export interface PromptEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'prompt';
  /**
   * the message the turn starts with
   */
  text: string;
  /**
   * who wrote it: a client (`user`), or the server: `fork` (a fork child's assignment), `forkResults` (the `<fork-results>` message), `forkError` (why a `<fork>` tag was refused), `forkRejected` (the user declined a proposed fork), `task` (the CLI started the turn itself, to report on a background task that ended)
   */
  origin: Origin;
}
/**
 * The CLI process started, or its session id or model changed.
 */
export interface AgentStartedEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'agent';
  /**
   * the CLI's session id (the name of its transcript)
   */
  agentSessionId?: string;
  /**
   * the model the CLI uses
   */
  model?: string;
  /**
   * the CLI's working directory (a worktree child's is in its worktree)
   */
  cwd?: string;
  /**
   * the CLI's permission mode
   */
  permissionMode?: string;
  /**
   * the CLI's version, e.g. `2.1.330`
   */
  claudeCodeVersion?: string;
}
/**
 * A fork child waits for one of the server's `maxParallel` slots (status `queued`); sent each time its place in the line changes.
 */
export interface QueuePositionEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'queuePosition';
  /**
   * 1 for the next to start
   */
  position: number;
}
/**
 * Assistant text (a whole block: its pieces were streamed as `coven/delta` before).
 */
export interface TextEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'text';
  /**
   * the block's whole text
   */
  text: string;
  /**
   * the CLI's uuid of the assistant message: what `coven/fork`'s `atMessageId` takes
   */
  messageId?: string;
  /**
   * set inside the CLI's own subagents: the `toolUseId` of their Agent/Task call
   */
  parentToolUseId?: string;
  /**
   * the `blockId` of the `coven/delta` pieces this block was streamed in, when it was: the whole text replaces them
   */
  blockId?: string;
}
/**
 * Assistant thinking (a whole block, streamed as `coven/delta` before).
 */
export interface ThinkingEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'thinking';
  /**
   * the block's whole thinking
   */
  text: string;
  /**
   * as in `text`
   */
  messageId?: string;
  /**
   * set inside the CLI's own subagents, as in `text`
   */
  parentToolUseId?: string;
  /**
   * as in `text`
   */
  blockId?: string;
}
/**
 * The assistant calls a tool.
 */
export interface ToolUseEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'toolUse';
  /**
   * the call's id, which its `toolResult` (and a `permissionRequest` for it) carries
   */
  toolUseId: string;
  /**
   * the tool (`Bash`, `Edit`, `Agent`, …)
   */
  name: string;
  /**
   * the tool's input, as the model wrote it
   */
  input: {
    [k: string]: unknown;
  };
  /**
   * as in `text`
   */
  messageId?: string;
  /**
   * set inside the CLI's own subagents, as in `text`
   */
  parentToolUseId?: string;
}
/**
 * A tool's result.
 */
export interface ToolResultEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'toolResult';
  /**
   * the `toolUse` it answers
   */
  toolUseId: string;
  /**
   * the result as text
   */
  content: string;
  /**
   * the tool failed, or was denied
   */
  isError: boolean;
  /**
   * set inside the CLI's own subagents, as in `text`
   */
  parentToolUseId?: string;
}
/**
 * The CLI asks to use a tool; the user is being asked.
 */
export interface PermissionRequestEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'permissionRequest';
  /**
   * the tool
   */
  toolName: string;
  /**
   * the tool's input, as the model wrote it
   */
  input: {
    [k: string]: unknown;
  };
  /**
   * the `toolUse` it is about
   */
  toolUseId?: string;
  /**
   * the answers the agent offers (ACP agents; absent for Claude and Codex)
   */
  options?: PermissionOption[];
}
/**
 * One of the answers an ACP agent offers to its permission question (ACP's `PermissionOption`); agents name them differently, their `kind` says what each means.
 */
export interface PermissionOption {
  /**
   * the agent's id for it, given back as the answer's `optionId`
   */
  optionId: string;
  /**
   * `allow_once`, `allow_always`, `reject_once` or `reject_always`
   */
  kind: 'allow_always' | 'allow_once' | 'reject_always' | 'reject_once';
  /**
   * what the agent calls it, to show the user
   */
  name: string;
}
/**
 * The answer to a permission request (from the user, or a timeout).
 */
export interface PermissionDecisionEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'permissionDecision';
  /**
   * the tool
   */
  toolName: string;
  /**
   * the tool may run
   */
  allow: boolean;
  /**
   * the `toolUse` it is about
   */
  toolUseId?: string;
  /**
   * what the model is told when the tool is denied
   */
  message?: string;
  /**
   * the option picked, of the request's `options`
   */
  optionId?: string;
}
/**
 * The turn ended.
 */
export interface TurnResultEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'turnResult';
  /**
   * the assistant's final answer
   */
  text: string;
  /**
   * true for API failures and other failed turns (not for a cancelled one)
   */
  isError: boolean;
  /**
   * the CLI's (`success`, `error_during_execution`, …), or `cancelled` when the turn was stopped before the CLI could report
   */
  subtype: string;
  /**
   * this turn's cost
   */
  costUsd?: number;
  /**
   * how long the turn took
   */
  durationMs?: number;
  /**
   * the model calls the CLI made in the turn
   */
  numTurns?: number;
  /**
   * the CLI's session id after the turn
   */
  agentSessionId?: string;
  /**
   * this turn's tokens, over every model call in it
   */
  usage?: Usage;
  /**
   * true only on turns ended by `coven/cancel` (then `text` is empty and `isError` false)
   */
  cancelled?: boolean;
  /**
   * how full the session's context is after the turn (its last model request against its model's window); absent when the turn made no model request
   */
  contextUsage?: ContextUsage;
}
/**
 * A call to the model failed (overloaded, rate-limited, a server error, a dropped connection) and the CLI will try again after a delay: show it as "API overloaded — retrying in 4 s (3/10)".
 */
export interface ApiRetryEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'apiRetry';
  /**
   * this retry's number, from 1
   */
  attempt: number;
  /**
   * how many retries the CLI makes at most
   */
  maxRetries: number;
  /**
   * how long the CLI waits before it tries again
   */
  retryDelayMs: number;
  /**
   * the HTTP status of the failed call (429, 500, 529, …), when there was one
   */
  errorStatus?: number;
  /**
   * the error's kind or message, as the CLI gives it
   */
  error?: string;
}
/**
 * A background task of the CLI (the subagent of an Agent tool call, a background shell) started, made progress or ended. A subagent's own messages arrive as events with `parentToolUseId` = this task's `toolUseId`.
 */
export interface TaskEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'task';
  /**
   * what `coven/stopTask` takes
   */
  taskId: string;
  /**
   * `started`, `running` (progress), or how it ended: `completed`, `failed`, `stopped`. The CLI often reports an end twice, a bare notice and then the summary and figures: a second event with the same status completes the first
   */
  status: 'completed' | 'failed' | 'running' | 'started' | 'stopped';
  /**
   * the tool call that started it (the Agent call of a subagent)
   */
  toolUseId?: string;
  /**
   * what the task does, in the CLI's words
   */
  description?: string;
  /**
   * how it ended, in the CLI's words (`completed`, `failed`, `stopped`)
   */
  summary?: string;
  /**
   * the tool it used last (`running`)
   */
  lastToolName?: string;
  /**
   * the tokens it has used so far
   */
  totalTokens?: number;
  /**
   * the tool calls it has made so far
   */
  toolUses?: number;
  /**
   * how long it has run
   */
  durationMs?: number;
}
/**
 * Something went wrong outside the conversation: the agent could not start, or crashed in a turn (the turn fails) or between turns (said at once; the session stays idle and its next message starts the agent again on the same conversation).
 */
export interface ErrorEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'error';
  /**
   * what went wrong, for a person
   */
  message: string;
}
/**
 * An ACP agent reports that its session is in another of its modes (ACP's `current_mode_update`: switched by the agent, or by coven-ls for a `permissionMode`).
 */
export interface ModeChangedEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'modeChanged';
  /**
   * the agent's own id of the mode (`plan`, `default`, `read-only`, …)
   */
  mode: string;
}
/**
 * An ACP agent's plan (ACP's `plan`; claude-agent-acp sends its todo list so): the whole plan each time, which replaces the one before.
 */
export interface PlanEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'plan';
  /**
   * the plan's steps, in order
   */
  entries: PlanEntry[];
}
export interface PlanEntry {
  /**
   * the step, in the agent's words
   */
  content: string;
  /**
   * how far it is
   */
  status: 'completed' | 'in_progress' | 'pending';
  /**
   * how much it matters, by the agent's judgement
   */
  priority: 'high' | 'low' | 'medium';
}
/**
 * A running tool call of an ACP agent changed (ACP's `tool_call_update`): only the fields that changed are given; its `toolResult` still ends it.
 */
export interface ToolUpdateEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'toolUpdate';
  /**
   * the `toolUse` it updates
   */
  toolUseId: string;
  /**
   * where the call is
   */
  status?: 'completed' | 'failed' | 'in_progress' | 'pending';
  /**
   * the call's new title, for a person (e.g. `Read src/app.py`)
   */
  title?: string;
  /**
   * the call's output so far, as text (the whole of it, not a piece to append)
   */
  content?: string;
  /**
   * the files (and lines) it works on now
   */
  locations?: ToolLocation[];
}
export interface ToolLocation {
  /**
   * a file the tool works on (absolute)
   */
  path: string;
  /**
   * the line in it, when the agent says (from 1)
   */
  line?: number | null;
}
/**
 * An ACP agent's process ended by itself and was started again, its session taken up again (`session/resume`, else `session/load`); a turn that was running ended failed before this.
 */
export interface AgentRestartedEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'agentRestarted';
  /**
   * how the process ended, for a person
   */
  reason: string;
  /**
   * which restart this is of the session's agent (1, 2, …)
   */
  restart: number;
  /**
   * how many it gets: once they are used up, the next end is an `error` event
   */
  maxRestarts: number;
}
/**
 * A fork child placed on a cluster has a node: its agent runs there from now on. The first event of its agent's, before its `agent` event; a child on this machine never has one.
 */
export interface PlacedEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'placed';
  /**
   * the node, for a person (its host name or address)
   */
  node: string;
  /**
   * the cluster's name (`ray`)
   */
  cluster?: string;
  /**
   * the cluster's own id of the node, when it has one
   */
  nodeId?: string;
}
/**
 * The model asked to fork (fork mode `approve`); the session is `awaitingApproval`.
 */
export interface ForkProposedEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'forkProposed';
  /**
   * what `coven/decideFork` takes
   */
  forkId: string;
  /**
   * the fork's state after this event (`proposed`)
   */
  state: ForkState;
  /**
   * the task labels the model wrote, in order
   */
  tasks: string[];
  /**
   * the parent's context and what the fork would cost its children to read it, with a warning when the context is past 80% of its window; absent when the parent has made no model request (show it with the question)
   */
  estimate?: ForkEstimate;
}
/**
 * What a fork would cost its children before any of them does anything: each child pays for the parent's context once, at the price it pays for it.
 */
export interface ForkEstimate {
  /**
   * the parent's context (its `contextUsage.tokens`)
   */
  contextTokens: number;
  /**
   * the parent's model's context window; null for a model the table does not know
   */
  window: number | null;
  /**
   * the parent's model
   */
  model: string | null;
  /**
   * how many children the fork starts
   */
  children: number;
  /**
   * what the children read before they start: for `inherit`, `children` × `contextTokens`; for `fresh`, only their briefs and tasks (about 4 characters a token); for `transcript`, each the parent's conversation after its cuts (about `contextTokens`, at most 100,000) and its brief; for fresh and transcript children in worktrees, also what their agent adds to their first request (see `writeTokens`)
   */
  tokens: number;
  /**
   * the price each child pays for those tokens: `cacheRead` for children that resume the parent's conversation natively (its prompt cache is warm), `input` (full price) for fresh, transcript, Codex or another agent's children
   */
  pricedAs: 'cacheRead' | 'input';
  /**
   * `tokens` at that price of the children's model, and `writeTokens` at its cache-write price; null when the table does not know the model (say so and show the tokens only)
   */
  costUsd: number | null;
  /**
   * the date of coven-ls's price table (`YYYY-MM-DD`)
   */
  pricesAsOf: string;
  /**
   * set when the parent's context is past 80% of its window, e.g. "the parent's context is 85% full (170,000 of 200,000 tokens)"; else null
   */
  warning: string | null;
  /**
   * what the children start from, as this estimate assumes (the fork's `context`)
   */
  context?: 'fresh' | 'inherit' | 'transcript';
  /**
   * with `pricedAs: cacheRead`: what the children write to the prompt cache as they start, all together: each its copy of the parent's last answer (the parent's last request did not hold it) and its brief, and, for children in worktrees, what their agent adds to their first request (Claude Code: where the child works now, about 250 tokens, and when the children will be fenced, `childSandbox`, the sandbox and the paths it holds, about 2,000 more); 0 otherwise
   */
  writeTokens?: number;
}
/**
 * The proposal was rejected or withdrawn.
 */
export interface ForkRejectedEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'forkRejected';
  /**
   * the fork
   */
  forkId: string;
  /**
   * the fork's state after this event (`rejected`)
   */
  state: ForkState;
  /**
   * why, when a reason was given (`cancelled by the user` when `coven/cancel` withdrew it)
   */
  reason?: string;
}
/**
 * Children were created, one per task.
 */
export interface ForkStartedEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'forkStarted';
  /**
   * the fork
   */
  forkId: string;
  /**
   * the fork's state after this event (`running`)
   */
  state: ForkState;
  /**
   * `model` (a `<fork>` tag) or `user` (`coven/fork`)
   */
  source: ForkSource;
  /**
   * the task labels, in order
   */
  tasks: string[];
  /**
   * one `{sessionId, label}` per task, in task order
   */
  children: ChildRef[];
  /**
   * the `messageId` the fork started from (`coven/fork`'s `atMessageId`), when not the end
   */
  atMessageId?: string;
  /**
   * where the children work
   */
  isolation?: 'shared' | 'worktree';
  /**
   * with `isolation: shared`: why not in worktrees ("not a git repository", "forkIsolation is shared", ...)
   */
  isolationReason?: string;
  /**
   * with `isolation: worktree`: how their changes come back
   */
  mergeMode?: 'auto' | 'review';
  /**
   * with `isolation: worktree`: the snapshot commit the children start from
   */
  base?: string;
  /**
   * what the children start from, when not the parent's conversation resumed natively: `fresh` or `transcript` (see `coven/fork`)
   */
  context?: 'fresh' | 'inherit' | 'transcript';
  /**
   * the agent the children run, when not the parent's
   */
  agent?: string;
  /**
   * what each child, and the whole fork, may spend (absent: no limit); each child's `spend` events say how far it is
   */
  limits?: ForkLimits;
  /**
   * where the fork asked its children to run, when not `local` (each child's `placement` says where it does)
   */
  placement?: 'auto' | 'cluster' | 'local';
  /**
   * why children the fork would have placed on the cluster run on this machine instead (with `placement: auto`: the cluster cannot be reached, or none is configured), for the user
   */
  placementReason?: string;
}
export interface ChildRef {
  /**
   * the child's session
   */
  sessionId: string;
  /**
   * its task (also the child's `title`)
   */
  label: string;
  /**
   * how the operating system holds it (see Child sandbox)
   */
  sandbox?: Sandbox | null;
  /**
   * a child placed on a cluster: which (its `node` null until a `placed` event names it); absent for one that runs on this machine
   */
  placement?: ClusterPlacement | null;
}
/**
 * What a fork's children may spend. Each is optional: absent (or null) takes the session's setting (`initializationOptions.forkLimits`), 0 means no limit. A child that reaches a limit is stopped (status `cancelled`): its task is reported with `stopped: "limit"` and the limit's name, its file changes stay on its branch, and the parent goes on with what the others did.
 */
export interface ForkLimits {
  /**
   * tokens one child may use, every kind added up (input, output, cache read, cache creation); checked after each model call
   */
  childTokens?: number | null;
  /**
   * what one child may cost, in USD (the CLI's figure once a turn ends; during a turn, its model calls priced by coven-ls's table); checked after each model call
   */
  childCostUsd?: number | null;
  /**
   * how long one child may run, from its start (time spent `queued` does not count)
   */
  childSeconds?: number | null;
  /**
   * what the whole fork may cost, in USD: every child, their background tasks and their own forks; when it is reached, every child still at work is stopped
   */
  forkCostUsd?: number | null;
}
/**
 * Every child has ended (and, in worktree mode, its changes were merged or decided); the parent is given their results next.
 */
export interface ForkFinishedEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'forkFinished';
  /**
   * the fork
   */
  forkId: string;
  /**
   * the fork's state after this event (`finished`)
   */
  state: ForkState;
  /**
   * in task order
   */
  results: TaskOutcome[];
  /**
   * the children's tokens (and their own forks'), added up
   */
  usage?: Usage;
  /**
   * with `isolation: worktree`: what the children's worktrees take on disk (files, not the shared git objects)
   */
  diskBytes?: number;
}
export interface TaskOutcome {
  /**
   * the task
   */
  label: string;
  /**
   * the child that ran it
   */
  sessionId: string;
  /**
   * the child finished its task without an error
   */
  ok: boolean;
  /**
   * why the task failed (absent when `ok`)
   */
  error?: string | null;
  /**
   * a worktree child's: what became of its changes (absent in shared mode)
   */
  merge?: ('applied' | 'conflict' | 'discarded' | 'kept' | 'pending' | 'unchanged') | null;
  /**
   * a worktree child's branch, when its work is kept there (`conflict`, `discarded`, `kept`)
   */
  branch?: string | null;
  /**
   * with `merge: conflict`: the files that did not merge
   */
  conflicts?: ConflictFile[] | null;
  /**
   * `limit`: the child was stopped because it reached one of the fork's limits (`ok` is false, its changes are `kept` on its branch)
   */
  stopped?: 'limit' | null;
  /**
   * with `stopped`: which limit (see ForkLimits)
   */
  limit?: ('childCostUsd' | 'childSeconds' | 'childTokens' | 'forkCostUsd') | null;
}
/**
 * The model's `<fork>` tag could not be used; nothing was forked and the model is told why.
 */
export interface ForkErrorEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'forkError';
  /**
   * what is wrong with the tag (the model is told the same)
   */
  message: string;
}
/**
 * A restarted server found this fork cut off; the parent waits for `coven/resumeFork` or `coven/abandonFork`.
 */
export interface ForkInterruptedEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'forkInterrupted';
  /**
   * what `coven/resumeFork` and `coven/abandonFork` take
   */
  forkId: string;
  /**
   * the fork's state after this event (`interrupted`)
   */
  state: ForkState;
  /**
   * the children (session ids) that had not finished
   */
  unfinished: string[];
}
/**
 * `coven/resumeFork` re-runs these children; `forkFinished` follows as usual.
 */
export interface ForkResumedEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'forkResumed';
  /**
   * the fork
   */
  forkId: string;
  /**
   * the fork's state after this event (`running`)
   */
  state: ForkState;
  /**
   * the children that run again (each keeps its `sessionId` and label)
   */
  children: ChildRef[];
}
/**
 * A worktree fork in merge mode `review` has ended; the parent is `reviewing` until each child's changes are applied or discarded (`coven/applyChanges`, `coven/discardChanges`).
 */
export interface ForkReviewingEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'forkReviewing';
  /**
   * the fork
   */
  forkId: string;
  /**
   * the fork's state after this event (`reviewing`)
   */
  state: ForkState;
  /**
   * the children (session ids) whose changes wait for a decision, in task order
   */
  pending: string[];
}
/**
 * A worktree child's changes: sent when it ends (its work committed on its branch) and each time what became of them changes (`merge`).
 */
export interface ChangesEventEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'changes';
  /**
   * the child's worktree
   */
  worktree: Worktree;
  /**
   * its changes, and what became of them
   */
  changes: Changes;
}
/**
 * A worktree child's environment is being made, before it starts: what `.worktreeinclude` brought into its worktree, what was left out, and which setup runs (`setupOutput` and `setupEnded` follow when one does).
 */
export interface WorktreeEnvEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'worktreeEnv';
  /**
   * `COVEN_PORT`: the first of the 10 ports reserved for this child while it runs
   */
  port: number;
  /**
   * `COVEN_CHILD_INDEX`: its task's number, from 1
   */
  childIndex: number;
  /**
   * the gitignored files and folders (ending in `/`) copied in from the parent's folder
   */
  copied?: string[];
  /**
   * how many files those copies hold
   */
  copiedFiles?: number;
  /**
   * what the copies take, in bytes
   */
  copiedBytes?: number;
  /**
   * of `copiedFiles`, those cloned (the file system shares their blocks until one is written)
   */
  clonedFiles?: number;
  /**
   * true when the copies were made ahead, in the spare worktree the child got from the server's pool while it idled, and kept because the parent's files have not changed since: nothing was copied on the fork's path
   */
  copiedAhead?: boolean;
  /**
   * what in the copies was made to name the child's worktree instead of the parent's folder (nothing reinstalled), a sentence per copied environment: a Python venv's editable installs, `direct_url.json` files, scripts' `#!` lines, `pyvenv.cfg` and activate scripts, and links (in `node_modules`, say) whose absolute targets pointed into the parent's folder
   */
  rewritten?: string[];
  /**
   * for the user: what was left out that the child may need, what in a copy still points at the parent's folder (the child's worktree has no such file), why no setup runs
   */
  notices?: string[];
  /**
   * the setup command that runs next
   */
  setup?: string;
  /**
   * where it comes from: the `worktreeSetup` setting (`option`), `.cursor/worktrees.json` (`cursor`), `conductor.json` (`conductor`) or `.codex/environments/environment.toml` (`codex`)
   */
  setupSource?: 'codex' | 'conductor' | 'cursor' | 'option';
  /**
   * with a setup from the repository: its file, relative to the repository's top
   */
  setupFile?: string;
}
/**
 * A piece of the worktree setup's output (stdout and stderr together), as it runs.
 */
export interface SetupOutputEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'setupOutput';
  /**
   * the new piece of output, to append to what came before
   */
  text: string;
}
/**
 * The worktree setup ended. When it failed, the child ends `failed` without starting, with `error` (and its output's tail) as its task's error.
 */
export interface SetupEndedEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'setupEnded';
  /**
   * the setup exited with 0 within `worktreeSetupTimeoutSeconds`
   */
  ok: boolean;
  /**
   * how long it ran
   */
  durationMs: number;
  /**
   * its exit code, when it exited (not when it was stopped or could not start)
   */
  exitCode?: number;
  /**
   * why it failed, with the tail of its output (the child's task error)
   */
  error?: string;
}
/**
 * What a fork child with limits (`forkStarted`'s `limits`) has spent so far, after each of its model calls: its turns' tokens and cost, and those of the turn under way.
 */
export interface SpendEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'spend';
  /**
   * its tokens so far, every model call of the turn under way included
   */
  usage: Usage;
  /**
   * its cost so far in USD: its ended turns' as the CLI reported them, plus the calls of the turn under way priced by coven-ls's table (nothing for a model it does not know)
   */
  costUsd: number;
  /**
   * how long it has run, from its start
   */
  seconds: number;
}
/**
 * The session and these were deleted; this event is not stored, and its `seq` may be followed by nothing.
 */
export interface DeletedEvent {
  /**
   * the session the event belongs to
   */
  sessionId: string;
  /**
   * 1 for a session's first event, then up by exactly one per event
   */
  seq: number;
  /**
   * UTC ISO 8601 with milliseconds, e.g. `2026-11-22T01:36:13.290Z`
   */
  time: string;
  kind: 'deleted';
  /**
   * the session itself first, then its subtree
   */
  sessionIds: string[];
}
/**
 * A block still streaming: its text so far.
 */
export interface PartialBlock {
  /**
   * as in `coven/delta`
   */
  blockId: string;
  /**
   * `text` or `thinking`
   */
  kind: 'text' | 'thinking';
  /**
   * the block's text so far
   */
  text: string;
  /**
   * set in a subagent's blocks, as in events
   */
  parentToolUseId?: string | null;
}
export interface ForkParams {
  /**
   * the session to fork
   */
  sessionId: string;
  /**
   * task labels: 1 to `maxChildren`, each non-blank and under 200 characters
   */
  tasks: string[];
  /**
   * fork from this assistant message (a `messageId` of the session's events) instead of the end
   */
  atMessageId?: string | null;
  /**
   * for this fork: `initializationOptions.forkIsolation`'s choice instead
   */
  isolation?: ('shared' | 'worktree') | null;
  /**
   * for this fork: `initializationOptions.mergeMode`'s choice instead
   */
  mergeMode?: ('auto' | 'review') | null;
  /**
   * for this fork: `initializationOptions.worktreeSetup`'s choice instead (`""`: no setup)
   */
  worktreeSetup?: string | null;
  /**
   * what the children start from: `inherit` (the parent's conversation, resumed natively; the default for children of the parent's agent where it can copy its conversation), `fresh` (a new session with only the child's brief and task) or `transcript` (a new session whose first prompt holds the parent's conversation written out, with cuts: thinking left out, tool results over 1,500 characters cut, the oldest messages cut past 100,000 tokens; the default for children of another agent, and of an ACP agent without `session/fork`, which cannot take `inherit`)
   */
  context?: ('fresh' | 'inherit' | 'transcript') | null;
  /**
   * the agent every child runs: `claude`, `codex` or an ACP agent's name (default: the parent's); another agent than the parent's cannot take `context: inherit`
   */
  agent?: string | null;
  /**
   * for this fork: each limit given replaces `initializationOptions.forkLimits`' (0: none)
   */
  limits?: ForkLimits | null;
  /**
   * for this fork: `initializationOptions.childSandbox`'s instead
   */
  childSandbox?: ('auto' | 'off' | 'required') | null;
  /**
   * for this fork: `initializationOptions.childSandboxNetwork`'s instead
   */
  childSandboxNetwork?: ('full' | 'loopback' | 'none') | null;
  /**
   * for this fork: `initializationOptions.placement`'s instead (`cluster` and `auto` need a cluster configured: `capabilities.experimental.coven.cluster`)
   */
  placement?: ('auto' | 'cluster' | 'local') | null;
}
export interface ForkResult {
  /**
   * the new fork's id (its events carry it)
   */
  forkId: string;
}
export interface BranchParams {
  /**
   * the session to branch
   */
  sessionId: string;
  /**
   * branch at this assistant message (a `messageId` of the session's events) instead of the end
   */
  atMessageId?: string | null;
  /**
   * sent to the branch as its first message; without it the branch waits, idle, for one
   */
  prompt?: string | null;
}
export interface BranchResult {
  /**
   * the branch: a new session
   */
  sessionId: string;
}
export interface DecideForkParams {
  /**
   * from the `forkProposed` event
   */
  forkId: string;
  /**
   * true: start it; false: reject it (the model is told)
   */
  approve: boolean;
  /**
   * with `approve: true` only: the task list to run instead
   */
  tasks?: string[] | null;
  /**
   * with `approve: false`: told to the model
   */
  reason?: string | null;
  /**
   * for this fork: `initializationOptions.forkIsolation`'s choice instead
   */
  isolation?: ('shared' | 'worktree') | null;
  /**
   * for this fork: `initializationOptions.mergeMode`'s choice instead
   */
  mergeMode?: ('auto' | 'review') | null;
  /**
   * for this fork: `initializationOptions.worktreeSetup`'s choice instead (`""`: no setup)
   */
  worktreeSetup?: string | null;
  /**
   * what the children start from: `inherit` (the parent's conversation, resumed natively; the default for children of the parent's agent where it can copy its conversation), `fresh` (a new session with only the child's brief and task) or `transcript` (a new session whose first prompt holds the parent's conversation written out, with cuts: thinking left out, tool results over 1,500 characters cut, the oldest messages cut past 100,000 tokens; the default for children of another agent, and of an ACP agent without `session/fork`, which cannot take `inherit`)
   */
  context?: ('fresh' | 'inherit' | 'transcript') | null;
  /**
   * the agent every child runs: `claude`, `codex` or an ACP agent's name (default: the parent's); another agent than the parent's cannot take `context: inherit`
   */
  agent?: string | null;
  /**
   * for this fork: each limit given replaces `initializationOptions.forkLimits`' (0: none)
   */
  limits?: ForkLimits | null;
  /**
   * for this fork: `initializationOptions.childSandbox`'s instead
   */
  childSandbox?: ('auto' | 'off' | 'required') | null;
  /**
   * for this fork: `initializationOptions.childSandboxNetwork`'s instead
   */
  childSandboxNetwork?: ('full' | 'loopback' | 'none') | null;
  /**
   * for this fork: `initializationOptions.placement`'s instead (`cluster` and `auto` need a cluster configured: `capabilities.experimental.coven.cluster`)
   */
  placement?: ('auto' | 'cluster' | 'local') | null;
}
export interface EstimateForkParams {
  /**
   * a proposed fork (from the `forkProposed` event)
   */
  forkId: string;
  /**
   * the task list the user would approve instead (as on `coven/decideFork`)
   */
  tasks?: string[] | null;
  /**
   * as on `coven/decideFork`
   */
  context?: ('fresh' | 'inherit' | 'transcript') | null;
  /**
   * as on `coven/decideFork`
   */
  agent?: string | null;
  /**
   * as on `coven/decideFork` (checked as it would be there; the estimate is the same wherever the children run)
   */
  placement?: ('auto' | 'cluster' | 'local') | null;
}
export interface EstimateForkResult {
  /**
   * what the fork would cost with these choices (as `forkProposed`'s `estimate`); null before the parent's first model request
   */
  estimate: ForkEstimate | null;
}
export interface ForkIdParams {
  /**
   * the fork
   */
  forkId: string;
}
export interface DeleteSessionParams {
  /**
   * the session to delete, with its subtree
   */
  sessionId: string;
  /**
   * also delete what the agent stored of the conversations (Claude Code's transcripts, Codex's threads, an ACP agent's sessions where it has `session/delete`)
   */
  purge?: boolean;
  /**
   * also delete the branches of fork children that hold work never applied (a conflict, a failed or cancelled child's work, changes waiting for review, later work); without it they are kept, and listed in the answer's `keptBranches`
   */
  discardWork?: boolean;
}
export interface DeleteSessionResult {
  /**
   * the session first, then its subtree
   */
  deletedSessionIds: string[];
  /**
   * branches kept for their unapplied work (empty with `discardWork: true`)
   */
  keptBranches?: KeptBranch[];
}
/**
 * A deleted fork child's branch, kept because it holds work never applied. Recorded by the server (no restart removes it); `coven-ls prune --discard-work` deletes it.
 */
export interface KeptBranch {
  /**
   * e.g. `coven/<forkId>/<n>-<label>`
   */
  branch: string;
  /**
   * the work tree whose repository has the branch
   */
  repository: string;
  /**
   * the branch's commit, which holds the work
   */
  commit: string;
  /**
   * the commit the work counts from (`git diff <base> <commit>` shows it)
   */
  base: string;
  /**
   * the deleted child's
   */
  sessionId: string;
  /**
   * the child's task label
   */
  label: string;
  /**
   * what it holds, e.g. "changes that conflicted with the working tree"
   */
  reason: string;
}
export interface StopTaskParams {
  /**
   * the session whose agent runs the task
   */
  sessionId: string;
  /**
   * from a `task` event
   */
  taskId: string;
}
export interface GetChangesParams {
  /**
   * a fork child that worked in a worktree
   */
  sessionId: string;
  /**
   * also return this file's text before and after (a `path` of `files`)
   */
  path?: string | null;
}
export interface GetChangesResult {
  /**
   * the child
   */
  sessionId: string;
  /**
   * its worktree
   */
  worktree: Worktree;
  /**
   * its changes, and what became of them
   */
  changes: Changes;
  /**
   * the file `path` asked for, else null
   */
  file: FileText | null;
}
export interface FileText {
  /**
   * the file, as in `files`
   */
  path: string;
  /**
   * a rename's source, else null
   */
  oldPath: string | null;
  /**
   * true: the texts are null (show "binary file")
   */
  binary: boolean;
  /**
   * the file in the fork's snapshot (at `oldPath` for a rename); null when added or binary
   */
  base: string | null;
  /**
   * the file in the child's work; null when deleted or binary
   */
  child: string | null;
}
export interface ApplyChangesResult {
  /**
   * `merge` is `applied`, or `conflict` with the files (nothing was written then)
   */
  changes: Changes;
}
/**
 * Server → client requests: params and result of each.
 */
export interface ServerRequests {
  /**
   * Asks the client whether the CLI may use a tool (clients that declared `experimental.coven.permissions`)
   */
  'coven/requestPermission': {
    params: RequestPermissionParams;
    result: RequestPermissionResult;
  };
}
/**
 * `coven/requestPermission` (server → client).
 */
export interface RequestPermissionParams {
  /**
   * the session whose CLI asks
   */
  sessionId: string;
  /**
   * the tool (`Bash`, `Edit`, …)
   */
  toolName: string;
  /**
   * the tool's input as the model wrote it
   */
  input: {
    [k: string]: unknown;
  };
  /**
   * the `toolUseId` of the `toolUse` event it belongs to
   */
  toolUseId: string | null;
  /**
   * the answers the agent offers (ACP agents only; absent for Claude and Codex): the client shows them and answers with the one picked as `optionId`
   */
  options?: PermissionOption[] | null;
}
/**
 * The client's answer to `coven/requestPermission`.
 */
export interface RequestPermissionResult {
  /**
   * the tool may run
   */
  allow: boolean;
  /**
   * what the model is told when the tool is denied
   */
  message?: string | null;
  /**
   * the option picked, one of the question's `options` (its kind then decides, whatever `allow` says); absent: `allow` means allow once or reject once, mapped by the options' kinds
   */
  optionId?: string | null;
}
/**
 * Server → client notifications: params of each.
 */
export interface Notifications {
  /**
   * Every event of every session, to every connected client
   */
  'coven/event': Event;
  /**
   * A piece of assistant text or thinking as the model streams it
   */
  'coven/delta': Delta;
}
/**
 * `coven/delta` (server → client): a piece of assistant text or thinking as the model streams it. Not an event: it has no `seq` and is not stored; the block's whole text follows as a `text` or `thinking` event with the same `blockId`, which replaces the pieces.
 */
export interface Delta {
  /**
   * the session the block belongs to
   */
  sessionId: string;
  /**
   * the session's last event when the piece arrived: the block belongs after it
   */
  afterSeq: number;
  /**
   * one streamed block (the model message's id and the block's index)
   */
  blockId: string;
  kind: 'text' | 'thinking';
  /**
   * the new piece, to append to the block's text so far
   */
  text: string;
  /**
   * set in a subagent's blocks, as in events
   */
  parentToolUseId?: string | null;
}
/**
 * `initialize`'s `initializationOptions`; all optional.
 */
export interface InitializationOptions {
  /**
   * the `claude` binary to run (default: `$COVEN_CLAUDE_PATH`, else the one bundled in claude-agent-sdk, else `claude` on PATH)
   */
  claudePath?: string | null;
  /**
   * the agent of sessions that do not name one: `claude` (Claude Code), `codex`, or a name of `agents`
   */
  agent?: string;
  /**
   * agents that speak the Agent Client Protocol, by the name sessions give in `agent` (`claude` and `codex` are reserved); see ACP agents
   */
  agents?: {
    [k: string]: AcpAgentConfig;
  } | null;
  /**
   * the `codex` binary to run for Codex sessions (default: `$COVEN_CODEX_PATH`, else the one in the openai-codex-cli-bin wheel, `pip install coven-ls[codex]`, else `codex` on PATH)
   */
  codexPath?: string | null;
  /**
   * model for sessions that do not name one (default: the CLI's own)
   */
  model?: string | null;
  /**
   * permission mode for sessions that do not name one (default: the agent's own)
   */
  permissionMode?: PermissionMode | null;
  /**
   * fork mode for sessions that do not name one
   */
  forkMode?: ForkMode;
  /**
   * how long a tool permission request waits for the user before it is denied (0 or less: denied at once)
   */
  permissionTimeoutSeconds?: number;
  /**
   * the most tasks one fork may have
   */
  maxChildren?: number;
  /**
   * how many fork children run a turn at once, across the whole server (every fork, nested ones included); the rest wait, `queued`, in order (a CLI process takes ~200 MiB and about a second of CPU to start; a child's CLI stops with its turn and frees its slot). With several clients, the last one to connect that names it sets it (one that leaves it out, a terminal attaching with `coven-ls chat --tcp`, say, changes nothing)
   */
  maxParallel?: number;
  /**
   * how deep model-driven forks nest: with 1, a child's `<fork>` tag is ignored and left in its answer; with 2, children fork like their parent; 0 turns model-driven forks off
   */
  maxDepth?: number;
  /**
   * where the session databases live (one per workspace root, see Persistence), and fork children's worktrees (`<stateDir>/worktrees/`). Default: `$XDG_STATE_HOME/coven-ls`, else `~/.local/state/coven-ls`
   */
  stateDir?: string | null;
  /**
   * where fork children work: `worktree` (a git worktree each, merged back) or `shared` (the parent's folder). Default: `worktree` when the session's cwd is in a git repository with at least one commit, else `shared`
   */
  forkIsolation?: ('shared' | 'worktree') | null;
  /**
   * how many spare worktrees the server keeps ready for each repository that has had a worktree fork, made while it idles, so that the next fork's children get theirs at once (each is brought to that fork's snapshot first: a child never sees an older tree). Each takes about a checkout's disk (`coven-ls doctor` shows it). 0: none, and the pools the state folder holds are removed when the server starts
   */
  worktreePool?: number;
  /**
   * a fork child whose CLI says nothing for this long in a turn (frozen, or stuck on a hung connection) is stopped and its task reported as failed, so that its fork ends (0: never). Time spent waiting for the user's permission answer does not count
   */
  childIdleTimeoutSeconds?: number;
  /**
   * how a worktree fork's changes come back: `auto` (merged when the fork ends) or `review` (the fork waits, `reviewing`, until the user applies or discards each child's changes)
   */
  mergeMode?: 'auto' | 'review';
  /**
   * whether fork children run fenced by the operating system (see Child sandbox): `auto` (where their agent's sandbox is available, else unfenced, saying why), `required` (a fork whose children cannot be fenced fails) or `off`
   */
  childSandbox?: 'auto' | 'off' | 'required';
  /**
   * what a fenced child's commands reach: `full`, `loopback` (their own) or `none`
   */
  childSandboxNetwork?: 'full' | 'loopback' | 'none';
  /**
   * a shell command (`sh -c`) run in each fork child's new worktree, after the `.worktreeinclude` copies and before the child starts; `auto`: the setup the repository has for another tool (`.cursor/worktrees.json`, then `conductor.json`, then `.codex/environments/environment.toml`), once the user allowed it; `""`: none
   */
  worktreeSetup?: string;
  /**
   * a worktree setup still running after this long is stopped (its process group killed) and fails its child (0: never)
   */
  worktreeSetupTimeoutSeconds?: number;
  /**
   * what fork children may spend (see ForkLimits): every fork of the sessions this client starts, the model's included, unless `coven/fork` or `coven/decideFork` say otherwise for one fork
   */
  forkLimits?: ForkLimits | null;
  /**
   * a cluster fork children may be placed on (see Cluster placement); absent: every child runs on this machine. Read once per server, from the first client that gives it
   */
  cluster?: ClusterOptions | null;
  /**
   * where fork children run: `local` (on this machine), `cluster` (on the nodes of `cluster`; a fork fails when it cannot be reached) or `auto` (here up to `maxParallel` of a fork's children, the rest on the cluster; when the cluster cannot be reached, all here, saying why). `cluster` and `auto` need `cluster`, and worktree isolation
   */
  placement?: 'auto' | 'cluster' | 'local';
  /**
   * the server's token, which a `--tcp` server requires (its `--token-file`, `$COVEN_TOKEN`, or the one it generated and printed; see Starting the server); ignored on stdio. Never logged nor sent back
   */
  token?: string | null;
}
/**
 * How to start an agent that speaks the Agent Client Protocol (an entry of `initializationOptions.agents`).
 */
export interface AcpAgentConfig {
  /**
   * the program and its arguments (`["opencode", "acp"]`); the program is looked up on PATH
   */
  command: string[];
  /**
   * variables added to the server's environment for the agent's process
   */
  env?: {
    [k: string]: string;
  } | null;
  /**
   * the agent's session mode to put its sessions in (one of the modes its `session/new` lists); default: the first of `default`, `read-only`, `ask` it lists, else its own: a mode that asks before it runs a command, so that permission questions reach the user
   */
  mode?: string | null;
}
/**
 * Clusters fork children may be placed on (`initializationOptions.cluster`); one is used, and only by forks whose `placement` is `cluster` or `auto`.
 */
export interface ClusterOptions {
  /**
   * a Ray cluster (see RayClusterOptions)
   */
  ray?: RayClusterOptions | null;
}
/**
 * A Ray cluster fork children may be placed on (`initializationOptions.cluster.ray`; needs the `ray` extra, `pip install coven-ls[ray]`, here and on every node). coven-ls never starts a Ray of its own: the cluster is one you run (`ray start --head`, a VM group, KubeRay), and coven-ls connects to it when a fork first places a child there.
 */
export interface RayClusterOptions {
  /**
   * where the cluster is: a Ray client address (`ray://head:10001`, the head's client server port), a cluster address (`head:6379`, the GCS, for a server that runs on one of the cluster's machines), or `auto` (the cluster a `ray start` on this machine joined, as `ray.init(address="auto")` finds it)
   */
  address?: string;
  /**
   * names of the environment variables that travel with each child to its node (an API key, say: `["ANTHROPIC_API_KEY"]`), read from the server's environment when the child starts and sent as call arguments, never in a runtime environment a dashboard shows, never logged; no other variable travels
   */
  env?: string[];
  /**
   * what each child asks of a node, as Ray resources (`{"CPU": 1, "coven": 1}`: a custom resource the nodes meant for children declare keeps them off the others); default `{"CPU": 1}`
   */
  resources?: {
    [k: string]: number;
  } | null;
  /**
   * how many children may run on the cluster at once, across the server: the cluster's own slots, apart from `maxParallel` (which counts only the children that run here); the rest wait, `queued`, in order
   */
  maxChildren?: number;
  /**
   * how long children on the cluster outlive a server that stopped without closing them (a crash): a server started again within it takes them up again, else they end themselves. A clean stop ends them at once
   */
  reattachSeconds?: number;
  /**
   * how much each node keeps of what children were sent (the fork's snapshots as git objects, `.worktreeinclude` files by their digest), so that the next child there sends only what is new; past it the least recently used goes first
   */
  nodeCacheBytes?: number;
}
/**
 * `capabilities.experimental.coven` in `initialize`: what the client does itself. A client that sends this object (even empty) is coven-aware: it renders `coven/event` itself, so it gets no `window/logMessage` lines and no `executeCommandProvider`.
 */
export interface CovenClientCapabilities {
  /**
   * the client answers `coven/requestPermission` (else: `window/showMessageRequest`)
   */
  permissions?: boolean;
  /**
   * the client shows `forkProposed` itself and answers with `coven/decideFork`
   */
  forks?: boolean;
  /**
   * false: no work-done progress for this connection
   */
  progress?: boolean;
  /**
   * the client shows a fork's changes for review itself (`coven/getChanges`, `coven/applyChanges`, `coven/discardChanges`); else it is asked with `window/showMessageRequest`
   */
  review?: boolean;
}
/**
 * `capabilities.experimental.coven` in `initialize`'s result: what the server speaks.
 */
export interface CovenServerCapabilities {
  /**
   * the coven/* protocol's version (2 since `agents` became a list of objects), raised on every breaking change: a client written for another version should say so rather than misread what it is sent
   */
  protocolVersion: number;
  /**
   * the cluster this server may place fork children on (`ray`): a client offers the `placement` choice only when it is set; null (absent from an older server): none is configured, or this coven-ls cannot use the one configured
   */
  cluster?: string | null;
  /**
   * the agents whose binary this server finds for this client (its `claudePath`/`codexPath`, the environment, the bundled wheels, PATH; an ACP agent's command), without running it: which ones a client may offer when it starts a session, and what each can do
   */
  agents?: AgentOffer[] | null;
}
/**
 * An agent a client may start sessions of (`capabilities.experimental.coven.agents`).
 */
export interface AgentOffer {
  /**
   * what `agent` takes: `claude`, `codex`, or an ACP agent's name
   */
  name: string;
  /**
   * what hosts it: Claude Code, Codex's app-server, or an agent that speaks ACP
   */
  kind: 'acp' | 'claude' | 'codex';
  /**
   * how its fork children of the same agent continue their parent's context by default: `inherit` (a native copy of the conversation), `transcript` (an ACP agent without `session/fork`: the conversation written into each child's first prompt; `inherit` is refused); null: not known yet (an ACP agent this server has not started: it is asked when a fork needs it)
   */
  fork: ('inherit' | 'transcript') | null;
  /**
   * whether its turns say what they cost (`costUsd`); null: not known until one of its turns has ended in this server
   */
  cost: boolean | null;
}
/**
 * `coven-ls doctor --json`: the exit code is 0 when `ok`, 1 otherwise.
 */
export interface DoctorReport {
  /**
   * no finding is an `error`
   */
  ok: boolean;
  /**
   * coven-ls's own
   */
  version: string;
  /**
   * one per check, in the order they ran
   */
  findings: Finding[];
}
/**
 * One thing `coven-ls doctor` checked.
 */
export interface Finding {
  /**
   * what was checked: `python`, `packages`, `claude`, `auth`, `claudeSandbox`, `codex`, `codexSandbox`, `acpAgent` (one per ACP agent, named in `title`), `git`, `stateDir`, `database`, `worktreePool`, `cluster` (with `--cluster`: Ray installed, the address answering, its nodes and resources)
   */
  id: string;
  /**
   * `error`: a session cannot run until it is fixed; `warning`: sessions run, something is missing (worktrees, saving)
   */
  status: 'error' | 'ok' | 'warning';
  /**
   * what was checked, for a person
   */
  title: string;
  /**
   * what was found (versions, paths, reasons)
   */
  found: string;
  /**
   * what to do about it, when it is not ok
   */
  fix?: string | null;
}

/**
 * JSON-RPC error codes: -32700 ParseError: the body is not JSON (JSON-RPC); the response's `id` is null; -32600 InvalidRequest: not a JSON-RPC 2.0 request, or a request after `shutdown` (JSON-RPC); -32601 MethodNotFound: no such method (JSON-RPC); `data.method` names it; -32602 InvalidParams: a missing or wrongly typed field, a blank prompt or text, a bad `cwd`; the message names the method and the field, `data.field` the field; -32603 InternalError: a fault in coven-ls itself (JSON-RPC), never an answer to bad input: the message is the exception's, its traceback is in the server's log; please report it; -32800 RequestCancelled: the client withdrew the request with `$/cancelRequest` before it was answered (LSP); -32001 SessionNotFound: no session has that id; `data.sessionId`; -32002 ClaudeUnavailable: no usable agent: no `claude` binary (`data.claudePath` and `data.source` say which and from where), an ACP agent's command not found (`data.agent`, `data.command`), or a stored session's ACP agent no longer configured (`data.agent`, `data.sessionId`); -32003 InvalidState: the session or fork cannot do that now (closed, busy, already decided); `data` has the `sessionId` or `forkId` and its current `status` or `state`; -32004 ForkNotFound: no fork has that id; `data.forkId`; -32005 StoreUnavailable: the session database cannot be used (written by a newer coven-ls, or open in another coven-ls process); `data.path` is the database file, `data.pid` the other process; -32006 Unauthorized: a `--tcp` connection whose first message is not an `initialize` with the server's `initializationOptions.token`; the server closes the connection after this answer
 */
export enum ErrorCode {
  ParseError = -32700,
  InvalidRequest = -32600,
  MethodNotFound = -32601,
  InvalidParams = -32602,
  InternalError = -32603,
  RequestCancelled = -32800,
  SessionNotFound = -32001,
  ClaudeUnavailable = -32002,
  InvalidState = -32003,
  ForkNotFound = -32004,
  StoreUnavailable = -32005,
  Unauthorized = -32006,
}
