// The state model: `coven/event`s, `coven/delta` pieces and `coven/listSessions` entries reduced
// into the tree the sidebar shows (sessions → turns → tool calls → subagents, forks → child
// sessions).
//
// Pure on purpose: no `vscode` import, no timers, no I/O. The extension feeds it what the server
// says and asks it what changed; the tests drive it the same way in plain node.

import type { Changes as ChildChanges, ClusterPlacement, CovenEvent, Delta, ForkLimits, ForkState, PartialBlock, PlanEntry, Sandbox, SessionInfo, SettledStatus, Status, TaskOutcome, Worktree } from './protocol';

/** A status of the protocol, or a newer server's that this client shows as it is. */
export type SessionStatus = Status | (string & {});
/** Where fork children work: a git worktree each, or their parent's own folder. */
export type Isolation = 'worktree' | 'shared';
/** What became of a worktree child's changes (`Changes.merge`). */
export type MergeState = ChildChanges['merge'];
export type { ChildChanges, Worktree };

// --- nodes ---------------------------------------------------------------------------------------

interface NodeBase {
  /** Unique across the whole tree and stable across rebuilds: the TreeItem id. */
  readonly key: string;
  parent: Node | undefined;
  /** Bumped on every change, so a view can cache whatever it derives from the node. */
  version: number;
}

export interface SessionNode extends NodeBase {
  readonly kind: 'session';
  readonly sessionId: string;
  title: string;
  /** The task of a fork child; undefined for top-level sessions. */
  label: string | undefined;
  status: SessionStatus;
  parentId: string | undefined;
  forkId: string | undefined;
  createdAt: string;
  cwd: string | undefined;
  model: string | undefined;
  agentSessionId: string | undefined;
  /** The agent that runs it (`claude`, `codex`); undefined until a listing says. */
  agent: string | undefined;
  /**
   * A branch's (`coven/branch`): its parent's session id and the parent's message it left at
   * (null: the whole conversation). A branch is a session of its own, listed at the top level:
   * `parentId` stays for fork children.
   */
  branchedFrom: { sessionId: string; atMessageId: string | null } | undefined;
  claudeCodeVersion: string | undefined;
  queuedMessages: number;
  costUsd: number;
  /** Tokens of the session's own turns (not its forks': see `treeUsage`). */
  usage: TokenUsage;
  /** How full its context is (its last model request against its model's window); undefined before its first. */
  contextUsage: ContextGauge | undefined;
  /** A queued fork child's place in the line for a slot (1: it starts next). */
  queuePosition: number | undefined;
  /** The model call failed and the CLI tries again (an `apiRetry`), until the model answers. */
  retry: ApiRetry | undefined;
  /** The CLI's background tasks (subagents) of this session that still run. */
  backgroundTasks: number;
  /** Tool calls waiting for the user's Allow / Deny. */
  awaitingPermission: number;
  /** An ACP agent's plan: its latest `plan` event's steps (undefined until it sends one). */
  plan: PlanEntry[] | undefined;
  lastError: string | undefined;
  /** A fork child's: where it works; undefined for top-level sessions (and before a server says). */
  isolation: Isolation | undefined;
  /** A shared child's: why it is not in a worktree of its own. */
  isolationReason: string | undefined;
  /** A worktree child's worktree (its branch, the snapshot it started from, the parent's repository). */
  worktree: Worktree | undefined;
  /** A fork child's: how the operating system holds it (fenced by its agent's sandbox, or why not). */
  sandbox: Sandbox | undefined;
  /** A fork child placed on a cluster: which, and its node once placed (`placed`); undefined for one that runs here. */
  placement: ClusterPlacement | undefined;
  /** A worktree child's changes, once it has ended: its files and what became of them. */
  changes: ChildChanges | undefined;
  /** A fork child with limits: what it has spent so far (its latest `spend` event). */
  spend: Spend | undefined;
  /** When it first started work (ms since the epoch; its time queued does not count): its clock before any `spend`. */
  startedAt: number | undefined;
  /** When it last stopped working (left CLOCK_RUNS), until it works again: where its clock stands still. */
  stoppedAt: number | undefined;
  /** Highest seq applied; everything up to it has been applied, in order. */
  lastSeq: number;
  /**
   * The session's timeline: its turns, and between them its forks (and errors that happened
   * outside a turn). Turns hold their own items, so a streaming turn refreshes only itself.
   */
  readonly items: Array<TurnNode | ForkNode | NoteNode>;
}

export type TurnState = 'running' | 'done' | 'failed' | 'cancelled' | 'interrupted';

/** One turn: the message that started it (a `prompt` event) and what the agent did about it. */
export interface TurnNode extends NodeBase {
  readonly kind: 'turn';
  readonly sessionId: string;
  readonly seq: number;
  /** The message that started the turn. */
  readonly text: string;
  /** "user", "fork" (a child's assignment), "forkResults" (the parent's reintegration turn), … */
  readonly origin: string;
  state: TurnState;
  costUsd: number | undefined;
  durationMs: number | undefined;
  usage: TokenUsage | undefined;
  /** While the model call of this turn is being retried. */
  retry: ApiRetry | undefined;
  readonly children: ItemNode[];
}

export interface TextNode extends NodeBase {
  readonly kind: 'text' | 'thinking';
  readonly sessionId: string;
  /** The event's seq; for a block still streaming, the seq it came after. */
  readonly seq: number;
  /** Grows while the block streams (`coven/delta`); the whole block's event replaces the node. */
  text: string;
  /** The CLI's message uuid: what "Fork from Here" forks at. */
  readonly messageId: string | undefined;
  /** A block still streaming: its pieces so far, no event yet. */
  readonly streaming: boolean;
}

export type SubagentState = 'running' | 'completed' | 'failed' | 'stopped';

/**
 * One of the CLI's background tasks (`task` events): the subagent of an Agent tool call, under
 * that call, holding the subagent's own messages (events with its parentToolUseId).
 */
export interface SubagentNode extends NodeBase {
  readonly kind: 'subagent';
  readonly sessionId: string;
  readonly taskId: string;
  readonly toolUseId: string | undefined;
  /** What the task was started to do (its `started` event's description). */
  description: string;
  state: SubagentState;
  /** What it is doing now, in the CLI's words (a `running` event's description). */
  activity: string | undefined;
  lastToolName: string | undefined;
  totalTokens: number | undefined;
  toolUses: number | undefined;
  durationMs: number | undefined;
  /** How it ended, in the CLI's words. */
  summary: string | undefined;
  readonly children: ItemNode[];
}

/** A session's context (`ContextUsage`): `window` undefined for a model the server's price table does not know. */
export interface ContextGauge {
  tokens: number;
  window: number | undefined;
  model: string | undefined;
}

/** A proposed fork's cost (`ForkEstimate`); `costUsd` and `window` undefined for a model the table does not know. */
export interface ForkCost {
  contextTokens: number;
  window: number | undefined;
  model: string | undefined;
  children: number;
  tokens: number;
  pricedAs: 'cacheRead' | 'input';
  costUsd: number | undefined;
  pricesAsOf: string;
  warning: string | undefined;
  /** What the children start from, as the estimate assumes. */
  context: 'inherit' | 'fresh' | 'transcript';
  /** What children reading the cache write to it as they start (the parent's last answer, their briefs); 0 otherwise. */
  writeTokens: number;
}

export function contextGaugeOf(v: unknown): ContextGauge | undefined {
  if (typeof v !== 'object' || v === null) return undefined;
  const o = v as Record<string, unknown>;
  const tokens = num(o.tokens);
  return tokens === undefined ? undefined : { tokens, window: num(o.window), model: str(o.model) };
}

export function forkCostOf(v: unknown): ForkCost | undefined {
  if (typeof v !== 'object' || v === null) return undefined;
  const o = v as Record<string, unknown>;
  const contextTokens = num(o.contextTokens);
  const children = num(o.children);
  if (contextTokens === undefined || children === undefined) return undefined;
  return {
    contextTokens,
    window: num(o.window),
    model: str(o.model),
    children,
    tokens: num(o.tokens) ?? children * contextTokens,
    pricedAs: o.pricedAs === 'cacheRead' ? 'cacheRead' : 'input',
    costUsd: num(o.costUsd),
    pricesAsOf: str(o.pricesAsOf) ?? '',
    warning: str(o.warning),
    context: o.context === 'fresh' || o.context === 'transcript' ? o.context : 'inherit',
    writeTokens: num(o.writeTokens) ?? 0,
  };
}

/** Tokens, as the server counts them (`Usage`), with every field present. */
export interface TokenUsage {
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  cacheCreationTokens: number;
}

/** What a fork child has spent so far, against its fork's limits (a `spend` event). */
export interface Spend {
  usage: TokenUsage;
  costUsd: number;
  seconds: number;
  /** When the event was sent (ms since the epoch): its `seconds` were spent by then. */
  at: number;
}

export interface ApiRetry {
  attempt: number;
  maxRetries: number;
  retryDelayMs: number;
  errorStatus: number | undefined;
  error: string | undefined;
}

/** What `toolUpdate`s said of a running call: each field as its latest update gave it. */
export interface ToolProgress {
  status?: string;
  title?: string;
  /** The call's output so far. */
  output?: string;
  locations?: { path: string; line?: number }[];
}

