// A session as a Markdown document: what "Open Transcript" shows, rebuilt live as events arrive.
// Pure (no `vscode` import); the view side only decides when to re-render.

import { changesDescription, conflictLine, mergeText } from './changes';
import { type CovenModel, type ItemNode, mergeModeOf, mergeStateOf, type NoteNode, type SessionNode, totalTokens, treeUsage } from './model';
import {
  describeToolInput,
  escapeMarkdown,
  fence,
  forkStateText,
  formatCost,
  formatDuration,
  formatTokens,
  formatUsage,
  retryText,
  sessionStatusText,
  truncate,
} from './present';

const NOTE_TITLES: Record<NoteNode['severity'], string> = { error: 'Error', cancelled: 'Cancelled', setup: 'Setup', warning: 'Note' };

const RESULT_LIMIT = 4000;

export function renderTranscript(session: SessionNode, model: CovenModel): string {
  const out: string[] = [];
  const title = session.parentId !== undefined ? (session.label ?? session.title) : session.title;
  out.push(`# ${escapeMarkdown(title)}`, '');
  const facts = [sessionStatusText(session), `session \`${session.sessionId}\``];
  if (session.costUsd > 0) facts.push(formatCost(session.costUsd));
  const tokens = treeUsage(session);
  if (totalTokens(tokens) > 0) facts.push(`tokens: ${formatUsage(tokens, ', ')}`);
  if (session.model) facts.push(escapeMarkdown(session.model));
  out.push(`*${facts.join(' · ')}*`, '');
  if (session.parentId !== undefined) out.push(`Fork child of \`${session.parentId}\`.`, '');
  renderTimeline(session, model, 2, out);
  return out.join('\n').replace(/\n{3,}/g, '\n\n').trimEnd() + '\n';
}

function heading(depth: number, text: string): string {
  return `${'#'.repeat(Math.min(depth, 6))} ${text}`;
}

const TURN_HEADINGS: Record<string, string> = {
  user: 'You',
  fork: 'Assignment',
  forkResults: 'Fork results',
  forkRejected: 'Fork declined',
  forkError: 'Fork tag refused',
  task: 'The agent (a background task ended)',
  unprompted: 'Claude',
};

/** A session's turns, forks and notes, in order; fork children are rendered inline, one level down. */
function renderTimeline(session: SessionNode, model: CovenModel, depth: number, out: string[]): void {
  for (const entry of session.items) {
    switch (entry.kind) {
      case 'turn': {
        out.push(heading(depth, TURN_HEADINGS[entry.origin] ?? entry.origin), '');
        if (entry.text) out.push(...entry.text.split('\n').map((line) => `> ${line}`), '');
        if (entry.children.length > 0 && entry.origin !== 'unprompted') out.push(heading(depth, 'Claude'), '');
        renderItems(entry.children, depth + 1, out);
        if (entry.retry !== undefined) out.push(`*${retryText(entry.retry)}*`, '');
        if (entry.state !== 'done' && entry.state !== 'running') out.push(`*Turn ${entry.state}.*`, '');
        break;
      }
      case 'fork': {
        const count = Math.max(entry.tasks.length, entry.children.length);
        out.push(heading(depth, `⑂ Fork · ${count} ${count === 1 ? 'task' : 'tasks'} — ${forkStateText(entry)}`), '');
        if (entry.children.length === 0) out.push(...entry.tasks.map((t) => `- ${escapeMarkdown(t)}`), '');
        for (const child of entry.children) {
          out.push(heading(depth + 1, `${escapeMarkdown(child.label ?? child.title)} — ${sessionStatusText(child)}`), '');
          renderChanges(child, out);
          renderTimeline(child, model, depth + 2, out);
        }
        break;
      }
      case 'note':
        renderItems([entry], depth, out);
        break;
    }
  }
}

/** A worktree child's changes, one line (and its conflicts): what its work did to the files. */
function renderChanges(child: SessionNode, out: string[]): void {
  const merge = mergeStateOf(child);
  if (merge === undefined) return;
  const branch = child.worktree !== undefined ? ` · branch \`${child.worktree.branch}\`` : '';
  const mode = mergeModeOf(child);
  const words = child.changes !== undefined ? changesDescription(child.changes, mode) : mergeText(merge, mode);
  out.push(`*Changes: ${escapeMarkdown(words)}*${branch}`, '');
  for (const conflict of child.changes?.conflicts ?? []) out.push(`- Conflict: ${escapeMarkdown(conflictLine(conflict))}`);
  out.push('');
}

function renderItems(items: readonly ItemNode[], depth: number, out: string[]): void {
  for (const item of items) {
    switch (item.kind) {
      case 'text':
        // A block still streaming ends with a cursor, so that a reader sees it is not done.
        out.push(item.streaming ? `${item.text}▍` : item.text, '');
        break;
      case 'thinking':
        out.push(...(item.streaming ? `${item.text}▍` : item.text).split('\n').map((line) => `> *${escapeMarkdown(line)}*`), '');
        break;
      case 'subagent': {
        const state = { running: 'running', completed: 'done', failed: 'failed', stopped: 'stopped' }[item.state];
        const stats = [
          item.toolUses !== undefined ? `${item.toolUses} tool ${item.toolUses === 1 ? 'use' : 'uses'}` : '',
          item.totalTokens !== undefined ? `${formatTokens(item.totalTokens)} tokens` : '',
          item.durationMs !== undefined ? formatDuration(item.durationMs) : '',
        ].filter(Boolean);
        out.push(`**Subagent: ${escapeMarkdown(item.description)}** — ${[state, ...stats].join(' · ')}`, '');
        renderItems(item.children, depth, out);
        if (item.summary) out.push(`*${escapeMarkdown(item.summary)}*`, '');
        break;
      }
      case 'tool': {
        const state = { running: 'running', awaitingPermission: 'waiting for permission', ok: 'done', error: 'failed', denied: 'denied', interrupted: 'interrupted' }[item.state];
        out.push(`**${escapeMarkdown(item.name)}** \`${describeToolInput(item.input, 120).replace(/`/g, "'")}\` — ${state}`, '');
        if (item.denial) out.push(`Denied: ${escapeMarkdown(item.denial)}`, '');
        if (item.result !== undefined && item.result !== '') out.push(fence(truncate(item.result, RESULT_LIMIT)), '');
        if (item.children.length > 0) {
          // The CLI's subagent: quoted, so it reads as a conversation inside the call.
          const nested: string[] = [];
          renderItems(item.children, depth + 1, nested);
          // Entries can hold several lines (a fenced result): quote every line.
          out.push(...nested.join('\n').split('\n').map((line) => (line ? `> ${line}` : '>')), '');
        }
        break;
      }
      case 'note':
        out.push(`**${NOTE_TITLES[item.severity]}:** ${escapeMarkdown(item.text)}`, '');
        if (item.detail !== undefined && item.detail !== item.text) out.push(fence(item.detail), '');
        break;
    }
  }
}
