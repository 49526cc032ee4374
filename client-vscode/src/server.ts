// The coven-ls process and the language client in front of it: start, stop, restart, and the one
// notification a user sees when it cannot run.

import * as vscode from 'vscode';
import {
  CloseAction,
  ErrorAction,
  LanguageClient,
  type LanguageClientOptions,
  ResponseError,
  type ServerOptions,
  State,
  type StaticFeature,
} from 'vscode-languageclient/node';

import { type AgentOffer, offersOf } from './agentChoice';
import { expand, type LaunchCommand, type LaunchProblem, preflight, resolveLaunchCommand } from './launch';
import {
  type CovenClientCapabilities,
  type CovenEvent,
  type CovenServerCapabilities,
  type Delta,
  type InitializationOptions,
  Method,
  PROTOCOL_VERSION,
  type ParamsOf,
  type RequestMethod,
  type RequestPermissionParams,
  type RequestPermissionResult,
  type ResultOf,
} from './protocol';
import type { OwnServer } from './setup';
import { connectTcp, defaultTokenFile, parseHostPort, readToken } from './tcp';

export type ServerState = 'stopped' | 'starting' | 'running' | 'failed' | 'untrusted';

/** Crashes within this window count towards giving up instead of restarting again. */
const CRASH_WINDOW_MS = 3 * 60_000;
const MAX_CRASHES = 3;
/** coven-ls closes every session on shutdown; the CLI may take a few seconds to flush. */
const STOP_TIMEOUT_MS = 10_000;

/**
 * vscode-languageclient pops up its own error notifications (some of them forced); we own every
 * message the user sees, so its errors only go to the log.
 */
class QuietLanguageClient extends LanguageClient {
  override error(message: string, data?: unknown): void {
    // It reports every exit as an error, the clean one after `exit` too.
    if (/exited with code 0\.$/.test(message)) super.info(message, data, false);
    else super.error(message, data, false);
  }
  override warn(message: string, data?: unknown): void {
    super.warn(message, data, false);
  }
}

/**
 * What makes this client a coven client rather than a plain LSP one:
 * - it answers `coven/requestPermission`, shows proposed forks itself (answering with
 *   `coven/decideFork`) and reviews a fork's changes itself (Review Changes, then
 *   `coven/applyChanges` / `coven/discardChanges`); without these the server would also ask
 *   through window/showMessageRequest, and the user would see every question twice;
 * - it does not take the server's standard-LSP stand-ins for editors without a coven client: no
 *   work-done progress per turn (the tree and the status bar show that), and none of the
 *   `coven.*` executeCommand mirrors, whose ids are this extension's own command ids (the
 *   language client would try to register them as VS Code commands and fail to start).
 */
const covenClientFeature: StaticFeature = {
  fillClientCapabilities(capabilities) {
    const experimental = (capabilities.experimental ?? {}) as Record<string, unknown>;
    const coven: CovenClientCapabilities = { ...(experimental.coven as CovenClientCapabilities | undefined), permissions: true, forks: true, review: true };
    capabilities.experimental = { ...experimental, coven };
    capabilities.window = { ...capabilities.window, workDoneProgress: false };
  },
  preInitialize(capabilities) {
    // Runs before every feature's initialize, so the executeCommand feature finds nothing to register.
    delete capabilities.executeCommandProvider;
  },
  initialize() {},
  getState() {
    return { kind: 'static' };
  },
  clear() {},
};

