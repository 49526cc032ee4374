// Every command of the extension. Each one takes the tree node it was invoked on (menus), or asks
// for what it needs (palette). Requests go to coven-ls; the tree updates from the events that follow.

import * as vscode from 'vscode';
import { ResponseError } from 'vscode-languageclient/node';

import {
  BUSY_STATUSES,
  type CovenModel,
  firstLine,
  forkCostOf,
  type ForkNode,
  MESSAGEABLE_STATUSES,
  mergeModeOf,
  mergeStateOf,
  type Node,
  type SessionNode,
  type SubagentNode,
} from './model';
import { type AgentOffer, agentChoices, agentName } from './agentChoice';
import { changesDescription } from './changes';
import { deleteParams, discardQuestion, keptMessage, unappliedWork } from './deletion';
import { type ForkChoice, forkChoices, type PlacementChoice, placementChoices, withCosts } from './forkChoice';
import { LIMITS_EXAMPLE, parseLimits } from './forkLimits';
import { forkCostLines, forkStateText, sessionStatusText } from './present';
import { type DecideForkParams, ErrorCode, type ForkLimits, Method } from './protocol';
import type { ChangesReview } from './review';
import type { CovenServer } from './server';
import { showSetupCheck } from './setup';
import type { SessionSync } from './sync';
import type { Transcripts } from './transcriptView';

export interface CommandContext {
  server: CovenServer;
  sync: SessionSync;
  transcripts: Transcripts;
  review: ChangesReview;
  treeView: vscode.TreeView<Node>;
}

/** A session id, a fork id or a tree node: what menus, notifications and other extensions pass. */
type Target = Node | string | undefined;

/** What a keybinding passes (package.json `args`): act on the tree's selection. */
export const SELECTION = 'coven:selection';

