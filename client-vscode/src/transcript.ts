// A session as a Markdown document: what "Open Transcript" shows, rebuilt live as events arrive.
// Pure (no `vscode` import); the view side only decides when to re-render.

import type { CovenModel, ItemNode, SessionNode } from './model';
import { describeToolInput, escapeMarkdown, fence, forkStateText, formatCost, sessionStatusText, truncate } from './present';

const RESULT_LIMIT = 4000;

export function renderTranscript(session: SessionNode, model: CovenModel): string {
  const out: string[] = [];
  const title = session.parentId !== undefined ? (session.label ?? session.title) : session.title;
  out.push(`# ${escapeMarkdown(title)}`, '');
  const facts = [sessionStatusText(session), `session \`${session.sessionId}\``];
  if (session.costUsd > 0) facts.push(formatCost(session.costUsd));
  if (session.model) facts.push(escapeMarkdown(session.model));
  out.push(`*${facts.join(' · ')}*`, '');
  if (session.parentId !== undefined) out.push(`Fork child of \`${session.parentId}\`.`, '');
  renderItems(session.items, model, 2, out);
  return out.join('\n').replace(/\n{3,}/g, '\n\n').trimEnd() + '\n';
}

function renderItems(items: readonly ItemNode[], model: CovenModel, depth: number, out: string[]): void {
  // Consecutive assistant blocks read as one answer: label the speaker only when it changes.
  let speaker: 'user' | 'assistant' | undefined;
  const say = (who: 'user' | 'assistant', heading: string): void => {
    if (speaker !== who) out.push(`${'#'.repeat(Math.min(depth, 6))} ${heading}`, '');
    speaker = who;
  };
  for (const item of items) {
    switch (item.kind) {
      case 'prompt': {
        const heading = item.origin === 'forkResults' ? 'Fork results' : item.origin === 'fork' ? 'Assignment' : 'You';
        speaker = undefined;
        say('user', heading);
        out.push(...item.text.split('\n').map((line) => `> ${line}`), '');
        speaker = 'user';
        break;
      }
      case 'text':
        say('assistant', 'Claude');
        out.push(item.text, '');
        break;
      case 'thinking':
        say('assistant', 'Claude');
        out.push(...item.text.split('\n').map((line) => `> *${escapeMarkdown(line)}*`), '');
        break;
      case 'tool': {
        say('assistant', 'Claude');
        const state = { running: 'running', awaitingPermission: 'waiting for permission', ok: 'done', error: 'failed', denied: 'denied', interrupted: 'interrupted' }[item.state];
        out.push(`**${escapeMarkdown(item.name)}** \`${describeToolInput(item.input, 120).replace(/`/g, "'")}\` — ${state}`, '');
        if (item.denial) out.push(`Denied: ${escapeMarkdown(item.denial)}`, '');
        if (item.result !== undefined && item.result !== '') out.push(fence(truncate(item.result, RESULT_LIMIT)), '');
        if (item.children.length > 0) {
          const nested: string[] = [];
          renderItems(item.children, model, depth + 1, nested);
          out.push(...nested.map((line) => (line ? `> ${line}` : '>')), '');
        }
        break;
      }
      case 'fork': {
        speaker = undefined;
        const count = Math.max(item.tasks.length, item.children.length);
        out.push(`${'#'.repeat(Math.min(depth, 6))} ⑂ Fork · ${count} ${count === 1 ? 'task' : 'tasks'} — ${forkStateText(item)}`, '');
        if (item.children.length === 0) {
          out.push(...item.tasks.map((t) => `- ${escapeMarkdown(t)}`), '');
        }
        for (const child of item.children) {
          out.push(`${'#'.repeat(Math.min(depth + 1, 6))} ${escapeMarkdown(child.label ?? child.title)} — ${sessionStatusText(child)}`, '');
          renderItems(child.items, model, depth + 2, out);
        }
        break;
      }
      case 'note':
        speaker = undefined;
        out.push(`**${item.severity === 'error' ? 'Error' : 'Cancelled'}:** ${escapeMarkdown(item.text)}`, '');
        if (item.detail !== undefined && item.detail !== item.text) out.push(fence(item.detail), '');
        break;
    }
  }
}
