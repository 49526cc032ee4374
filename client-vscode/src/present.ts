// How each node looks: label, description, icon, tooltip, menu key. Pure (no `vscode` import):
// the tree turns these into TreeItems, and the tests check them without an editor.

import {
  BUSY_STATUSES,
  type CovenModel,
  type ForkNode,
  forkProgress,
  firstLine,
  type Node,
  type SessionNode,
  type ToolNode,
  type TurnNode,
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
  unprompted: { icon: 'comment-discussion', description: '', label: 'Claude (no prompt)' },
};

export const STATUS_TEXT: Record<string, string> = {
  queued: 'queued',
  starting: 'starting',
  running: 'running',
  idle: 'done',
  awaitingApproval: 'fork awaiting approval',
  forking: 'forking',
  failed: 'failed',
  cancelled: 'cancelled',
  closed: 'closed',
  interrupted: 'interrupted',
};

export function present(node: Node): Presentation {
  switch (node.kind) {
    case 'session':
      return presentSession(node);
    case 'turn': {
      const look = PROMPT_ORIGINS[node.origin] ?? { icon: 'account', description: node.origin };
      const stateIcons: Partial<Record<TurnNode['state'], Icon>> = {
        running: { id: 'loading~spin' },
        failed: { id: 'error', color: 'testing.iconFailed' },
        cancelled: { id: 'circle-slash' },
        interrupted: { id: 'debug-pause', color: 'charts.orange' },
      };
      const description = [look.description, node.state === 'done' ? '' : node.state].filter(Boolean).join(' · ');
      return {
        label: look.label ?? (firstLine(node.text) || '(empty message)'),
        description,
        tooltip: quote(node.text) + (node.costUsd ? `\n\n${formatCost(node.costUsd)}${node.durationMs ? ` · ${(node.durationMs / 1000).toFixed(1)} s` : ''}` : ''),
        icon: stateIcons[node.state] ?? { id: look.icon },
        contextValue: `turn-${node.state}`,
        // Expandable from the start: VS Code shows a node that gains children after its first
        // render (None → Expanded) collapsed, which would hide a streaming turn.
        collapsible: 'expanded',
        decorated: false,
      };
    }
    case 'text':
    case 'thinking':
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
        icon: node.severity === 'error' ? { id: 'error', color: 'testing.iconFailed' } : { id: 'circle-slash' },
        contextValue: `note-${node.severity}`,
        collapsible: 'none',
        decorated: false,
      };
  }
}

function presentSession(node: SessionNode): Presentation {
  const child = node.parentId !== undefined;
  const parts = [sessionStatusText(node)];
  if (node.queuedMessages > 0) parts.push(`${node.queuedMessages} queued`);
  if (node.costUsd > 0) parts.push(formatCost(node.costUsd));
  const rows: string[] = [
    `**${escapeMarkdown(child ? (node.label ?? node.title) : node.title)}**`,
    '',
    `Status: ${sessionStatusText(node)}`,
    `Session: \`${node.sessionId}\``,
  ];
  if (child) rows.push(`Fork child of \`${node.parentId}\``);
  if (node.model) rows.push(`Model: ${escapeMarkdown(node.model)}`);
  if (node.cwd) rows.push(`Folder: ${escapeMarkdown(node.cwd)}`);
  if (node.costUsd > 0) rows.push(`Cost: ${formatCost(node.costUsd)}`);
  if (node.agentSessionId) rows.push(`Claude Code session: \`${node.agentSessionId}\``);
  if (node.lastError && node.status === 'failed') rows.push('', fence(node.lastError));
  return {
    label: child ? (node.label ?? node.title) : node.title,
    description: parts.join(' · '),
    // Two spaces before a newline: a Markdown line break, so each fact stays on its own line.
    tooltip: rows.join('  \n'),
    icon: sessionIcon(node),
    contextValue: `session-${node.status}-${child ? 'child' : 'top'}`,
    // Fixed from the start, for the same reason as turns (children arrive after the first render).
    collapsible: child ? 'collapsed' : 'expanded',
    decorated: false,
  };
}

export function sessionStatusText(node: SessionNode): string {
  if (node.awaitingPermission > 0) return 'needs permission';
  return STATUS_TEXT[node.status] ?? node.status;
}