export function initializationOptions(config: vscode.WorkspaceConfiguration): InitializationOptions {
  const options: InitializationOptions = {};
  const text = (key: string): string | undefined => {
    const value = config.get<string>(key)?.trim();
    return value ? value : undefined;
  };
  const int = (key: string): number | undefined => {
    const value = config.get<number>(key);
    return typeof value === 'number' && Number.isInteger(value) ? value : undefined;
  };
  const claudePath = text('claudePath');
  if (claudePath) options.claudePath = claudePath;
  const agent = text('agent');
  if (agent) options.agent = agent;
  // Machine-scoped: each entry names a command to run. Sent as it is; the server says what is wrong
  // with an entry (a reserved name, no command).
  const agents = config.get<unknown>('agents');
  if (typeof agents === 'object' && agents !== null && !Array.isArray(agents) && Object.keys(agents).length > 0) {
    options.agents = agents as NonNullable<InitializationOptions['agents']>;
  }
  const codexPath = text('codexPath');
  if (codexPath) options.codexPath = codexPath;
  const model = text('model');
  if (model) options.model = model;
  const permissionMode = text('permissionMode');
  if (permissionMode) options.permissionMode = permissionMode as InitializationOptions['permissionMode'];
  const forkMode = text('forkMode');
  if (forkMode) options.forkMode = forkMode as InitializationOptions['forkMode'];
  const maxChildren = int('maxChildren');
  if (maxChildren !== undefined) options.maxChildren = maxChildren;
  const maxParallel = int('maxParallel');
  if (maxParallel !== undefined) options.maxParallel = maxParallel;
  const maxDepth = int('maxDepth');
  if (maxDepth !== undefined) options.maxDepth = maxDepth;
  // 0 (the default) is no limit: only the limits set are sent.
  const forkLimits: NonNullable<InitializationOptions['forkLimits']> = {};
  for (const name of ['childTokens', 'childCostUsd', 'childSeconds', 'forkCostUsd'] as const) {
    const value = config.get<number>(`forkLimits.${name}`);
    if (typeof value === 'number' && Number.isFinite(value) && value > 0) forkLimits[name] = name === 'childTokens' ? Math.floor(value) : value;
  }
  if (Object.keys(forkLimits).length > 0) options.forkLimits = forkLimits;
  const stateDir = text('stateDir');
  if (stateDir) options.stateDir = stateDir;
  // `auto` leaves the choice to the server: worktrees in a git repository with a commit, else shared.
  const forkIsolation = text('forkIsolation');
  if (forkIsolation === 'worktree' || forkIsolation === 'shared') options.forkIsolation = forkIsolation;
  const mergeMode = text('mergeMode');
  if (mergeMode === 'auto' || mergeMode === 'review') options.mergeMode = mergeMode;
  // Machine-scoped, sent as it is (the server says what is wrong with it); `placement` only with it.
  const cluster = config.get<unknown>('cluster');
  if (typeof cluster === 'object' && cluster !== null && !Array.isArray(cluster) && Object.keys(cluster).length > 0) {
    options.cluster = cluster as NonNullable<InitializationOptions['cluster']>;
    const placement = text('placement');
    if (placement === 'cluster' || placement === 'auto') options.placement = placement;
  }
  // Machine-scoped (a repository's .vscode/settings.json cannot name a command to run); `""` means
  // none, so it is passed as it is. An untrusted folder runs no setup at all, the repository's own
  // included.
  const worktreeSetup = config.get<string>('worktreeSetup');
  if (!vscode.workspace.isTrusted) options.worktreeSetup = '';
  else if (typeof worktreeSetup === 'string' && worktreeSetup.trim() !== 'auto') options.worktreeSetup = worktreeSetup.trim();
  return options;
}

/**
 * The "Coven Server" output channel, which also remembers what the server printed last since the
 * current start, so that a failure notification can quote the server instead of the transport.
 */
export class ServerOutput implements vscode.OutputChannel {
  private readonly channel: vscode.OutputChannel;
  private tail = '';

  constructor(readonly name: string) {
    this.channel = vscode.window.createOutputChannel(name);
  }

  /** Forget what the previous server printed. */
  markStart(): void {
    this.tail = '';
  }