export function registerCommands(ctx: CommandContext): vscode.Disposable[] {
  const { server, sync, transcripts, review, treeView } = ctx;
  const model = sync.model;

  const commands: Record<string, (target?: Target) => Promise<unknown>> = {
    'coven.newSession': async () => {
      const folders = vscode.workspace.workspaceFolders ?? [];
      if (folders.length === 0) {
        void vscode.window.showErrorMessage('Open a folder first: a Coven session works in a workspace folder.');
        return;
      }
      // coven-ls defaults to the first folder; in a multi-root workspace the user says which.
      const folder =
        folders.length === 1
          ? folders[0]
          : await vscode.window.showWorkspaceFolderPick({ placeHolder: 'Which folder should the session work in?' });
      if (folder === undefined) return;
      // Asked only when the server offers more than one agent; else the server's default (coven.agent) applies.
      const choices = agentChoices(server.agents, vscode.workspace.getConfiguration('coven').get<string>('agent'));
      let agent: string | undefined;
      if (choices.length > 0) {
        const picked = await vscode.window.showQuickPick(choices, {
          title: 'New Coven Session: which agent?',
          placeHolder: "The agents coven-ls offers (coven.agent sets the default; coven.agents adds ACP agents)",
          matchOnDescription: true,
        });
        if (picked === undefined) return;
        agent = picked.agent;
      }
      const who = agentName(agent);
      const prompt = await vscode.window.showInputBox({
        title: 'New Coven Session',
        prompt: `What should ${who} do? (Enter to start)`,
        placeHolder: 'e.g. Find out why the build is slow',
        ignoreFocusOut: true,
        validateInput: (v) => (v.trim() ? undefined : `Type what ${who} should do.`),
      });
      if (prompt === undefined) return;
      const { sessionId } = await server.request(Method.startSession, {
        prompt,
        cwd: folder.uri.fsPath,
        ...(agent !== undefined ? { agent } : {}),
      });
      if (await sync.whenKnown(sessionId)) {
        const node = model.session(sessionId);
        if (node) await treeView.reveal(node, { select: true, focus: false, expand: true }).then(undefined, () => undefined);
      }
    },

    'coven.sendMessage': async (target) => {
      const session = await sessionFor(model, target, (s) => s.status !== 'closed' && s.status !== 'cancelled', 'Send a message to which session?');
      if (!session) return;
      const text = await vscode.window.showInputBox({
        title: `Message to '${titleOf(session)}'`,
        prompt: MESSAGEABLE_STATUSES.has(session.status) ? 'Your next message' : 'The session is busy: the message waits its turn.',
        ignoreFocusOut: true,
        validateInput: (v) => (v.trim() ? undefined : 'Type a message.'),
      });
      if (text === undefined) return;
      const result = await server.request(Method.sendMessage, { sessionId: session.sessionId, text });
      if (result.queued) vscode.window.setStatusBarMessage(`Coven: message queued (${result.position} ahead of it)`, 4000);
    },

    'coven.forkSession': async (target) => {
      // Alt+Shift+F in the Coven view: the selected row's session (else the user picks).
      if (target === SELECTION) target = treeView.selection[0];
      const session = await sessionFor(model, target, (s) => MESSAGEABLE_STATUSES.has(s.status), 'Fork which session?');
      if (!session) return;
      const tasks = await editTasks([], `Fork '${titleOf(session)}'`, 'Fork');
      if (!tasks) return;
      const choice = await pickForkStart(session, server.agents);
      if (!choice) return;
      const where = await pickPlacement(server.cluster);
      if (!where) return;
      await server.request(Method.fork, { sessionId: session.sessionId, tasks, ...choice, ...where });
    },

    'coven.forkFromHere': async (target) => {
      const node = typeof target === 'object' ? target : treeView.selection[0];
      if (node?.kind !== 'text' || node.messageId === undefined) {
        void vscode.window.showInformationMessage('Fork from Here works on an assistant message in the Coven view: right-click one.');
        return;
      }
      const session = model.owningSession(node);
      const tasks = await editTasks([], `Fork '${session ? titleOf(session) : node.sessionId}' at "${firstLine(node.text).slice(0, 40)}"`, 'Fork');
      if (!tasks) return;
      const choice = await pickForkStart(session, server.agents);
      if (!choice) return;
      const where = await pickPlacement(server.cluster);
      if (!where) return;
      await server.request(Method.fork, { sessionId: node.sessionId, tasks, atMessageId: node.messageId, ...choice, ...where });
    },

    'coven.branchSession': async (target) => {
      const session = await sessionFor(model, target, (s) => MESSAGEABLE_STATUSES.has(s.status), 'Branch which session?');
      if (session) await branch(session, undefined, `Branch '${titleOf(session)}'`);
    },

    'coven.branchFromHere': async (target) => {
      const node = typeof target === 'object' ? target : treeView.selection[0];
      const session = node !== undefined ? model.owningSession(node) : undefined;
      if ((node?.kind !== 'text' && node?.kind !== 'thinking') || node.messageId === undefined || session === undefined) {
        void vscode.window.showInformationMessage('Branch Here works on an assistant message in the Coven view: right-click one.');
        return;
      }
      await branch(session, node.messageId, `Branch '${titleOf(session)}' at "${firstLine(node.text).slice(0, 40)}"`);
    },

    'coven.approveFork': async (target) => {
      const fork = await proposedFork(model, target);
      if (fork) await decide({ forkId: fork.forkId, approve: true });
    },

    'coven.approveForkWithEdits': async (target) => {
      const fork = await proposedFork(model, target);
      if (!fork) return;
      const tasks = await editTasks(fork.tasks, 'Approve the fork with these tasks', 'Approve');
      if (!tasks) return;
      // Each way to start is shown with what the fork would then cost (the server prices it).
      const price = async (params: ForkChoice['params']): Promise<string | undefined> => {
        const { estimate } = await server.request(Method.estimateFork, { forkId: fork.forkId, tasks, ...params });
        const cost = forkCostOf(estimate);
        return cost !== undefined ? forkCostLines(cost)[1] : undefined;
      };
      const choice = await pickForkStart(model.session(fork.sessionId), server.agents, price);
      if (!choice) return;
      const where = await pickPlacement(server.cluster);
      if (!where) return;
      const limits = await askLimits();
      if (!limits) return;
      if (fork.state !== 'proposed') return alreadyDecided(fork);
      await decide({ forkId: fork.forkId, approve: true, tasks, ...choice, ...where, ...(Object.keys(limits).length > 0 ? { limits } : {}) });
    },

    'coven.rejectFork': async (target) => {
      const fork = await proposedFork(model, target);
      if (!fork) return;
      const reason = await vscode.window.showInputBox({
        title: 'Reject the fork',
        prompt: `Why? ${agentName(model.session(fork.sessionId)?.agent)} is told (optional; Enter to reject, Escape to keep the proposal)`,
        ignoreFocusOut: true,
      });
      if (reason === undefined) return;
      if (fork.state !== 'proposed') return alreadyDecided(fork);
      await decide({ forkId: fork.forkId, approve: false, ...(reason.trim() ? { reason: reason.trim() } : {}) });
    },

    'coven.resumeFork': async (target) => {
      const fork = await interruptedFork(model, target);
      if (fork) await server.request(Method.resumeFork, { forkId: fork.forkId });
    },

    'coven.abandonFork': async (target) => {
      const fork = await interruptedFork(model, target);
      if (fork) await server.request(Method.abandonFork, { forkId: fork.forkId });
    },

    'coven.cancel': async (target) => {
      // A fork is cancelled through its parent: cancelling a forking parent cancels the whole fork.
      const node = typeof target === 'object' ? target : undefined;
      const sessionTarget = node?.kind === 'fork' ? node.sessionId : target;
      const session = await sessionFor(model, sessionTarget, (s) => BUSY_STATUSES.has(s.status) || s.status === 'awaitingApproval' || s.queuedMessages > 0, 'Cancel which session?');
      if (!session) return;
      await server.request(Method.cancel, { sessionId: session.sessionId });
    },

    'coven.stopTask': async (target) => {
      const subagent = await runningSubagent(model, target);
      if (!subagent) return;
      await server.request(Method.stopTask, { sessionId: subagent.sessionId, taskId: subagent.taskId });
    },

    'coven.closeSession': async (target) => {
      const session = await sessionFor(model, target, (s) => s.status !== 'closed', 'Close which session?');
      if (!session) return;
      if (BUSY_STATUSES.has(session.status)) {
        const ok = await vscode.window.showWarningMessage(
          `Close '${titleOf(session)}'? Its running turn stops, and a closed session takes no more messages.`,
          { modal: true },
          'Close Session',
        );
        if (ok !== 'Close Session') return;
      }
      await server.request(Method.closeSession, { sessionId: session.sessionId });
    },

    'coven.deleteSession': async (target) => {
      const session = await sessionFor(model, target, () => true, 'Delete which session?');
      if (!session) return;
      const children = countDescendants(model, session);
      const choice = await vscode.window.showWarningMessage(
        `Delete '${titleOf(session)}'${children > 0 ? ` and its ${children} fork ${children === 1 ? 'child' : 'children'}` : ''}? coven-ls forgets ${children > 0 ? 'them' : 'it'}; running agents stop.`,
        { modal: true, detail: "The agent's own record of the conversation (Claude Code's transcripts, Codex's threads) is kept unless you delete it too." },
        'Delete',
        'Delete with Claude Transcripts',
      );
      if (choice === undefined) return;
      // Work never applied (a conflict, a failed child's, changes waiting for review) is kept on
      // its branch unless the user says to discard it: asked here, before anything is deleted.
      const unapplied = unappliedWork(session);
      let workChoice: string | undefined;
      if (unapplied.length > 0) {
        const question = discardQuestion(unapplied);
        workChoice = await vscode.window.showWarningMessage(
          question.message,
          { modal: true, detail: question.detail },
          ...question.choices,
        );
      }
      const params = deleteParams(
        session.sessionId,
        choice === 'Delete with Claude Transcripts',
        workChoice,
        unapplied.length > 0,
      );
      if (!params) return;
      const answer = await server.request(Method.deleteSession, params);
      const kept = keptMessage(answer.keptBranches);
      if (kept) void vscode.window.showInformationMessage(kept);
    },

    'coven.openTranscript': async (target) => {
      const session = await sessionFor(model, target, () => true, 'Open the transcript of which session?');
      if (session) await transcripts.open(session);
    },

    'coven.copySessionId': async (target) => {
      const session = await sessionFor(model, target, () => true, 'Copy the id of which session?');
      if (!session) return;
      await vscode.env.clipboard.writeText(session.sessionId);
      vscode.window.setStatusBarMessage(`Copied ${session.sessionId}`, 3000);
    },

    'coven.reviewChanges': async (target) => {
      const child = await forkChild(model, target, (s) => (s.changes?.files.length ?? 0) > 0, 'Review the changes of which fork child?');
      if (child) await review.review(child, titleOf(child));
    },

    'coven.applyChanges': async (target) => {
      const child = await forkChild(model, target, (s) => s.changes?.merge === 'pending', 'Apply the changes of which fork child?');
      if (child) await review.apply(child, titleOf(child));
    },

    'coven.discardChanges': async (target) => {
      const child = await forkChild(model, target, (s) => s.changes?.merge === 'pending', 'Discard the changes of which fork child?');
      if (child) await review.discard(child, titleOf(child));
    },

    'coven.openConflicts': async (target) => {
      const child = await forkChild(model, target, (s) => mergeStateOf(s) === 'conflict', 'Open the conflicting files of which fork child?');
      if (child) await review.openConflicts(child);
    },

    'coven.showServerLog': async () => server.showLog(),

    'coven.restartServer': async () => server.restart(),

    'coven.checkSetup': async () => showSetupCheck(server.launched, server.problem),
  };

  /**
   * `coven/branch`: a new session with the conversation up to `atMessageId` (else all of it), in
   * the same folder; the user may give its first message. The branch is selected once listed.
   */
  async function branch(session: SessionNode, atMessageId: string | undefined, title: string): Promise<void> {
    const prompt = await vscode.window.showInputBox({
      title,
      prompt: "The branch's first message (optional: Enter with nothing makes the branch and waits; Escape cancels)",
      placeHolder: 'e.g. Try it another way',
      ignoreFocusOut: true,
    });
    if (prompt === undefined) return;
    const { sessionId } = await server.request(Method.branch, {
      sessionId: session.sessionId,
      ...(atMessageId !== undefined ? { atMessageId } : {}),
      ...(prompt.trim() ? { prompt: prompt.trim() } : {}),
    });
    if (await sync.whenKnown(sessionId)) {
      const node = model.session(sessionId);
      if (node) await treeView.reveal(node, { select: true, focus: false, expand: true }).then(undefined, () => undefined);
    }
  }

  async function decide(params: DecideForkParams): Promise<void> {
    await server.request(Method.decideFork, params);
  }

  return Object.entries(commands).map(([id, run]) =>
    vscode.commands.registerCommand(id, async (target?: Target) => {
      try {
        await run(target);
      } catch (error) {
        await reportError(error, server);
      }
    }),
  );
}