export type ToolState = 'running' | 'awaitingPermission' | 'ok' | 'error' | 'denied' | 'interrupted';

export interface ToolNode extends NodeBase {
  readonly kind: 'tool';
  readonly sessionId: string;
  readonly seq: number;
  readonly toolUseId: string;
  readonly name: string;
  readonly input: Record<string, unknown>;
  state: ToolState;
  result: string | undefined;
  /** Why the tool was denied (the message the model got). */
  denial: string | undefined;
  /** An ACP agent's news of the running call (`toolUpdate`s, each field its latest). */
  progress: ToolProgress;
  /**
   * Events of the CLI's own subagent that runs inside this call (parentToolUseId); once the
   * subagent's task is known, that subagent alone, holding them.
   */
  readonly children: ItemNode[];
  /** The background task this call started (an Agent call's subagent). */
  subagent: SubagentNode | undefined;
}

/**
 * The server's word for a fork's state (protocol.md, Fork states), as its fork events and its
 * parent's `SessionInfo.lastFork` say it: never derived here.
 */
export type { ForkState };
export const FORK_STATES: ReadonlySet<string> = new Set<ForkState>(['proposed', 'running', 'reviewing', 'rejected', 'finished', 'interrupted']);
/** A fork in one of these still waits for something (the user, its children, a resume). */
const OPEN_FORK_STATES: ReadonlySet<ForkState> = new Set<ForkState>(['proposed', 'running', 'reviewing', 'interrupted']);

export interface ForkNode extends NodeBase {
  readonly kind: 'fork';
  readonly forkId: string;
  /** The parent session. Empty while the fork is only known from a child's SessionInfo. */
  sessionId: string;
  state: ForkState;
  tasks: string[];
  source: string | undefined;
  atMessageId: string | undefined;
  reason: string | undefined;
  results: TaskOutcome[] | undefined;
  /** The children's tokens, from forkFinished. */
  usage: TokenUsage | undefined;
  /** Where its children work (forkStarted; else what a child's SessionInfo says). */
  isolation: Isolation | undefined;
  /** In shared mode: why the children are not in worktrees ("not a git repository", …). */
  isolationReason: string | undefined;
  /** Why children it would have placed on a cluster run on this machine (the cluster cannot be reached, …). */
  placementReason: string | undefined;
  /** In worktree mode: whether the children's changes are merged at once or wait for review. */
  mergeMode: 'auto' | 'review' | undefined;
  /** In worktree mode: the snapshot commit the children started from. */
  base: string | undefined;
  /** What the children started from when not the parent's conversation natively (`fresh`, `transcript`). */
  context: string | undefined;
  /** The agent the children run when not the parent's (`claude`, `codex`). */
  agent: string | undefined;
  /** What each child, and the whole fork, may spend (forkStarted); undefined: no limit. */
  limits: ForkLimits | undefined;
  /** In worktree mode: what the children's worktrees take on disk (forkFinished). */
  diskBytes: number | undefined;
  /** The children whose changes waited for a decision when the fork began reviewing (forkReviewing). */
  pending: string[];
  /** Child sessions, in the order the fork listed them. */
  readonly children: SessionNode[];
  /** The proposed tasks, shown until the fork starts (or forever, if it was rejected). */
  readonly taskNodes: TaskNode[];
  /** A model's proposal: the parent's context and what the children would pay to read it (forkProposed). */
  estimate: ForkCost | undefined;
  /** Whether it sits in its parent's timeline yet. */
  placed: boolean;
  /** Its parent ended (closed, cancelled, failed) while it was still open: nothing more will come of it. */
  orphaned: boolean;
}

export interface TaskNode extends NodeBase {
  readonly kind: 'task';
  readonly forkId: string;
  readonly index: number;
  readonly text: string;
}

export interface NoteNode extends NodeBase {
  readonly kind: 'note';
  readonly sessionId: string;
  readonly seq: number;
  /** `setup`: a worktree child's environment and setup, rewritten as its output grows. */
  severity: 'error' | 'cancelled' | 'setup' | 'warning';
  text: string;
  detail: string | undefined;
}

/** What a fork child's setup note keeps of its output: its end (the whole is in the events). */
const SETUP_DETAIL_CHARS = 4000;

/** What a turn, a tool call or a subagent holds. */
export type ItemNode = TextNode | ToolNode | NoteNode | SubagentNode;
export type Node = SessionNode | TurnNode | ItemNode | ForkNode | TaskNode;

/**
 * Statuses in which the session is doing something (spinner, counts as running). Not the schema's
 * BusyStatus: `awaitingApproval` waits for the user, which the tree shows differently.
 */
/** The statuses in which a fork child's clock runs (`childSeconds` counts them; not `queued`). */
export const CLOCK_RUNS: ReadonlySet<string> = new Set<Status>(['starting', 'running', 'forking']);
export const BUSY_STATUSES: ReadonlySet<string> = new Set<Status>(['starting', 'running', 'forking', 'queued']);
/**
 * Whether a fork child settled in each status (the schema's SettledStatus: it has stopped working
 * on its task) counts as done in its fork's progress ("2 of 3 done"). A child that a server restart
 * interrupted has stopped, but not finished: coven/resumeFork runs it again. Keyed by the
 * generated union, so a settled status the server adds does not compile until it is decided here.
 */
const SETTLED_DONE: Record<SettledStatus, boolean> = { idle: true, failed: true, cancelled: true, closed: true, interrupted: false };
/** A fork child in one of these has ended: it counts as done in its fork's progress. */
export const ENDED_STATUSES: ReadonlySet<string> = new Set(
  (Object.keys(SETTLED_DONE) as SettledStatus[]).filter((status) => SETTLED_DONE[status]),
);
/** Statuses in which a session takes a message right away (others queue it or refuse it). */
export const MESSAGEABLE_STATUSES: ReadonlySet<string> = new Set<Status>(['idle', 'failed', 'interrupted']);

export interface Gap {
  sessionId: string;
  /** Ask `coven/getEvents` for everything after this seq. */
  afterSeq: number;
}

export interface Changes {
  /** The top level changed (a session appeared or the model was reset): refresh everything. */
  root: boolean;
  /** Changed nodes, none of them a descendant of another (refreshing a node covers its subtree). */
  nodes: Node[];
  /** Sessions whose content changed (for transcripts and the status bar). */
  sessions: SessionNode[];
}

// --- bookkeeping that the tree does not show ---------------------------------------------------

interface SessionRecord {
  node: SessionNode;
  /** Events that arrived ahead of a gap, by seq, waiting for the gap to be filled. */
  pending: Map<number, CovenEvent>;
  tools: Map<string, ToolNode>;
  /** Whether a `status` event has been applied: from then on the event stream owns the status. */
  statusFromEvents: boolean;
  /** Whether a SessionInfo or a forkStarted has said what this session is. */
  known: boolean;
  costFromEvents: number;
  costFromInfo: number;
  pendingPermissions: Set<string>;
  /** The turn events go to, from its prompt to its turnResult. */
  turn: TurnNode | undefined;
  /** Insertion order, to order sessions created in the same millisecond. */
  order: number;
  /** Blocks streaming now (`coven/delta`), by blockId. */
  streams: Map<string, Stream>;
  /** Blocks whose whole event arrived: a late piece of one is not a new stream. */
  finishedBlocks: Set<string>;
  /** Background tasks by taskId. */
  tasks: Map<string, SubagentNode>;
  usageFromEvents: TokenUsage;
  usageFromInfo: TokenUsage;
  backgroundTasksFromInfo: number;
  /** Whether a `changes` event has been applied: from then on events own the child's changes. */
  changesFromEvents: boolean;
}

interface Stream {
  node: TextNode;
  parentToolUseId: string | undefined;
  /** The block belongs after this event: it is placed once the session has it. */
  afterSeq: number;
  /** Where it is shown, once placed. */
  container: TurnNode | ToolNode | SubagentNode | undefined;
}

const str = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
/** An event's `time` in ms since the epoch; now when it has none a clock can read. */
const timeOf = (v: unknown): number => {
  const ms = typeof v === 'string' ? Date.parse(v) : Number.NaN;
  return Number.isFinite(ms) ? ms : Date.now();
};
const obj = (v: unknown): Record<string, unknown> =>
  v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
const strings = (v: unknown): string[] => (Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : []);

export const NO_USAGE: Readonly<TokenUsage> = Object.freeze({ inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheCreationTokens: 0 });

/** A `Usage` from the wire (fields optional, maybe junk) with every field a number. */
export function tokenUsage(v: unknown): TokenUsage | undefined {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return undefined;
  const o = v as Record<string, unknown>;
  const n = (x: unknown): number => (typeof x === 'number' && Number.isFinite(x) && x > 0 ? x : 0);
  return { inputTokens: n(o.inputTokens), outputTokens: n(o.outputTokens), cacheReadTokens: n(o.cacheReadTokens), cacheCreationTokens: n(o.cacheCreationTokens) };
}

