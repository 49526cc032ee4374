// How each node looks: label, description, icon, tooltip, menu key. Pure (no `vscode` import):
// the tree turns these into TreeItems, and the tests check them without an editor.

import { changesDescription, conflictLine, fileLine, mergeMeaning, mergeText } from './changes';
import { apiFailures, statusLabels } from './labels.gen';
import type { ClusterPlacement, PlanEntry, Sandbox } from './protocol';
import {
  type ApiRetry,
  type ContextGauge,
  type ForkCost,
  BUSY_STATUSES,
  CLOCK_RUNS,
  type CovenModel,
  type ForkNode,
  forkProgress,
  forkUsage,
  firstLine,
  type MergeState,
  mergeStateOf,
  type Node,
  NO_USAGE,
  type NoteNode,
  type SessionNode,
  type SubagentNode,
  type TextNode,
  type TokenUsage,
  type ToolNode,
  totalTokens,
  treeUsage,
  type TurnNode,
  addUsage,
  awaitsReview,
  mergeModeOf,
  pendingChildren,
} from './model';

export interface Icon {
  /** A codicon id, `~spin` suffix allowed. */
  id: string;
  /** A theme colour id, e.g. `testing.iconPassed`. */
  color?: string;
}

export interface Presentation {
  label: string;
  description: string;
  /** Markdown. */
  tooltip: string;
  icon: Icon;
  /**
   * The `viewItem` of menus: the kind, then its state words, joined by `-` (e.g.
   * `session-idle-top`, `fork-proposed`). package.json's `when` clauses match it with regexes, so
   * menus follow from the data, not from code. (No `=` or `;` in here: with them,
   * `viewItem == fork;state=proposed` matched every row in VS Code 1.139.)
   */
  contextValue: string;
  collapsible: 'none' | 'collapsed' | 'expanded';
  /** Fork nodes get the `coven.forkForeground` colour through a file decoration. */
  decorated: boolean;
}

/** Tools whose calls run one of the CLI's own subagents (their events nest under the call). */
const SUBAGENT_TOOLS = new Set(['Task', 'Agent']);

/** Turns the server started itself (prompt.origin) look different from the user's own. */
const PROMPT_ORIGINS: Record<string, { icon: string; description: string; label?: string }> = {
  user: { icon: 'account', description: '' },
  fork: { icon: 'repo-forked', description: 'assignment' },
  forkResults: { icon: 'git-merge', description: 'reintegration turn', label: 'Fork results' },
  forkRejected: { icon: 'info', description: 'fork declined', label: 'Told Claude the fork was declined' },
  forkError: { icon: 'warning', description: 'fork tag refused', label: 'Told Claude why its fork tag was refused' },
  // The CLI started the turn itself, to tell the model a background task ended; the prompt says
  // which ("Background task completed: Find TODOs").
  task: { icon: 'bell', description: 'from the agent' },
  unprompted: { icon: 'comment-discussion', description: '', label: 'Claude (no prompt)' },
};

/** While the model call is retried: the icon of the session and of its turn. */
const RETRY_ICON: Icon = { id: 'sync~spin', color: 'charts.yellow' };

/** A status in words (coven_ls/protocol/labels.json's, shared with the other clients). */
export const STATUS_TEXT: Readonly<Record<string, string>> = statusLabels;

export function present(node: Node, now: number = Date.now()): Presentation {
  switch (node.kind) {
    case 'session':
      return presentSession(node, now);
    case 'turn': {
      const look = PROMPT_ORIGINS[node.origin] ?? { icon: 'account', description: node.origin };
      const stateIcons: Partial<Record<TurnNode['state'], Icon>> = {
        running: { id: 'loading~spin' },
        failed: { id: 'error', color: 'testing.iconFailed' },
        cancelled: { id: 'circle-slash' },
        interrupted: { id: 'debug-pause', color: 'charts.orange' },
      };
      const thinking = node.state === 'running' && node.children.some((c) => c.kind === 'thinking' && c.streaming);
      // A queued fork child has its assignment already; it runs once it gets a slot.
      const waiting = node.state === 'running' && node.parent?.kind === 'session' && node.parent.status === 'queued';
      const description = [
        look.description,
        node.state === 'done' ? '' : waiting ? 'waiting for a slot' : node.state,
        node.retry !== undefined ? retryText(node.retry) : thinking ? 'thinking…' : '',
      ]
        .filter(Boolean)
        .join(' · ');
      const facts = [
        node.costUsd ? formatCost(node.costUsd) : '',
        node.durationMs ? formatDuration(node.durationMs) : '',
        node.usage !== undefined && totalTokens(node.usage) > 0 ? `Tokens: ${formatUsage(node.usage)}` : '',
      ].filter(Boolean);
      const tooltip = [quote(node.text), node.retry !== undefined ? retryText(node.retry) : '', facts.join(' · ')].filter(Boolean).join('\n\n');
      return {
        label: look.label ?? (firstLine(node.text) || '(empty message)'),
        description,
        tooltip,
        icon: node.retry !== undefined ? RETRY_ICON : waiting ? { id: 'watch' } : (stateIcons[node.state] ?? { id: look.icon }),
        contextValue: `turn-${node.state}`,
        // Expandable from the start: VS Code shows a node that gains children after its first
        // render (None → Expanded) collapsed, which would hide a streaming turn.
        collapsible: 'expanded',
        decorated: false,
      };
    }
    case 'text':
    case 'thinking':
      if (node.streaming) return presentStreaming(node);
      return {
        label: firstLine(node.text) || '…',
        description: '',
        // Model output is Markdown already.
        tooltip: node.text,
        icon: { id: node.kind === 'text' ? 'comment' : 'lightbulb' },
        contextValue: node.messageId !== undefined ? `${node.kind}-forkable` : node.kind,
        collapsible: 'none',
        decorated: false,
      };
    case 'tool':
      return presentTool(node);
    case 'subagent':
      return presentSubagent(node);
    case 'fork':
      return presentFork(node);
    case 'task': {
      const fork = node.parent?.kind === 'fork' ? node.parent : undefined;
      return {
        label: node.text,
        description: fork?.state === 'rejected' ? 'not run' : '',
        tooltip: escapeMarkdown(node.text),
        icon: { id: fork?.state === 'rejected' ? 'circle-slash' : 'circle-outline' },
        contextValue: 'task',
        collapsible: 'none',
        decorated: false,
      };
    }
    case 'note':
      return {
        label: node.text,
        description: '',
        tooltip: node.detail !== undefined ? fence(node.detail) : escapeMarkdown(node.text),
        icon: NOTE_ICONS[node.severity],
        contextValue: `note-${node.severity}`,
        collapsible: 'none',
        decorated: false,
      };
  }
}