/** How the children start (context, agent), picked by the user; undefined when they pressed Escape. */
async function pickForkStart(
  parent: SessionNode | undefined,
  agents: readonly AgentOffer[],
  price?: (params: ForkChoice['params']) => Promise<string | undefined>,
): Promise<ForkChoice['params'] | undefined> {
  let choices = forkChoices(parent?.agent, agents);
  if (price !== undefined) {
    // A choice the server cannot price (or refuses) is shown without a cost, never blocks the pick.
    choices = withCosts(choices, await Promise.all(choices.map((c) => price(c.params).catch(() => undefined))));
  }
  const picked = await vscode.window.showQuickPick(choices, {
    title: 'How should the children start?',
    placeHolder: 'What each child knows of this conversation, and which agent runs it',
    ignoreFocusOut: true,
  });
  return picked?.params;
}

/** Where the children run (coven/fork's `placement`): asked only of a server with a cluster; undefined when the user pressed Escape. */
async function pickPlacement(cluster: string | undefined): Promise<PlacementChoice['params'] | undefined> {
  const choices = placementChoices(cluster);
  if (choices.length === 0) return {};
  const picked = await vscode.window.showQuickPick(choices, {
    title: 'Where should the children run?',
    placeHolder: `On this machine, or on the ${cluster} cluster's nodes`,
    ignoreFocusOut: true,
  });
  return picked?.params;
}