const MERGE_STATES: ReadonlySet<string> = new Set<MergeState>(['applied', 'conflict', 'discarded', 'kept', 'pending', 'unchanged']);
const FILE_STATUSES: ReadonlySet<string> = new Set<ChildChanges['files'][number]['status']>(['added', 'deleted', 'modified', 'renamed']);

const isolationOf = (v: unknown): Isolation | undefined => (v === 'worktree' || v === 'shared' ? v : undefined);
const NETWORKS = new Set(['full', 'loopback', 'none']);
function sandboxOf(v: unknown): Sandbox | undefined {
  if (typeof v !== 'object' || v === null || typeof (v as Sandbox).fenced !== 'boolean') return undefined;
  const s = v as Record<string, unknown>;
  return {
    fenced: s.fenced as boolean,
    by: typeof s.by === 'string' ? s.by : null,
    reason: typeof s.reason === 'string' ? s.reason : null,
    network: typeof s.network === 'string' && NETWORKS.has(s.network) ? (s.network as Sandbox['network']) : null,
  };
}
function placementOf(v: unknown): ClusterPlacement | undefined {
  if (typeof v !== 'object' || v === null || typeof (v as ClusterPlacement).cluster !== 'string') return undefined;
  const p = v as Record<string, unknown>;
  return { cluster: p.cluster as string, node: typeof p.node === 'string' ? p.node : null, nodeId: typeof p.nodeId === 'string' ? p.nodeId : null };
}
const count = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) && v > 0 ? v : 0);

/** A `Worktree` from the wire, if it has every field. */
export function worktreeOf(v: unknown): Worktree | undefined {
  const o = obj(v);
  const [path, branch, base, repository] = [str(o.path), str(o.branch), str(o.base), str(o.repository)];
  if (path === undefined || branch === undefined || base === undefined || repository === undefined) return undefined;
  return { path, branch, base, repository };
}

/**
 * A `Changes` from the wire with every field of the right type; undefined without a merge state
 * this client knows (a newer server's is shown as nothing rather than as something it is not).
 */
export function childChanges(v: unknown): ChildChanges | undefined {
  const o = obj(v);
  const merge = str(o.merge);
  if (merge === undefined || !MERGE_STATES.has(merge)) return undefined;
  const files = (Array.isArray(o.files) ? o.files : []).map(obj).flatMap((f) => {
    const path = str(f.path);
    if (path === undefined) return [];
    const status = str(f.status);
    return [{
      path,
      status: status !== undefined && FILE_STATUSES.has(status) ? (status as ChildChanges['files'][number]['status']) : 'modified',
      oldPath: str(f.oldPath) ?? null,
      binary: f.binary === true,
      linesAdded: count(f.linesAdded),
      linesRemoved: count(f.linesRemoved),
    }];
  });
  const conflicts = (Array.isArray(o.conflicts) ? o.conflicts : []).map(obj).flatMap((c) => {
    const path = str(c.path);
    return path === undefined ? [] : [{ path, reason: str(c.reason) ?? '' }];
  });
  return {
    merge: merge as MergeState,
    files,
    linesAdded: count(o.linesAdded),
    linesRemoved: count(o.linesRemoved),
    conflicts,
    commit: str(o.commit) ?? null,
  };
}

export function addUsage(a: TokenUsage, b: TokenUsage | undefined): TokenUsage {
  if (b === undefined) return a;
  return {
    inputTokens: a.inputTokens + b.inputTokens,
    outputTokens: a.outputTokens + b.outputTokens,
    cacheReadTokens: a.cacheReadTokens + b.cacheReadTokens,
    cacheCreationTokens: a.cacheCreationTokens + b.cacheCreationTokens,
  };
}

export function totalTokens(u: TokenUsage): number {
  return u.inputTokens + u.outputTokens + u.cacheReadTokens + u.cacheCreationTokens;
}

/** A session's tokens with everything forked from it (its children, theirs, …). */
export function treeUsage(session: SessionNode): TokenUsage {
  let sum = session.usage;
  for (const item of session.items) {
    if (item.kind !== 'fork') continue;
    for (const child of item.children) sum = addUsage(sum, treeUsage(child));
  }
  return sum;
}

/** What a fork cost in tokens: forkFinished's count, else its children's so far. */
export function forkUsage(fork: ForkNode): TokenUsage {
  return fork.usage ?? fork.children.reduce((sum, child) => addUsage(sum, treeUsage(child)), NO_USAGE);
}

/** Statuses in which no turn runs: pieces of the main agent still streaming there are moot. */
const NO_TURN_STATUSES: ReadonlySet<string> = new Set(['idle', 'awaitingApproval', 'forking', 'queued', 'failed', 'cancelled', 'closed', 'interrupted']);
/** Statuses that mean the CLI process is gone: its subagents and their streams with it. */
const PROCESS_GONE_STATUSES: ReadonlySet<string> = new Set(['failed', 'cancelled', 'closed', 'interrupted']);
const TASK_ENDS: Record<string, SubagentState> = { completed: 'completed', failed: 'failed', stopped: 'stopped' };

export class CovenModel {
  private readonly records = new Map<string, SessionRecord>();
  private readonly forks = new Map<string, ForkNode>();
  // Kept apart so that the sync's per-event "anything to fetch?" does not scan every session
  // (with a persistent server, the list only grows).
  private readonly gapped = new Set<SessionRecord>();
  private readonly unknown = new Set<SessionRecord>();
  private nextOrder = 0;
  private changed = new Set<Node>();
  private changedSessions = new Set<SessionNode>();
  private rootChanged = false;

  // --- input -----------------------------------------------------------------------------------

  /**
   * Applies events in seq order per session, whatever order they arrive in. Duplicates (seq
   * already applied) are dropped; events past a gap wait until `coven/getEvents` fills it.
   * Returns the events actually applied, in the order they were applied.
   */
  ingest(events: Iterable<CovenEvent>): CovenEvent[] {
    const applied: CovenEvent[] = [];
    for (const event of events) {
      const sessionId = str(event.sessionId);
      const seq = num(event.seq);
      if (sessionId === undefined || seq === undefined || !Number.isInteger(seq) || seq < 1) continue;
      if (event.kind === 'deleted') {
        // Not stored, so no getEvents will ever fill in before it: it applies at once, whatever
        // its seq, and the session's other events (pending ones too) go with it.
        this.remove([sessionId, ...strings(event.sessionIds)]);
        applied.push(event);
        continue;
      }
      const rec = this.record(sessionId, str(event.time));
      if (seq <= rec.node.lastSeq) continue;
      if (seq > rec.node.lastSeq + 1) {
        rec.pending.set(seq, event);
        this.gapped.add(rec);
        continue;
      }
      this.apply(rec, event);
      applied.push(event);
      for (let next = rec.pending.get(rec.node.lastSeq + 1); next; next = rec.pending.get(rec.node.lastSeq + 1)) {
        rec.pending.delete(next.seq);
        this.apply(rec, next);
        applied.push(next);
      }
      if (rec.pending.size === 0) this.gapped.delete(rec);
      this.placeStreams(rec);
    }
    return applied;
  }

  /**
   * A `coven/delta`: a piece of a block the model is streaming, appended to the block's text so
   * far. The block shows where its `afterSeq` puts it (once the session has that event), until
   * the block's whole `text`/`thinking` event replaces it or its turn ends without one.
   */
  applyDelta(delta: Delta): void {
    const sessionId = str(delta.sessionId);
    const blockId = str(delta.blockId);
    const text = str(delta.text);
    if (sessionId === undefined || blockId === undefined || text === undefined) return;
    // A session this model has not seen (a reconnect in progress): getEvents' `partial` brings
    // the text so far.
    const rec = this.records.get(sessionId);
    if (rec === undefined || rec.finishedBlocks.has(blockId)) return;
    const stream = this.stream(rec, blockId, delta.kind, str(delta.parentToolUseId), num(delta.afterSeq) ?? rec.node.lastSeq);
    stream.node.text += text;
    if (stream.node.kind === 'text' || stream.parentToolUseId === undefined) this.clearRetry(rec);
    if (stream.container !== undefined) this.touch(stream.node);
    else this.placeStreams(rec);
  }

  /**
   * getEvents' `partial`: the blocks of the session streaming when the server answered, each with
   * its whole text so far (it replaces what pieces said). Blocks the model still has that are not
   * listed ended while this client was not listening (their events, if any, were in the answer).
   * `afterSeq`: the last event of that answer, which the blocks come after.
   */
  applyPartial(sessionId: string, partial: readonly PartialBlock[], afterSeq: number): void {
    const rec = this.records.get(sessionId);
    if (rec === undefined) return;
    const listed = new Set(partial.map((p) => str(p.blockId)));
    for (const blockId of [...rec.streams.keys()]) if (!listed.has(blockId)) this.dropStream(rec, blockId);
    for (const block of partial) {
      const blockId = str(block.blockId);
      if (blockId === undefined || rec.finishedBlocks.has(blockId)) continue;
      const stream = this.stream(rec, blockId, block.kind, str(block.parentToolUseId), afterSeq);
      stream.node.text = str(block.text) ?? '';
      if (stream.container !== undefined) this.touch(stream.node);
    }
    this.placeStreams(rec);
  }