const NOTE_ICONS: Record<NoteNode['severity'], Icon> = {
  error: { id: 'error', color: 'testing.iconFailed' },
  cancelled: { id: 'circle-slash' },
  setup: { id: 'tools' },
  warning: { id: 'warning', color: 'list.warningForeground' },
};

/** A block the model is still writing: its latest line, growing. */
function presentStreaming(node: TextNode): Presentation {
  return {
    // Short enough that a sidebar of usual width shows the end, where the text grows.
    label: `${tail(node.text, 60)}▍`,
    description: node.kind === 'thinking' ? 'thinking…' : 'writing…',
    tooltip: node.text,
    icon: { id: node.kind === 'text' ? 'edit' : 'lightbulb' },
    // Nothing to fork from yet: the message has no id until its whole block arrives.
    contextValue: `${node.kind}-streaming`,
    collapsible: 'none',
    decorated: false,
  };
}

const SUBAGENT_STATE_TEXT: Record<SubagentNode['state'], string> = { running: 'running', completed: 'done', failed: 'failed', stopped: 'stopped' };

function presentSubagent(node: SubagentNode): Presentation {
  const stats = subagentStats(node);
  // While it runs, what it does now says more than "running" (the spinner says that).
  const now = node.state === 'running' && node.activity ? node.activity : SUBAGENT_STATE_TEXT[node.state];
  const description = [now, ...stats].join(' · ');
  const rows = [`**Subagent** — ${escapeMarkdown(node.description)}`, '', `Status: ${SUBAGENT_STATE_TEXT[node.state]}`];
  if (node.activity && node.state === 'running') rows.push(`Now: ${escapeMarkdown(node.activity)}`);
  if (node.lastToolName) rows.push(`Last tool: ${escapeMarkdown(node.lastToolName)}`);
  if (stats.length > 0) rows.push(stats.join(' · '));
  if (node.summary) rows.push('', escapeMarkdown(node.summary));
  rows.push('', `Background task \`${node.taskId}\``);
  const icons: Record<SubagentNode['state'], Icon> = {
    running: { id: 'loading~spin' },
    completed: { id: 'pass', color: 'testing.iconPassed' },
    failed: { id: 'error', color: 'testing.iconFailed' },
    stopped: { id: 'debug-stop' },
  };
  return {
    label: node.description,
    description,
    tooltip: rows.join('  \n'),
    icon: icons[node.state],
    contextValue: `subagent-${node.state}`,
    // Expanded from the start: what the subagent says arrives after its first render.
    collapsible: 'expanded',
    decorated: false,
  };
}

function subagentStats(node: SubagentNode): string[] {
  const stats: string[] = [];
  if (node.toolUses !== undefined) stats.push(`${node.toolUses} tool ${node.toolUses === 1 ? 'use' : 'uses'}`);
  if (node.totalTokens !== undefined) stats.push(`${formatTokens(node.totalTokens)} tokens`);
  if (node.durationMs !== undefined) stats.push(formatDuration(node.durationMs));
  return stats;
}

