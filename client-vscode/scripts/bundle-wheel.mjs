// Builds the wheel of this checkout's coven-ls into server/, where the .vsix carries it: the
// extension sets up its own coven-ls from it for users who have none (src/setup.ts).
// Python: $COVEN_PYTHON, else the checkout's .venv, else python3.

import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const client = join(dirname(fileURLToPath(import.meta.url)), '..');
const checkout = join(client, '..');
const out = join(client, 'server');
const venv = join(checkout, '.venv', 'bin', 'python');
const python = process.env.COVEN_PYTHON || (existsSync(venv) ? venv : 'python3');

rmSync(out, { recursive: true, force: true });
mkdirSync(out);
execFileSync(python, ['-m', 'pip', 'wheel', '--quiet', '--no-deps', '--disable-pip-version-check', '--wheel-dir', out, checkout], {
  stdio: ['ignore', 'inherit', 'inherit'],
});
const wheels = readdirSync(out).filter((n) => n.endsWith('.whl'));
if (wheels.length !== 1 || !wheels[0].startsWith('coven_ls-')) throw new Error(`expected one coven_ls wheel in ${out}, found ${wheels.join(', ') || 'none'}`);
console.log(`bundled ${wheels[0]}`);