  /** Merges `coven/listSessions` entries: what each session is, and its parent for fork children. */
  applySessions(infos: Iterable<SessionInfo>): void {
    for (const info of infos) {
      const sessionId = str(info.sessionId);
      if (sessionId === undefined) continue;
      const rec = this.record(sessionId, str(info.createdAt));
      const node = rec.node;
      const before = infoSignature(node);
      node.title = str(info.title) ?? node.title;
      node.createdAt = str(info.createdAt) ?? node.createdAt;
      node.cwd = str(info.cwd) ?? node.cwd;
      node.model = str(info.model) ?? node.model;
      node.agentSessionId = str(info.agentSessionId) ?? node.agentSessionId;
      node.agent = str(info.agent) ?? node.agent;
      node.branchedFrom = branchOf(info) ?? node.branchedFrom;
      node.queuedMessages = num(info.queued) ?? node.queuedMessages;
      rec.costFromInfo = num(info.costUsd) ?? rec.costFromInfo;
      rec.usageFromInfo = tokenUsage(info.usage) ?? rec.usageFromInfo;
      node.contextUsage = contextGaugeOf(info.contextUsage) ?? node.contextUsage;
      if (Array.isArray(info.backgroundTasks)) rec.backgroundTasksFromInfo = info.backgroundTasks.length;
      node.isolation = isolationOf(info.isolation) ?? node.isolation;
      node.isolationReason = str(info.isolationReason) ?? node.isolationReason;
      node.worktree = worktreeOf(info.worktree) ?? node.worktree;
      node.sandbox = sandboxOf(info.sandbox) ?? node.sandbox;
      node.placement = placementOf(info.placement) ?? node.placement;
      // A listing may be older than a `changes` event that raced it: events win, as for the status.
      if (!rec.changesFromEvents) node.changes = childChanges(info.changes) ?? node.changes;
      if (!rec.statusFromEvents) {
        if (str(info.status)) node.status = info.status;
        node.queuePosition = num(info.queuePosition) ?? undefined;
      }
      this.refreshCost(rec);
      const parentId = str(info.parentId);
      const forkId = str(info.forkId);
      if (parentId !== undefined && forkId !== undefined) {
        this.adoptChild(rec, parentId, forkId, str(info.label));
        // A fork known only from listings (its forkStarted not fetched yet) still says where its children work.
        const fork = this.forks.get(forkId);
        if (fork !== undefined && fork.isolation === undefined && node.isolation !== undefined) {
          fork.isolation = node.isolation;
          fork.isolationReason ??= node.isolationReason;
          this.touch(fork);
        }
      }
      // The state of the session's latest fork now; its events, once seen, say the same or newer.
      const last = info.lastFork;
      if (last && typeof last === 'object' && str(last.forkId) !== undefined) {
        const fork = this.forkNode(str(last.forkId)!, sessionId);
        if (!fork.placed) this.setState(fork, last.state);
      }
      this.markKnown(rec);
      // listSessions answers for every session; only the ones it tells something new are redrawn.
      if (infoSignature(node) !== before) this.touch(node);
    }
  }

  /** Forgets everything (the server restarted); the caller rebuilds from listSessions + getEvents. */
  reset(): void {
    this.records.clear();
    this.forks.clear();
    this.gapped.clear();
    this.unknown.clear();
    this.changed.clear();
    this.changedSessions.clear();
    this.rootChanged = true;
  }

  /** Drops sessions (a `deleted` event): from the tree, from their forks, with their own forks. */
  private remove(sessionIds: string[]): void {
    for (const sessionId of new Set(sessionIds)) {
      const rec = this.records.get(sessionId);
      if (rec === undefined) continue;
      this.records.delete(sessionId);
      this.gapped.delete(rec);
      this.unknown.delete(rec);
      const node = rec.node;
      if (node.parent?.kind === 'fork') {
        const fork = node.parent;
        const index = fork.children.indexOf(node);
        if (index >= 0) fork.children.splice(index, 1);
        this.touch(fork);
      } else if (rec.known) {
        this.rootChanged = true;
      }
      for (const [forkId, fork] of this.forks) if (fork.sessionId === sessionId) this.forks.delete(forkId);
    }
  }

  // --- what the caller must fetch --------------------------------------------------------------

  /** Sessions with events waiting behind a gap: fetch `coven/getEvents` after `afterSeq`. */
  gaps(): Gap[] {
    return [...this.gapped].map((rec) => ({ sessionId: rec.node.sessionId, afterSeq: rec.node.lastSeq }));
  }

  /** Sessions seen only in events so far: `coven/listSessions` says what they are. */
  unknownSessions(): string[] {
    return [...this.unknown].map((r) => r.node.sessionId);
  }

  // --- output ----------------------------------------------------------------------------------

  /** What changed since the last call, with nodes pruned to the topmost ones. */
  takeChanges(): Changes {
    const root = this.rootChanged;
    const sessions = [...this.changedSessions].filter((s) => this.records.get(s.sessionId)?.node === s);
    const nodes = root ? [] : [...this.changed].filter((n) => this.isVisible(n) && !this.hasChangedAncestor(n));
    this.rootChanged = false;
    this.changed = new Set();
    this.changedSessions = new Set();
    return { root, nodes, sessions };
  }

  /** Top-level sessions, newest first. */
  roots(): SessionNode[] {
    return [...this.records.values()]
      .filter((r) => r.known && r.node.parentId === undefined)
      .sort((a, b) => (a.node.createdAt === b.node.createdAt ? b.order - a.order : a.node.createdAt < b.node.createdAt ? 1 : -1))
      .map((r) => r.node);
  }

  /** What the tree shows under a node (thinking is left to the transcript: it is noise in a tree). */
  children(node: Node | undefined): Node[] {
    if (node === undefined) return this.roots();
    switch (node.kind) {
      case 'session':
        return node.items;
      case 'turn':
      case 'tool':
      case 'subagent':
        return node.children.filter(visibleItem);
      case 'fork':
        return node.state === 'proposed' || node.state === 'rejected' || node.children.length === 0
          ? node.taskNodes
          : node.children;
      default:
        return [];
    }
  }

  session(sessionId: string): SessionNode | undefined {
    const rec = this.records.get(sessionId);
    return rec?.known ? rec.node : undefined;
  }

  sessions(): SessionNode[] {
    return [...this.records.values()].filter((r) => r.known).map((r) => r.node);
  }

  fork(forkId: string): ForkNode | undefined {
    return this.forks.get(forkId);
  }

  /** Forks waiting for the user's decision. */
  proposedForks(): ForkNode[] {
    return [...this.forks.values()].filter((f) => f.state === 'proposed' && f.placed && !f.orphaned);
  }

  /** Forks a server restart cut off, waiting for resumeFork or abandonFork. */
  interruptedForks(): ForkNode[] {
    return [...this.forks.values()].filter((f) => f.state === 'interrupted' && f.placed && !f.orphaned);
  }

  /** Forks whose children's changes wait for the user to apply or discard them. */
  reviewingForks(): ForkNode[] {
    return [...this.forks.values()].filter((f) => f.state === 'reviewing' && f.placed && !f.orphaned);
  }

  /** Fork children whose changes wait for the user's decision (merge `pending`), in every fork. */
  pendingChanges(): SessionNode[] {
    return this.sessions().filter((s) => s.changes?.merge === 'pending');
  }

  /** The CLI's background tasks (subagents) that still run, in every session. */
  runningSubagents(): SubagentNode[] {
    return [...this.records.values()].filter((r) => r.known).flatMap((r) => [...r.tasks.values()].filter((t) => t.state === 'running'));
  }

  /** Running forks, with how many of their children have ended. */
  runningForks(): Array<{ fork: ForkNode; done: number; total: number }> {
    return [...this.forks.values()]
      .filter((f) => f.state === 'running' && f.placed && !f.orphaned)
      .map((fork) => ({ fork, done: endedChildren(fork), total: Math.max(fork.children.length, fork.tasks.length) }));
  }

  /** The session a node belongs to (a fork belongs to its parent session). */
  owningSession(node: Node): SessionNode | undefined {
    for (let n: Node | undefined = node; n; n = n.parent) {
      if (n.kind === 'session') return n;
    }
    return undefined;
  }

  // --- reducing --------------------------------------------------------------------------------

  private record(sessionId: string, time: string | undefined): SessionRecord {
    let rec = this.records.get(sessionId);
    if (rec === undefined) {
      const node: SessionNode = {
        kind: 'session',
        key: sessionId,
        parent: undefined,
        version: 0,
        sessionId,
        title: sessionId,
        label: undefined,
        status: 'starting',
        parentId: undefined,
        forkId: undefined,
        createdAt: time ?? '',
        cwd: undefined,
        model: undefined,
        agentSessionId: undefined,
        agent: undefined,
        branchedFrom: undefined,
        claudeCodeVersion: undefined,
        queuedMessages: 0,
        costUsd: 0,
        usage: NO_USAGE,
        contextUsage: undefined,
        queuePosition: undefined,
        retry: undefined,
        backgroundTasks: 0,
        awaitingPermission: 0,
        plan: undefined,
        lastError: undefined,
        isolation: undefined,
        isolationReason: undefined,
        worktree: undefined,
        sandbox: undefined,
        placement: undefined,
        changes: undefined,
        spend: undefined,
        startedAt: undefined,
        stoppedAt: undefined,
        lastSeq: 0,
        items: [],
      };
      rec = {
        node,
        pending: new Map(),
        tools: new Map(),
        statusFromEvents: false,
        known: false,
        costFromEvents: 0,
        costFromInfo: 0,
        pendingPermissions: new Set(),
        turn: undefined,
        order: this.nextOrder++,
        streams: new Map(),
        finishedBlocks: new Set(),
        tasks: new Map(),
        usageFromEvents: NO_USAGE,
        usageFromInfo: NO_USAGE,
        backgroundTasksFromInfo: 0,
        changesFromEvents: false,
      };
      this.records.set(sessionId, rec);
      this.unknown.add(rec);
    }
    return rec;
  }

