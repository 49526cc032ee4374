// Reviewing a worktree child's changes: the multi-file diff editor (base ↔ child, each side a
// virtual document that coven/getChanges fills), and the decisions: apply, discard, and opening
// the files that conflicted. The words and the diff plan come from changes.ts.

import * as vscode from 'vscode';

import { applyOutcome, changesSummary, type DiffEntry, diffPlan, parseSide, shownSides, type SideRef, sideLocation, sideText } from './changes';
import type { SessionNode } from './model';
import { type GetChangesResult, Method } from './protocol';
import type { ServerConnection } from './sync';

export const CHANGES_SCHEME = 'coven-changes';
/** Answers kept for the diff editor's documents: each file is asked for once per side otherwise. */
const CACHE_LIMIT = 200;

export class ChangesReview implements vscode.TextDocumentContentProvider {
  /** coven/getChanges answers by session, file and commit: a commit's files never change. */
  private readonly answers = new Map<string, Promise<GetChangesResult>>();

  constructor(private readonly server: ServerConnection) {}

  async provideTextDocumentContent(uri: vscode.Uri): Promise<string> {
    const ref = parseSide(uri.path, uri.query);
    if (ref === undefined) return '';
    try {
      const result = await this.fileTexts(ref);
      if (result.file === null) return '';
      const status = result.changes.files.find((f) => f.path === ref.path)?.status;
      return sideText(result.file, ref.side, status);
    } catch (error) {
      // Shown in the diff, where the user looks, rather than as an editor error without context.
      return `coven-ls could not give this file's text: ${error instanceof Error ? error.message : String(error)}\n`;
    }
  }

  /** Review Changes: every file the child changed, side by side with the fork's snapshot. */
  async review(session: SessionNode, title: string): Promise<void> {
    const { worktree, changes } = await this.server.request(Method.getChanges, { sessionId: session.sessionId });
    const plan = diffPlan(session.sessionId, changes);
    if (plan.length === 0) {
      void vscode.window.showInformationMessage(`'${title}' changed no files.`);
      return;
    }
    const repository = vscode.Uri.file(worktree.repository);
    const resources = plan.map((entry) => {
      const { base, child } = shownSides(entry);
      return [fileIn(repository, entry), base && sideUri(base), child && sideUri(child)] as const;
    });
    // The editor adds "(N files)" to the title itself.
    const heading = `${title}: +${changes.linesAdded} −${changes.linesRemoved}`;
    if ((await vscode.commands.getCommands(true)).includes('vscode.changes')) {
      await vscode.commands.executeCommand('vscode.changes', heading, resources);
    } else {
      // VS Code before the multi-file diff editor (1.85): one file at a time.
      const picked = plan.length === 1 ? plan[0] : (await vscode.window.showQuickPick(plan.map((entry) => ({ label: entry.path, entry })), { title: heading }))?.entry;
      if (picked === undefined) return;
      await vscode.commands.executeCommand('vscode.diff', sideUri(picked.base), sideUri(picked.child), `${picked.path} (${title})`);
    }
    if (changes.merge === 'pending') void this.offerDecision(session, title, worktree.repository, changesSummary(changes));
  }

  /** Apply Changes: merged into the parent's working tree now, or, if a file clashes, not at all. */
  async apply(session: SessionNode, title: string): Promise<void> {
    const { changes } = await this.server.request(Method.applyChanges, { sessionId: session.sessionId });
    const outcome = applyOutcome(title, changes, session.worktree?.branch);
    if (outcome.ok) {
      void vscode.window.showInformationMessage(outcome.message);
      return;
    }
    const choice = await vscode.window.showWarningMessage(outcome.message, ...(changes.conflicts.length > 0 ? ['Open Conflicting Files'] : []));
    if (choice === 'Open Conflicting Files') await this.openConflicts(session);
  }

  /** Discard Changes: left out of the working tree (they stay on the child's branch); asks first. */
  async discard(session: SessionNode, title: string): Promise<void> {
    const summary = session.changes !== undefined ? ` (${changesSummary(session.changes)})` : '';
    const branch = session.worktree !== undefined ? `the branch ${session.worktree.branch}` : 'its branch';
    const ok = await vscode.window.showWarningMessage(
      `Discard the changes of '${title}'${summary}?`,
      { modal: true, detail: `They are not applied to the working tree; the work stays on ${branch}, and Claude is told.` },
      'Discard',
    );
    if (ok !== 'Discard') return;
    await this.server.request(Method.discardChanges, { sessionId: session.sessionId });
    vscode.window.setStatusBarMessage(`Coven: discarded the changes of '${title}'`, 5000);
  }

  /** Open Conflicting Files: the parent's files that the child's changes clashed with. */
  async openConflicts(session: SessionNode): Promise<void> {
    let conflicts = session.changes?.conflicts ?? [];
    let repository = session.worktree?.repository;
    if (conflicts.length === 0 || repository === undefined) {
      const answer = await this.server.request(Method.getChanges, { sessionId: session.sessionId });
      conflicts = answer.changes.conflicts;
      repository = answer.worktree.repository;
    }
    if (conflicts.length === 0) {
      void vscode.window.showInformationMessage('No file of that child conflicts with the working tree.');
      return;
    }
    const root = vscode.Uri.file(repository);
    const missing: string[] = [];
    for (const [index, conflict] of conflicts.entries()) {
      const uri = vscode.Uri.joinPath(root, ...conflict.path.split('/'));
      // The first one gets the focus; the rest open as tabs beside it.
      await vscode.window.showTextDocument(uri, { preview: false, preserveFocus: index > 0 }).then(undefined, () => missing.push(conflict.path));
    }
    if (missing.length > 0) void vscode.window.showWarningMessage(`Not in the working tree (deleted there?): ${missing.join(', ')}`);
  }

  /** After a look at pending changes, the decision is one click away. */
  private async offerDecision(session: SessionNode, title: string, repository: string, summary: string): Promise<void> {
    const choice = await vscode.window.showInformationMessage(`Apply the changes of '${title}' (${summary}) to ${repository}?`, 'Apply', 'Discard…');
    if (choice === 'Apply') await vscode.commands.executeCommand('coven.applyChanges', session.sessionId);
    else if (choice === 'Discard…') await vscode.commands.executeCommand('coven.discardChanges', session.sessionId);
  }

  private fileTexts(ref: SideRef): Promise<GetChangesResult> {
    const key = JSON.stringify([ref.sessionId, ref.path, ref.commit]);
    let answer = this.answers.get(key);
    if (answer === undefined) {
      if (this.answers.size >= CACHE_LIMIT) this.answers.clear();
      answer = this.server.request(Method.getChanges, { sessionId: ref.sessionId, path: ref.path });
      this.answers.set(key, answer);
      // A failure (server restarting) is not remembered: the next look asks again.
      answer.catch(() => this.answers.delete(key));
    }
    return answer;
  }
}

function sideUri(ref: SideRef): vscode.Uri {
  return vscode.Uri.from({ scheme: CHANGES_SCHEME, ...sideLocation(ref) });
}

/** The file in the parent's repository: what the diff editor names each entry by. */
function fileIn(repository: vscode.Uri, entry: DiffEntry): vscode.Uri {
  return vscode.Uri.joinPath(repository, ...entry.path.split('/'));
}