function presentSession(node: SessionNode, now: number): Presentation {
  const child = node.parentId !== undefined;
  const merge = child ? mergeStateOf(node) : undefined;
  const mode = child ? mergeModeOf(node) : undefined;
  const parts = [...agentMarks(node), sessionStatusText(node)];
  if (node.changes !== undefined) parts.push(changesDescription(node.changes, mode));
  else if (merge !== undefined) parts.push(mergeText(merge, mode));
  if (node.retry !== undefined) parts.push(retryText(node.retry));
  if (node.queuedMessages > 0) parts.push(`${node.queuedMessages} queued`);
  if (node.plan !== undefined && node.plan.length > 0) parts.push(planBrief(node.plan));
  if (node.placement !== undefined) parts.push(placementText(node.placement));
  const limits = child ? childLimits(node, now) : [];
  // While it runs against limits, its spend against each (the cost among them) says more.
  if (limits.length > 0 && !SETTLED.has(node.status)) parts.push(...limits.map((l) => l.short));
  else if (node.costUsd > 0) parts.push(formatCost(node.costUsd));
  const rows: string[] = [
    `**${escapeMarkdown(child ? (node.label ?? node.title) : node.title)}**`,
    '',
    `Status: ${sessionStatusText(node)}`,
    `Session: \`${node.sessionId}\``,
  ];
  if (node.retry !== undefined) rows.push(retryText(node.retry));
  if (child) rows.push(`Fork child of \`${node.parentId}\``);
  if (node.branchedFrom !== undefined) rows.push(branchText(node.branchedFrom));
  const agent = agentOf(node);
  if (agent !== undefined) rows.push(`Agent: ${AGENT_NAMES[agent] ?? escapeMarkdown(agent)}`);
  if (node.model) rows.push(`Model: ${escapeMarkdown(node.model)}`);
  if (node.cwd) rows.push(`Folder: ${escapeMarkdown(node.cwd)}`);
  if (node.costUsd > 0) rows.push(`Cost: ${formatCost(node.costUsd)}`);
  if (node.contextUsage !== undefined) rows.push(`Context: ${escapeMarkdown(contextText(node.contextUsage))}`);
  if (totalTokens(node.usage) > 0) rows.push(`Tokens: ${formatUsage(node.usage)}`);
  const tree = treeUsage(node);
  if (totalTokens(tree) > totalTokens(node.usage)) rows.push(`With its forks: ${formatUsage(tree)}`);
  if (node.agentSessionId) rows.push(`${agent === 'codex' ? 'Codex thread' : 'Claude Code session'}: \`${node.agentSessionId}\``);
  if (node.plan !== undefined && node.plan.length > 0) rows.push('', '**Plan:**', ...planRows(node.plan));
  if (limits.length > 0) rows.push('', '**Limits** (spent of what it may spend):', ...limits.map((l) => l.long));
  const stopped = child ? stoppedAt(node) : undefined;
  if (stopped !== undefined) rows.push('', `Stopped: it reached ${LIMIT_TEXT[stopped]} (\`${stopped}\`); its work so far is kept.`);
  if (child) rows.push(...isolationRows(node, merge));
  if (child && node.sandbox !== undefined) rows.push('', escapeMarkdown(sandboxText(node.sandbox)));
  if (node.placement !== undefined) rows.push(escapeMarkdown(placementLine(node.placement)));
  if (node.lastError && node.status === 'failed') rows.push('', fence(node.lastError));
  return {
    label: child ? (node.label ?? node.title) : node.title,
    description: parts.join(' · '),
    // Two spaces before a newline: a Markdown line break, so each fact stays on its own line.
    tooltip: rows.join('  \n'),
    icon: merge === 'conflict' ? CONFLICT_ICON : awaitsReview(node) ? PENDING_ICON : sessionIcon(node),
    contextValue: sessionContext(node, child, merge),
    // Fixed from the start, for the same reason as turns (children arrive after the first render).
    collapsible: child ? 'collapsed' : 'expanded',
    decorated: false,
  };
}

/** How the tree names each agent. */
const AGENT_NAMES: Record<string, string> = { claude: 'Claude Code', codex: 'Codex' };

/**
 * The first words of a session's description: `⎇ branch` for a branch (`coven/branch`), and the
 * agent for any session not Claude's (Claude, the default, goes unmarked so that a tree of Claude
 * sessions reads as before; the tooltip names the agent of every session).
 */
function agentMarks(node: SessionNode): string[] {
  const marks: string[] = [];
  if (node.branchedFrom !== undefined) marks.push('⎇ branch');
  const agent = agentOf(node);
  if (agent !== undefined && agent !== 'claude') marks.push(AGENT_NAMES[agent] ?? agent);
  return marks;
}

/**
 * The session's agent: its listing's, else (a fork child known only from its fork's events) the
 * one its fork started it with (`forkStarted.agent`), else its parent's.
 */
function agentOf(node: SessionNode): string | undefined {
  if (node.agent !== undefined) return node.agent;
  const fork = node.parent?.kind === 'fork' ? node.parent : undefined;
  if (fork?.agent !== undefined) return fork.agent;
  return fork?.parent?.kind === 'session' ? agentOf(fork.parent) : undefined;
}

function branchText(from: NonNullable<SessionNode['branchedFrom']>): string {
  const at = from.atMessageId !== null ? ` at message \`${from.atMessageId}\`` : '';
  return `Branch of \`${from.sessionId}\`${at}: a conversation of its own (its parent never hears of it)`;
}

const SETTLED: ReadonlySet<string> = new Set(['idle', 'failed', 'cancelled', 'closed', 'interrupted']);

const LIMIT_TEXT: Record<string, string> = {
  childTokens: 'its token limit',
  childCostUsd: 'its cost limit',
  childSeconds: 'its time limit',
  forkCostUsd: "its fork's cost limit",
};

/** The limit that stopped a fork child, as its fork's results say. */
function stoppedAt(node: SessionNode): string | undefined {
  const fork = node.parent?.kind === 'fork' ? node.parent : undefined;
  const result = fork?.results?.find((r) => r.sessionId === node.sessionId);
  return result?.stopped === 'limit' ? (result.limit ?? undefined) : undefined;
}

/** A fork child whose row shows a clock that moves: it works, against a time limit (tree.ts redraws it each second). */
export function ticks(node: Node): boolean {
  return node.kind === 'session' && node.parent?.kind === 'fork' && !!node.parent.limits?.childSeconds && CLOCK_RUNS.has(node.status);
}

/**
 * How long a fork child has worked at `now`, in seconds: its latest `spend` event's, and while it
 * works the time since (from its start before any spend), so that its row's clock moves every second.
 */
export function elapsedSeconds(node: SessionNode, now: number): number {
  const spent = node.spend?.seconds ?? 0;
  const since = node.spend?.at ?? node.startedAt;
  if (since === undefined) return spent;
  const until = CLOCK_RUNS.has(node.status) ? now : (node.stoppedAt ?? since);
  return spent + Math.max(0, until - since) / 1000;
}

