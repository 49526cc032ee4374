// Drives a fresh VS Code (code-server) that has no coven-ls at all (issue 14): no
// coven.server.command, no coven_ls on PATH. The extension sets up its own coven-ls from the wheel
// the .vsix carries (a progress notification), a session runs on it, "Coven: Check Setup" shows
// coven-ls doctor's findings; a restart reuses the environment; a broken one (its Python deleted)
// is detected and set up again. scripts/vscode-e2e.sh then reads the server log for the reuse.

import { readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { env, openBrowser, STEP_MS } from './ui.mjs';

const URL_ = env('COVEN_E2E_URL');
const WORKSPACE = env('COVEN_E2E_WORKSPACE');
const ARTIFACTS = env('COVEN_E2E_ARTIFACTS');
/** The extension's own environment (in its global storage), which the broken-env step breaks. */
const OWN_ENV = env('COVEN_E2E_OWN_ENV');
/** code-server's user data, whose logs/ has the Coven Server output channel's file. */
const USER_DATA = env('COVEN_E2E_USER_DATA');
/** pip may have to download dependencies the first time: minutes, not seconds. */
const SETUP_MS = 600_000;
const PROMPT = 'Say hello from the bundled coven-ls.';

const { context, page, log, browserLog, screenshot, runCommand, newSession } = await openBrowser({ artifacts: ARTIFACTS, prefix: 'firstrun-' });
const sidebar = page.locator('.part.sidebar');
const settingUp = page.locator('.notification-toast', { hasText: 'Setting up coven-ls' });
const sessionDone = sidebar.locator(`.monaco-list-row[aria-label^="${PROMPT}, done"]`).first();

/** Waits until the Coven Server output channel's log file has `text` at least `count` times. */
async function serverLogSays(text, count) {
  const logs = join(USER_DATA, 'logs');
  for (const started = Date.now(); Date.now() - started < STEP_MS; await page.waitForTimeout(200)) {
    const file = readdirSync(logs, { recursive: true }).find((f) => String(f).endsWith('Coven Server.log'));
    if (file !== undefined && readFileSync(join(logs, String(file)), 'utf8').split(text).length - 1 >= count) return;
  }
  throw new Error(`the server log never said "${text}" ${count} time(s)`);
}

let failed = false;
try {
  log(`opening ${URL_}`);
  await page.goto(`${URL_}/?folder=${encodeURIComponent(WORKSPACE)}`);
  await page.locator('.monaco-workbench .part.activitybar').waitFor();
  await page.locator('.part.activitybar [aria-label^="Coven"]').first().click();

  log('the extension sets up its own coven-ls');
  await settingUp.waitFor({ timeout: SETUP_MS });
  await sidebar.getByText('Setting up coven-ls: a Python environment of its own').waitFor();
  await screenshot('setting-up');
  await sidebar.getByText('No sessions yet').waitFor({ timeout: SETUP_MS });
  await screenshot('set-up');

  log('a session runs on it');
  await newSession(PROMPT);
  await sessionDone.waitFor();
  await screenshot('session');

  log('Coven: Check Setup');
  await runCommand('Coven: Check Setup');
  const report = page.frameLocator('iframe.webview.ready').frameLocator('iframe').first();
  await report.getByText('is ready').waitFor({ timeout: 90_000 });
  await report.getByText('Claude Code authentication').waitFor();
  await screenshot('check-setup');
  await runCommand('View: Close All Editors');

  log('a restart reuses the environment');
  await runCommand('Coven: Restart Server');
  await serverLogSays("using the extension's coven-ls in", 1);
  await page.locator('.part.statusbar', { hasText: 'Coven: starting' }).waitFor({ state: 'hidden' });
  await sessionDone.waitFor(); // the tree, rebuilt from the restarted server's store
  if (await settingUp.count()) throw new Error('the restart set coven-ls up again instead of reusing it');

  log(`breaking the environment (deleting its Python in ${OWN_ENV})`);
  rmSync(join(OWN_ENV, 'bin', 'python'), { force: true });
  await runCommand('Coven: Restart Server');
  await settingUp.waitFor({ timeout: SETUP_MS });
  await screenshot('rebuilding');
  await sidebar.getByText('Connecting to coven-ls').waitFor({ state: 'hidden', timeout: SETUP_MS });
  await sessionDone.waitFor({ timeout: SETUP_MS });
  await screenshot('rebuilt');
  log('PASS');
} catch (error) {
  failed = true;
  console.error(`[firstrun] FAIL: ${error instanceof Error ? error.stack ?? error.message : String(error)}`);
  try {
    console.error(`[firstrun] notifications: ${await page.locator('.notifications-toasts').innerText({ timeout: 2000 })}`);
    await screenshot('failure');
  } catch {
    // the page itself may be gone
  }
} finally {
  writeFileSync(join(ARTIFACTS, 'firstrun-browser-console.log'), browserLog.join('\n') + '\n');
  await context.close();
}
process.exit(failed ? 1 : 0);
