// The extension's own coven-ls: the wheel the .vsix carries, installed into a private virtual
// environment in the extension's global storage. Pure logic over a process runner (no `vscode`
// here), so that every decision is unit-tested in plain node; setup.ts shows it to the user.

import { spawn } from 'node:child_process';
import { existsSync, promises as fs } from 'node:fs';
import * as path from 'node:path';

export const MIN_PYTHON: [number, number] = [3, 10];
/** Written last: an environment without it is half made (cancelled, failed, killed). */
const STAMP = 'coven-env.json';

export interface EnvLayout {
  root: string;
  python: string;
  stamp: string;
}

export function envLayout(storage: string, platform: NodeJS.Platform = process.platform): EnvLayout {
  const root = path.join(storage, 'coven-env');
  const python = platform === 'win32' ? path.join(root, 'Scripts', 'python.exe') : path.join(root, 'bin', 'python');
  return { root, python, stamp: path.join(root, STAMP) };
}

export interface Stamp {
  /** The wheel's file name: a new extension version carries another one. */
  wheel: string;
  /** The Python the environment was made with, and its version. */
  base: string;
  version: string;
}

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
  /** The command itself could not be run (ENOENT, EACCES). */
  notFound: boolean;
}

export type Runner = (command: string, args: string[], options?: { timeoutMs?: number }) => Promise<RunResult>;

export interface RunOptions {
  timeoutMs?: number;
  /** Each line the process prints, as it comes (pip's progress). */
  onLine?: (line: string) => void;
  signal?: AbortSignal;
}

/** Runs a process to its end; never rejects. */
export function runProcess(command: string, args: string[], options: RunOptions = {}): Promise<RunResult> {
  return new Promise((resolve) => {
    let stdout = '';
    let stderr = '';
    let partial = '';
    const child = spawn(command, args, { windowsHide: true, env: process.env, signal: options.signal, timeout: options.timeoutMs });
    const take = (chunk: Buffer, into: 'out' | 'err'): void => {
      const text = chunk.toString();
      if (into === 'out') stdout += text;
      else stderr += text;
      if (options.onLine === undefined) return;
      const lines = (partial + text).split(/\r?\n|\r/);
      partial = lines.pop() ?? '';
      for (const line of lines) if (line.trim()) options.onLine(line);
    };
    child.stdout.on('data', (c: Buffer) => take(c, 'out'));
    child.stderr.on('data', (c: Buffer) => take(c, 'err'));
    let notFound = false;
    child.on('error', (error: NodeJS.ErrnoException) => {
      notFound = error.code === 'ENOENT' || error.code === 'EACCES';
      stderr += `${error.message}\n`;
    });
    child.on('close', (code) => {
      if (partial.trim()) options.onLine?.(partial);
      resolve({ code: notFound ? null : code, stdout, stderr, notFound });
    });
  });
}

/** The wheel the .vsix carries (server/coven_ls-<version>-py3-none-any.whl), if any. */
export async function bundledWheel(extensionPath: string): Promise<string | undefined> {
  const folder = path.join(extensionPath, 'server');
  const names = await fs.readdir(folder).catch(() => [] as string[]);
  const wheel = names.filter((n) => /^coven_ls-.+\.whl$/.test(n)).sort().at(-1);
  return wheel === undefined ? undefined : path.join(folder, wheel);
}

export type EnvState =
  | { kind: 'ready' }
  | { kind: 'missing' }
  | { kind: 'outdated'; had: string }
  | { kind: 'broken'; why: string };

/** What the private environment is, for this wheel. */
export async function inspectEnv(layout: EnvLayout, wheel: string, run: Runner): Promise<EnvState> {
  if (!existsSync(layout.root)) return { kind: 'missing' };
  let stamp: Stamp;
  try {
    stamp = JSON.parse(await fs.readFile(layout.stamp, 'utf8')) as Stamp;
    if (typeof stamp.wheel !== 'string') throw new Error('no wheel in it');
  } catch {
    return { kind: 'broken', why: 'it was never finished (set-up cancelled or failed)' };
  }
  if (stamp.wheel !== path.basename(wheel)) return { kind: 'outdated', had: stamp.wheel };
  const probe = await run(layout.python, ['-m', 'coven_ls', '--version'], { timeoutMs: 30_000 });
  if (probe.code === 0 && /coven-ls/.test(probe.stdout + probe.stderr)) return { kind: 'ready' };
  const said = (probe.stderr.trim().split('\n').at(-1) ?? '').slice(0, 200);
  return { kind: 'broken', why: probe.notFound ? `its Python (${layout.python}) is gone` : `coven-ls does not run there${said ? `: ${said}` : ''}` };
}