/**
 * A fork child's spend against each of its fork's limits: `short` for its row ("3.2k/5k tokens"),
 * `long` for its tooltip. Its spend is its latest `spend` event's (else what its turns said); its
 * time goes on at `now` while it works.
 */
export function childLimits(node: SessionNode, now: number = Date.now()): Array<{ short: string; long: string }> {
  const fork = node.parent?.kind === 'fork' ? node.parent : undefined;
  const limits = fork?.limits;
  if (limits === undefined || limits === null) return [];
  const spend = node.spend;
  const tokens = totalTokens(spend?.usage ?? node.usage);
  const cost = spend?.costUsd ?? node.costUsd;
  const shown: Array<{ short: string; long: string }> = [];
  if (limits.childTokens) {
    shown.push({
      short: `${formatTokens(tokens)}/${formatTokens(limits.childTokens)} tokens`,
      long: `Tokens: ${tokens.toLocaleString('en-US')} of ${limits.childTokens.toLocaleString('en-US')}`,
    });
  }
  if (limits.childCostUsd) {
    shown.push({
      short: `${formatCost(cost)}/${formatCost(limits.childCostUsd)}`,
      long: `Cost: ${formatCost(cost)} of ${formatCost(limits.childCostUsd)}`,
    });
  }
  if (limits.childSeconds) {
    const seconds = Math.floor(elapsedSeconds(node, now));
    shown.push({
      short: `${seconds}s/${Math.round(limits.childSeconds)}s`,
      long: `Time: ${seconds} s of ${limits.childSeconds} s`,
    });
  }
  if (limits.forkCostUsd) {
    const forkCost = (fork?.children ?? []).reduce((sum, c) => sum + (c.spend?.costUsd ?? c.costUsd), 0);
    shown.push({
      short: `fork ${formatCost(forkCost)}/${formatCost(limits.forkCostUsd)}`,
      long: `The whole fork: ${formatCost(forkCost)} of ${formatCost(limits.forkCostUsd)}`,
    });
  }
  return shown;
}

/** A child whose changes clashed with the working tree: they were not applied, the user should look. */
const CONFLICT_ICON: Icon = { id: 'warning', color: 'list.warningForeground' };
/** A child whose changes wait for the user's review. */
const PENDING_ICON: Icon = { id: 'diff', color: 'charts.yellow' };

/**
 * `session-<status>-<top|child>`, then for a worktree child `-<merge>`, then `-diff` when it
 * changed files (there is something to review). Menus key on it: Review Changes on `-diff$`,
 * Apply/Discard on `-child-pending`, Open Conflicting Files on `-child-conflict`.
 */
function sessionContext(node: SessionNode, child: boolean, merge: MergeState | undefined): string {
  const parts = ['session', node.status, child ? 'child' : 'top'];
  if (merge !== undefined) parts.push(merge);
  if ((node.changes?.files.length ?? 0) > 0) parts.push('diff');
  return parts.join('-');
}

/** How the operating system holds a fork child: "Fenced by claude (network: full)", "Unfenced: …". */
/** Where a child placed on a cluster runs, in a row's description: `on host-2` (`on ray` until placed). */
export function placementText(placement: ClusterPlacement): string {
  return `on ${placement.node ?? placement.cluster}`;
}

/** The same in a tooltip: which cluster, and the node once it is placed. */
export function placementLine(placement: ClusterPlacement): string {
  return placement.node === null
    ? `Placed on the ${placement.cluster} cluster (waiting for a node)`
    : `Runs on ${placement.node} (${placement.cluster} cluster)`;
}

export function sandboxText(sandbox: Sandbox): string {
  if (sandbox.fenced) {
    const by = sandbox.by ? ` by ${sandbox.by}` : '';
    return `Fenced${by}${sandbox.network ? ` (network: ${sandbox.network})` : ''}`;
  }
  return `Unfenced${sandbox.reason ? `: ${sandbox.reason}` : ''}`;
}

/** A fork child's tooltip lines about where it works and what became of its changes. */
function isolationRows(node: SessionNode, merge: MergeState | undefined): string[] {
  const fork = node.parent?.kind === 'fork' ? node.parent : undefined;
  const isolation = node.isolation ?? fork?.isolation;
  if (isolation === 'shared') {
    const reason = node.isolationReason ?? fork?.isolationReason;
    return ['', `Works in its parent's folder, not a worktree of its own${reason ? `: ${escapeMarkdown(reason)}` : ''}.`];
  }
  const worktree = node.worktree;
  const changes = node.changes;
  const mode = mergeModeOf(node);
  const branch = worktree?.branch ?? fork?.results?.find((r) => r.sessionId === node.sessionId)?.branch ?? undefined;
  if (isolation !== 'worktree' && worktree === undefined && merge === undefined) return [];
  const rows = [''];
  if (changes !== undefined && changes.files.length > 0) rows.push(`**Changes:** ${changesDescription(changes, mode)}`);
  else if (merge !== undefined) rows.push(`**Changes:** ${mergeText(merge, mode)}`);
  else rows.push('Works in a git worktree of its own; its changes are known when it ends.');
  if (merge !== undefined) rows.push(escapeMarkdown(mergeMeaning(merge, worktree?.repository ?? 'the repository', mode)));
  if (branch !== undefined) rows.push(`Branch: \`${branch}\``);
  if (worktree !== undefined) rows.push(`Worktree: ${escapeMarkdown(worktree.path)}`);
  const shown = changes?.files.slice(0, MAX_FILES_SHOWN) ?? [];
  if (shown.length > 0) rows.push('', ...shown.map((f) => `- ${escapeMarkdown(fileLine(f))}`));
  const more = (changes?.files.length ?? 0) - shown.length;
  if (more > 0) rows.push(`- … and ${more} more`);
  const conflicts = changes?.conflicts ?? fork?.results?.find((r) => r.sessionId === node.sessionId)?.conflicts ?? [];
  if (conflicts.length > 0) rows.push('', '**Conflicts:**', ...conflicts.map((c) => `- ${escapeMarkdown(conflictLine(c))}`));
  return rows;
}

