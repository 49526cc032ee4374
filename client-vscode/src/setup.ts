// The extension's own coven-ls for users who have none: set up from the bundled wheel with a
// progress notification, reused while it is current, rebuilt when broken or outdated. And
// "Coven: Check Setup". The decisions are bundled.ts's (unit-tested); this is the UI around them.

import * as vscode from 'vscode';

import {
  bundledWheel,
  createEnv,
  type EnvLayout,
  envLayout,
  findPython,
  inspectEnv,
  runProcess,
  SetupError,
} from './bundled';
import { type LaunchCommand, type LaunchProblem, MODULE_ARGS } from './launch';
import type { DoctorReport } from './protocol';
import { setupHtml } from './setupReport';

export const OWN_SOURCE = "the extension's own environment";

export class OwnServer {
  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly log: (line: string) => void,
    /** Pythons to make the environment with, best first (the Python extension's, python3, ...). */
    private readonly pythons: () => Promise<string[]>,
  ) {}

  get layout(): EnvLayout {
    return envLayout(this.context.globalStorageUri.fsPath);
  }

  private launch(): LaunchCommand {
    return { command: this.layout.python, args: MODULE_ARGS, source: OWN_SOURCE };
  }

  /** The environment, when it is there and current for the bundled wheel (nothing to set up). */
  async ready(): Promise<LaunchCommand | undefined> {
    const wheel = await bundledWheel(this.context.extensionPath);
    if (wheel === undefined) return undefined;
    const state = await inspectEnv(this.layout, wheel, runProcess);
    if (state.kind === 'ready') {
      this.log(`using the extension's coven-ls in ${this.layout.root}`);
      return this.launch();
    }
    if (state.kind === 'broken') this.log(`the extension's coven-ls environment is broken (${state.why}): it will be made again`);
    if (state.kind === 'outdated') this.log(`the extension's coven-ls environment has ${state.had}: it will be upgraded`);
    return undefined;
  }

  /** Sets it up (a cancellable progress notification); undefined when the .vsix has no wheel. */
  async setUp(): Promise<LaunchCommand | LaunchProblem | undefined> {
    const wheel = await bundledWheel(this.context.extensionPath);
    if (wheel === undefined) return undefined;
    const found = await findPython(await this.pythons(), runProcess);
    if ('tried' in found) {
      return {
        message: `coven-ls needs Python 3.10 or newer to set itself up, and none was found (${found.tried.join('; ')}). Install Python 3.10+ (or select one with the Python extension), then Retry.`,
        retry: true,
      };
    }
    this.log(`setting up coven-ls in ${this.layout.root} with ${found.command} (Python ${found.version}) from ${wheel}`);
    // The sessions view says what is happening meanwhile (its welcome content reads this key).
    void vscode.commands.executeCommand('setContext', 'coven.settingUp', true);
    try {
      await vscode.window.withProgress(
        { location: vscode.ProgressLocation.Notification, title: 'Setting up coven-ls', cancellable: true },
        async (progress, token) => {
          const abort = new AbortController();
          token.onCancellationRequested(() => abort.abort());
          progress.report({ message: `a Python ${found.version} environment of its own…` });
          await createEnv(found, wheel, this.layout, {
            signal: abort.signal,
            onLine: (line) => {
              this.log(`pip: ${line}`);
              progress.report({ message: line.length > 90 ? `${line.slice(0, 90)}…` : line });
            },
          });
        },
      );
    } catch (error) {
      const failure = error instanceof SetupError ? error : new SetupError(String(error));
      for (const line of failure.detail) this.log(`  ${line}`);
      const said = failure.detail.length > 0 ? ` pip's last words: ${failure.detail.slice(-2).join(' ')}` : '';
      return { message: `${failure.message}${said}`, retry: true };
    } finally {
      void vscode.commands.executeCommand('setContext', 'coven.settingUp', false);
    }
    this.log(`coven-ls is set up in ${this.layout.root}`);
    return this.launch();
  }
}

/** Runs `<server> doctor --json` for the workspace and shows its findings in a page. */
export async function showSetupCheck(launch: LaunchCommand | undefined, cannot: string | undefined): Promise<void> {
  const folder = vscode.workspace.workspaceFolders?.[0];
  const config = vscode.workspace.getConfiguration('coven', folder);
  let report: DoctorReport | undefined;
  let failure = cannot;
  const shown = launch === undefined ? 'coven-ls' : [launch.command, ...launch.args].join(' ');
  if (launch !== undefined) {
    const args = [...launch.args, 'doctor', '--json'];
    if (folder !== undefined) args.push('--root', folder.uri.fsPath);
    const stateDir = config.get<string>('stateDir')?.trim();
    if (stateDir) args.push('--state-dir', stateDir);
    const claudePath = config.get<string>('claudePath')?.trim();
    if (claudePath) args.push('--claude', claudePath);
    const done = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: 'Checking the Coven set-up…' },
      () => runProcess(launch.command, args, { timeoutMs: 90_000 }),
    );
    try {
      report = JSON.parse(done.stdout) as DoctorReport;
    } catch {
      failure = `${shown} doctor --json ${done.notFound ? 'could not be run' : `exited with code ${done.code}`}: ${done.stderr.trim().split('\n').at(-1) ?? ''}`;
    }
  }
  const panel = vscode.window.createWebviewPanel('coven.setup', 'Coven: Check Setup', vscode.ViewColumn.Active, {});
  panel.webview.html = setupHtml(report, shown, failure);
}
