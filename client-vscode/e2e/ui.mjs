// What both browser drivers (drive.mjs, firstrun.mjs) do to VS Code in headless Chromium: open
// it, take numbered screenshots, run palette commands, start a session.

import { mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

export const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set (run scripts/vscode-e2e.sh)`);
  return value;
};

export const STEP_MS = 120_000;

/** A browser on a fresh profile, one page, and the helpers bound to it. */
export async function openBrowser({ artifacts, prefix = '' }) {
  const { chromium } = createRequire(join(env('COVEN_E2E_TOOLS'), 'package.json'))('playwright-core');
  mkdirSync(artifacts, { recursive: true });
  const started = Date.now();
  const log = (message) => console.log(`[drive +${((Date.now() - started) / 1000).toFixed(1)}s] ${message}`);
  const context = await chromium.launchPersistentContext(env('COVEN_E2E_BROWSER_PROFILE'), {
    executablePath: env('COVEN_E2E_CHROMIUM'),
    headless: true,
    viewport: { width: 1600, height: 1000 },
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(STEP_MS);
  const browserLog = [];
  page.on('console', (m) => browserLog.push(`[${m.type()}] ${m.text()}`));
  page.on('pageerror', (e) => browserLog.push(`[pageerror] ${e.message}`));
  let shot = 0;
  /**
   * `hover`: a tooltip is showing, and is cleared (Escape) afterwards. `pointer`: the pointer stays
   * where it is (inline actions show), with no Escape after (it would also hide notifications).
   */
  const screenshot = async (name, { hover = false, pointer = false } = {}) => {
    const file = join(artifacts, `${prefix}${String(++shot).padStart(2, '0')}-${name}.png`);
    if (!hover && !pointer) await page.mouse.move(1100, 400); // no hover tooltip over the tree
    await page.screenshot({ path: file });
    log(`screenshot ${file}`);
    if (hover) {
      // Leave no tooltip behind for the next screenshot.
      await page.mouse.move(1100, 400);
      await page.keyboard.press('Escape');
    }
    if (pointer) await page.mouse.move(1100, 400);
  };
  const runCommand = async (title) => {
    await page.keyboard.press('F1');
    const input = page.locator('.quick-input-widget input');
    await input.waitFor({ state: 'visible' });
    await input.fill(`>${title}`);
    await page.locator('.quick-input-widget .monaco-list-row', { hasText: title }).first().waitFor();
    await page.keyboard.press('Enter');
  };
  /**
   * Starts a session from the palette; resolves once its row is in the tree. When the server
   * finds both agents, New Session asks which first: `agent` is the item to pick.
   */
  const newSession = async (prompt, { agent = 'Claude Code' } = {}) => {
    await runCommand('Coven: New Session');
    const widget = page.locator('.quick-input-widget');
    await widget.filter({ hasText: 'New Coven Session' }).waitFor();
    if (await widget.filter({ hasText: 'which agent?' }).count()) {
      log(`New Session asks which agent: ${agent}`);
      await widget.locator('.monaco-list-row', { hasText: agent }).first().click();
    }
    await widget.filter({ hasText: 'What should' }).waitFor();
    await widget.locator('input').fill(prompt);
    await page.keyboard.press('Enter');
    log(`waiting for the session "${prompt}"`);
    await page.locator(`.part.sidebar .monaco-list-row[aria-label^="${prompt.replace(/"/g, '\\"')}"]`).first().waitFor({ state: 'visible' });
  };
  /**
   * Runs a context-menu action on `target` until `shows` (what the action opens) is visible. A
   * click can be lost on a menu that is still opening (seen in CI: the menu item was clicked and
   * nothing ran): then the menu is opened again, the item hovered (which focuses it) and Enter
   * runs it.
   */
  const contextMenuAction = async (target, action, shows) => {
    for (let attempt = 1; ; attempt++) {
      await target.click({ button: 'right' });
      const item = page.locator(`.context-view .action-label[aria-label="${action}"]`);
      await item.waitFor();
      await page.waitForTimeout(300); // the menu settles (its opening animation)
      if (attempt === 1) await item.click();
      else {
        await item.hover();
        await page.keyboard.press('Enter');
      }
      if (await shows.waitFor({ timeout: 10_000 }).then(() => true, () => false)) return;
      if (attempt === 3) throw new Error(`${action} from the context menu never opened what it should`);
      log(`${action}: nothing opened after attempt ${attempt}, opening the menu again`);
      await page.keyboard.press('Escape');
    }
  };
  return { context, page, log, browserLog, screenshot, runCommand, newSession, contextMenuAction };
}
