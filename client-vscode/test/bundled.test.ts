import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';

import { bundledWheel, createEnv, envLayout, findPython, inspectEnv, pipProblem, type Runner, runProcess, SetupError } from '../src/bundled';
import { setupHtml } from '../src/setupReport';

/** A runner that answers from a table: command -> what it prints (or that it is missing). */
function fakeRunner(table: Record<string, { code?: number; stdout?: string; stderr?: string } | 'missing'>): Runner & { calls: string[] } {
  const calls: string[] = [];
  const run = async (command: string, args: string[]) => {
    calls.push([command, ...args].join(' '));
    const said = table[command];
    if (said === undefined || said === 'missing') return { code: null, stdout: '', stderr: '', notFound: true };
    return { code: said.code ?? 0, stdout: said.stdout ?? '', stderr: said.stderr ?? '', notFound: false };
  };
  return Object.assign(run, { calls });
}

async function scratch(): Promise<string> {
  return mkdtemp(join(tmpdir(), 'coven-bundled-'));
}

test('the environment lives in global storage, its Python where venv puts it', () => {
  assert.deepEqual(envLayout('/g', 'linux'), { root: '/g/coven-env', python: '/g/coven-env/bin/python', stamp: '/g/coven-env/coven-env.json' });
  assert.equal(envLayout('/g', 'win32').python, join('/g', 'coven-env', 'Scripts', 'python.exe'));
});