export interface FoundPython {
  command: string;
  version: string;
}

/** The first candidate that is a Python ≥ 3.10; or, when none is, what each one was. */
export async function findPython(candidates: string[], run: Runner): Promise<FoundPython | { tried: string[] }> {
  const tried: string[] = [];
  for (const command of [...new Set(candidates)]) {
    const probe = await run(command, ['-c', 'import sys; print("%d.%d.%d" % sys.version_info[:3])'], { timeoutMs: 15_000 });
    const version = probe.stdout.trim();
    const [major, minor] = version.split('.').map(Number);
    if (probe.code === 0 && major !== undefined && minor !== undefined) {
      if (major > MIN_PYTHON[0] || (major === MIN_PYTHON[0] && minor >= MIN_PYTHON[1])) return { command, version };
      tried.push(`${command} is Python ${version}`);
    } else {
      tried.push(probe.notFound ? `${command} was not found` : `${command} did not run`);
    }
  }
  return { tried };
}

export class SetupError extends Error {
  constructor(
    message: string,
    /** pip's (or venv's) own last lines, for the log and the notification. */
    readonly detail: string[] = [],
  ) {
    super(message);
  }
}

/**
 * Makes the environment anew: a venv with `python`, the wheel and its dependencies installed by
 * pip, then the stamp. Whatever stops it (failure, cancel) leaves no half environment behind.
 */
export async function createEnv(python: FoundPython, wheel: string, layout: EnvLayout, options: RunOptions = {}): Promise<void> {
  await fs.rm(layout.root, { recursive: true, force: true });
  try {
    await fs.mkdir(path.dirname(layout.root), { recursive: true });
    const venv = await runProcess(python.command, ['-m', 'venv', layout.root], options);
    if (venv.code !== 0) throw new SetupError(venvProblem(python, venv), lastLines(venv.stderr));
    const pip = await runProcess(
      layout.python,
      ['-m', 'pip', 'install', '--disable-pip-version-check', '--no-input', '--progress-bar', 'off', wheel],
      options,
    );
    if (options.signal?.aborted) throw new SetupError('Setting up coven-ls was cancelled.');
    if (pip.code !== 0) throw new SetupError(pipProblem(pip.stdout + pip.stderr), lastLines(pip.stdout + pip.stderr));
    const stamp: Stamp = { wheel: path.basename(wheel), base: python.command, version: python.version };
    await fs.writeFile(layout.stamp, JSON.stringify(stamp, null, 2));
  } catch (error) {
    await fs.rm(layout.root, { recursive: true, force: true }).catch(() => undefined);
    if (options.signal?.aborted) throw new SetupError('Setting up coven-ls was cancelled.');
    throw error instanceof SetupError ? error : new SetupError(`Setting up coven-ls failed: ${String(error)}`);
  }
}

function venvProblem(python: FoundPython, venv: RunResult): string {
  const text = venv.stdout + venv.stderr;
  if (/ensurepip is not available|No module named venv/i.test(text)) {
    return `${python.command} (Python ${python.version}) cannot make virtual environments: install its venv module (on Debian and Ubuntu: sudo apt install python3-venv), then Retry.`;
  }
  if (/No space left on device/i.test(text)) return 'The disk is full: free some space, then Retry.';
  return `${python.command} -m venv failed (exit ${venv.code}). Open Log shows why.`;
}

/** A sentence for what went wrong in `pip install`, from its output. */
export function pipProblem(output: string): string {
  if (/No space left on device/i.test(output)) return 'The disk is full: free some space, then Retry.';
  if (/(NewConnectionError|Failed to establish a new connection|Temporary failure in name resolution|Name or service not known|ProxyError|SSLError|Connection refused|timed out)/i.test(output)) {
    return "pip could not reach the package index to install coven-ls's dependencies. Check your network (or pip's proxy and index settings, PIP_INDEX_URL), then Retry.";
  }
  if (/(No matching distribution found|Could not find a version that satisfies)/i.test(output)) {
    return "pip found no version of a dependency of coven-ls for this Python on the package index (is PIP_INDEX_URL a mirror without it?). Open Log shows which; then Retry.";
  }
  return 'pip could not install coven-ls (Open Log shows its output). Fix what it says, then Retry.';
}

export function lastLines(text: string, count = 6): string[] {
  return text.trim().split(/\r?\n/).filter((l) => l.trim()).slice(-count);
}