  private apply(rec: SessionRecord, e: CovenEvent): void {
    const node = rec.node;
    node.lastSeq = e.seq;
    this.changedSessions.add(node);
    switch (e.kind) {
      case 'status': {
        const works = CLOCK_RUNS.has(str(e.status) ?? '');
        if (works) node.startedAt ??= timeOf(e.time);
        if (works) node.stoppedAt = undefined;
        else if (CLOCK_RUNS.has(node.status)) node.stoppedAt = timeOf(e.time);
        return this.onStatus(rec, str(e.status));
      }
      case 'prompt': {
        const text = str(e.text) ?? '';
        // A session seen only in events gets a readable name until listSessions answers.
        if (!rec.known && node.title === node.sessionId) node.title = firstLine(text);
        this.openTurn(rec, e.seq, text, str(e.origin) ?? 'user');
        return;
      }
      case 'agent':
        node.agentSessionId = str(e.agentSessionId) ?? node.agentSessionId;
        node.model = str(e.model) ?? node.model;
        node.cwd = str(e.cwd) ?? node.cwd;
        node.claudeCodeVersion = str(e.claudeCodeVersion) ?? node.claudeCodeVersion;
        return this.touch(node);
      case 'spend': {
        const usage = tokenUsage(e.usage);
        if (usage === undefined) return;
        node.spend = { usage, costUsd: num(e.costUsd) ?? 0, seconds: num(e.seconds) ?? 0, at: timeOf(e.time) };
        return;
      }
      case 'queuePosition':
        node.queuePosition = num(e.position);
        return this.touch(node);
      case 'text':
      case 'thinking': {
        const parentToolUseId = str(e.parentToolUseId);
        const item: TextNode = {
          kind: e.kind, key: `${node.sessionId}#${e.seq}`, parent: undefined, version: 0,
          sessionId: node.sessionId, seq: e.seq, text: str(e.text) ?? '', messageId: str(e.messageId), streaming: false,
        };
        if (e.kind === 'text' || parentToolUseId === undefined) this.clearRetry(rec);
        // The whole block replaces its pieces, in the place they were shown.
        const stream = this.finishStream(rec, str(e.blockId));
        const container = stream?.container;
        if (container !== undefined && container === this.containerFor(rec, parentToolUseId)) {
          const at = container.children.indexOf(stream!.node);
          if (at >= 0) {
            item.parent = container;
            container.children[at] = item;
            return this.touch(container);
          }
        }
        if (stream !== undefined) this.unplace(stream);
        return this.append(rec, parentToolUseId, item);
      }
      case 'toolUse': {
        const toolUseId = str(e.toolUseId) ?? `${node.sessionId}#${e.seq}`;
        const tool: ToolNode = {
          kind: 'tool', key: `${node.sessionId}#${e.seq}`, parent: undefined, version: 0,
          sessionId: node.sessionId, seq: e.seq, toolUseId, name: str(e.name) ?? 'tool', input: obj(e.input),
          state: 'running', result: undefined, denial: undefined, progress: {}, children: [], subagent: undefined,
        };
        rec.tools.set(toolUseId, tool);
        if (str(e.parentToolUseId) === undefined) this.clearRetry(rec);
        return this.append(rec, str(e.parentToolUseId), tool);
      }
      case 'toolUpdate': {
        const tool = rec.tools.get(str(e.toolUseId) ?? '');
        if (tool === undefined) return;
        const p = tool.progress;
        p.status = str(e.status) ?? p.status;
        p.title = str(e.title) ?? p.title;
        p.output = str(e.content) ?? p.output;
        if (Array.isArray(e.locations)) p.locations = e.locations.map((l) => ({ path: l.path, line: l.line ?? undefined }));
        return this.touch(tool);
      }
      case 'plan': {
        node.plan = Array.isArray(e.entries) ? e.entries.map((x) => ({ ...x })) : [];
        return this.touch(node);
      }
      case 'toolResult': {
        const tool = rec.tools.get(str(e.toolUseId) ?? '');
        if (tool === undefined) return;
        tool.result = str(e.content) ?? '';
        if (tool.state !== 'denied') tool.state = e.isError === true ? 'error' : 'ok';
        return this.touch(tool);
      }
      case 'permissionRequest': {
        const id = str(e.toolUseId) ?? `seq-${e.seq}`;
        rec.pendingPermissions.add(id);
        node.awaitingPermission = rec.pendingPermissions.size;
        const tool = rec.tools.get(id);
        if (tool) {
          tool.state = 'awaitingPermission';
          this.touch(tool);
        }
        return this.touch(node);
      }
      case 'permissionDecision': {
        const id = str(e.toolUseId) ?? '';
        // A decision without an id answers the oldest open request (permissions are asked one at a time).
        const key = rec.pendingPermissions.has(id) ? id : rec.pendingPermissions.values().next().value;
        if (key !== undefined) rec.pendingPermissions.delete(key);
        node.awaitingPermission = rec.pendingPermissions.size;
        const tool = rec.tools.get(id);
        if (tool) {
          if (e.allow === true) {
            if (tool.state === 'awaitingPermission') tool.state = 'running';
          } else {
            tool.state = 'denied';
            tool.denial = str(e.message);
          }
          this.touch(tool);
        }
        return this.touch(node);
      }
      case 'turnResult': {
        const cost = num(e.costUsd) ?? 0;
        const usage = tokenUsage(e.usage);
        // The server keeps costs to 6 decimals: a float sum's last bits could round a shown
        // $0.07225 the other way from listSessions' total.
        rec.costFromEvents = Math.round((rec.costFromEvents + cost) * 1e6) / 1e6;
        rec.usageFromEvents = addUsage(rec.usageFromEvents, usage);
        node.contextUsage = contextGaugeOf(e.contextUsage) ?? node.contextUsage;
        this.refreshCost(rec);
        rec.pendingPermissions.clear();
        node.awaitingPermission = 0;
        this.touch(node);
        this.clearRetry(rec);
        // What the main agent was still streaming got no whole block: the turn cut it off.
        this.dropStreams(rec, (s) => s.parentToolUseId === undefined);
        const turn = rec.turn;
        if (turn !== undefined) {
          turn.costUsd = cost;
          turn.durationMs = num(e.durationMs);
          turn.usage = usage;
        }
        if (e.cancelled === true || e.subtype === 'cancelled') return this.endTurn(rec, 'cancelled');
        if (e.isError === true) {
          const text = str(e.text) ?? '';
          this.append(rec, undefined, note(node, e.seq, 'error', `Turn failed: ${firstLine(text) || str(e.subtype) || 'error'}`, text));
          return this.endTurn(rec, 'failed');
        }
        return this.endTurn(rec, 'done');
      }
      case 'error': {
        const message = str(e.message) ?? 'error';
        node.lastError = message;
        this.clearRetry(rec);
        // The CLI died or could not start: nothing it was streaming will end.
        this.dropStreams(rec, () => true);
        return this.append(rec, undefined, note(node, e.seq, 'error', firstLine(message), message));
      }
      case 'placed': {
        // A child on a cluster has its node: the row says where it runs from now on.
        const where = str(e.node);
        if (where === undefined) return;
        node.placement = { cluster: str(e.cluster) ?? node.placement?.cluster ?? 'cluster', node: where, nodeId: str(e.nodeId) ?? null };
        return this.touch(node);
      }
      case 'modeChanged': {
        // An ACP agent's own mode (its id: `plan`, `default`, `read-only`, …).
        const mode = str(e.mode) ?? '?';
        return this.append(rec, undefined, note(node, e.seq, 'warning', `Mode: ${mode}`, undefined));
      }
      case 'agentRestarted': {
        const reason = str(e.reason) ?? 'its process ended';
        const text = `Agent started again (${num(e.restart) ?? '?'} of ${num(e.maxRestarts) ?? '?'}): ${firstLine(reason)}`;
        return this.append(rec, undefined, note(node, e.seq, 'warning', text, reason));
      }
      case 'apiRetry': {
        const retry: ApiRetry = {
          attempt: num(e.attempt) ?? 0,
          maxRetries: num(e.maxRetries) ?? 0,
          retryDelayMs: num(e.retryDelayMs) ?? 0,
          errorStatus: num(e.errorStatus),
          error: str(e.error),
        };
        node.retry = retry;
        this.touch(node);
        if (rec.turn !== undefined) {
          rec.turn.retry = retry;
          this.touch(rec.turn);
        }
        return;
      }
      case 'task':
        return this.onTask(rec, e);
      case 'forkProposed': {
        const fork = this.forkNode(str(e.forkId) ?? `${node.sessionId}#${e.seq}`, node.sessionId);
        this.setState(fork, e.state);
        this.setTasks(fork, strings(e.tasks));
        fork.estimate = forkCostOf(e.estimate) ?? fork.estimate;
        this.place(rec, fork);
        return this.touch(fork);
      }
      case 'forkRejected': {
        const fork = this.forks.get(str(e.forkId) ?? '');
        if (fork === undefined) return;
        this.setState(fork, e.state);
        fork.reason = str(e.reason);
        return this.touch(fork);
      }
      case 'forkStarted': {
        const fork = this.forkNode(str(e.forkId) ?? `${node.sessionId}#${e.seq}`, node.sessionId);
        this.setState(fork, e.state);
        fork.source = str(e.source);
        fork.atMessageId = str(e.atMessageId);
        fork.isolation = isolationOf(e.isolation) ?? fork.isolation;
        fork.isolationReason = str(e.isolationReason) ?? fork.isolationReason;
        fork.placementReason = str(e.placementReason) ?? fork.placementReason;
        fork.mergeMode = e.mergeMode === 'auto' || e.mergeMode === 'review' ? e.mergeMode : fork.mergeMode;
        fork.base = str(e.base) ?? fork.base;
        fork.context = str(e.context) ?? fork.context;
        fork.agent = str(e.agent) ?? fork.agent;
        fork.limits = forkLimits(e.limits) ?? fork.limits;
        const children = (Array.isArray(e.children) ? e.children : []).map(obj);
        this.setTasks(fork, children.map((c) => str(c.label) ?? ''));
        this.place(rec, fork);
        for (const child of children) {
          const childId = str(child.sessionId);
          if (childId === undefined) continue;
          const childRec = this.record(childId, str(e.time));
          this.adoptChild(childRec, node.sessionId, fork.forkId, str(child.label));
          // The fork says where all its children work; a child's own SessionInfo says the same.
          if (fork.isolation !== undefined && childRec.node.isolation === undefined) {
            childRec.node.isolation = fork.isolation;
            childRec.node.isolationReason ??= fork.isolationReason;
          }
          childRec.node.sandbox = sandboxOf(child.sandbox) ?? childRec.node.sandbox;
          childRec.node.placement = placementOf(child.placement) ?? childRec.node.placement;
          this.markKnown(childRec);
        }
        // The fork lists its children in task order; keep that order whatever arrived first.
        const order = new Map(children.map((c, i) => [str(c.sessionId), i]));
        fork.children.sort((a, b) => (order.get(a.sessionId) ?? 1e9) - (order.get(b.sessionId) ?? 1e9));
        return this.touch(fork);
      }
      case 'forkFinished': {
        const fork = this.forks.get(str(e.forkId) ?? '');
        if (fork === undefined) return;
        fork.results = (Array.isArray(e.results) ? e.results : []).map(obj).map((r) => {
          const merge = str(r.merge);
          const conflicts = childChanges({ merge: 'conflict', conflicts: r.conflicts })?.conflicts ?? [];
          return {
            label: str(r.label) ?? '',
            sessionId: str(r.sessionId) ?? '',
            ok: r.ok === true,
            ...(str(r.error) !== undefined ? { error: str(r.error) } : {}),
            ...(merge !== undefined && MERGE_STATES.has(merge) ? { merge: merge as MergeState } : {}),
            ...(str(r.branch) !== undefined ? { branch: str(r.branch) } : {}),
            ...(conflicts.length > 0 ? { conflicts } : {}),
            ...(r.stopped === 'limit' ? { stopped: 'limit' as const } : {}),
            ...(LIMIT_NAMES.has(str(r.limit) ?? '') ? { limit: r.limit as TaskOutcome['limit'] } : {}),
          };
        });
        this.setState(fork, e.state);
        fork.usage = tokenUsage(e.usage) ?? fork.usage;
        fork.diskBytes = num(e.diskBytes) ?? fork.diskBytes;
        fork.pending = [];
        // A child's row shows what became of its changes: redraw the ones the results speak of.
        for (const child of fork.children) this.touch(child);
        return this.touch(fork);
      }
      case 'forkReviewing': {
        const fork = this.forks.get(str(e.forkId) ?? '');
        if (fork === undefined) return;
        this.setState(fork, e.state);
        fork.pending = strings(e.pending);
        return this.touch(fork);
      }
      case 'forkInterrupted':
      case 'forkResumed': {
        const fork = this.forks.get(str(e.forkId) ?? '');
        if (fork === undefined) return;
        this.setState(fork, e.state);
        return this.touch(fork);
      }
      case 'changes': {
        const changes = childChanges(e.changes);
        if (changes === undefined) return;
        rec.changesFromEvents = true;
        node.changes = changes;
        node.worktree = worktreeOf(e.worktree) ?? node.worktree;
        // Only worktree children have changes, whatever the fork was known to be so far.
        node.isolation = 'worktree';
        this.touch(node);
        // Its fork counts what still waits for review.
        const fork = node.forkId !== undefined ? this.forks.get(node.forkId) : undefined;
        if (fork !== undefined) this.touch(fork);
        return;
      }
      case 'worktreeEnv': {
        // Before the child starts: what was copied in, what it lacks, and the setup that runs next.
        const copied = Array.isArray(e.copied) ? e.copied.filter((c): c is string => typeof c === 'string') : [];
        const notices = Array.isArray(e.notices) ? e.notices.filter((c): c is string => typeof c === 'string') : [];
        // What in the copies now names the child's worktree (a venv's scripts, editable installs).
        const rewritten = Array.isArray(e.rewritten) ? e.rewritten.filter((c): c is string => typeof c === 'string') : [];
        const setup = str(e.setup);
        const parts = [copied.length > 0 ? `copied ${copied.join(', ')}` : '', `port ${num(e.port) ?? '?'}`];
        if (setup !== undefined) parts.push(`setup${str(e.setupFile) ? ` from ${str(e.setupFile)}` : ''}: ${firstLine(setup)}`);
        const detail = [setup ?? '', ...rewritten, ...notices.map((n) => `⚠ ${n}`)].filter((line) => line !== '').join('\n') || undefined;
        this.append(rec, undefined, note(node, e.seq, notices.length > 0 ? 'warning' : 'setup', `Environment: ${parts.filter((p) => p).join(' · ')}`, detail));
        if (setup !== undefined) this.append(rec, undefined, { ...note(node, e.seq, 'setup', 'Worktree setup running…', ''), key: `${node.sessionId}/setup` });
        return;
      }
      case 'setupOutput': {
        const setupNote = node.items.find((i): i is NoteNode => i.kind === 'note' && i.key === `${node.sessionId}/setup`);
        const text = str(e.text);
        if (setupNote === undefined || text === undefined) return;
        setupNote.detail = ((setupNote.detail ?? '') + text).slice(-SETUP_DETAIL_CHARS);
        const lines = setupNote.detail.split('\n').filter((line) => line.trim() !== '');
        setupNote.text = `Worktree setup: ${lines[lines.length - 1] ?? 'running…'}`;
        return this.touch(setupNote);
      }
      case 'setupEnded': {
        const setupNote = node.items.find((i): i is NoteNode => i.kind === 'note' && i.key === `${node.sessionId}/setup`);
        if (setupNote === undefined) return;
        const seconds = ((num(e.durationMs) ?? 0) / 1000).toFixed(1);
        if (e.ok === true) setupNote.text = `Worktree setup done (${seconds} s)`;
        else {
          setupNote.severity = 'error';
          setupNote.text = `Worktree setup failed: ${firstLine(str(e.error) ?? 'error')}`;
          setupNote.detail = str(e.error) ?? setupNote.detail;
        }
        return this.touch(setupNote);
      }
      case 'forkError': {
        // Between turns: the answer with the bad tag has ended, the retry is the next turn.
        const message = str(e.message) ?? 'invalid fork';
        node.items.push({ ...note(node, e.seq, 'error', `Fork not started: ${firstLine(message)}`, message), parent: node });
        return this.touch(node);
      }
      default:
        return; // kinds from a newer server: their seq counts, their content is not ours to show
    }
  }