  /** The last non-blank line the server wrote (its stderr), if any. */
  lastServerLine(): string | undefined {
    const lines = this.tail.split('\n').map((l) => l.trim()).filter((l) => l && !/^\[(Info|Warn|Error|Trace|coven)\b/.test(l));
    return lines.at(-1)?.slice(0, 300);
  }

  append(value: string): void {
    this.tail = (this.tail + value).slice(-4000);
    this.channel.append(value);
  }
  appendLine(value: string): void {
    this.append(value + '\n');
  }
  replace(value: string): void {
    this.channel.replace(value);
  }
  clear(): void {
    this.channel.clear();
  }
  show(columnOrPreserve?: vscode.ViewColumn | boolean, preserveFocus?: boolean): void {
    if (typeof columnOrPreserve === 'boolean' || columnOrPreserve === undefined) this.channel.show(columnOrPreserve);
    else this.channel.show(columnOrPreserve, preserveFocus);
  }
  hide(): void {
    this.channel.hide();
  }
  dispose(): void {
    this.channel.dispose();
  }
}

export class CovenServer implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private _state: ServerState = 'stopped';
  private _problem: string | undefined;
  private _agents: readonly AgentOffer[] = offersOf(undefined);
  private _cluster: string | undefined = undefined;
  private crashes: number[] = [];
  /** Whether the current client ever reached Running: a server that dies while starting is
   * broken, not crashed, and restarting it would only repeat the failure. */
  private reachedRunning = false;
  /** Start/stop/restart run one at a time, in the order asked. */
  private queue: Promise<void> = Promise.resolve();
  private notifying = false;

  private readonly stateEmitter = new vscode.EventEmitter<ServerState>();
  readonly onDidChangeState = this.stateEmitter.event;
  private readonly connectEmitter = new vscode.EventEmitter<void>();
  /** The server is (again) ready: the session list must be rebuilt from it. */
  readonly onDidConnect = this.connectEmitter.event;

  /** The command the last start ran (or would have), for "Coven: Check Setup". */
  launched: LaunchCommand | undefined;

  constructor(
    private readonly own: OwnServer,
    private readonly output: ServerOutput,
    private readonly onEvent: (event: CovenEvent) => void,
    private readonly onDelta: (delta: Delta) => void,
    private readonly onPermission: (params: RequestPermissionParams, token: vscode.CancellationToken) => Promise<RequestPermissionResult>,
  ) {}

  get state(): ServerState {
    return this._state;
  }

  /** Why the server is not running, when it failed. */
  get problem(): string | undefined {
    return this._problem;
  }

  start(): Promise<void> {
    return this.enqueue(() => this.doStart());
  }

  stop(): Promise<void> {
    return this.enqueue(() => this.doStop());
  }

  restart(): Promise<void> {
    return this.enqueue(async () => {
      await this.doStop();
      this.crashes = [];
      await this.doStart();
    });
  }

  async request<M extends RequestMethod>(method: M, params: ParamsOf<M>): Promise<ResultOf<M>> {
    const client = this.client;
    if (client === undefined || this._state !== 'running') {
      throw new Error(
        this._state === 'untrusted'
          ? 'Coven does not run agents in Restricted Mode. Trust this folder first.'
          : this._state === 'starting'
            ? 'coven-ls is still starting. Try again in a moment.'
            : `coven-ls is not running${this._problem ? `: ${this._problem}` : ''}. Use "Coven: Restart Server".`,
      );
    }
    return client.sendRequest<ResultOf<M>>(method, params);
  }

  showLog(): void {
    this.output.show(true);
  }

  /** The agents the running server offers (`capabilities.experimental.coven.agents`). */
  get agents(): readonly AgentOffer[] {
    return this._agents;
  }

  /** The cluster the running server may place fork children on (`capabilities.experimental.coven.cluster`), if any. */
  get cluster(): string | undefined {
    return this._cluster;
  }

  /** Says in the log which coven/* protocol the server speaks, and warns when it is not this client's. */
  private checkProtocolVersion(experimental: unknown): void {
    const coven = (experimental as { coven?: Partial<CovenServerCapabilities> } | undefined)?.coven;
    // Either shape (names, or {name, kind, fork, cost} from protocol version 2); a server older
    // than the field offers only Claude for sure.
    this._agents = offersOf(coven);
    this._cluster = typeof coven?.cluster === 'string' ? coven.cluster : undefined;
    const version = coven?.protocolVersion;
    this.log(`coven-ls speaks protocol version ${version ?? 'unknown'}`);
    if (version !== PROTOCOL_VERSION) {
      void vscode.window.showWarningMessage(
        `coven-ls speaks protocol version ${version ?? 'unknown'}, this extension version ${PROTOCOL_VERSION}: update the one that is older.`,
      );
    }
  }

