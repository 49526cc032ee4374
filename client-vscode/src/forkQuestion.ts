// The fork questions open on screen, and when each must go: a proposal is a question only while
// its fork is `proposed`. Once the fork is decided anywhere (this window's tree, another editor,
// a `coven/decideFork` from any connection, a cancel of the parent, a restart that dropped it),
// its state event arrives and the question is withdrawn.
//
// Pure (no `vscode` import): forkPrompt.ts draws the questions; the tests drive this with the
// model alone.

import { agentName } from './agentChoice';
import type { ForkNode, SessionNode } from './model';
import { forkCostLines } from './present';

/** A question on screen that can be taken back. */
export interface Withdrawable {
  withdraw(): void;
}

/** Where the questions look a fork up: the model (`CovenModel.fork`). */
export interface ForkLookup {
  fork(forkId: string): ForkNode | undefined;
}

/** The open questions, one per fork. */
export class OpenForkQuestions<Q extends Withdrawable> {
  private readonly open = new Map<string, Q>();

  /** Opens a question for the fork unless one is open already; false: it was. */
  add(forkId: string, question: Q): boolean {
    if (this.open.has(forkId)) return false;
    this.open.set(forkId, question);
    return true;
  }

  get(forkId: string): Q | undefined {
    return this.open.get(forkId);
  }

  /** The forks asked about, oldest first. */
  forkIds(): string[] {
    return [...this.open.keys()];
  }

  get size(): number {
    return this.open.size;
  }

  /** Withdraws every question whose fork is no longer waiting for a decision; their fork ids. */
  sweep(forks: ForkLookup): string[] {
    const gone = this.forkIds().filter((forkId) => !stillProposed(forks, forkId));
    for (const forkId of gone) this.remove(forkId);
    return gone;
  }

  /**
   * The forks waiting for a decision that nobody is asked about: after a server restart the model
   * is rebuilt (its questions were withdrawn with the old forks) and a fork still proposed must be
   * asked about again. Only forks the tree shows (`placed`).
   */
  unasked(proposed: readonly ForkNode[]): ForkNode[] {
    return proposed.filter((fork) => fork.state === 'proposed' && fork.placed && !this.open.has(fork.forkId));
  }

  remove(forkId: string): void {
    const question = this.open.get(forkId);
    if (question === undefined) return;
    this.open.delete(forkId);
    question.withdraw();
  }

  dispose(): void {
    for (const forkId of this.forkIds()) this.remove(forkId);
  }
}

export function stillProposed(forks: ForkLookup, forkId: string): boolean {
  return forks.fork(forkId)?.state === 'proposed';
}

/** The question's words: who proposes what, in which session. */
export function forkQuestionText(fork: ForkNode, session: SessionNode | undefined): string {
  const tasks = fork.tasks.map((t) => `“${t}”`).join(', ');
  const agent = agentName(session?.agent);
  const where = session ? ` '${session.title}'` : '';
  const question = `${agent} proposes to fork${where} into ${fork.tasks.length} ${fork.tasks.length === 1 ? 'task' : 'tasks'}: ${tasks}`;
  // The parent's context, the fork's cost and, past 80% of the window, the warning.
  return [question, ...(fork.estimate !== undefined ? forkCostLines(fork.estimate) : [])].join(' — ');
}

/** The answers a question offers, each a command that takes the fork id. */
export const FORK_ANSWERS = [
  { label: 'Approve', command: 'coven.approveFork' },
  { label: 'Approve with Edits…', command: 'coven.approveForkWithEdits' },
  { label: 'Reject', command: 'coven.rejectFork' },
] as const;

/** The answers as Markdown command links (a notification's message renders them as links). */
export function answerLinks(forkId: string): string {
  const args = encodeURIComponent(JSON.stringify([forkId]));
  return FORK_ANSWERS.map((a) => `[${a.label}](command:${a.command}?${args})`).join(' · ');
}

/** The status bar's words for the open questions. */
export function waitingText(count: number): string {
  return count === 1 ? '$(repo-forked) Fork proposed' : `$(repo-forked) ${count} forks proposed`;
}