/** A tooltip lists this many changed files at most; Review Changes shows them all. */
const MAX_FILES_SHOWN = 15;

export function sessionStatusText(node: SessionNode): string {
  if (node.awaitingPermission > 0) return 'needs permission';
  if (node.status === 'queued' && node.queuePosition !== undefined) {
    return `queued · ${node.queuePosition === 1 ? 'next' : ordinal(node.queuePosition)} in line`;
  }
  // The turn is over, but the CLI's background agents work on (and it will report on them).
  if (node.status === 'idle' && node.backgroundTasks > 0) {
    return `${node.backgroundTasks} ${node.backgroundTasks === 1 ? 'subagent' : 'subagents'} running`;
  }
  // `idle` reads "done" once a turn has ended; before any, nothing was done.
  if (awaitsFirstMessage(node)) return 'idle';
  return STATUS_TEXT[node.status] ?? node.status;
}

/**
 * An idle session that has done nothing yet (no turn, no fork): a branch made without a first
 * message (its copy of the conversation starts with its first message, so its agent has no
 * session id yet).
 */
function awaitsFirstMessage(node: SessionNode): boolean {
  return node.status === 'idle' && node.agentSessionId === undefined && node.items.length === 0;
}

export function sessionIcon(node: SessionNode): Icon {
  if (node.awaitingPermission > 0 || node.status === 'awaitingApproval') return { id: 'question', color: 'charts.yellow' };
  if (node.status === 'reviewing') return PENDING_ICON;
  if (node.retry !== undefined && BUSY_STATUSES.has(node.status)) return RETRY_ICON;
  if (node.status === 'queued') return { id: 'watch' };
  if (BUSY_STATUSES.has(node.status)) return { id: 'loading~spin' };
  if (node.status === 'idle' && node.backgroundTasks > 0) return { id: 'loading~spin' };
  if (awaitsFirstMessage(node)) return { id: 'circle-outline' };
  switch (node.status) {
    case 'idle':
      return { id: 'check', color: 'testing.iconPassed' };
    case 'failed':
      return { id: 'error', color: 'testing.iconFailed' };
    case 'cancelled':
      return { id: 'circle-slash' };
    case 'closed':
      return { id: 'archive' };
    case 'interrupted':
      return { id: 'debug-pause', color: 'charts.orange' };
    default:
      return { id: 'circle-outline' };
  }
}

function presentTool(node: ToolNode): Presentation {
  const subagent = SUBAGENT_TOOLS.has(node.name) || node.children.length > 0;
  const icons: Record<ToolNode['state'], Icon> = {
    running: { id: 'loading~spin' },
    awaitingPermission: { id: 'question', color: 'charts.yellow' },
    ok: { id: 'pass', color: 'testing.iconPassed' },
    error: { id: 'error', color: 'testing.iconFailed' },
    denied: { id: 'circle-slash', color: 'testing.iconFailed' },
    interrupted: { id: 'debug-stop' },
  };
  const stateText: Record<ToolNode['state'], string> = {
    running: 'running',
    awaitingPermission: 'waiting for your permission',
    ok: 'done',
    error: 'failed',
    denied: 'denied',
    interrupted: 'interrupted',
  };
  const rows = [`**${escapeMarkdown(node.name)}** — ${stateText[node.state]}`, '', fence(JSON.stringify(node.input, null, 2), 'json')];
  const progress = node.progress;
  // An ACP agent's news while the call runs; its result replaces the output so far.
  const running = node.result === undefined;
  if (running && progress.title) rows.push('', escapeMarkdown(progress.title));
  if (running && progress.status) rows.push('', `Status: ${escapeMarkdown(progress.status)}`);
  if (progress.locations !== undefined && progress.locations.length > 0) rows.push('', `In: ${progress.locations.map((l) => escapeMarkdown(l.line !== undefined ? `${l.path}:${l.line}` : l.path)).join(', ')}`);
  if (running && progress.output) rows.push('', 'Output so far:', fence(truncate(progress.output, 2000)));
  if (node.denial) rows.push('', `Denied: ${escapeMarkdown(node.denial)}`);
  if (node.result !== undefined) rows.push('', 'Result:', fence(truncate(node.result, 2000)));
  return {
    label: `${subagent ? '▶ ' : ''}${node.name}`,
    description: toolDescription(node),
    tooltip: rows.join('\n'),
    icon: icons[node.state],
    contextValue: `tool-${node.state}${subagent ? '-subagent' : ''}`,
    // A background subagent arrives after the call's first render: its call is open from the start
    // (a node that gains children later would show collapsed). Other calls that hold a subagent's
    // messages start closed.
    collapsible: node.subagent !== undefined || (SUBAGENT_TOOLS.has(node.name) && node.input.run_in_background === true)
      ? 'expanded'
      : node.children.some((c) => c.kind !== 'thinking')
        ? 'collapsed'
        : 'none',
    decorated: false,
  };
}

