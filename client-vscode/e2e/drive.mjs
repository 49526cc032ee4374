// Drives a real VS Code (code-server) in headless Chromium through the user story of issue 4:
// open the Coven view, start a session from the palette, allow the tool it asks for, approve the
// proposed fork from its tree node, and check in the DOM that the fork and its children appear
// nested and finish, and that the parent carries on below the fork. Then a session as alive as the
// CLI: an API retry, an answer that grows in the tree and the transcript while it streams, and a
// background subagent nested under its Agent call, with the turn the CLI starts to report it.
// Then isolated children (issue 11): in the workspace's git repository, a fork whose children edit
// the same line, each in a worktree of its own: one child's changes merged into the working tree,
// the other's marked as a conflict, Review Changes opening the multi-file diff editor, and Open
// Conflicting Files; and, with coven.mergeMode set to review, a fork that waits until the user has
// looked at the diff and applied it.
//
// Started by scripts/vscode-e2e.sh, which sets up code-server, the scripted model and coven-ls.
// Every assertion reads what a user would see: tree rows (their aria-level is the nesting, their
// aria-label the label and description), notifications, the editor.

import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { questionsStory } from './questions.mjs';
import { env, openBrowser, STEP_MS } from './ui.mjs';

const URL_ = env('COVEN_E2E_URL');
const WORKSPACE = env('COVEN_E2E_WORKSPACE');
const ARTIFACTS = env('COVEN_E2E_ARTIFACTS');
/** code-server's remote ("Machine") settings, where coven.server.command lives. */
const MACHINE_SETTINGS = env('COVEN_E2E_MACHINE_SETTINGS');
/** Which stories run, in this order (all by default; a subset while working on one). */
const STORIES = (process.env.COVEN_E2E_STORIES || 'fork,live,isolation,questions').split(',');

const PROMPT = 'Prepare the release: check the notes, then the parser and the docs.';
const SESSION_TITLE = PROMPT.split('\n')[0];
const TASKS = ['Check the parser', 'Check the docs'];
const STREAM_PROMPT = 'Explain the release process.';
const SUBAGENT_PROMPT = 'Survey the TODOs in this workspace.';
/** The end of a block still streaming, in its tree row and in the transcript. */
const CURSOR = '▍';
// The isolation stories (e2e/fork.yaml says what each child does to the files).
const MERGE_PROMPT = 'Tidy the release notes in parallel.';
const MERGE_TASKS = ['Note the parser change', 'Reword the flag'];
const REVIEW_PROMPT = 'Prepare an upgrade guide for users.';
const REVIEW_TASK = 'Write the upgrade guide';

const { context, page, log, browserLog, screenshot, runCommand, newSession: startSession, contextMenuAction } = await openBrowser({ artifacts: ARTIFACTS });

const sidebar = page.locator('.part.sidebar');
const rows = sidebar.locator('.monaco-list-row');
/** The tree as [{index, level, label}] in display order (the list is virtualised: sort by index). */
async function treeRows() {
  const all = await rows.evaluateAll((els) =>
    els.map((el) => ({
      index: Number(el.getAttribute('data-index')),
      level: Number(el.getAttribute('aria-level')),
      label: el.getAttribute('aria-label') ?? el.textContent ?? '',
    })),
  );
  return all.sort((a, b) => a.index - b.index);
}