/** What this fork's children may spend (coven/decideFork's `limits`); undefined when the user pressed Escape. */
async function askLimits(): Promise<ForkLimits | undefined> {
  const text = await vscode.window.showInputBox({
    title: 'Limits for this fork',
    prompt: "What its children may spend, name=value; 0: no limit; a limit left out (or all: Enter) keeps the session's",
    placeHolder: LIMITS_EXAMPLE,
    ignoreFocusOut: true,
    validateInput: (typed) => {
      const parsed = parseLimits(typed);
      return 'error' in parsed ? parsed.error : undefined;
    },
  });
  if (text === undefined) return undefined;
  const parsed = parseLimits(text);
  return 'limits' in parsed ? parsed.limits : undefined;
}

function titleOf(session: SessionNode): string {
  return session.parentId !== undefined ? (session.label ?? session.title) : session.title;
}

function alreadyDecided(fork: ForkNode): void {
  void vscode.window.showInformationMessage(`That fork is no longer waiting for a decision (${forkStateText(fork)}).`);
}

/** The session a command is about: the node's own session, an id, or the user's pick. */
async function sessionFor(
  model: CovenModel,
  target: Target,
  eligible: (s: SessionNode) => boolean,
  placeHolder: string,
): Promise<SessionNode | undefined> {
  if (typeof target === 'string') return model.session(target);
  if (target !== undefined) return target.kind === 'fork' ? model.session(target.sessionId) : model.owningSession(target);
  const candidates = model.sessions().filter(eligible);
  if (candidates.length === 0) {
    void vscode.window.showInformationMessage('No Coven session fits. Start one with "Coven: New Session".');
    return undefined;
  }
  const picked = await vscode.window.showQuickPick(
    candidates.map((session) => ({
      label: titleOf(session),
      description: sessionStatusText(session),
      detail: session.parentId !== undefined ? `fork child of ${model.session(session.parentId)?.title ?? session.parentId} · ${session.sessionId}` : session.sessionId,
      session,
    })),
    { placeHolder, matchOnDetail: true },
  );
  return picked?.session;
}