/** A call's note: an ACP agent's title and status for it while it runs, else its input. */
function toolDescription(node: ToolNode): string {
  const { title, status } = node.progress;
  if (node.result !== undefined || (title === undefined && status === undefined)) return describeToolInput(node.input, 80);
  const text = [title !== undefined ? truncate(firstLine(title), 80) : describeToolInput(node.input, 80), status].filter((x) => x);
  return text.join(' · ');
}

const PLAN_MARKS: Record<PlanEntry['status'], string> = { completed: '[x]', in_progress: '[>]', pending: '[ ]' };

/** A plan in a few words: how far it is, and the step under way. */
export function planBrief(plan: PlanEntry[]): string {
  const done = plan.filter((e) => e.status === 'completed').length;
  const current = plan.find((e) => e.status === 'in_progress');
  return `plan ${done}/${plan.length}${current ? `: ${truncate(firstLine(current.content), 40)}` : ''}`;
}

/** A plan's steps, one row each, marked `[x]` done, `[>]` in progress, `[ ]` pending. */
export function planRows(plan: PlanEntry[]): string[] {
  return plan.map((e) => `${PLAN_MARKS[e.status] ?? '[ ]'} ${escapeMarkdown(e.content)}`);
}

/**
 * How a fork is shown: its state as the server says it, but `cancelled` for one its parent took
 * down while it was open, or whose every child the user stopped.
 */
export function shownForkState(fork: ForkNode): ForkNode['state'] | 'cancelled' {
  if (fork.orphaned) return 'cancelled';
  if (fork.state === 'finished' && fork.children.length > 0 && fork.children.every((c) => c.status === 'cancelled')) return 'cancelled';
  return fork.state;
}

export function forkStateText(fork: ForkNode): string {
  const { done, total, failed } = forkProgress(fork);
  switch (shownForkState(fork)) {
    case 'proposed':
      return 'proposed';
    case 'rejected':
      return fork.reason ? `rejected: ${firstLine(fork.reason)}` : 'rejected';
    case 'running':
      return `running · ${done} of ${total} done`;
    case 'interrupted':
      return `interrupted · ${done} of ${total} done`;
    case 'reviewing': {
      const waiting = pendingChildren(fork).length;
      return `${waiting} ${waiting === 1 ? 'child' : 'children'} to review`;
    }
    case 'finished':
      return failed > 0 ? `done · ${failed} of ${total} failed` : 'done';
    case 'cancelled':
      return 'cancelled';
  }
}

function presentFork(fork: ForkNode): Presentation {
  const count = Math.max(fork.tasks.length, fork.children.length);
  const usage = forkUsage(fork);
  const rows = [`**Fork** · ${forkStateText(fork)}`, '', ...fork.tasks.map((t, i) => `${i + 1}. ${escapeMarkdown(t)}`)];
  if (totalTokens(usage) > 0) rows.push('', `Tokens of its children: ${formatUsage(usage)}`);
  if (fork.source === 'user') rows.push('', 'Started by you.');
  const start = startText(fork);
  if (start) rows.push('', start);
  const isolation = isolationText(fork);
  if (isolation) rows.push('', isolation);
  if (fork.placementReason) rows.push('', `Every child runs on this machine: ${escapeMarkdown(fork.placementReason)}.`);
  if (fork.diskBytes !== undefined) rows.push(`Their worktrees take ${formatBytes(fork.diskBytes)} on disk.`);
  const state = shownForkState(fork);
  if (state === 'interrupted') rows.push('', 'coven-ls stopped while it ran: resume it (the unfinished children run again) or abandon it (the parent gets what finished).');
  if (state === 'reviewing') rows.push('', 'Review each waiting child\'s changes, then apply or discard them; the parent carries on once every child is decided.');
  for (const r of fork.results ?? []) {
    if (!r.ok) rows.push('', `${escapeMarkdown(r.label)}: ${escapeMarkdown(r.error ?? 'failed')}`);
  }
  const icon: Icon =
    state === 'proposed' || state === 'interrupted' || state === 'reviewing'
      ? { id: 'question', color: 'coven.forkForeground' }
      : state === 'running'
        ? { id: 'loading~spin', color: 'coven.forkForeground' }
        : { id: 'repo-forked', color: 'coven.forkForeground' };
  return {
    label: `⑂ Fork · ${count} ${count === 1 ? 'task' : 'tasks'}`,
    description: [forkStateText(fork), mergeTally(fork), totalTokens(usage) > 0 ? `${formatTokens(totalTokens(usage))} tokens` : '']
      .filter(Boolean)
      .join(' · '),
    tooltip: rows.join('  \n'),
    icon,
    contextValue: `fork-${state}`,
    collapsible: count > 0 ? 'expanded' : 'none',
    decorated: true,
  };
}

/** How a fork's children started, for its tooltip, when not the parent's conversation natively. */
export function startText(fork: ForkNode): string {
  if (fork.context === undefined && fork.agent === undefined) return '';
  const who = fork.agent === 'codex' ? 'Codex sessions' : fork.agent === 'claude' ? 'Claude sessions' : 'new sessions';
  const from =
    fork.context === 'fresh'
      ? 'with only their task'
      : "with the parent's conversation written into their first prompt (thinking left out, long tool results and the oldest messages cut)";
  return `The children are ${who} ${from}.`;
}

