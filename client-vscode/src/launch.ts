// Which command starts coven-ls, and, when it cannot start, a sentence that says exactly what to
// run. The user sees one notification per failure, so it has to be the right one.

import { execFile } from 'node:child_process';
import * as vscode from 'vscode';

export const MODULE_ARGS = ['-m', 'coven_ls'];
const MIN_PYTHON: [number, number] = [3, 10];

export interface LaunchCommand {
  command: string;
  args: string[];
  /** Where it came from, for messages: "coven.server.command", "the Python extension", "PATH". */
  source: string;
}

/** `coven.server.command` if set; else the Python extension's interpreter; else `python3` on PATH. */
export async function resolveLaunchCommand(log: (line: string) => void): Promise<LaunchCommand> {
  const folder = vscode.workspace.workspaceFolders?.[0];
  const configured = vscode.workspace.getConfiguration('coven', folder).get<unknown>('server.command');
  if (Array.isArray(configured) && configured.length > 0 && configured.every((x) => typeof x === 'string' && x !== '')) {
    const [command, ...args] = (configured as string[]).map((part) => expand(part, folder));
    return { command: command!, args, source: 'coven.server.command' };
  }
  const python = await pythonFromExtension(folder?.uri, log);
  if (python !== undefined) return { command: python, args: MODULE_ARGS, source: 'the Python extension' };
  return { command: 'python3', args: MODULE_ARGS, source: 'PATH' };
}

/** A setting's path with `${workspaceFolder}` and a leading `~` expanded. */
export function expand(part: string, folder: vscode.WorkspaceFolder | undefined): string {
  let out = part.replace(/\$\{workspaceFolder\}/g, folder?.uri.fsPath ?? '');
  if (out === '~' || out.startsWith('~/')) out = (process.env.HOME ?? '') + out.slice(1);
  return out;
}

/** The slice of the Python extension's API we use; typed here so we need no dependency on it. */
interface PythonApi {
  environments?: {
    getActiveEnvironmentPath(resource?: vscode.Uri): { id: string; path: string } | undefined;
    resolveEnvironment(env: { id: string; path: string } | string): Promise<{ executable?: { uri?: vscode.Uri } } | undefined>;
    onDidChangeActiveEnvironmentPath?: vscode.Event<unknown>;
  };
  settings?: { getExecutionDetails?(resource?: vscode.Uri): { execCommand?: string[] } };
}

async function pythonApi(): Promise<PythonApi | undefined> {
  // Looked up at run time, never declared: extensionDependencies would break offline installs.
  const ext = vscode.extensions.getExtension<PythonApi>('ms-python.python');
  if (ext === undefined) return undefined;
  return ext.isActive ? ext.exports : await ext.activate();
}

export async function pythonFromExtension(resource: vscode.Uri | undefined, log: (line: string) => void): Promise<string | undefined> {
  try {
    const api = await pythonApi();
    const envs = api?.environments;
    if (envs !== undefined) {
      const active = envs.getActiveEnvironmentPath(resource);
      if (active !== undefined) {
        const resolved = await envs.resolveEnvironment(active);
        const path = resolved?.executable?.uri?.fsPath ?? active.path;
        if (path) return path;
      }
    }
    const exec = api?.settings?.getExecutionDetails?.(resource)?.execCommand;
    if (exec?.[0]) return exec[0];
  } catch (error) {
    log(`The Python extension did not give an interpreter (${String(error)}); falling back to python3 on PATH.`);
  }
  return undefined;
}

/** Fires when the Python extension's selected interpreter changes (a reason to restart). */
export async function onPythonInterpreterChange(listener: () => void): Promise<vscode.Disposable | undefined> {
  try {
    return (await pythonApi())?.environments?.onDidChangeActiveEnvironmentPath?.(listener);
  } catch {
    return undefined;
  }
}

// --- preflight -------------------------------------------------------------------------------