  log(line: string): void {
    this.output.appendLine(`[coven ${new Date().toLocaleTimeString()}] ${line}`);
  }

  dispose(): void {
    void this.stop();
    this.stateEmitter.dispose();
    this.connectEmitter.dispose();
  }

  private enqueue(work: () => Promise<void>): Promise<void> {
    const next = this.queue.then(work, work);
    this.queue = next.catch(() => undefined);
    return next;
  }

  private setState(state: ServerState, problem?: string): void {
    this._problem = problem;
    if (this._state === state) return;
    this._state = state;
    void vscode.commands.executeCommand('setContext', 'coven.serverState', state);
    this.stateEmitter.fire(state);
  }

  private async doStart(): Promise<void> {
    if (this.client !== undefined) return;
    if (!vscode.workspace.isTrusted) {
      this.setState('untrusted');
      return;
    }
    this.setState('starting');
    const folder = vscode.workspace.workspaceFolders?.[0];
    const config = vscode.workspace.getConfiguration('coven', folder);
    const tcp = config.get<string>('server.tcp')?.trim();
    let serverOptions: ServerOptions;
    let token: string | undefined;
    if (tcp) {
      // A server someone else started (`coven-ls --tcp`), shared with other editors: connect to
      // it with its token instead of launching one.
      const address = parseHostPort(tcp);
      if (address === undefined) {
        this.fail({ message: `coven.server.tcp must be host:port (e.g. 127.0.0.1:7000), not '${tcp}'.`, setting: 'coven.server.tcp' });
        return;
      }
      const configured = config.get<string>('server.tokenFile')?.trim();
      const tokenFile = configured ? expand(configured, folder) : defaultTokenFile(address.port);
      try {
        token = await readToken(tokenFile);
      } catch (error) {
        this.fail({ message: `coven-ls: ${error instanceof Error ? error.message : String(error)}`, setting: 'coven.server.tokenFile' });
        return;
      }
      this.log(`connecting to coven-ls at ${address.host}:${address.port} (token from ${tokenFile})`);
      serverOptions = async () => {
        const socket = await connectTcp(address);
        return { reader: socket, writer: socket };
      };
    } else {
      // coven.server.command if set; else the extension's own coven-ls when it is set up; else
      // a Python that has coven-ls (the Python extension's, python3); else the own one, set up
      // now from the wheel the .vsix carries.
      let launch = await resolveLaunchCommand((line) => this.log(line));
      if (launch.source !== 'coven.server.command') launch = (await this.own.ready()) ?? launch;
      this.launched = launch;
      this.log(`starting ${[launch.command, ...launch.args].join(' ')} (from ${launch.source})`);
      let problem = await preflight(launch, folder?.uri.fsPath);
      if (problem !== undefined && launch.source !== 'coven.server.command') {
        this.log(`${problem.message} Setting up the extension's own coven-ls instead.`);
        const own = await this.own.setUp();
        if (own !== undefined && 'message' in own) problem = own;
        else if (own !== undefined) {
          launch = this.launched = own;
          problem = await preflight(launch, folder?.uri.fsPath);
        }
      }
      if (problem !== undefined) {
        this.fail(problem);
        return;
      }
      serverOptions = {
        command: launch.command,
        args: launch.args,
        // No `transport`: with TransportKind.stdio the client appends `--stdio`, which coven-ls
        // (stdio by default) rejects. Left out, it is still stdio, with our arguments only.
        // The server passes its environment to the CLI: ANTHROPIC_* and CLAUDE_* set for the
        // editor reach every session.
        options: { cwd: folder?.uri.fsPath, env: process.env },
      };
    }
    const clientOptions: LanguageClientOptions = {
      // coven-ls works on sessions, not documents.
      documentSelector: [],
      outputChannel: this.output,
      initializationOptions: { ...initializationOptions(config), ...(token === undefined ? {} : { token }) },
      initializationFailedHandler: () => false,
      errorHandler: {
        error: () => ({ action: ErrorAction.Continue, handled: true }),
        closed: () => this.onClosed(),
      },
    };
    const client = new QuietLanguageClient('coven', 'Coven Server', serverOptions, clientOptions);
    client.registerFeature(covenClientFeature);
    client.onNotification(Method.event, (event: CovenEvent) => this.onEvent(event));
    client.onNotification(Method.delta, (delta: Delta) => this.onDelta(delta));
    client.onRequest(Method.requestPermission, (params: RequestPermissionParams, token) => this.onPermission(params, token));
    client.onDidChangeState(({ newState }) => {
      if (this.client !== client) return;
      if (newState === State.Running) {
        this.reachedRunning = true;
        this.setState('running');
        this.connectEmitter.fire();
      } else if (newState === State.Starting) {
        this.setState('starting');
      }
    });
    this.client = client;
    this.reachedRunning = false;
    this.output.markStart();
    try {
      await client.start();
      this.checkProtocolVersion(client.initializeResult?.capabilities.experimental);
    } catch (error) {
      this.client = undefined;
      await client.dispose().catch(() => undefined);
      if (error instanceof ResponseError) {
        // `initialize` refused (a bad setting, a session database from a newer coven-ls): the
        // server's message says what to do.
        this.fail({ message: `coven-ls refused to start: ${error.message}` });
      } else {
        // The process died: what it printed says more than the client's "connection got disposed".
        const said = this.output.lastServerLine();
        const message = error instanceof Error ? error.message : String(error);
        this.fail({
          message: `coven-ls did not start: ${said ?? message}. See the server log, and check coven.server.command and the other coven.* settings.`,
        });
      }
    }
  }