  private onStatus(rec: SessionRecord, status: string | undefined): void {
    if (status === undefined) return;
    const node = rec.node;
    rec.statusFromEvents = true;
    // The open turn of a queued fork child says it waits (present.ts): redraw it when that changes.
    if (rec.turn !== undefined && (status === 'queued') !== (node.status === 'queued')) this.touch(rec.turn);
    node.status = status;
    if (status !== 'queued') node.queuePosition = undefined;
    if (status !== 'running' && status !== 'starting') this.clearRetry(rec);
    this.touch(node);
    // A turn still open when its session stops will get no turnResult.
    if (status === 'interrupted') this.endTurn(rec, 'interrupted');
    else if (status === 'closed' || status === 'cancelled') this.endTurn(rec, 'cancelled');
    else if (status === 'failed') this.endTurn(rec, 'failed');
    if (PROCESS_GONE_STATUSES.has(status)) {
      // The CLI is gone, and its background tasks with it (the server says so for each, except
      // after a restart of its own).
      for (const sub of rec.tasks.values()) if (sub.state === 'running') this.endSubagent(rec, sub, 'stopped');
      this.dropStreams(rec, () => true);
      for (const tool of rec.tools.values()) {
        if (tool.state === 'running' || tool.state === 'awaitingPermission') {
          tool.state = 'interrupted';
          this.touch(tool);
        }
      }
      this.refreshCost(rec);
    } else if (NO_TURN_STATUSES.has(status)) {
      this.dropStreams(rec, (s) => s.parentToolUseId === undefined);
    }
    // A fork's progress is its children's statuses.
    const fork = node.forkId !== undefined ? this.forks.get(node.forkId) : undefined;
    if (fork !== undefined) this.touch(fork);
    // A parent that ends while its fork is open took the fork down with it: no event will say so.
    // (The fork's state stays the server's; only how it is shown changes.)
    if (status === 'cancelled' || status === 'closed' || status === 'failed') {
      for (const f of this.forks.values()) {
        if (f.sessionId !== node.sessionId || f.orphaned || !OPEN_FORK_STATES.has(f.state)) continue;
        f.orphaned = true;
        this.touch(f);
      }
    }
  }

