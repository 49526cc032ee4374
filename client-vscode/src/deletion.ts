// Deleting a session without losing work (protocol.md, coven/deleteSession): the server keeps
// every fork branch that holds work never applied unless asked to discard it. Before a deletion
// the user is asked which, when the tree shows such work; afterwards, told which branches were
// kept. Free of `vscode`, so that it is unit-tested in plain node.

import type { SessionNode } from './model';
import type { KeptBranch, ParamsOf } from './protocol';

/** Merge states whose work never reached the parent's working tree. */
const UNAPPLIED = new Set(['pending', 'conflict', 'kept']);

/** The session and the fork children under it whose changes were never applied, as far as the
 * client knows (the server also keeps later work it has not reported yet). */
export function unappliedWork(session: SessionNode): SessionNode[] {
  const found: SessionNode[] = [];
  const visit = (node: SessionNode) => {
    if (node.changes && UNAPPLIED.has(node.changes.merge)) found.push(node);
    for (const item of node.items) {
      if (item.kind === 'fork') for (const child of item.children) visit(child);
    }
  };
  visit(session);
  return found;
}

export const KEEP_WORK = 'Keep Their Branches';
export const DISCARD_WORK = 'Discard the Work';

/** The second, modal question, asked when the subtree holds unapplied work. */
export function discardQuestion(unapplied: SessionNode[]): { message: string; detail: string; choices: string[] } {
  const what: Record<string, string> = { pending: 'waiting for review', conflict: 'conflicted', kept: 'never applied' };
  const list = unapplied
    .map((s) => `${s.label ?? s.title} (${what[s.changes?.merge ?? ''] ?? 'never applied'})`)
    .join(', ');
  const n = unapplied.length;
  return {
    message: `${n} fork ${n === 1 ? 'child holds' : 'children hold'} work never applied: ${list}. Keep ${n === 1 ? 'its branch' : 'their branches'}, or discard the work?`,
    detail:
      'Kept branches stay in the repository (coven/…) for you to merge or cherry-pick; `coven-ls prune --discard-work` deletes them later. Discarded work is gone.',
    choices: [KEEP_WORK, DISCARD_WORK],
  };
}

/** The deleteSession request for the user's answers; undefined when they dismissed a question. */
export function deleteParams(
  sessionId: string,
  purge: boolean,
  workChoice: string | undefined,
  asked: boolean,
): ParamsOf<'coven/deleteSession'> | undefined {
  if (asked && workChoice !== KEEP_WORK && workChoice !== DISCARD_WORK) return undefined;
  return { sessionId, purge, discardWork: asked && workChoice === DISCARD_WORK };
}

/** What to tell the user about the branches the server kept, if any. */
export function keptMessage(kept: KeptBranch[] | undefined): string | undefined {
  if (!kept || kept.length === 0) return undefined;
  const names = kept.map((k) => `${k.branch} (${k.label}: ${k.reason})`).join('; ');
  return `Kept ${kept.length} ${kept.length === 1 ? 'branch' : 'branches'} with work never applied: ${names}. \`coven-ls prune --discard-work\` deletes them.`;
}
