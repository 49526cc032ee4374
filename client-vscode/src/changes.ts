// A worktree child's changes in words, and as a plan for a diff view. Pure (no `vscode` import):
// present.ts and the transcript use the words, review.ts turns the plan into VS Code's multi-file
// diff editor, and the tests check both in plain node.

import type { ChildChanges, MergeState } from './model';
import type { ChangedFile, ConflictFile, FileText } from './protocol';

/**
 * How a child's pending changes come back: `review`, the user decides (the fork waits for it);
 * `auto`, they are merged when the whole fork has ended; undefined when not known (yet).
 */
export type MergeMode = 'auto' | 'review' | undefined;

const MERGE_TEXT: Record<MergeState, string> = {
  applied: 'applied',
  conflict: 'conflict',
  pending: 'pending',
  discarded: 'discarded',
  kept: 'kept',
  unchanged: 'unchanged',
};

/** A merge state as a tree row says it: "applied", "pending review", "not merged yet", … */
export function mergeText(merge: MergeState, mode: MergeMode): string {
  if (merge === 'pending' && mode === 'review') return 'pending review';
  if (merge === 'pending' && mode === 'auto') return 'not merged yet';
  return MERGE_TEXT[merge];
}

/** A merge state as a tooltip explains it: where the child's work is now (plain text). */
export function mergeMeaning(merge: MergeState, repository: string, mode: MergeMode): string {
  switch (merge) {
    case 'applied':
      return `Merged into the working tree of ${repository}, as uncommitted changes.`;
    case 'conflict':
      return 'Not applied: it clashes with what the working tree has. None of it was written; the work stays on its branch.';
    case 'pending':
      return mode === 'review'
        ? `Waiting for your review: apply it to ${repository}, or discard it.`
        : mode === 'auto'
          ? `Not merged yet: it is merged into ${repository} when the whole fork has ended (or apply or discard it now).`
          : `Not brought back yet: apply it to ${repository}, or discard it.`;
    case 'discarded':
      return 'Discarded: left out of the working tree. The work stays on its branch.';
    case 'kept':
      return 'Not merged, because the task did not finish. Its partial work stays on its branch.';
    case 'unchanged':
      return 'It changed no files.';
  }
}

/** "+12 −3 · 4 files" (the minus is U+2212, as the server writes it). */
export function changesSummary(changes: Pick<ChildChanges, 'files' | 'linesAdded' | 'linesRemoved'>): string {
  const n = changes.files.length;
  return `+${changes.linesAdded} −${changes.linesRemoved} · ${n} ${n === 1 ? 'file' : 'files'}`;
}

/** A tree row's words for a child's changes: "+12 −3 · 4 files · pending review", or just "unchanged". */
export function changesDescription(changes: ChildChanges, mode: MergeMode): string {
  if (changes.files.length === 0) return mergeText(changes.merge, mode);
  return `${changesSummary(changes)} · ${mergeText(changes.merge, mode)}`;
}

/** "docs/guide.md (modified, +40 −2)", "src/new.py ← src/old.py (renamed, +1 −1)", "logo.png (added, binary)". */
export function fileLine(file: ChangedFile): string {
  const name = file.status === 'renamed' && file.oldPath ? `${file.path} ← ${file.oldPath}` : file.path;
  const lines = file.binary ? 'binary' : `+${file.linesAdded} −${file.linesRemoved}`;
  return `${name} (${file.status}, ${lines})`;
}

/** "src/app.py (changed on the same lines in the working tree and by the child)". */
export function conflictLine(conflict: ConflictFile): string {
  return conflict.reason ? `${conflict.path} (${conflict.reason})` : conflict.path;
}

// --- the diff view ------------------------------------------------------------------------------

export type Side = 'base' | 'child';