  private append(rec: SessionRecord, parentToolUseId: string | undefined, item: TextNode | ToolNode | NoteNode): void {
    // Outside a turn only notes belong to the session itself (the CLI died between turns). Agent
    // output there, which the server does not send, gets a turn of its own rather than be lost.
    const container: SessionNode | TurnNode | ToolNode | SubagentNode =
      this.containerFor(rec, parentToolUseId) ?? (item.kind === 'note' ? rec.node : this.openTurn(rec, item.seq, '', 'unprompted'));
    item.parent = container;
    if (container.kind === 'session') container.items.push(item as NoteNode); // only notes get here
    else container.children.push(item);
    this.touch(container);
  }

  private openTurn(rec: SessionRecord, seq: number, text: string, origin: string): TurnNode {
    this.endTurn(rec, 'done');
    const node = rec.node;
    const turn: TurnNode = {
      // Not `#seq` like the items: a turn that no prompt started shares its first item's seq.
      kind: 'turn', key: `${node.sessionId}/turn${seq}`, parent: node, version: 0,
      sessionId: node.sessionId, seq, text, origin,
      state: 'running', costUsd: undefined, durationMs: undefined, usage: undefined, retry: undefined, children: [],
    };
    rec.turn = turn;
    node.items.push(turn);
    this.touch(node);
    return turn;
  }

  /** Closes the open turn: whatever was still running in it will not finish any more. */
  private endTurn(rec: SessionRecord, state: TurnState): void {
    const turn = rec.turn;
    if (turn === undefined) return;
    rec.turn = undefined;
    turn.state = state;
    turn.retry = undefined;
    this.touch(turn);
    // Not the tools of a background subagent: it works on after the turn that started it.
    for (const tool of rec.tools.values()) {
      if ((tool.state === 'running' || tool.state === 'awaitingPermission') && within(tool, turn)) {
        tool.state = 'interrupted';
        this.touch(tool);
      }
    }
  }

  /** Where the events of a subagent (or, without one, of the turn) go. */
  private containerFor(rec: SessionRecord, parentToolUseId: string | undefined): TurnNode | ToolNode | SubagentNode | undefined {
    const tool = parentToolUseId !== undefined ? rec.tools.get(parentToolUseId) : undefined;
    if (tool !== undefined) return tool.subagent ?? tool;
    return rec.turn;
  }

  // --- streamed blocks ---------------------------------------------------------------------------

  private stream(rec: SessionRecord, blockId: string, kind: unknown, parentToolUseId: string | undefined, afterSeq: number): Stream {
    let stream = rec.streams.get(blockId);
    if (stream === undefined) {
      const sessionId = rec.node.sessionId;
      stream = {
        node: {
          kind: kind === 'thinking' ? 'thinking' : 'text', key: `${sessionId}~${blockId}`, parent: undefined, version: 0,
          sessionId, seq: afterSeq, text: '', messageId: undefined, streaming: true,
        },
        parentToolUseId,
        afterSeq,
        container: undefined,
      };
      rec.streams.set(blockId, stream);
    }
    return stream;
  }

  /** Shows the streams whose place has come: the session has the event they follow. */
  private placeStreams(rec: SessionRecord): void {
    if (rec.streams.size === 0) return;
    for (const stream of rec.streams.values()) {
      if (stream.container !== undefined || stream.afterSeq > rec.node.lastSeq) continue;
      // No turn open (the server always opens one first): it waits for one.
      const container = this.containerFor(rec, stream.parentToolUseId);
      if (container === undefined) continue;
      stream.container = container;
      stream.node.parent = container;
      container.children.push(stream.node);
      this.touch(container);
    }
  }

  /** The block's whole event arrived: its stream, if it had one, is over. */
  private finishStream(rec: SessionRecord, blockId: string | undefined): Stream | undefined {
    if (blockId === undefined) return undefined;
    // Only a guard against a piece arriving after its block (the server never sends one): bounded.
    if (rec.finishedBlocks.size > 1000) rec.finishedBlocks.clear();
    rec.finishedBlocks.add(blockId);
    const stream = rec.streams.get(blockId);
    rec.streams.delete(blockId);
    return stream;
  }

  private unplace(stream: Stream): void {
    const container = stream.container;
    if (container === undefined) return;
    stream.container = undefined;
    const at = container.children.indexOf(stream.node);
    if (at >= 0) container.children.splice(at, 1);
    this.touch(container);
  }

  private dropStream(rec: SessionRecord, blockId: string): void {
    const stream = this.finishStream(rec, blockId);
    if (stream !== undefined) this.unplace(stream);
  }

  /** Drops the pieces of blocks that will get no whole event (their turn or agent ended). */
  private dropStreams(rec: SessionRecord, which: (stream: Stream) => boolean): void {
    if (rec.streams.size === 0) return;
    for (const [blockId, stream] of [...rec.streams]) if (which(stream)) this.dropStream(rec, blockId);
  }

  // --- background tasks ----------------------------------------------------------------------------

  private onTask(rec: SessionRecord, e: Extract<CovenEvent, { kind: 'task' }>): void {
    const taskId = str(e.taskId);
    if (taskId === undefined) return;
    const status = str(e.status) ?? 'running';
    const node = rec.node;
    let sub = rec.tasks.get(taskId);
    if (sub === undefined) {
      sub = {
        kind: 'subagent', key: `${node.sessionId}/task:${taskId}`, parent: undefined, version: 0,
        sessionId: node.sessionId, taskId, toolUseId: str(e.toolUseId), description: str(e.description) ?? 'Background task',
        state: 'running', activity: undefined, lastToolName: undefined, totalTokens: undefined, toolUses: undefined,
        durationMs: undefined, summary: undefined, children: [],
      };
      rec.tasks.set(taskId, sub);
      this.placeSubagent(rec, sub);
    } else if (status === 'running') {
      // Progress names what the subagent does now ("Running Search for TODOs"), not its task.
      const description = str(e.description);
      if (description !== undefined && description !== sub.description) sub.activity = description;
    }
    sub.lastToolName = str(e.lastToolName) ?? sub.lastToolName;
    sub.totalTokens = num(e.totalTokens) ?? sub.totalTokens;
    sub.toolUses = num(e.toolUses) ?? sub.toolUses;
    sub.durationMs = num(e.durationMs) ?? sub.durationMs;
    sub.summary = str(e.summary) ?? sub.summary;
    const ended = TASK_ENDS[status];
    if (ended !== undefined) this.endSubagent(rec, sub, ended);
    this.touch(sub);
    this.refreshCost(rec);
  }

  /** Under the tool call that started it, holding what the subagent already said; else in the turn. */
  private placeSubagent(rec: SessionRecord, sub: SubagentNode): void {
    const tool = sub.toolUseId !== undefined ? rec.tools.get(sub.toolUseId) : undefined;
    if (tool !== undefined && tool.subagent === undefined) {
      tool.subagent = sub;
      sub.parent = tool;
      const earlier = tool.children.splice(0);
      for (const item of earlier) item.parent = sub;
      sub.children.push(...earlier);
      tool.children.push(sub);
      for (const stream of rec.streams.values()) if (stream.container === tool) stream.container = sub;
      this.touch(tool);
      return;
    }
    const container = tool ?? rec.turn ?? lastTurn(rec.node);
    if (container === undefined) return;
    sub.parent = container;
    container.children.push(sub);
    this.touch(container);
  }

  private endSubagent(rec: SessionRecord, sub: SubagentNode, state: SubagentState): void {
    sub.state = state;
    this.touch(sub);
    if (sub.toolUseId !== undefined) this.dropStreams(rec, (s) => s.parentToolUseId === sub.toolUseId);
    for (const tool of rec.tools.values()) {
      if ((tool.state === 'running' || tool.state === 'awaitingPermission') && within(tool, sub)) {
        tool.state = 'interrupted';
        this.touch(tool);
      }
    }
  }