export interface LaunchProblem {
  /** One or two sentences, ending with what to run or set. */
  message: string;
  /** A shell command that fixes it, when there is one. */
  fix?: string;
  /** The setting "Open Setting" shows (default: coven.server.command). */
  setting?: string;
  /** Setting up the extension's own coven-ls failed: offer Retry, Open Log and Check Setup. */
  retry?: boolean;
}

interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
  notFound: boolean;
}

function run(command: string, args: string[], cwd: string | undefined, timeoutMs: number): Promise<RunResult> {
  return new Promise((resolve) => {
    execFile(command, args, { cwd, timeout: timeoutMs, windowsHide: true, env: process.env }, (error, stdout, stderr) => {
      const err = error as (NodeJS.ErrnoException & { code?: unknown }) | null;
      resolve({
        code: err === null ? 0 : typeof err.code === 'number' ? err.code : null,
        stdout: String(stdout),
        stderr: String(stderr),
        notFound: err?.code === 'ENOENT' || err?.code === 'EACCES',
      });
    });
  });
}

const quoteArg = (s: string): string => (/^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`);

/**
 * Runs `<command> --version` before the language client starts it: a server that cannot start
 * fails here with a cause we can name, instead of as a closed pipe.
 */
export async function preflight(launch: LaunchCommand, cwd: string | undefined): Promise<LaunchProblem | undefined> {
  const shown = [launch.command, ...launch.args].map(quoteArg).join(' ');
  // In the server's own working directory: `python -m` imports from it, so a probe run elsewhere
  // (say, in a coven-ls checkout) could find a module the real start will not.
  const probe = await run(launch.command, [...launch.args, '--version'], cwd, 30_000);
  if (probe.code === 0 && /coven-ls/.test(probe.stdout + probe.stderr)) return undefined;
  if (probe.notFound) {
    return {
      message:
        launch.source === 'coven.server.command'
          ? `coven-ls could not start: '${launch.command}' (from coven.server.command) was not found or is not executable. Set coven.server.command to the command that runs coven-ls, e.g. ["/path/to/venv/bin/python", "-m", "coven_ls"].`
          : `coven-ls could not start: '${launch.command}' (from ${launch.source}) was not found. Install Python ${MIN_PYTHON.join('.')}+ with coven-ls, or set coven.server.command.`,
    };
  }
  const isPythonModule = launch.args.length >= 2 && launch.args.at(-2) === '-m' && launch.args.at(-1) === 'coven_ls';
  if (isPythonModule) {
    const version = await run(launch.command, ['-c', 'import sys; print("%d.%d" % sys.version_info[:2])'], cwd, 15_000);
    const [major, minor] = version.stdout.trim().split('.').map(Number);
    if (version.code === 0 && major !== undefined && minor !== undefined && (major < MIN_PYTHON[0] || (major === MIN_PYTHON[0] && minor < MIN_PYTHON[1]))) {
      return {
        message: `coven-ls needs Python ${MIN_PYTHON.join('.')} or newer, but '${launch.command}' (from ${launch.source}) is Python ${major}.${minor}. Select a newer interpreter, or set coven.server.command to one that has coven-ls installed.`,
      };
    }
    if (/No module named '?coven_ls/.test(probe.stderr)) {
      const fix = `${quoteArg(launch.command)} -m pip install coven-ls`;
      return {
        message: `coven-ls is not installed for '${launch.command}' (from ${launch.source}). Run \`${fix}\` (or \`pip install -e <your coven-ls checkout>\`), or set coven.server.command to a Python that has it.`,
        fix,
      };
    }
  }
  const lastLine = (probe.stderr.trim().split('\n').at(-1) ?? '').slice(0, 300);
  return {
    message: `coven-ls could not start: \`${shown} --version\` ${probe.code === null ? 'did not finish' : `exited with code ${probe.code}`}${lastLine ? `: ${lastLine}` : ''}. See the server log, and check coven.server.command.`,
  };
}