/**
 * The fork child a review command is about: the child it was invoked on (or named by id), one of
 * a fork's children (a fork node or id), or the user's pick among the eligible ones.
 */
async function forkChild(
  model: CovenModel,
  target: Target,
  eligible: (s: SessionNode) => boolean,
  placeHolder: string,
): Promise<SessionNode | undefined> {
  const node = typeof target === 'string' ? (model.session(target) ?? model.fork(target)) : target;
  if (node?.kind === 'session') return node;
  if (typeof target === 'string' && node === undefined) {
    void vscode.window.showInformationMessage(`coven-ls knows no session or fork '${target}' any more.`);
    return undefined;
  }
  const candidates = (node?.kind === 'fork' ? node.children : model.sessions()).filter((s) => s.parentId !== undefined && eligible(s));
  if (candidates.length === 0) {
    void vscode.window.showInformationMessage('No fork child fits: its changes are shown once it has ended.');
    return undefined;
  }
  if (candidates.length === 1) return candidates[0];
  const picked = await vscode.window.showQuickPick(
    candidates.map((session) => ({
      label: titleOf(session),
      description: session.changes !== undefined ? changesDescription(session.changes, mergeModeOf(session)) : sessionStatusText(session),
      detail: `fork child of ${model.session(session.parentId ?? '')?.title ?? session.parentId} · ${session.sessionId}`,
      session,
    })),
    { placeHolder, matchOnDetail: true },
  );
  return picked?.session;
}

function countDescendants(model: CovenModel, session: SessionNode): number {
  let count = 0;
  for (const item of session.items) {
    if (item.kind !== 'fork') continue;
    for (const child of item.children) count += 1 + countDescendants(model, child);
  }
  return count;
}

/** The subagent Stop Subagent is about: the node it was invoked on, else the user's pick. */
async function runningSubagent(model: CovenModel, target: Target): Promise<SubagentNode | undefined> {
  if (typeof target === 'object') {
    if (target.kind === 'subagent') return target.state === 'running' ? target : undefined;
    if (target.kind === 'tool' && target.subagent?.state === 'running') return target.subagent;
  }
  const running = model.runningSubagents();
  if (running.length === 0) {
    void vscode.window.showInformationMessage('No subagent is running.');
    return undefined;
  }
  if (running.length === 1) return running[0];
  const picked = await vscode.window.showQuickPick(
    running.map((s) => ({ label: s.description, description: model.session(s.sessionId)?.title ?? s.sessionId, subagent: s })),
    { placeHolder: 'Stop which subagent?' },
  );
  return picked?.subagent;
}

async function interruptedFork(model: CovenModel, target: Target): Promise<ForkNode | undefined> {
  let fork: ForkNode | undefined;
  if (typeof target === 'string') fork = model.fork(target);
  else if (target?.kind === 'fork') fork = target;
  else if (target?.kind === 'session') fork = model.interruptedForks().find((f) => f.sessionId === target.sessionId);
  else {
    const open = model.interruptedForks();
    if (open.length === 0) {
      void vscode.window.showInformationMessage('No fork is waiting to be resumed or abandoned.');
      return undefined;
    }
    fork =
      open.length === 1
        ? open[0]
        : (
            await vscode.window.showQuickPick(
              open.map((f) => ({ label: model.session(f.sessionId)?.title ?? f.sessionId, description: f.tasks.join(' · '), fork: f })),
              { placeHolder: 'Which interrupted fork?' },
            )
          )?.fork;
  }
  if (fork !== undefined && fork.state !== 'interrupted') {
    void vscode.window.showInformationMessage(`That fork was not interrupted (${forkStateText(fork)}).`);
    return undefined;
  }
  return fork;
}