/** One side of one file in the diff: what the content provider is asked for. */
export interface SideRef {
  sessionId: string;
  /** The file as coven/getChanges names it (a path of `changes.files`). */
  path: string;
  side: Side;
  /** The child's commit: a new commit (a follow-up turn) is a new document, never a stale cached one. */
  commit: string;
  /**
   * The path the side is shown under: the old path on the base side of a rename, so that the
   * editor shows the rename (it infers one from differing paths), else `path`.
   */
  shownPath: string;
}

/** A file of the diff view: where it lives in the parent's repository, and its two sides. */
export interface DiffEntry {
  /** Relative to the repository's top, with `/` separators. */
  path: string;
  status: ChangedFile['status'];
  base: SideRef;
  child: SideRef;
}

/**
 * The sides the multi-file diff editor gets: none for the base of an added file and for the
 * child's side of a deleted one, which it then shows as added or deleted (rather than as a diff
 * against an empty text).
 */
export function shownSides(entry: DiffEntry): { base: SideRef | undefined; child: SideRef | undefined } {
  return { base: entry.status === 'added' ? undefined : entry.base, child: entry.status === 'deleted' ? undefined : entry.child };
}

/** The diff view of a child's changes: every file it changed, base (the fork's snapshot) ↔ child. */
export function diffPlan(sessionId: string, changes: ChildChanges): DiffEntry[] {
  const commit = changes.commit ?? '';
  return changes.files.map((file) => ({
    path: file.path,
    status: file.status,
    base: { sessionId, path: file.path, side: 'base', commit, shownPath: file.oldPath ?? file.path },
    child: { sessionId, path: file.path, side: 'child', commit, shownPath: file.path },
  }));
}

/** A side as a URI's path and query (the scheme is the caller's); `parseSide` reads it back. */
export function sideLocation(ref: SideRef): { path: string; query: string } {
  const query = new URLSearchParams({ session: ref.sessionId, file: ref.path, side: ref.side, commit: ref.commit });
  return { path: `/${ref.shownPath.replace(/^\/+/, '')}`, query: query.toString() };
}

export function parseSide(path: string, query: string): SideRef | undefined {
  const q = new URLSearchParams(query);
  const [sessionId, file, side, commit] = [q.get('session'), q.get('file'), q.get('side'), q.get('commit')];
  if (!sessionId || !file || (side !== 'base' && side !== 'child')) return undefined;
  return { sessionId, path: file, side, commit: commit ?? '', shownPath: path.replace(/^\/+/, '') };
}

/**
 * A side's text for the diff editor: the file's text there, empty where it does not exist (the
 * base of an added file, the child's side of a deleted one), and a line saying so for a binary
 * file, whose texts the server does not send.
 */
export function sideText(file: FileText, side: Side, status: ChangedFile['status'] | undefined): string {
  if (file.binary) {
    if (side === 'base') return status === 'added' ? '' : 'Binary file: its contents are not shown.\n';
    return status === 'deleted' ? '' : 'Binary file, changed by the child: its contents are not shown.\n';
  }
  return (side === 'base' ? file.base : file.child) ?? '';
}

// --- deciding -----------------------------------------------------------------------------------

/** What to tell the user after coven/applyChanges: the changes were merged, or which files clashed. */
export function applyOutcome(title: string, changes: ChildChanges, branch: string | undefined): { ok: boolean; message: string } {
  if (changes.merge === 'applied') return { ok: true, message: `Applied the changes of '${title}' (${changesSummary(changes)}).` };
  if (changes.merge === 'conflict') {
    const files = changes.conflicts.map(conflictLine);
    const where = branch !== undefined ? ` on the branch ${branch}` : ' on its branch';
    return {
      ok: false,
      message:
        `The changes of '${title}' were not applied: ${files.length === 1 ? 'this file conflicts' : `${files.length} files conflict`} ` +
        `with the working tree: ${files.join('; ')}. Nothing was written; the work stays${where}.`,
    };
  }
  return { ok: false, message: `The changes of '${title}' are ${mergeText(changes.merge, undefined)}.` };
}