test('the bundled wheel is found in the extension, and its absence too', async () => {
  const dir = await scratch();
  try {
    assert.equal(await bundledWheel(dir), undefined);
    await mkdir(join(dir, 'server'));
    await writeFile(join(dir, 'server', 'coven_ls-0.2.0-py3-none-any.whl'), '');
    await writeFile(join(dir, 'server', 'other-1.0-py3-none-any.whl'), '');
    assert.equal(await bundledWheel(dir), join(dir, 'server', 'coven_ls-0.2.0-py3-none-any.whl'));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('an environment is missing, half made, outdated, broken, or ready', async () => {
  const dir = await scratch();
  const layout = envLayout(dir, 'linux');
  const wheel = '/ext/server/coven_ls-0.2.0-py3-none-any.whl';
  const works = fakeRunner({ [layout.python]: { stdout: 'coven-ls 0.2.0\n' } });
  try {
    assert.deepEqual(await inspectEnv(layout, wheel, works), { kind: 'missing' });
    await mkdir(layout.root, { recursive: true });
    assert.equal((await inspectEnv(layout, wheel, works)).kind, 'broken'); // no stamp: never finished
    await writeFile(layout.stamp, JSON.stringify({ wheel: 'coven_ls-0.1.0-py3-none-any.whl', base: 'python3', version: '3.11.7' }));
    assert.deepEqual(await inspectEnv(layout, wheel, works), { kind: 'outdated', had: 'coven_ls-0.1.0-py3-none-any.whl' });
    await writeFile(layout.stamp, JSON.stringify({ wheel: 'coven_ls-0.2.0-py3-none-any.whl', base: 'python3', version: '3.11.7' }));
    assert.deepEqual(await inspectEnv(layout, wheel, works), { kind: 'ready' });
    assert.deepEqual(works.calls, [`${layout.python} -m coven_ls --version`]);
    const gone = await inspectEnv(layout, wheel, fakeRunner({}));
    assert.equal(gone.kind, 'broken');
    assert.match((gone as { why: string }).why, /its Python .* is gone/);
    const failing = await inspectEnv(layout, wheel, fakeRunner({ [layout.python]: { code: 1, stderr: "ModuleNotFoundError: No module named 'msgspec'" } }));
    assert.match((failing as { why: string }).why, /does not run there: ModuleNotFoundError/);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('the first Python that is 3.10 or newer is taken; none says what each one was', async () => {
  const run = fakeRunner({ old: { stdout: '3.8.10\n' }, broken: { code: 1 }, good: { stdout: '3.12.1\n' }, later: { stdout: '3.13.0\n' } });
  assert.deepEqual(await findPython(['missing', 'old', 'broken', 'good', 'later'], run), { command: 'good', version: '3.12.1' });
  assert.deepEqual(await findPython(['missing', 'old', 'old'], run), { tried: ['missing was not found', 'old is Python 3.8.10'] });
});

test("pip's failures become sentences that say what to do", () => {
  assert.match(pipProblem('ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device'), /disk is full/);
  assert.match(
    pipProblem("WARNING: Retrying ... NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection>: Failed to establish a new connection')"),
    /could not reach the package index/,
  );
  assert.match(pipProblem('ERROR: No matching distribution found for claude-agent-sdk>=0.2.187'), /found no version of a dependency/);
  assert.match(pipProblem('something else'), /Open Log shows its output/);
});

test('a failed or cancelled set-up leaves no half environment', async () => {
  const dir = await scratch();
  const layout = envLayout(join(dir, 'storage'), 'linux');
  // A "Python" whose venv makes the folder and whose pip then fails like pip does offline.
  const fake = join(dir, 'python');
  await writeFile(
    fake,
    `#!/bin/sh\nif [ "$2" = venv ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python"; exit 0; fi\n` +
      `echo "ERROR: Could not find a version that satisfies the requirement msgspec" >&2; exit 1\n`,
  );
  await chmod(fake, 0o755);
  try {
    const lines: string[] = [];
    await assert.rejects(
      createEnv({ command: fake, version: '3.11.7' }, '/w/coven_ls-0.2.0-py3-none-any.whl', layout, { onLine: (l) => lines.push(l) }),
      (error: unknown) => error instanceof SetupError && /found no version of a dependency/.test(error.message) && error.detail.some((l) => l.includes('msgspec')),
    );
    assert.ok(lines.some((l) => l.includes('Could not find a version')), 'pip lines reach the progress');
    assert.deepEqual(await inspectEnv(layout, 'coven_ls-0.2.0-py3-none-any.whl', runProcess), { kind: 'missing' });

    const abort = new AbortController();
    abort.abort();
    await assert.rejects(createEnv({ command: fake, version: '3.11.7' }, '/w/x.whl', layout, { signal: abort.signal }), /cancelled/);
    assert.deepEqual(await inspectEnv(layout, 'x.whl', runProcess), { kind: 'missing' });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('runProcess gives each line as it comes, and says when a command is missing', async () => {
  const lines: string[] = [];
  const done = await runProcess('sh', ['-c', 'echo one; printf "two\\rthree\\n"; echo err >&2'], { onLine: (l) => lines.push(l) });
  assert.equal(done.code, 0);
  assert.deepEqual(lines.sort(), ['err', 'one', 'three', 'two']);
  const missing = await runProcess('/no/such/command', []);
  assert.equal(missing.notFound, true);
  assert.equal(missing.code, null);
  assert.ok(execFileSync('sh', ['-c', 'echo ok']).toString().includes('ok'));
});

test('Check Setup shows each finding with its fix, escaped, and the verdict', () => {
  const html = setupHtml(
    {
      ok: false,
      version: '0.2.0',
      findings: [
        { id: 'claude', status: 'ok', title: 'Claude Code CLI', found: '2.1.330 at /x/claude' },
        { id: 'auth', status: 'error', title: 'Claude Code authentication', found: 'not logged in', fix: 'Run `claude` and <login>' },
      ],
    },
    '/env/bin/python -m coven_ls',
  );
  assert.match(html, /is not ready: fix the ✗ lines/);
  assert.match(html, /<tr class="error"><td class="mark">✗<\/td><td><b>Claude Code authentication<\/b><br>not logged in<div class="fix">→ Run `claude` and &lt;login&gt;<\/div>/);
  assert.match(html, /<tr class="ok"><td class="mark">✓<\/td>/);
  assert.match(setupHtml(undefined, 'python3 -m coven_ls', "No module named 'coven_ls'"), /could not check the set-up: No module named &#39;coven_ls&#39;/);
});
