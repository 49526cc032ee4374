// "Open Transcript": a read-only Markdown document per session (a virtual document in its own
// scheme), re-rendered while the session runs.

import * as vscode from 'vscode';

import type { Changes, CovenModel, SessionNode } from './model';
import { renderTranscript } from './transcript';

export const TRANSCRIPT_SCHEME = 'coven-transcript';
/** Re-rendering a long transcript on every tree flush would be wasted work nobody can read that fast. */
const REFRESH_MS = 300;

export class Transcripts implements vscode.TextDocumentContentProvider, vscode.Disposable {
  private readonly emitter = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.emitter.event;
  private readonly dirty = new Set<string>();
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(private readonly model: CovenModel) {}

  uriFor(session: SessionNode): vscode.Uri {
    const name = (session.parentId !== undefined ? (session.label ?? session.title) : session.title)
      .replace(/[^\p{L}\p{N}._ -]+/gu, ' ')
      .trim()
      .slice(0, 60) || session.sessionId;
    // The .md suffix makes it a Markdown document (highlighting, preview) with no extra wiring.
    return vscode.Uri.from({ scheme: TRANSCRIPT_SCHEME, path: `/${session.sessionId}/${name}.md` });
  }

  async open(session: SessionNode): Promise<void> {
    const doc = await vscode.workspace.openTextDocument(this.uriFor(session));
    await vscode.window.showTextDocument(doc, { preview: false });
  }

  provideTextDocumentContent(uri: vscode.Uri): string {
    const sessionId = uri.path.split('/')[1] ?? '';
    const session = this.model.session(sessionId);
    if (session === undefined) {
      return `# ${sessionId}\n\ncoven-ls does not know this session (the server restarted, and sessions do not outlive it).\n`;
    }
    return renderTranscript(session, this.model);
  }

  /** Marks the open transcripts that show a changed session (a parent shows its fork children too). */
  apply(changes: Changes): void {
    const open = vscode.workspace.textDocuments.filter((d) => d.uri.scheme === TRANSCRIPT_SCHEME);
    if (open.length === 0) return;
    const affected = new Set<string>();
    for (const s of changes.sessions) {
      for (let id: string | undefined = s.sessionId; id !== undefined && !affected.has(id); id = this.model.session(id)?.parentId) {
        affected.add(id);
      }
    }
    for (const doc of open) {
      if (changes.root || affected.has(doc.uri.path.split('/')[1] ?? '')) this.dirty.add(doc.uri.toString());
    }
    if (this.dirty.size > 0) this.timer ??= setTimeout(() => this.flush(), REFRESH_MS);
  }

  private flush(): void {
    this.timer = undefined;
    for (const uri of this.dirty) this.emitter.fire(vscode.Uri.parse(uri));
    this.dirty.clear();
  }

  dispose(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.emitter.dispose();
  }
}