  private clearRetry(rec: SessionRecord): void {
    if (rec.node.retry !== undefined) {
      rec.node.retry = undefined;
      this.touch(rec.node);
    }
    const turn = rec.turn;
    if (turn?.retry !== undefined) {
      turn.retry = undefined;
      this.touch(turn);
    }
  }

  /** A fork's state as the server said it (an event's or a listing's `state`); anything else is ignored. */
  private setState(fork: ForkNode, state: unknown): void {
    if (typeof state === 'string' && FORK_STATES.has(state) && state !== fork.state) {
      fork.state = state as ForkState;
      if (!OPEN_FORK_STATES.has(fork.state)) fork.orphaned = false;
      this.touch(fork);
    }
  }

  private forkNode(forkId: string, sessionId: string): ForkNode {
    let fork = this.forks.get(forkId);
    if (fork === undefined) {
      fork = {
        kind: 'fork', key: `fork:${forkId}`, parent: undefined, version: 0,
        forkId, sessionId, state: 'running', tasks: [], source: undefined, atMessageId: undefined,
        reason: undefined, results: undefined, usage: undefined, isolation: undefined, isolationReason: undefined, placementReason: undefined,
        mergeMode: undefined, base: undefined, context: undefined, agent: undefined, limits: undefined, diskBytes: undefined, pending: [], children: [], taskNodes: [], placed: false,
        orphaned: false, estimate: undefined,
      };
      this.forks.set(forkId, fork);
    }
    if (sessionId) fork.sessionId = sessionId;
    return fork;
  }

  private setTasks(fork: ForkNode, tasks: string[]): void {
    fork.tasks = tasks;
    fork.taskNodes.length = 0;
    tasks.forEach((text, index) =>
      fork.taskNodes.push({ kind: 'task', key: `fork:${fork.forkId}/task${index}`, parent: fork, version: 0, forkId: fork.forkId, index, text }),
    );
  }

  /** Puts a fork into its parent's timeline, at the point where the parent announced it. */
  private place(rec: SessionRecord, fork: ForkNode): void {
    if (fork.placed) return;
    fork.placed = true;
    fork.parent = rec.node;
    rec.node.items.push(fork);
    this.touch(rec.node);
  }

  private adoptChild(rec: SessionRecord, parentId: string, forkId: string, label: string | undefined): void {
    const node = rec.node;
    node.parentId = parentId;
    node.forkId = forkId;
    if (label !== undefined) node.label = label;
    const fork = this.forkNode(forkId, parentId);
    if (node.parent !== fork) {
      node.parent = fork;
      fork.children.push(node);
      this.touch(fork);
    }
  }

  private markKnown(rec: SessionRecord): void {
    if (rec.known) return;
    rec.known = true;
    this.unknown.delete(rec);
    if (rec.node.parentId === undefined) this.rootChanged = true;
    else if (rec.node.parent) this.touch(rec.node.parent);
  }

  private refreshCost(rec: SessionRecord): void {
    // Events carry each turn's cost and tokens exactly once; a listSessions total is only a
    // stand-in until the events are in (adding both would count turns twice). The same for the
    // background tasks that run.
    const node = rec.node;
    const fromEvents = node.lastSeq > 0;
    node.costUsd = fromEvents ? rec.costFromEvents : rec.costFromInfo;
    node.usage = fromEvents ? rec.usageFromEvents : rec.usageFromInfo;
    const running = fromEvents ? [...rec.tasks.values()].filter((t) => t.state === 'running').length : rec.backgroundTasksFromInfo;
    if (running !== node.backgroundTasks) {
      node.backgroundTasks = running;
      this.touch(node);
    }
  }

  private touch(node: Node): void {
    node.version++;
    this.changed.add(node);
    const session = node.kind === 'session' ? node : this.owningSession(node);
    if (session) this.changedSessions.add(session);
  }

  private hasChangedAncestor(node: Node): boolean {
    for (let p = node.parent; p; p = p.parent) if (this.changed.has(p)) return true;
    return false;
  }

  /** Whether the tree has (or could have) shown this node: its chain of sessions is known and placed. */
  private isVisible(node: Node): boolean {
    for (let n: Node | undefined = node; n; n = n.parent) {
      if (n.kind === 'session') {
        const rec = this.records.get(n.sessionId);
        if (!rec?.known || rec.node !== n) return false;
        if (n.parentId === undefined) return true;
      }
      if (n.kind === 'fork' && !n.placed) return false;
      if (n.kind === 'thinking') return false;
    }
    return false;
  }
}

/** A listing's branch marker: a parent and a `branchedFrom`, and no fork (that would be a fork child). */
function branchOf(info: SessionInfo): SessionNode['branchedFrom'] {
  const parentId = str(info.parentId);
  const marker = info.branchedFrom;
  if (parentId === undefined || str(info.forkId) !== undefined || !marker || typeof marker !== 'object') return undefined;
  return { sessionId: parentId, atMessageId: str(marker.atMessageId) ?? null };
}

const LIMIT_NAMES: ReadonlySet<string> = new Set(['childTokens', 'childCostUsd', 'childSeconds', 'forkCostUsd']);

/** A fork's limits as forkStarted says them: the positive numbers only (undefined: none). */
function forkLimits(value: unknown): ForkLimits | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const limits: Record<string, number> = {};
  for (const [name, limit] of Object.entries(value)) {
    if (LIMIT_NAMES.has(name) && typeof limit === 'number' && limit > 0) limits[name] = limit;
  }
  return Object.keys(limits).length > 0 ? (limits as ForkLimits) : undefined;
}

function infoSignature(n: SessionNode): string {
  return JSON.stringify([
    n.title, n.label, n.status, n.costUsd, n.queuedMessages, n.model, n.cwd, n.agentSessionId, n.agent, n.branchedFrom, n.createdAt, n.usage, n.queuePosition, n.backgroundTasks,
    n.isolation, n.isolationReason, n.worktree, n.sandbox, n.placement, n.changes, n.contextUsage,
  ]);
}

function visibleItem(node: ItemNode): boolean {
  return node.kind !== 'thinking';
}

/** Whether `node` sits under `ancestor`, not inside a subagent that still runs on its own. */
function within(node: Node, ancestor: Node): boolean {
  for (let p = node.parent; p; p = p.parent) {
    if (p === ancestor) return true;
    if (p.kind === 'subagent' && p.state === 'running') return false;
  }
  return false;
}

function lastTurn(session: SessionNode): TurnNode | undefined {
  for (let i = session.items.length - 1; i >= 0; i--) {
    const item = session.items[i]!;
    if (item.kind === 'turn') return item;
  }
  return undefined;
}

function endedChildren(fork: ForkNode): number {
  return fork.children.filter((c) => ENDED_STATUSES.has(c.status)).length;
}

function note(session: SessionNode, seq: number, severity: NoteNode['severity'], text: string, detail: string | undefined): NoteNode {
  return { kind: 'note', key: `${session.sessionId}#${seq}`, parent: undefined, version: 0, sessionId: session.sessionId, seq, severity, text, detail };
}

export function firstLine(text: string): string {
  const line = text.trim().split('\n', 1)[0] ?? '';
  return line.trim();
}

/**
 * What became of a fork child's changes: its own `changes` (events, listings), else what its
 * fork's results say (a server that sent no `changes` for it); undefined in shared mode.
 */
export function mergeStateOf(child: SessionNode): MergeState | undefined {
  if (child.changes !== undefined) return child.changes.merge;
  const fork = child.parent?.kind === 'fork' ? child.parent : undefined;
  return fork?.results?.find((r) => r.sessionId === child.sessionId)?.merge ?? undefined;
}

/**
 * How a fork child's pending changes come back: `review` when its fork waits for the user (or was
 * started in merge mode review), or when they are later work (a follow-up after its fork ended,
 * which only the user brings back); `auto` when the fork merges them as it ends; undefined while
 * the fork is not known (a child seen in a listing only).
 */
export function mergeModeOf(child: SessionNode): 'auto' | 'review' | undefined {
  const fork = child.parent?.kind === 'fork' ? child.parent : undefined;
  if (fork?.state === 'finished' && child.changes?.merge === 'pending') return 'review';
  return fork?.state === 'reviewing' ? 'review' : fork?.mergeMode;
}

/** Whether a fork child's changes wait for the user: pending, and its fork reviews rather than merges. */
export function awaitsReview(child: SessionNode): boolean {
  return mergeStateOf(child) === 'pending' && mergeModeOf(child) === 'review';
}

/** A reviewing fork's children whose changes still wait: the ones forkReviewing listed, less those decided since. */
export function pendingChildren(fork: ForkNode): SessionNode[] {
  if (fork.state !== 'reviewing') return [];
  return fork.children.filter((c) => (c.changes !== undefined ? c.changes.merge === 'pending' : fork.pending.includes(c.sessionId)));
}

export function forkProgress(fork: ForkNode): { done: number; total: number; failed: number } {
  const total = Math.max(fork.children.length, fork.tasks.length);
  if (fork.results !== undefined) {
    return { done: fork.results.length, total: Math.max(total, fork.results.length), failed: fork.results.filter((r) => !r.ok).length };
  }
  return { done: endedChildren(fork), total, failed: fork.children.filter((c) => c.status === 'failed').length };
}