export function sessionIcon(node: SessionNode): Icon {
  if (node.awaitingPermission > 0 || node.status === 'awaitingApproval') return { id: 'question', color: 'charts.yellow' };
  if (node.status === 'queued') return { id: 'watch' };
  if (BUSY_STATUSES.has(node.status)) return { id: 'loading~spin' };
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
  if (node.denial) rows.push('', `Denied: ${escapeMarkdown(node.denial)}`);
  if (node.result !== undefined) rows.push('', 'Result:', fence(truncate(node.result, 2000)));
  return {
    label: `${subagent ? '▶ ' : ''}${node.name}`,
    description: describeToolInput(node.input, 80),
    tooltip: rows.join('\n'),
    icon: icons[node.state],
    contextValue: `tool-${node.state}${subagent ? '-subagent' : ''}`,
    collapsible: node.children.some((c) => c.kind !== 'thinking') ? 'collapsed' : 'none',
    decorated: false,
  };
}

export function forkStateText(fork: ForkNode): string {
  const { done, total, failed } = forkProgress(fork);
  switch (fork.state) {
    case 'proposed':
      return 'proposed';
    case 'rejected':
      return fork.reason ? `rejected: ${firstLine(fork.reason)}` : 'rejected';
    case 'running':
      return `running · ${done} of ${total} done`;
    case 'interrupted':
      return `interrupted · ${done} of ${total} done`;
    case 'done':
      return failed > 0 ? `done · ${failed} of ${total} failed` : 'done';
    case 'cancelled':
      return 'cancelled';
  }
}

function presentFork(fork: ForkNode): Presentation {
  const count = Math.max(fork.tasks.length, fork.children.length);
  const rows = [`**Fork** · ${forkStateText(fork)}`, '', ...fork.tasks.map((t, i) => `${i + 1}. ${escapeMarkdown(t)}`)];
  if (fork.source === 'user') rows.push('', 'Started by you.');
  if (fork.state === 'interrupted') rows.push('', 'coven-ls stopped while it ran: resume it (the unfinished children run again) or abandon it (the parent gets what finished).');
  for (const r of fork.results ?? []) {
    if (!r.ok) rows.push('', `${escapeMarkdown(r.label)}: ${escapeMarkdown(r.error ?? 'failed')}`);
  }
  const icon: Icon =
    fork.state === 'proposed' || fork.state === 'interrupted'
      ? { id: 'question', color: 'coven.forkForeground' }
      : fork.state === 'running'
        ? { id: 'loading~spin', color: 'coven.forkForeground' }
        : { id: 'repo-forked', color: 'coven.forkForeground' };
  return {
    label: `⑂ Fork · ${count} ${count === 1 ? 'task' : 'tasks'}`,
    description: forkStateText(fork),
    tooltip: rows.join('  \n'),
    icon,
    contextValue: `fork-${fork.state}`,
    collapsible: count > 0 ? 'expanded' : 'none',
    decorated: true,
  };
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
  // A forking parent is shown by its fork's progress, a queued child is not running yet.
  const running = sessions.filter((s) => s.status === 'running' || s.status === 'starting').length;
  const asking =
    sessions.filter((s) => s.awaitingPermission > 0 || s.status === 'awaitingApproval').length + model.interruptedForks().length;
  const forks = model.runningForks();
  const parts: string[] = [];
  if (running > 0) parts.push(`${running} running`);
  for (const { done, total } of forks) parts.push(`$(repo-forked) ${done}/${total}`);
  if (asking > 0) parts.push(`${asking} waiting for you`);
  const icon = asking > 0 ? '$(question)' : running > 0 ? '$(loading~spin)' : '$(repo-forked)';
  const tooltipParts = [
    `${sessions.length} session${sessions.length === 1 ? '' : 's'}, ${running} running`,
    ...forks.map(({ fork, done, total }) => `fork of ${model.session(fork.sessionId)?.title ?? fork.sessionId}: ${done} of ${total} children done`),
  ];
  if (asking > 0) tooltipParts.push(`${asking} waiting for your decision`);
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

export function formatCost(usd: number): string {
  return usd >= 1 ? `$${usd.toFixed(2)}` : `$${usd.toFixed(4)}`;
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
