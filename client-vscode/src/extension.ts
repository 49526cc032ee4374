// Wiring: the server, the model sync, the tree, the commands, the status bar, the transcripts.
// No agent logic lives in the extension: coven-ls does the work, this only shows it and asks.

import * as vscode from 'vscode';

import { agentName } from './agentChoice';
import { registerCommands } from './commands';
import { ForkPrompts } from './forkPrompt';
import { onPythonInterpreterChange, pythonFromExtension } from './launch';
import { type ForkNode, type Node, type SessionNode, pendingChildren } from './model';
import { permissionAnswer, permissionButtons } from './permissionChoice';
import { contextStatus, describeToolInput, summarize } from './present';
import { type RequestPermissionParams, type RequestPermissionResult, WORKTREE_SETUP_TOOL } from './protocol';
import { CHANGES_SCHEME, ChangesReview } from './review';
import { CovenServer, ServerOutput } from './server';
import { OwnServer } from './setup';
import { SessionSync } from './sync';
import { TRANSCRIPT_SCHEME, Transcripts } from './transcriptView';
import { SessionTree } from './tree';

/** Settings changes usually come in clusters (a settings.json save, a profile switch). */
const RESTART_DEBOUNCE_MS = 750;

let server: CovenServer | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const output = new ServerOutput('Coven Server');
  // The sync needs the server and the server needs the sync's handler: tie them through a closure.
  let sync: SessionSync | undefined;
  const own = new OwnServer(
    context,
    (line) => server?.log(line),
    async () => {
      const folder = vscode.workspace.workspaceFolders?.[0];
      const chosen = await pythonFromExtension(folder?.uri, (line) => server?.log(line));
      return [...(chosen === undefined ? [] : [chosen]), 'python3', 'python'];
    },
  );
  server = new CovenServer(
    own,
    output,
    (event) => sync?.onEvent(event),
    (delta) => sync?.onDelta(delta),
    (params, token) => askPermission(params, token, sync),
  );
  sync = new SessionSync(server);
  const model = sync.model;
  const tree = new SessionTree(model);
  const treeView = vscode.window.createTreeView<Node>('coven.sessions', { treeDataProvider: tree, showCollapseAll: true });
  const transcripts = new Transcripts(model);
  const review = new ChangesReview(server);
  const forkPrompts = new ForkPrompts(model);
  const status = vscode.window.createStatusBarItem('coven.status', vscode.StatusBarAlignment.Left, 10);
  status.name = 'Coven';
  status.command = 'coven.sessions.focus';
  // How full the selected session's context is (its last model request against its model's window).
  const gauge = vscode.window.createStatusBarItem('coven.context', vscode.StatusBarAlignment.Left, 8);
  gauge.name = 'Coven: context';
  gauge.command = 'coven.sessions.focus';
  const selectedSession = (): SessionNode | undefined => {
    const picked = treeView.selection[0];
    return picked?.kind === 'session' ? model.session(picked.sessionId) : undefined;
  };
  const updateGauge = (): void => {
    const shown = server!.state === 'running' ? contextStatus(selectedSession()) : undefined;
    if (shown === undefined) {
      gauge.hide();
      return;
    }
    gauge.text = shown.text;
    gauge.tooltip = shown.tooltip;
    gauge.backgroundColor = shown.warning ? new vscode.ThemeColor('statusBarItem.warningBackground') : undefined;
    gauge.show();
  };

  const updateStatus = (): void => {
    const s = server!.state;
    if (s === 'untrusted' || s === 'stopped') {
      status.hide();
      return;
    }
    if (s === 'failed') {
      status.text = '$(error) Coven';
      status.tooltip = server!.problem ?? 'coven-ls is not running';
      status.backgroundColor = new vscode.ThemeColor('statusBarItem.errorBackground');
      status.command = 'coven.showServerLog';
    } else if (s === 'starting') {
      status.text = '$(loading~spin) Coven: starting';
      status.tooltip = 'coven-ls is starting';
      status.backgroundColor = undefined;
      status.command = 'coven.showServerLog';
    } else {
      const summary = summarize(model);
      status.text = summary.text;
      status.tooltip = summary.tooltip;
      status.backgroundColor = summary.attention ? new vscode.ThemeColor('statusBarItem.warningBackground') : undefined;
      status.command = 'coven.sessions.focus';
    }
    status.show();
  };

  // While the tree may not be what the server has (it is down, starting, or the list is being
  // rebuilt), a line above it says so. The welcome content covers the empty cases.
  let rebuilding = false;
  const updateViewMessage = (): void => {
    const state = server!.state;
    const stale = model.roots().length > 0;
    treeView.message =
      state === 'failed' && stale
        ? `coven-ls is not running: ${server!.problem ?? ''}`
        : rebuilding || (state === 'starting' && stale)
          ? 'Connecting to coven-ls…'
          : undefined;
  };

  context.subscriptions.push(
    output,
    server,
    sync,
    tree,
    treeView,
    transcripts,
    status,
    gauge,
    treeView.onDidChangeSelection(updateGauge),
    forkPrompts,
    vscode.commands.registerCommand('coven.answerFork', (forkId?: unknown) => forkPrompts.answer(typeof forkId === 'string' ? forkId : undefined)),
    vscode.window.registerFileDecorationProvider(tree),
    vscode.workspace.registerTextDocumentContentProvider(TRANSCRIPT_SCHEME, transcripts),
    vscode.workspace.registerTextDocumentContentProvider(CHANGES_SCHEME, review),
    sync.onDidChange((changes) => {
      tree.apply(changes);
      transcripts.apply(changes);
      forkPrompts.sweep();
      updateStatus();
      updateGauge();
    }),
    sync.onForkProposed((fork) => forkPrompts.ask(fork)),
    sync.onForkReviewing((fork) => void announceReview(fork, sync!)),
    server.onDidConnect(async () => {
      rebuilding = true;
      updateViewMessage();
      try {
        await sync!.rebuild();
      } finally {
        rebuilding = false;
        updateViewMessage();
      }
    }),
    server.onDidChangeState(() => {
      updateStatus();
      updateViewMessage();
    }),
    ...registerCommands({ server, sync, transcripts, review, treeView }),
    vscode.workspace.onDidGrantWorkspaceTrust(() => void server!.start()),
    watchSettings(server, sync),
  );
  void vscode.commands.executeCommand('setContext', 'coven.serverState', server.state);
  void onPythonInterpreterChange(() => {
    const command = vscode.workspace.getConfiguration('coven').get<string[]>('server.command') ?? [];
    if (command.length === 0) void server!.restart();
  }).then((d) => d && context.subscriptions.push(d));
  updateStatus();
  await server.start();
}

