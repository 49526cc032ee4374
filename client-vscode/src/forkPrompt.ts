// How a fork proposal asks the user, in forms VS Code lets an extension take back (an information
// message's buttons cannot be: it would stay on screen, live, after the fork was decided elsewhere):
// - a progress notification, whose task ends (and the toast closes) when the fork's state event
//   says it is no longer `proposed`; its message holds the answers as command links;
// - a status bar item while any fork waits, which opens a quick pick of the answers (closed too if
//   the fork is decided while it is open);
// - the fork's row in the tree, with its inline Approve / Reject (the model redraws it).

import * as vscode from 'vscode';

import type { CovenModel, ForkNode } from './model';
import { answerLinks, FORK_ANSWERS, forkQuestionText, OpenForkQuestions, stillProposed, waitingText } from './forkQuestion';

interface Question {
  withdraw(): void;
}

export class ForkPrompts implements vscode.Disposable {
  private readonly questions = new OpenForkQuestions<Question>();
  private readonly status = vscode.window.createStatusBarItem('coven.forkProposed', vscode.StatusBarAlignment.Left, 9);
  /** The quick pick open now (one at a time), and the fork it is about. */
  private picking: { forkId: string; pick: vscode.QuickPick<vscode.QuickPickItem> } | undefined;

  constructor(private readonly model: CovenModel) {
    this.status.name = 'Coven: fork proposed';
    this.status.command = 'coven.answerFork';
    this.status.backgroundColor = new vscode.ThemeColor('statusBarItem.warningBackground');
  }

  /** Asks about a proposed fork until it is decided, here or anywhere else. */
  ask(fork: ForkNode): void {
    if (!stillProposed(this.model, fork.forkId)) return;
    let close!: () => void;
    const closed = new Promise<void>((resolve) => (close = resolve));
    if (!this.questions.add(fork.forkId, { withdraw: close })) return;
    const text = forkQuestionText(fork, this.model.session(fork.sessionId));
    void vscode.window.withProgress(
      // The answers first: a progress toast shows one line until expanded, and they must be seen.
      { location: vscode.ProgressLocation.Notification, title: `Fork proposed: ${answerLinks(fork.forkId)}. ${text}.` },
      () => closed,
    );
    this.update();
  }

  /**
   * Withdraws what was asked about forks now decided, and asks about proposed forks nobody is
   * asked about (after a rebuild); call it after every change of the model.
   */
  sweep(): void {
    const gone = this.questions.sweep(this.model);
    if (this.picking !== undefined && gone.includes(this.picking.forkId)) this.picking.pick.hide();
    for (const fork of this.questions.unasked(this.model.proposedForks())) this.ask(fork);
    if (gone.length > 0) this.update();
  }

  /** The status bar's command: the answers to one waiting fork (the user picks which if several). */
  async answer(forkId?: string): Promise<void> {
    const waiting = this.questions.forkIds().filter((id) => stillProposed(this.model, id));
    const target = forkId ?? (waiting.length === 1 ? waiting[0] : await this.pickFork(waiting));
    const fork = target !== undefined ? this.model.fork(target) : undefined;
    if (fork === undefined || fork.state !== 'proposed') {
      if (waiting.length === 0) void vscode.window.showInformationMessage('No fork waits for a decision.');
      return;
    }
    const answer = await this.pickAnswer(fork);
    if (answer !== undefined) await vscode.commands.executeCommand(answer, fork.forkId);
  }

  private async pickFork(forkIds: string[]): Promise<string | undefined> {
    if (forkIds.length === 0) return undefined;
    const items = forkIds.flatMap((id) => {
      const fork = this.model.fork(id);
      return fork ? [{ label: forkQuestionText(fork, this.model.session(fork.sessionId)), forkId: id }] : [];
    });
    return (await vscode.window.showQuickPick(items, { placeHolder: 'Decide which proposed fork?' }))?.forkId;
  }

  /** A quick pick of the answers, hidden by `sweep` if the fork is decided while it is open. */
  private pickAnswer(fork: ForkNode): Promise<string | undefined> {
    this.picking?.pick.hide();
    const pick = vscode.window.createQuickPick();
    pick.title = forkQuestionText(fork, this.model.session(fork.sessionId));
    pick.placeholder = 'Approve, edit or reject the fork';
    pick.items = FORK_ANSWERS.map((a) => ({ label: a.label }));
    this.picking = { forkId: fork.forkId, pick };
    return new Promise((resolve) => {
      let chosen: string | undefined;
      pick.onDidAccept(() => {
        chosen = FORK_ANSWERS.find((a) => a.label === pick.selectedItems[0]?.label)?.command;
        pick.hide();
      });
      pick.onDidHide(() => {
        if (this.picking?.pick === pick) this.picking = undefined;
        pick.dispose();
        resolve(chosen);
      });
      pick.show();
    });
  }

  private update(): void {
    const count = this.questions.size;
    if (count === 0) {
      this.status.hide();
      return;
    }
    this.status.text = waitingText(count);
    this.status.tooltip = 'A fork waits for your decision: approve, edit or reject it';
    this.status.show();
  }

  dispose(): void {
    this.questions.dispose();
    this.picking?.pick.hide();
    this.status.dispose();
  }
}