async function proposedFork(model: CovenModel, target: Target): Promise<ForkNode | undefined> {
  let fork: ForkNode | undefined;
  if (typeof target === 'string') fork = model.fork(target);
  else if (target?.kind === 'fork') fork = target;
  else if (target?.kind === 'task' && target.parent?.kind === 'fork') fork = target.parent;
  else if (target?.kind === 'session') fork = model.proposedForks().find((f) => f.sessionId === target.sessionId);
  else {
    const open = model.proposedForks();
    if (open.length === 1) fork = open[0];
    else if (open.length > 1) {
      fork = (
        await vscode.window.showQuickPick(
          open.map((f) => ({ label: model.session(f.sessionId)?.title ?? f.sessionId, description: f.tasks.join(' · '), fork: f })),
          { placeHolder: 'Which proposed fork?' },
        )
      )?.fork;
    } else {
      void vscode.window.showInformationMessage('No fork is waiting for a decision.');
      return undefined;
    }
  }
  if (fork !== undefined && fork.state !== 'proposed') {
    alreadyDecided(fork);
    return undefined;
  }
  return fork;
}

/**
 * A task list editor on a QuickPick: VS Code has no multi-line input box, and a list where each
 * task is an item to pick, edit or drop is what "one task per line" means in a picker. Pasting
 * several lines into "Add" adds several tasks.
 */
export async function editTasks(initial: string[], title: string, verb: string): Promise<string[] | undefined> {
  const tasks = [...initial];
  type Item = vscode.QuickPickItem & { action: 'accept' | 'add' | 'edit'; index?: number };
  if (tasks.length === 0) {
    const added = await askTasks(title, 'The first task: one child session works on it. Paste several lines to add several.');
    if (added === undefined) return undefined;
    tasks.push(...added);
  }
  for (;;) {
    const items: Item[] = [
      ...(tasks.length > 0 ? [{ label: `$(check) ${verb} with ${tasks.length} ${tasks.length === 1 ? 'task' : 'tasks'}`, action: 'accept' as const }] : []),
      ...tasks.map((task, index) => ({ label: `${index + 1}. ${task}`, description: 'edit', action: 'edit' as const, index })),
      { label: '$(add) Add a task…', action: 'add' as const },
    ];
    const pick = await vscode.window.showQuickPick(items, { title, placeHolder: 'Enter to accept, or pick a task to edit it', ignoreFocusOut: true });
    if (pick === undefined) return undefined;
    if (pick.action === 'accept') return tasks;
    if (pick.action === 'add') {
      tasks.push(...((await askTasks(title, 'Another task (several lines add several)')) ?? []));
      continue;
    }
    const index = pick.index!;
    const edited = await vscode.window.showInputBox({ title, value: tasks[index], prompt: 'Edit the task (empty removes it)', ignoreFocusOut: true });
    if (edited === undefined) continue;
    if (edited.trim()) tasks[index] = edited.trim();
    else tasks.splice(index, 1);
  }
}

async function askTasks(title: string, prompt: string): Promise<string[] | undefined> {
  const text = await vscode.window.showInputBox({ title, prompt, ignoreFocusOut: true });
  if (text === undefined) return undefined;
  return text
    .split(/\r?\n/)
    .map((line) => line.replace(/^\s*(?:[-*]|\d+[.)])\s+/, '').trim())
    .filter(Boolean);
}

async function reportError(error: unknown, server: CovenServer): Promise<void> {
  const message = error instanceof Error ? error.message : String(error);
  server.log(`command failed: ${message}`);
  if (error instanceof ResponseError && error.code === ErrorCode.ClaudeUnavailable) {
    const choice = await vscode.window.showErrorMessage(message, 'Open Setting');
    if (choice) await vscode.commands.executeCommand('workbench.action.openSettings', 'coven.claudePath');
    return;
  }
  await vscode.window.showErrorMessage(message);
}