export async function deactivate(): Promise<void> {
  await server?.stop();
  server = undefined;
}

/** Restarts the server when a `coven.*` setting changes, after asking if sessions would be lost. */
function watchSettings(server: CovenServer, sync: SessionSync): vscode.Disposable {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const subscription = vscode.workspace.onDidChangeConfiguration((e) => {
    if (!affectsServer(e)) return;
    if (timer !== undefined) clearTimeout(timer);
    timer = setTimeout(async () => {
      timer = undefined;
      const busy = sync.model.sessions().filter((s) => ['starting', 'running', 'forking', 'queued', 'awaitingApproval'].includes(s.status));
      if (busy.length > 0) {
        const choice = await vscode.window.showWarningMessage(
          `Coven settings changed. Restarting coven-ls applies them, but stops ${busy.length} running ${busy.length === 1 ? 'session' : 'sessions'}.`,
          'Restart Now',
          'Later',
        );
        if (choice !== 'Restart Now') return;
      }
      await server.restart();
    }, RESTART_DEBOUNCE_MS);
  });
  return new vscode.Disposable(() => {
    if (timer !== undefined) clearTimeout(timer);
    subscription.dispose();
  });
}

/** Every `coven.*` setting except `coven.trace.server`, which the client applies live. */
function affectsServer(e: vscode.ConfigurationChangeEvent): boolean {
  const keys = ['server.command', 'server.tcp', 'server.tokenFile', 'claudePath', 'agent', 'agents', 'codexPath', 'forkMode', 'maxChildren', 'maxParallel', 'maxDepth', 'model', 'permissionMode', 'stateDir'];
  return [...keys, 'forkIsolation', 'mergeMode', 'worktreeSetup', 'forkLimits', 'cluster', 'placement'].some((key) => e.affectsConfiguration(`coven.${key}`));
}

async function askPermission(
  params: RequestPermissionParams,
  token: vscode.CancellationToken,
  sync: SessionSync | undefined,
): Promise<RequestPermissionResult> {
  const session = sync?.model.session(params.sessionId);
  const where = session ? ` in '${session.label ?? session.title}'` : '';
  const input = params.input !== null && typeof params.input === 'object' ? params.input : {};
  if (params.toolName === WORKTREE_SETUP_TOOL) return askSetupApproval(input as Record<string, unknown>, token);
  // An ACP agent's question offers the agent's own answers (allow once, always, reject, ...).
  const choice = await vscode.window.showWarningMessage(
    `${agentName(session?.agent)} wants to use ${params.toolName}${where}: ${describeToolInput(input, 200)}`,
    ...permissionButtons(params.options),
  );
  if (token.isCancellationRequested) return { allow: false, message: 'The permission request was withdrawn.' };
  return permissionAnswer(params.options, choice);
}

/**
 * A repository's worktree setup (`.cursor/worktrees.json`, `conductor.json`, `.codex/environments/environment.toml`) runs commands nobody typed before each fork
 * child starts: shown whole, its script included, in a modal question. The server remembers the answer per repository
 * and content.
 */
async function askSetupApproval(input: Record<string, unknown>, token: vscode.CancellationToken): Promise<RequestPermissionResult> {
  const file = typeof input.file === 'string' ? input.file : 'the repository';
  const command = typeof input.command === 'string' ? input.command : '';
  const script = typeof input.script === 'string' ? `\n\n${input.script}` : '';
  const choice = await vscode.window.showWarningMessage(
    `Run the worktree setup from ${file} before each fork child starts?`,
    { modal: true, detail: `${command}${script}` },
    'Allow Setup',
    "Don't Allow",
  );
  if (token.isCancellationRequested) return { allow: false, message: 'Denied: the question was withdrawn.' };
  if (choice === 'Allow Setup') return { allow: true };
  return choice === "Don't Allow" ? { allow: false, message: 'Refused by the user.' } : { allow: false, message: 'Denied: the question was dismissed.' };
}

/** The extension reviews forks itself (experimental.coven.review): the user must hear that one waits. */
async function announceReview(fork: ForkNode, sync: SessionSync): Promise<void> {
  const session = sync.model.session(fork.sessionId);
  const waiting = pendingChildren(fork);
  if (waiting.length === 0) return;
  const names = waiting.map((c) => `“${c.label ?? c.title}”`).join(', ');
  const choice = await vscode.window.showInformationMessage(
    `The fork of${session ? ` '${session.title}'` : ''} has ended: the changes of ${names} wait for your review before they reach the working tree.`,
    'Review Changes',
  );
  if (choice === undefined) return;
  // With one child waiting, its diff opens; with several, the command asks which.
  const still = pendingChildren(fork);
  await vscode.commands.executeCommand('coven.reviewChanges', still.length === 1 ? still[0]!.sessionId : fork.forkId);
}