/** Where a fork's children work and how their changes come back, for its tooltip. */
function isolationText(fork: ForkNode): string {
  if (fork.isolation === 'shared') {
    return `The children share the parent's folder${fork.isolationReason ? `, not worktrees: ${escapeMarkdown(fork.isolationReason)}` : ''}.`;
  }
  if (fork.isolation !== 'worktree') return '';
  const how =
    fork.mergeMode === 'review'
      ? 'their changes wait for your review before they reach the working tree'
      : 'their changes are merged into the working tree when the fork ends';
  return `Each child works in a git worktree of its own${fork.base ? ` from the snapshot \`${fork.base.slice(0, 12)}\`` : ''}; ${how}.`;
}

/** "2 applied · 1 conflict": what became of a finished worktree fork's children's changes. */
function mergeTally(fork: ForkNode): string {
  if (shownForkState(fork) !== 'finished' || fork.isolation === 'shared') return '';
  const counts = new Map<MergeState, number>();
  for (const child of fork.children) {
    const merge = mergeStateOf(child);
    if (merge !== undefined && merge !== 'unchanged') counts.set(merge, (counts.get(merge) ?? 0) + 1);
  }
  return [...counts].map(([merge, n]) => `${n} ${mergeText(merge, fork.mergeMode)}`).join(' · ');
}

// --- the status bar -----------------------------------------------------------------------------

export interface StatusSummary {
  text: string;
  tooltip: string;
  /** Something needs the user (a fork proposal or a permission question). */
  attention: boolean;
}

export function summarize(model: CovenModel): StatusSummary {
  const sessions = model.sessions();
  // What the workspace's sessions cost: each top-level session with everything forked from it.
  const roots = model.roots();
  const tokens = roots.reduce((sum, root) => addUsage(sum, treeUsage(root)), NO_USAGE);
  const cost = sessions.reduce((sum, s) => sum + s.costUsd, 0);
  // A forking parent is shown by its fork's progress, a queued child is not running yet.
  const running = sessions.filter((s) => s.status === 'running' || s.status === 'starting').length;
  const asking =
    sessions.filter((s) => s.awaitingPermission > 0 || s.status === 'awaitingApproval' || s.status === 'reviewing').length +
    model.interruptedForks().length;
  const forks = model.runningForks();
  const parts: string[] = [];
  if (running > 0) parts.push(`${running} running`);
  for (const { done, total } of forks) parts.push(`$(repo-forked) ${done}/${total}`);
  if (asking > 0) parts.push(`${asking} waiting for you`);
  if (totalTokens(tokens) > 0) parts.push(`${formatTokens(totalTokens(tokens))} tokens`);
  if (cost > 0) parts.push(formatCost(cost));
  const icon = asking > 0 ? '$(question)' : running > 0 ? '$(loading~spin)' : '$(repo-forked)';
  const tooltipParts = [
    `${sessions.length} session${sessions.length === 1 ? '' : 's'}, ${running} running`,
    ...forks.map(({ fork, done, total }) => `fork of ${model.session(fork.sessionId)?.title ?? fork.sessionId}: ${done} of ${total} children done`),
  ];
  if (asking > 0) tooltipParts.push(`${asking} waiting for your decision`);
  if (totalTokens(tokens) > 0 || cost > 0) {
    tooltipParts.push(`Tokens of all sessions and their forks: ${formatUsage(tokens)}${cost > 0 ? ` · ${formatCost(cost)}` : ''}`);
  }
  return {
    text: `${icon} Coven${parts.length > 0 ? ': ' + parts.join(' · ') : ''}`,
    tooltip: tooltipParts.join('\n'),
    attention: asking > 0,
  };
}

// --- small text helpers -------------------------------------------------------------------------

/** A one-line summary of what a tool will do (the same keys coven-ls uses for its own prompt). */
export function describeToolInput(input: Record<string, unknown>, limit = 300): string {
  let text: string | undefined;
  for (const key of ['command', 'file_path', 'path', 'url', 'pattern', 'prompt', 'description']) {
    const value = input[key];
    if (typeof value === 'string' && value) {
      text = value;
      break;
    }
  }
  text = (text ?? JSON.stringify(input)).split(/\s+/).join(' ').trim();
  return truncate(text, limit);
}

/** A session's context: "170k / 200k tokens (85%)", or the tokens alone and why. */
export function contextText(c: ContextGauge): string {
  if (c.window !== undefined && c.window > 0) {
    return `${formatTokens(c.tokens)} / ${formatTokens(c.window)} tokens (${Math.floor((c.tokens * 100) / c.window)}%)`;
  }
  return `${formatTokens(c.tokens)} tokens (window unknown: ${c.model ?? 'the model'} is not in the table)`;
}

/** Past this share of its window a context is nearly full (the server warns on a fork past it too). */
export const CONTEXT_WARN_FRACTION = 0.8;

export function contextNearlyFull(c: ContextGauge): boolean {
  return c.window !== undefined && c.tokens > CONTEXT_WARN_FRACTION * c.window;
}

/**
 * A proposed fork's context and cost, a line each: "Context: 170k / 200k tokens (85%)", "Fork cost: 2 × 170k = 340k
 * tokens read from the cache + 620 written to it ≈ $0.10 (prices of 2026-11-26)" and, past 80% of the window, the
 * warning.
 */
export function forkCostLines(e: ForkCost): string[] {
  const how = e.pricedAs === 'cacheRead' ? 'read from the cache' : 'at the full input price';
  const cost =
    e.costUsd !== undefined
      ? `≈ ${estimateCost(e.costUsd)} (prices of ${e.pricesAsOf})`
      : `(cost unknown: ${e.model ?? 'the model'} is not in coven-ls's price table)`;
  // Fresh children read their briefs, transcript ones the conversation after its cuts.
  const read = e.context === 'inherit' ? `${e.children} × ${formatTokens(e.contextTokens)}` : `${e.children} ${e.context} ${e.children === 1 ? 'child' : 'children'}`;
  const written = e.writeTokens > 0 ? ` + ${formatTokens(e.writeTokens)} written to it` : '';
  const lines = [
    `Context: ${contextText({ tokens: e.contextTokens, window: e.window, model: e.model })}`,
    `Fork cost: ${read} = ${formatTokens(e.tokens)} tokens ${how}${written} ${cost}`,
  ];
  if (e.warning !== undefined) lines.push(`⚠ Warning: ${e.warning}`);
  return lines;
}