  private async doStop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (client !== undefined) {
      try {
        await client.stop(STOP_TIMEOUT_MS);
      } catch (error) {
        this.log(`stopping coven-ls: ${String(error)}`);
      }
    }
    if (this._state !== 'untrusted') this.setState('stopped');
  }

  private onClosed(): { action: CloseAction; handled: true; message?: string } {
    if (!this.reachedRunning) return { action: CloseAction.DoNotRestart, handled: true };
    const now = Date.now();
    this.crashes = [...this.crashes.filter((t) => now - t < CRASH_WINDOW_MS), now];
    if (this.crashes.length < MAX_CRASHES) {
      this.log('coven-ls stopped unexpectedly; restarting it. Sessions that were running are gone.');
      return { action: CloseAction.Restart, handled: true };
    }
    this.client = undefined;
    this.fail({ message: `coven-ls stopped unexpectedly ${this.crashes.length} times in 3 minutes, so it was not restarted. The server log says why.` });
    return { action: CloseAction.DoNotRestart, handled: true };
  }

  private fail(problem: LaunchProblem): void {
    this.log(problem.message);
    this.setState('failed', problem.message);
    // One notification at a time: a failing restart loop must not stack them up.
    if (this.notifying) return;
    this.notifying = true;
    const actions = problem.retry
      ? ['Retry', 'Open Log', 'Check Setup']
      : ['Open Setting', 'Show Log', ...(problem.fix ? ['Copy Command'] : [])];
    void vscode.window.showErrorMessage(problem.message, ...actions).then(async (choice) => {
      this.notifying = false;
      if (choice === 'Open Setting') await vscode.commands.executeCommand('workbench.action.openSettings', problem.setting ?? 'coven.server.command');
      else if (choice === 'Show Log' || choice === 'Open Log') this.showLog();
      else if (choice === 'Retry') await this.restart();
      else if (choice === 'Check Setup') await vscode.commands.executeCommand('coven.checkSetup');
      else if (choice === 'Copy Command' && problem.fix) await vscode.env.clipboard.writeText(problem.fix);
    });
  }
}