const quoted = (text) => text.replace(/"/g, '\\"');
const row = (labelPrefix) => sidebar.locator(`.monaco-list-row[aria-label^="${quoted(labelPrefix)}"]`);
const rowWith = (text) => sidebar.locator(`.monaco-list-row[aria-label*="${quoted(text)}"]`);
const topRow = (title) => sidebar.locator(`.monaco-list-row[aria-level="1"][aria-label^="${quoted(title)}"]`);

async function waitForRow(labelPrefix, what) {
  log(`waiting for ${what}: row "${labelPrefix}…"`);
  await row(labelPrefix).first().waitFor({ state: 'visible' });
}

async function clickInline(rowLocator, action) {
  // Hover only: a click on a row with children would also toggle its expansion.
  await rowLocator.hover();
  await rowLocator.locator(`.actions .action-label[aria-label="${action}"]`).click();
}

function assertNested(tree, { finished }) {
  const at = (prefix, from = 0) => {
    const i = tree.findIndex((r, k) => k >= from && r.label.startsWith(prefix));
    if (i < 0) throw new Error(`no row "${prefix}…" in the tree:\n${format(tree)}`);
    return i;
  };
  const session = at(SESSION_TITLE);
  const fork = at('⑂ Fork · 2 tasks', session);
  const children = TASKS.map((t) => at(`${t},`, fork));
  const expect = (cond, message) => {
    if (!cond) throw new Error(`${message}:\n${format(tree)}`);
  };
  expect(tree[fork].level === tree[session].level + 1, 'the fork is not a child of the session');
  for (const c of children) {
    expect(tree[c].level === tree[fork].level + 1, `child row ${tree[c].label} is not nested under the fork`);
    // Nothing between the fork and its child climbs back to the fork's level or above.
    expect(tree.slice(fork + 1, c).every((r) => r.level > tree[fork].level), `child row ${tree[c].label} is outside the fork's subtree`);
  }
  if (finished) {
    const results = at('Fork results', fork);
    expect(tree[results].level === tree[session].level + 1, 'the reintegration turn is not at the parent level');
    expect(children.every((c) => c < results), 'the parent did not continue below the fork');
  }
}

/** Drags the sidebar's sash so that descriptions fit (screenshots only; nothing depends on it). */
async function widenSidebar(width) {
  const box = await sidebar.boundingBox();
  if (!box) return;
  const y = box.y + box.height / 2;
  await page.mouse.move(box.x + box.width + 1, y);
  await page.mouse.down();
  await page.mouse.move(box.x + width, y, { steps: 5 });
  await page.mouse.up();
}

async function newSession(prompt) {
  await startSession(prompt);
  await waitForRow(prompt, `the session "${prompt}"`);
}

/** The rows of one top-level session's subtree (the session row first). */
function subtree(tree, title) {
  const start = tree.findIndex((r) => r.level === 1 && r.label.startsWith(title));
  if (start < 0) throw new Error(`no session "${title}" in the tree:\n${format(tree)}`);
  const end = tree.findIndex((r, k) => k > start && r.level === 1);
  return tree.slice(start, end < 0 ? undefined : end);
}

async function liveStory() {
  // (a) The model is overloaded, then answers in small pieces: the retry shows on the session, and
  // the answer grows in its tree row and in the transcript while it streams.
  log('New Session whose answer streams after the API was overloaded');
  await runCommand('Notifications: Clear All Notifications'); // the broken setting's, from before
  await widenSidebar(760); // room for the retry and the growing text
  await newSession(STREAM_PROMPT);
  await rowWith('API overloaded — retrying in').first().waitFor();
  await screenshot('api-retry');
  // Polled rather than awaited on a selector: the log then shows what the tree went through.
  for (let last = '', started = Date.now(); ; ) {
    const rows = subtree(await treeRows(), STREAM_PROMPT);
    const now = format(rows);
    if (now !== last) log(`the streaming session:\n${now}`);
    last = now;
    if (rows.some((r) => r.label.includes(CURSOR))) break;
    if (Date.now() - started > STEP_MS) throw new Error(`the answer never showed while it streamed:\n${now}`);
    await page.waitForTimeout(100);
  }
  log('the answer streams: opening the transcript while it does');
  await clickInline(topRow(STREAM_PROMPT), 'Open Transcript');
  const transcript = page.locator('.editor-group-container .monaco-editor .view-lines', { hasText: 'Explain the release process' });
  await transcript.filter({ hasText: CURSOR }).first().waitFor();
  await page.waitForTimeout(5000); // more pieces, in both
  const midTree = subtree(await treeRows(), STREAM_PROMPT);
  const midText = await transcript.first().innerText();
  await screenshot('streaming');
  const growing = midTree.find((r) => r.label.includes(CURSOR));
  if (!growing) throw new Error(`no growing row while the answer streamed:\n${format(midTree)}`);
  if (!midText.includes(CURSOR) || midText.includes('start again from step 3')) {
    throw new Error(`the transcript was not mid-stream at the screenshot:\n${midText}`);
  }
  if (!(await rowWith(CURSOR).count())) throw new Error('the answer had finished streaming by the screenshot');
  const streamingTurn = midTree.find((r) => r.level === 2);
  if (growing.level !== streamingTurn.level + 1) throw new Error(`the growing row is not in its turn:\n${format(midTree)}`);
  await waitForRow(`${STREAM_PROMPT}, done`, 'the streamed answer to end');
  await transcript.filter({ hasText: 'start again from step 3' }).first().waitFor();
  const after = subtree(await treeRows(), STREAM_PROMPT);
  if (after.some((r) => r.label.includes(CURSOR) || /retrying/.test(r.label))) {
    throw new Error(`pieces or the retry outlived the answer:\n${format(after)}`);
  }
  log(`streamed session:\n${format(after)}`);
  // The turn's tooltip: its cost, time and tokens. (Hovers are VS Code's to time: not a failure.)
  await sidebar.locator(`.monaco-list-row[aria-level="2"][aria-label^="${quoted(STREAM_PROMPT)}"]`).first().hover();
  const turnHover = page.locator('.monaco-hover, .workbench-hover', { hasText: 'Tokens' }).first();
  if (await turnHover.waitFor({ timeout: 15_000 }).then(() => true, () => false)) await screenshot('streamed-done', { hover: true });
  else await screenshot('streamed-done');

  // (b) The CLI's Agent tool in the background: the subagent shows under its Agent call while
  // the turn that started it is over, then the CLI reports it in a turn of its own.
  log('New Session that starts a background subagent');
  await newSession(SUBAGENT_PROMPT);
  await waitForRow('Find TODOs', 'the subagent under its Agent call');
  await waitForRow('Let me scan the workspace.', "the subagent's own message");
  await waitForRow(`${SUBAGENT_PROMPT}, 1 subagent running`, 'the session to wait for its subagent');
  await page.waitForTimeout(500);
  const running = subtree(await treeRows(), SUBAGENT_PROMPT);
  const at = (prefix) => {
    const i = running.findIndex((r) => r.label.startsWith(prefix));
    if (i < 0) throw new Error(`no row "${prefix}…" in the session:\n${format(running)}`);
    return running[i];
  };
  const agent = at('▶ Agent');
  const sub = at('Find TODOs');
  const said = at('Let me scan the workspace.');
  if (sub.level !== agent.level + 1 || said.level !== sub.level + 1) {
    throw new Error(`the subagent is not nested under its Agent call:\n${format(running)}`);
  }
  log(`subagent running:\n${format(running)}`);
  // A running subagent offers Stop Subagent on its row (coven/stopTask).
  await row('Find TODOs,').first().hover();
  await row('Find TODOs,').first().locator('.actions .action-label[aria-label="Stop Subagent"]').waitFor();
  await screenshot('subagent-running', { hover: true });
  await waitForRow('Find TODOs, done', 'the subagent to finish');
  await waitForRow('Background task completed', 'the turn the CLI started to report it');
  await waitForRow('The background agent is done', "the model's report");
  await waitForRow(`${SUBAGENT_PROMPT}, done`, 'the session to settle');
  const done = subtree(await treeRows(), SUBAGENT_PROMPT);
  log(`subagent done:\n${format(done)}`);
  await clickInline(topRow(SUBAGENT_PROMPT), 'Open Transcript');
  await page.locator('.editor-group-container .monaco-editor .view-lines', { hasText: 'Subagent: Find TODOs' }).first().waitFor();
  await screenshot('subagent-done');
  // Its tooltip: tokens, tool uses, time. (Hovers are VS Code's to time: not a failure if none.)
  await row('Find TODOs, done').first().hover();
  const hover = page.locator('.monaco-hover, .workbench-hover', { hasText: 'Subagent' }).first();
  if (await hover.waitFor({ timeout: 15_000 }).then(() => true, () => false)) await screenshot('subagent-tooltip', { hover: true });
  else log('no tooltip showed on the subagent row; no screenshot of it');

  const status = await page.locator('.part.statusbar').innerText();
  if (!/Coven.*tokens/s.test(status)) throw new Error(`no token total in the status bar: ${status}`);
}

/** Allows the Bash call a fork child asks for (each child asks for its own). */
async function allowBash(task) {
  const question = page.locator('.notification-toast', { hasText: `Claude wants to use Bash in '${task}'` });
  await question.waitFor();
  await question.locator('.monaco-button', { hasText: 'Allow' }).click();
}

/** Waits for the multi-file diff editor that Review Changes opened, showing `texts`. */
async function waitForDiff(title, texts) {
  await page.locator('.tabs-container .tab', { hasText: title }).first().waitFor();
  for (const text of texts) await page.locator('.editor-group-container .monaco-editor .view-lines', { hasText: text }).first().waitFor();
}

const workspaceFile = (name) => readFileSync(join(WORKSPACE, name), 'utf8');

/** Approves the fork the model proposed in the session `title`, from its tree node. */
async function approveFork(taskCount) {
  const proposed = `⑂ Fork · ${taskCount} ${taskCount === 1 ? 'task' : 'tasks'}, proposed`;
  await waitForRow(proposed, 'the proposed fork');
  await clickInline(row(proposed).first(), 'Approve Fork');
}

async function isolationStory() {
  // (a) Merge mode auto: two children change the same line of RELEASE.md in their worktrees; the
  // first is merged into the working tree, the second clashes with it and is left on its branch.
  log('New Session whose fork children edit files, each in a worktree of its own');
  await runCommand('Notifications: Clear All Notifications');
  await newSession(MERGE_PROMPT);
  await approveFork(2);
  for (const task of MERGE_TASKS) await allowBash(task);
  await runCommand('Notifications: Clear All Notifications');
  const [parser, flag] = MERGE_TASKS;
  await waitForRow(`${parser}, done · +4 −1 · 2 files · applied`, 'the first child, merged');
  await waitForRow(`${flag}, done · +1 −1 · 1 file · conflict`, 'the second child, in conflict');
  await waitForRow('⑂ Fork · 2 tasks, done · 1 applied · 1 conflict', 'the fork, with what became of each child');
  await waitForRow(`${MERGE_PROMPT}, done`, 'the parent to read the results');
  const merged = subtree(await treeRows(), MERGE_PROMPT);
  log(`merged fork:\n${format(merged)}`);
  // What the user has on disk: the first child's work, not the second's.
  const notes = workspaceFile('RELEASE.md');
  if (!notes.includes('(the parser accepts it)') || notes.includes('shows what would change')) {
    throw new Error(`RELEASE.md is not the first child's version:\n${notes}`);
  }
  if (!workspaceFile('PARSER.md').includes('Empty input is handled.')) throw new Error('PARSER.md did not reach the working tree');
  await screenshot('isolation-merged');
  await row(`${flag}, done`).first().hover();
  const conflictHover = page.locator('.monaco-hover, .workbench-hover', { hasText: 'Conflicts' }).first();
  if (await conflictHover.waitFor({ timeout: 15_000 }).then(() => true, () => false)) await screenshot('isolation-conflict-tooltip', { hover: true });
  else log('no tooltip showed on the conflicting child; no screenshot of it');

  log('Review Changes on the merged child');
  await clickInline(row(`${parser}, done`).first(), 'Review Changes');
  await waitForDiff(`${parser}: +4 −1 (2 files)`, ['Empty input is handled.', '(the parser accepts it)']);
  await screenshot('isolation-diff');

  log('Open Conflicting Files on the other child');
  await clickInline(row(`${flag}, done`).first(), 'Open Conflicting Files');
  await page.locator('.tabs-container .tab.active', { hasText: 'RELEASE.md' }).waitFor();
  await page.locator('.editor-group-container .monaco-editor .view-lines', { hasText: '(the parser accepts it)' }).first().waitFor();
  await screenshot('isolation-conflicting-file');

  // (b) Merge mode review: the fork waits until the user has looked at the child's changes.
  log('coven.mergeMode = review (the server restarts)');
  await runCommand('View: Close All Editors');
  await runCommand('Notifications: Clear All Notifications');
  const settings = JSON.parse(readFileSync(MACHINE_SETTINGS, 'utf8'));
  writeFileSync(MACHINE_SETTINGS, JSON.stringify({ ...settings, 'coven.mergeMode': 'review' }, null, 2));
  // The restart shows "Connecting…" above the tree until the rebuild is done (a short while: if it
  // came and went unseen, the rows below still say whether the new server has the sessions).
  await sidebar.getByText('Connecting to coven-ls').waitFor({ timeout: 30_000 }).catch(() => log('did not see the server restart'));
  await sidebar.getByText('Connecting to coven-ls').waitFor({ state: 'hidden' });
  await waitForRow(`${parser}, done · +4 −1 · 2 files · applied`, 'the merged child, rebuilt from the store');

  await newSession(REVIEW_PROMPT);
  await approveFork(1);
  // The proposal's toast out of the way before the child runs: cleared after its Bash call, a
  // quick child's review announcement (awaited below) could be cleared with it.
  await runCommand('Notifications: Clear All Notifications');
  await allowBash(REVIEW_TASK);
  await waitForRow(`${REVIEW_TASK}, done · +6 −0 · 2 files · pending review`, 'the child, waiting for review');
  await waitForRow(`${REVIEW_PROMPT}, fork changes to review`, 'the parent, waiting for the review');
  await waitForRow('⑂ Fork · 1 task, 1 child to review', 'the fork, waiting for the review');
  if (existsSync(join(WORKSPACE, 'UPGRADE.md'))) throw new Error('UPGRADE.md reached the working tree before it was applied');
  const announcement = page.locator('.notification-toast', { hasText: 'wait for your review' });
  await announcement.waitFor();
  await row(`${REVIEW_TASK}, done`).first().hover();
  await row(`${REVIEW_TASK}, done`).first().locator('.actions .action-label[aria-label="Apply Changes"]').waitFor();
  await screenshot('review-pending', { pointer: true });

  log('Review Changes from the notification, then Apply');
  await announcement.locator('.monaco-button', { hasText: 'Review Changes' }).click();
  await waitForDiff(`${REVIEW_TASK}: +6 −0 (2 files)`, ['# Upgrading to 2.0']);
  const decision = page.locator('.notification-toast', { hasText: `Apply the changes of '${REVIEW_TASK}'` });
  await decision.locator('.monaco-button', { hasText: 'Discard' }).waitFor();
  await screenshot('review-diff');
  await decision.locator('.monaco-button', { hasText: 'Apply' }).first().click();
  await waitForRow(`${REVIEW_TASK}, done · +6 −0 · 2 files · applied`, 'the child, applied');
  await waitForRow('⑂ Fork · 1 task, done · 1 applied', 'the fork to finish');
  await waitForRow(`${REVIEW_PROMPT}, done`, 'the parent to read the results');
  if (!workspaceFile('UPGRADE.md').includes('# Upgrading to 2.0')) throw new Error('UPGRADE.md did not reach the working tree');
  log(`reviewed fork:\n${format(subtree(await treeRows(), REVIEW_PROMPT))}`);
  await screenshot('review-applied');
}

/** Issue 4: a session, a permission, a fork approved from the tree, a fork by hand, a broken setting. */
async function forkStory() {
  log('New Session from the palette');
  await startSession(PROMPT);
  await waitForRow(SESSION_TITLE, 'the new session');

  log('waiting for the permission question');
  const permission = page.locator('.notification-toast', { hasText: 'Claude wants to use Bash' });
  await permission.waitFor();
  await screenshot('permission');
  await permission.locator('.monaco-button', { hasText: 'Allow' }).click();

  await waitForRow('⑂ Fork · 2 tasks, proposed', 'the proposed fork');
  await page.locator('.notification-toast', { hasText: 'Claude proposes to fork' }).waitFor();
  await screenshot('fork-proposed');

  log('approving the fork from its tree node');
  await clickInline(row('⑂ Fork · 2 tasks, proposed'), 'Approve Fork');

  for (const task of TASKS) await waitForRow(`${task},`, `child "${task}"`);
  await screenshot('fork-running');
  assertNested(await treeRows(), { finished: false });

  await waitForRow('⑂ Fork · 2 tasks, done', 'the fork to finish');
  for (const task of TASKS) await waitForRow(`${task}, done`, `child "${task}" to finish`);
  await waitForRow('Both checks passed', "the parent's answer after the fork");
  await waitForRow(`${SESSION_TITLE}, done`, 'the parent to finish');
  const tree = await treeRows();
  assertNested(tree, { finished: true });
  log(`final tree:\n${format(tree)}`);
  await screenshot('fork-done');

  log('opening the transcript');
  await clickInline(sidebar.locator(`.monaco-list-row[aria-level="1"][aria-label^="${SESSION_TITLE}"]`), 'Open Transcript');
  await page.locator('.monaco-editor .view-lines', { hasText: '⑂ Fork · 2 tasks' }).first().waitFor();
  await screenshot('transcript');

  // A fork by hand, from an earlier message: the context menu, the task editor, coven/fork.
  log('Fork from Here on the first assistant message');
  await contextMenuAction(
    row('Let me check the release notes first.'),
    'Fork from Here',
    page.locator('.quick-input-widget', { hasText: 'The first task' }),
  );
  await page.locator('.quick-input-widget input').fill('Double-check the notes');
  await page.keyboard.press('Enter');
  await page.locator('.quick-input-widget .monaco-list-row', { hasText: 'Fork with 1 task' }).waitFor();
  await page.keyboard.press('Enter'); // the first item accepts
  // Then how the children start: the first item (continue the conversation) is the default.
  await page.locator('.quick-input-widget', { hasText: 'How should the children start?' }).waitFor();
  await page.keyboard.press('Enter');
  await waitForRow('⑂ Fork · 1 task, done', 'the fork by hand to finish');
  await waitForRow('Double-check the notes, done', 'its child');
  const manual = await treeRows();
  const by = (prefix) => manual.findIndex((r) => r.label.startsWith(prefix));
  if (manual[by('Double-check the notes')].level !== manual[by('⑂ Fork · 1 task')].level + 1) {
    throw new Error(`the child of the fork by hand is not nested under it:\n${format(manual)}`);
  }
  // Settle first: with a turn running, the settings change below would ask before restarting.
  await waitForRow(`${SESSION_TITLE}, done`, 'the parent to finish its second reintegration');
  await screenshot('fork-from-here');

  const status = await page.locator('.part.statusbar').innerText();
  if (!/Coven/.test(status)) throw new Error(`no Coven item in the status bar: ${status}`);

  // A broken setting: the server restarts on its own (debounced), fails its preflight, and says
  // exactly what is wrong, once; fixing the setting brings it back (a fresh server, so no sessions).
  log('breaking coven.server.command');
  const good = readFileSync(MACHINE_SETTINGS, 'utf8');
  const broken = { ...JSON.parse(good), 'coven.server.command': ['/nonexistent/python3', '-m', 'coven_ls'] };
  writeFileSync(MACHINE_SETTINGS, JSON.stringify(broken, null, 2));
  const failure = page.locator('.notification-toast', { hasText: "'/nonexistent/python3' (from coven.server.command) was not found" });
  await failure.waitFor();
  await failure.locator('.monaco-button', { hasText: 'Open Setting' }).waitFor();
  await sidebar.getByText('coven-ls could not start').waitFor({ timeout: 10_000 }).catch(() => {
    // The welcome text only shows once the tree is empty; the old sessions may still be listed.
  });
  await page.waitForTimeout(1500); // a restart loop would stack up more notifications by now
  const toasts = await page.locator('.notification-toast', { hasText: 'coven-ls' }).count();
  if (toasts !== 1) throw new Error(`expected one notification about coven-ls, saw ${toasts}`);
  await screenshot('server-failed');

  log('restoring coven.server.command');
  writeFileSync(MACHINE_SETTINGS, good);
  // Sessions outlive the server (it keeps them in its store): the client rebuilds the tree from
  // coven/listSessions + coven/getEvents, fork and children nested as before.
  // "not running" gives way to "Connecting…" at once, which stays until the rebuild is done.
  await sidebar.getByText('coven-ls is not running').waitFor({ state: 'hidden' });
  await sidebar.getByText('Connecting to coven-ls').waitFor({ state: 'hidden' });
  await waitForRow('⑂ Fork · 2 tasks, done', 'the rebuilt fork');
  for (const task of TASKS) await waitForRow(`${task}, done`, `rebuilt child "${task}"`);
  assertNested(await treeRows(), { finished: true });
  await screenshot('rebuilt-after-restart');
}

const format = (tree) => tree.map((r) => `${'  '.repeat(Math.max(0, r.level - 1))}${r.label}`).join('\n');

let failed = false;
try {
  log(`opening ${URL_}`);
  await page.goto(`${URL_}/?folder=${encodeURIComponent(WORKSPACE)}`);
  await page.locator('.monaco-workbench .part.activitybar').waitFor();
  log('workbench is up');

  await page.locator('.part.activitybar [aria-label^="Coven"]').first().click();
  await widenSidebar(520);
  log('waiting for coven-ls to start (the view says so when it is ready)');
  await sidebar.getByText('No sessions yet').waitFor();
  await screenshot('empty-view');

  if (STORIES.includes('fork')) await forkStory();

  if (STORIES.includes('live')) await liveStory();
  if (STORIES.includes('isolation')) await isolationStory();
  if (STORIES.includes('questions')) {
    await questionsStory({ page, log, screenshot, runCommand, contextMenuAction, newSession: startSession, sidebar, row, rowWith, topRow, waitForRow, clickInline, treeRows, subtree, format, workspace: WORKSPACE });
  }
  log('PASS');
} catch (error) {
  failed = true;
  console.error(`[drive] FAIL: ${error instanceof Error ? error.stack ?? error.message : String(error)}`);
  try {
    console.error(`[drive] tree at failure:\n${format(await treeRows())}`);
    console.error(`[drive] notifications: ${await page.locator('.notifications-toasts').innerText({ timeout: 2000 })}`);
    await screenshot('failure');
  } catch {
    // the page itself may be gone
  }
} finally {
  writeFileSync(join(ARTIFACTS, 'browser-console.log'), browserLog.join('\n') + '\n');
  await context.close();
}
process.exit(failed ? 1 : 0);