/** The status bar item of the selected session's context; undefined hides it (no session, or no request yet). */
export function contextStatus(session: SessionNode | undefined): { text: string; tooltip: string; warning: boolean } | undefined {
  const c = session?.contextUsage;
  if (session === undefined || c === undefined) return undefined;
  const share = c.window ? ` ${Math.floor((c.tokens * 100) / c.window)}%` : '';
  return {
    text: `$(dashboard) ${formatTokens(c.tokens)}${c.window ? ` / ${formatTokens(c.window)}` : ''}${share}`,
    tooltip: `Context of '${session.label ?? session.title}': ${contextText(c)}${c.model ? ` · ${c.model}` : ''}`,
    warning: contextNearlyFull(c),
  };
}

/** An estimate in dollars: to the cent, and below a cent to a hundredth of one (not "$0.00"). */
export function estimateCost(usd: number): string {
  return usd >= 0.01 ? `$${usd.toFixed(2)}` : `$${usd.toFixed(4)}`;
}

export function formatCost(usd: number): string {
  return usd >= 1 ? `$${usd.toFixed(2)}` : `$${usd.toFixed(4)}`;
}

/** 950, 4.5k, 12.3k, 412k, 1.2M: three significant digits at most. */
export function formatTokens(n: number): string {
  const trim = (x: number, digits: number): string => x.toFixed(digits).replace(/\.0+$/, '');
  if (n < 1000) return String(Math.round(n));
  if (n < 100_000) return `${trim(n / 1000, 1)}k`;
  if (n < 999_500) return `${Math.round(n / 1000)}k`;
  return `${trim(n / 1_000_000, 1)}M`;
}

/** "12.3k in · 4.5k out · 41.2k cached · 2.2k cache write" (empty cache parts left out). */
export function formatUsage(u: TokenUsage, separator = ' · '): string {
  const parts = [`${formatTokens(u.inputTokens)} in`, `${formatTokens(u.outputTokens)} out`];
  if (u.cacheReadTokens > 0) parts.push(`${formatTokens(u.cacheReadTokens)} cached`);
  if (u.cacheCreationTokens > 0) parts.push(`${formatTokens(u.cacheCreationTokens)} cache write`);
  return parts.join(separator);
}

/** "API overloaded — retrying in 4 s (3/10)". */
export function retryText(retry: ApiRetry): string {
  const status = retry.errorStatus;
  const what =
    status !== undefined && apiFailures[status] !== undefined
      ? apiFailures[status]
      : status !== undefined && status >= 500 && status < 600
          ? `API server error (${status})`
          : retry.error
            ? firstLine(retry.error)
            : status !== undefined
              ? `API error ${status}`
              : 'API error';
  const seconds = retry.retryDelayMs / 1000;
  const delay = seconds < 10 ? String(Number(seconds.toFixed(1))) : String(Math.round(seconds));
  const count = retry.maxRetries > 0 ? ` (${retry.attempt}/${retry.maxRetries})` : '';
  return `${what} — retrying in ${delay} s${count}`;
}

/** 950 B, 12.3 kB, 1.8 MB, 2.1 GB (decimal units, as file managers show sizes). */
export function formatBytes(bytes: number): string {
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit++;
  }
  return unit === 0 ? `${Math.round(value)} B` : `${value < 10 ? value.toFixed(1) : Math.round(value)} ${units[unit]}`;
}

export function formatDuration(ms: number): string {
  const seconds = ms / 1000;
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  const minutes = Math.floor(seconds / 60);
  return `${minutes} min ${Math.round(seconds - minutes * 60)} s`;
}

export function ordinal(n: number): string {
  const teen = n % 100 >= 11 && n % 100 <= 13;
  const suffix = teen ? 'th' : ({ 1: 'st', 2: 'nd', 3: 'rd' } as Record<number, string>)[n % 10] ?? 'th';
  return `${n}${suffix}`;
}

/** The end of a growing text on one line, at most `limit` characters (cut at the front). */
export function tail(text: string, limit: number): string {
  const flat = text.split(/\s+/).join(' ').trim();
  return flat.length <= limit ? flat : '…' + flat.slice(flat.length - limit + 1).trimStart();
}

export function truncate(text: string, limit: number): string {
  return text.length <= limit ? text : text.slice(0, limit - 1) + '…';
}

/** Escapes what changes the meaning of inline Markdown; text is never at a line start here. */
export function escapeMarkdown(text: string): string {
  return text.replace(/[\\`*_[\]<>|]/g, '\\$&');
}

function quote(text: string): string {
  return text
    .split('\n')
    .map((line) => '> ' + escapeMarkdown(line))
    .join('\n');
}

export function fence(text: string, lang = ''): string {
  // A fence longer than any backtick run inside the text cannot be closed by it.
  const longest = Math.max(2, ...(text.match(/`+/g) ?? []).map((m) => m.length));
  const ticks = '`'.repeat(longest + 1);
  return `${ticks}${lang}\n${text}\n${ticks}`;
}
