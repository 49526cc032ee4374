// Isolated fork children (issue 11): each child works in a git worktree, and its changes are
// merged into the parent's working tree or wait for the user's review. First the recording of a
// real coven-ls in merge mode review (review.jsonl: one child applied, one discarded); then the
// cases it does not show (a conflict, an older listing, shared mode, announcements), built by hand
// with ./events.ts, each event shaped like protocol.md's examples ("Isolation: a worktree per
// child"), ids included. Menus are checked through package.json's own `when` clauses, as VS Code
// matches them.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';

import {
  applyOutcome,
  type DiffEntry,
  diffPlan,
  parseSide,
  shownSides,
  sideLocation,
  sideText,
} from '../src/changes';
import { DISCARD_WORK, deleteParams, discardQuestion, KEEP_WORK, keptMessage, unappliedWork } from '../src/deletion';
import { type ChildChanges, CovenModel, type ForkNode, mergeStateOf, type SessionNode } from '../src/model';
import { present, sessionIcon, summarize } from '../src/present';
import type { CovenEvent, GetChangesResult, SessionInfo } from '../src/protocol';
import { type ServerConnection, SessionSync } from '../src/sync';
import { renderTranscript } from '../src/transcript';
import { info, Stream } from './events';
import { afterEvent, type EventOf, loadFixture, packageRoot, replay, rootOf } from './fixtures';

// --- protocol.md's example ids and payloads -----------------------------------------------------

const PARENT = 's-3f9a1c02b7de';
const DOCS = 's-a1b2c3d4e5f6';
const BUGS = 's-b2c3d4e5f6a7';
const FORK = 'f-0c1d2e3f4a5b';
const REPOSITORY = '/home/me/project';

const worktreeOf = (n: number, slug: string) => ({
  path: `/home/me/.local/state/coven-ls/worktrees/${FORK}/${n}-${slug}`,
  branch: `coven/${FORK}/${n}-${slug}`,
  base: '9c1e4f0a7b2d',
  repository: REPOSITORY,
});
const DOCS_WORKTREE = worktreeOf(1, 'write-the-docs');
const BUGS_WORKTREE = worktreeOf(2, 'fix-the-bugs');

const docsChanges = (merge: ChildChanges['merge']): ChildChanges => ({
  merge,
  files: [{ path: 'docs/guide.md', status: 'modified', oldPath: null, binary: false, linesAdded: 40, linesRemoved: 2 }],
  linesAdded: 40,
  linesRemoved: 2,
  conflicts: [],
  commit: '5d2a9e81c3f0',
});
const APP_CONFLICT = { path: 'src/app.py', reason: 'changed on the same lines in the working tree and by the child' };
const bugsConflict: ChildChanges = {
  merge: 'conflict',
  files: [
    { path: 'src/app.py', status: 'modified', oldPath: null, binary: false, linesAdded: 3, linesRemoved: 1 },
    { path: 'src/util.py', status: 'renamed', oldPath: 'src/helpers.py', binary: false, linesAdded: 1, linesRemoved: 1 },
  ],
  linesAdded: 4,
  linesRemoved: 2,
  conflicts: [APP_CONFLICT],
  commit: '7e1f0a2b3c4d',
};
const CHILDREN = [
  { sessionId: DOCS, label: 'Write the docs' },
  { sessionId: BUGS, label: 'Fix the bugs' },
];

/** A parent that forks into the two children of protocol.md, each of which answers and ends. */
function forkStory(s: Stream, fields: Record<string, unknown>): CovenEvent[] {
  return [
    ...s.turn(PARENT, 'Plan the release', 'Two tasks, in parallel.'),
    s.status(PARENT, 'forking'),
    s.ev(PARENT, 'forkStarted', { state: 'running', forkId: FORK, source: 'user', tasks: CHILDREN.map((c) => c.label), children: CHILDREN, ...fields }),
    ...s.turn(DOCS, "You were assigned 'Write the docs'", 'Docs are written.', 'fork'),
    ...s.turn(BUGS, "You were assigned 'Fix the bugs'", 'Bugs are fixed.', 'fork'),
  ];
}

const WORKTREE_FORK = { isolation: 'worktree', mergeMode: 'review', base: '9c1e4f0a7b2d' };

function modelOf(events: CovenEvent[], sessions: SessionInfo[] = []): CovenModel {
  const model = new CovenModel();
  model.applySessions([info(PARENT, { title: 'Plan the release' }), ...sessions]);
  model.ingest(events);
  return model;
}

const child = (model: CovenModel, sessionId: string): SessionNode => model.session(sessionId)!;
const forkOf = (model: CovenModel): ForkNode => model.fork(FORK)!;

// --- menus, as VS Code matches package.json's `when` clauses against a row's contextValue -------

interface MenuItem {
  command: string;
  when: string;
  group?: string;
}
const menus = (JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as {
  contributes: { menus: { 'view/item/context': MenuItem[] } };
}).contributes.menus['view/item/context'];

/** The commands a row offers (inline: its icons; else: its context menu), by package.json. */
function offered(contextValue: string, inline: boolean): Set<string> {
  const found = new Set<string>();
  for (const item of menus) {
    if ((item.group?.startsWith('inline') ?? false) !== inline) continue;
    const clauses = item.when.split('&&').map((c) => c.trim());
    const fits = clauses.every((clause) => {
      if (clause === 'view == coven.sessions') return true;
      const regex = /^viewItem =~ \/(.*)\/$/.exec(clause);
      assert.ok(regex, `a when clause this test cannot read: ${clause}`);
      return new RegExp(regex[1]!).test(contextValue);
    });
    if (fits) found.add(item.command);
  }
  return found;
}
const REVIEW_COMMANDS = ['coven.reviewChanges', 'coven.applyChanges', 'coven.discardChanges', 'coven.openConflicts'];
/** The review commands a row offers inline, sorted. */
const reviewActions = (contextValue: string): string[] => [...offered(contextValue, true)].filter((c) => REVIEW_COMMANDS.includes(c)).sort();

// --- tests ------------------------------------------------------------------------------------------

describe('a recorded review (review.jsonl)', () => {
  const review = loadFixture('review');
  const reviewing = review.events.find((e): e is EventOf<'forkReviewing'> => e.kind === 'forkReviewing')!;
  const started = review.events.find((e): e is EventOf<'forkStarted'> => e.kind === 'forkStarted')!;
  const [first, second] = started.children;

  test('while the fork waits: each child shows its changes with Apply and Discard; the parent reviews', () => {
    const model = replay(review, new CovenModel(), afterEvent(review, 'forkReviewing'));
    const fork = model.fork(reviewing.forkId)!;
    assert.equal(fork.state, 'reviewing');
    assert.deepEqual(model.pendingChanges().map((c) => c.sessionId).sort(), [...reviewing.pending].sort());
    for (const { sessionId } of [first!, second!]) {
      const look = present(child(model, sessionId));
      const changes = child(model, sessionId).changes!;
      assert.match(look.description, new RegExp(`\\+${changes.linesAdded} −${changes.linesRemoved} · 1 file · pending review`));
      assert.deepEqual(reviewActions(look.contextValue), ['coven.applyChanges', 'coven.discardChanges', 'coven.reviewChanges']);
      assert.match(look.tooltip, new RegExp(child(model, sessionId).worktree!.branch));
    }
    assert.match(present(fork).description, /2 children to review/);
    assert.equal(summarize(model).attention, true);
  });

  test("the diff of an added file: the recorded getChanges texts, nothing on the base side", () => {
    const asked = review.lines.find((l) => l.marker?.fixture === 'request' && l.marker.method === 'coven/getChanges')!.marker!;
    const result = asked.result as GetChangesResult;
    const [entry] = diffPlan(result.sessionId, result.changes).filter((e) => e.path === asked.params?.path);
    const status = result.changes.files.find((f) => f.path === entry!.path)!.status;
    assert.equal(status, 'added');
    assert.equal(sideText(result.file!, entry!.base.side, status), '');
    assert.equal(sideText(result.file!, entry!.child.side, status), result.file!.child);
    assert.ok(result.file!.child!.length > 0);
  });

  test('once decided: one applied, one discarded, the fork done, nothing waits', () => {
    const model = replay(review);
    const fork = model.fork(reviewing.forkId)!;
    assert.equal(fork.state, 'finished');
    assert.equal(mergeStateOf(child(model, first!.sessionId)), 'applied');
    assert.equal(mergeStateOf(child(model, second!.sessionId)), 'discarded');
    assert.deepEqual(reviewActions(present(child(model, second!.sessionId)).contextValue), ['coven.reviewChanges']);
    assert.match(present(fork).description, /1 applied · 1 discarded/);
    assert.deepEqual(model.pendingChanges(), []);
    assert.equal(summarize(model).attention, false);
    assert.equal(child(model, rootOf(review).sessionId).status, 'idle');
  });
});

describe('isolated fork children: merge mode review', () => {
  /** A fork in merge mode review, ended: one child's changes wait, the other changed nothing. Each test gets its own stream. */
  function reviewing(): { s: Stream; ended: CovenEvent[]; review: CovenEvent[] } {
    const s = new Stream();
    const ended = forkStory(s, WORKTREE_FORK);
    const review = [
      s.ev(DOCS, 'changes', { worktree: DOCS_WORKTREE, changes: docsChanges('pending') }),
      s.ev(BUGS, 'changes', { worktree: BUGS_WORKTREE, changes: { ...bugsConflict, merge: 'unchanged', files: [], linesAdded: 0, linesRemoved: 0, conflicts: [] } }),
      s.status(PARENT, 'reviewing'),
      s.ev(PARENT, 'forkReviewing', { state: 'reviewing', forkId: FORK, pending: [DOCS] }),
    ];
    return { s, ended, review };
  }

  test('a child whose changes wait shows them, with Review, Apply and Discard on its row', () => {
    const { ended, review } = reviewing();
    const model = modelOf([...ended, ...review]);
    const docs = present(child(model, DOCS));
    assert.match(docs.description, /\+40 −2 · 1 file · pending review/);
    assert.deepEqual(reviewActions(docs.contextValue), ['coven.applyChanges', 'coven.discardChanges', 'coven.reviewChanges']);
    assert.ok(offered(docs.contextValue, false).has('coven.applyChanges'), 'Apply is in the context menu too');
    // The tooltip says where the work is and what it touched.
    assert.match(docs.tooltip, new RegExp(DOCS_WORKTREE.branch));
    assert.match(docs.tooltip, /docs\/guide\.md \(modified, \+40 −2\)/);
    assert.match(docs.tooltip, /Waiting for your review/);
    assert.notDeepEqual(docs.icon, present(child(model, BUGS)).icon, 'a child waiting for review stands out');
  });

  test('a child that changed nothing has nothing to review', () => {
    const { ended, review } = reviewing();
    const model = modelOf([...ended, ...review]);
    const bugs = present(child(model, BUGS));
    assert.match(bugs.description, /unchanged/);
    assert.doesNotMatch(bugs.description, /file/);
    assert.deepEqual(reviewActions(bugs.contextValue), []);
  });

  test('the parent and its fork wait for the user, and the status bar says so', () => {
    const { ended, review } = reviewing();
    const before = modelOf(ended);
    const model = modelOf([...ended, ...review]);
    const parent = present(child(model, PARENT));
    assert.match(parent.description, /review/);
    assert.notDeepEqual(parent.icon, present(child(before, PARENT)).icon);
    const fork = forkOf(model);
    assert.equal(fork.state, 'reviewing');
    assert.match(present(fork).description, /1 child to review/);
    assert.ok(offered(present(fork).contextValue, true).has('coven.reviewChanges'));
    assert.deepEqual(model.pendingChanges().map((c) => c.sessionId), [DOCS]);
    assert.equal(summarize(before).attention, false);
    assert.equal(summarize(model).attention, true);
  });

  test('once applied, the child no longer offers Apply, and the finished fork counts what was applied', () => {
    const { s, ended, review } = reviewing();
    const model = modelOf([
      ...ended,
      ...review,
      s.ev(DOCS, 'changes', { worktree: DOCS_WORKTREE, changes: docsChanges('applied') }),
      s.status(PARENT, 'running'),
      s.ev(PARENT, 'forkFinished', {
        state: 'finished',
        forkId: FORK,
        results: [
          { label: 'Write the docs', sessionId: DOCS, ok: true, merge: 'applied' },
          { label: 'Fix the bugs', sessionId: BUGS, ok: true, merge: 'unchanged' },
        ],
        diskBytes: 1843200,
      }),
    ]);
    const docs = present(child(model, DOCS));
    assert.match(docs.description, /\+40 −2 · 1 file · applied/);
    assert.deepEqual(reviewActions(docs.contextValue), ['coven.reviewChanges']);
    const fork = forkOf(model);
    assert.equal(fork.state, 'finished');
    assert.match(present(fork).description, /1 applied/);
    assert.match(present(fork).tooltip, /1\.8 MB on disk/);
    assert.deepEqual(model.pendingChanges(), []);
  });

  test("a rebuild's listing that is older than the changes event does not undo it", () => {
    const { s, ended, review } = reviewing();
    const model = modelOf([...ended, ...review, s.ev(DOCS, 'changes', { worktree: DOCS_WORKTREE, changes: docsChanges('discarded') })]);
    model.applySessions([info(DOCS, { parentId: PARENT, forkId: FORK, label: 'Write the docs', isolation: 'worktree', worktree: DOCS_WORKTREE, changes: docsChanges('pending') })]);
    assert.equal(mergeStateOf(child(model, DOCS)), 'discarded');
  });
});

describe('isolated fork children: merge mode auto, with a conflict', () => {
  /** A fork in merge mode auto, ended and merged: one child applied, one in conflict. */
  function merged(withChanges: boolean): CovenEvent[] {
    const s = new Stream();
    const ended = forkStory(s, { ...WORKTREE_FORK, mergeMode: 'auto' });
    const changes = withChanges
      ? [
          s.ev(DOCS, 'changes', { worktree: DOCS_WORKTREE, changes: docsChanges('applied') }),
          s.ev(BUGS, 'changes', { worktree: BUGS_WORKTREE, changes: bugsConflict }),
        ]
      : [];
    const finished = s.ev(PARENT, 'forkFinished', {
      state: 'finished',
      forkId: FORK,
      results: [
        { label: 'Write the docs', sessionId: DOCS, ok: true, merge: 'applied' },
        { label: 'Fix the bugs', sessionId: BUGS, ok: true, merge: 'conflict', branch: BUGS_WORKTREE.branch, conflicts: [APP_CONFLICT] },
      ],
      diskBytes: 1843200,
    });
    return [...ended, ...changes, finished];
  }

  test('deleting the parent asks before discarding the conflicting child\'s work, and says what was kept', () => {
    const model = modelOf(merged(true));
    const unapplied = unappliedWork(child(model, PARENT));
    // The applied child's work is in the working tree: only the conflicting one's is at stake.
    assert.deepEqual(unapplied.map((n) => n.sessionId), [BUGS]);
    const question = discardQuestion(unapplied);
    assert.match(question.message, /^1 fork child holds work never applied: Fix the bugs \(conflicted\)\. Keep its branch/);
    assert.deepEqual(question.choices, [KEEP_WORK, DISCARD_WORK]);
    assert.deepEqual(deleteParams(PARENT, false, KEEP_WORK, true), { sessionId: PARENT, purge: false, discardWork: false });
    assert.deepEqual(deleteParams(PARENT, true, DISCARD_WORK, true), { sessionId: PARENT, purge: true, discardWork: true });
    // Dismissed: nothing is deleted.
    assert.equal(deleteParams(PARENT, false, undefined, true), undefined);
    // Nothing at stake: no second question, nothing discarded.
    assert.deepEqual(unappliedWork(child(model, DOCS)), []);
    assert.deepEqual(deleteParams(DOCS, false, undefined, false), { sessionId: DOCS, purge: false, discardWork: false });
    const kept = keptMessage([
      { branch: BUGS_WORKTREE.branch, repository: REPOSITORY, commit: '7e3b0c9d2a41', base: '9c1e4f0a7b2d', sessionId: BUGS, label: 'Fix the bugs', reason: 'changes that conflicted with the working tree' },
    ]);
    assert.equal(
      kept,
      `Kept 1 branch with work never applied: ${BUGS_WORKTREE.branch} (Fix the bugs: changes that conflicted with the working tree). \`coven-ls prune --discard-work\` deletes them.`,
    );
    assert.equal(keptMessage([]), undefined);
  });

  test("a child's later work, after its fork ended, waits for the user's review", () => {
    const later = { ...docsChanges('pending'), files: [{ path: 'docs/faq.md', status: 'added' as const, oldPath: null, binary: false, linesAdded: 12, linesRemoved: 0 }], linesAdded: 12, linesRemoved: 0, commit: 'b41d0e7a9c35' };
    const story = merged(true);
    const last = Math.max(...story.filter((e) => e.sessionId === DOCS).map((e) => e.seq));
    // Protocol.md's example of later work: the child's next event after a follow-up.
    const event = { sessionId: DOCS, seq: last + 1, kind: 'changes', time: '2026-11-22T02:05:11.020Z', worktree: DOCS_WORKTREE, changes: later } as CovenEvent;
    const model = modelOf([...story, event]);
    const docs = present(child(model, DOCS));
    assert.match(docs.description, /\+12 −0 · 1 file · pending review/);
    assert.match(docs.tooltip, /Waiting for your review/);
    assert.ok(offered(docs.contextValue, true).has('coven.applyChanges'));
    assert.deepEqual(unappliedWork(child(model, PARENT)).map((n) => n.sessionId), [DOCS, BUGS]);
  });

  test('while the fork runs, a child that ended has changes not merged yet: nothing waits for the user', () => {
    const s = new Stream();
    const model = modelOf([
      ...forkStory(s, { ...WORKTREE_FORK, mergeMode: 'auto' }).filter((e) => e.sessionId !== BUGS),
      s.ev(DOCS, 'changes', { worktree: DOCS_WORKTREE, changes: docsChanges('pending') }),
    ]);
    const docs = present(child(model, DOCS));
    assert.match(docs.description, /\+40 −2 · 1 file · not merged yet/);
    assert.match(docs.tooltip, /when the whole fork has ended/);
    // Not the look of a child waiting for review (its fork merges it by itself): its status's.
    assert.deepEqual(docs.icon, sessionIcon(child(model, DOCS)));
    assert.equal(summarize(model).attention, false);
    // It may still be decided now, in either merge mode.
    assert.ok(offered(docs.contextValue, true).has('coven.applyChanges'));
  });

  test('the conflicting child is marked, names the files and its branch, and offers to open them', () => {
    const model = modelOf(merged(true));
    const docs = present(child(model, DOCS));
    const bugs = present(child(model, BUGS));
    assert.match(bugs.description, /\+4 −2 · 2 files · conflict/);
    assert.notDeepEqual(bugs.icon, docs.icon);
    assert.deepEqual(reviewActions(bugs.contextValue), ['coven.openConflicts', 'coven.reviewChanges']);
    assert.deepEqual(reviewActions(docs.contextValue), ['coven.reviewChanges']);
    assert.match(bugs.tooltip, /src\/app\.py \(changed on the same lines in the working tree and by the child\)/);
    assert.match(bugs.tooltip, new RegExp(BUGS_WORKTREE.branch));
    assert.match(bugs.tooltip, /src\/util\.py ← src\/helpers\.py \(renamed, \+1 −1\)/);
    assert.match(present(forkOf(model)).description, /1 applied · 1 conflict/);
    assert.match(present(forkOf(model)).tooltip, /git worktree/);
  });

  test('without a changes event, the fork results still say what became of each child', () => {
    const model = modelOf(merged(false));
    const bugs = child(model, BUGS);
    assert.equal(mergeStateOf(bugs), 'conflict');
    const look = present(bugs);
    assert.match(look.description, /conflict/);
    assert.ok(offered(look.contextValue, true).has('coven.openConflicts'));
    assert.match(look.tooltip, /src\/app\.py/);
  });

  test("the parent's transcript gives each child's changes", () => {
    const model = modelOf(merged(true));
    const text = renderTranscript(child(model, PARENT), model);
    assert.match(text, /\+40 −2 · 1 file · applied/);
    assert.match(text, /Conflict: src\/app\.py/);
  });
});

describe('isolated fork children: from coven/listSessions alone', () => {
  // protocol.md's listSessions example: the parent, and a worktree child whose changes were applied.
  const listed = [
    info(PARENT, { title: 'Count the files in src/' }),
    info(DOCS, {
      parentId: PARENT, forkId: FORK, label: 'Write the docs', title: 'Write the docs', cwd: DOCS_WORKTREE.path,
      isolation: 'worktree', isolationReason: null, worktree: { ...DOCS_WORKTREE, base: '9c1e4f0a7b2d…' }, changes: docsChanges('applied'),
    }),
  ];

  test('a child shows its changes and where it worked before any event is fetched', () => {
    const model = new CovenModel();
    model.applySessions(listed);
    const docs = present(child(model, DOCS));
    assert.match(docs.description, /\+40 −2 · 1 file · applied/);
    assert.match(docs.tooltip, new RegExp(DOCS_WORKTREE.branch));
    assert.match(present(forkOf(model)).tooltip, /git worktree/);
  });

  test('a listing that brings changes redraws the child', () => {
    const model = new CovenModel();
    model.applySessions(listed.map((i) => ({ ...i, changes: null })));
    model.takeChanges();
    model.applySessions(listed);
    assert.ok(model.takeChanges().sessions.some((n) => n.sessionId === DOCS));
  });
});

describe('shared fork children', () => {
  // protocol.md's shared example: a parent outside any git repository.
  const s = new Stream();
  const SHARED_PARENT = 's-4a5b6c7d8e9f';
  const children = [
    { sessionId: 's-c3d4e5f6a7b8', label: 'Draft it' },
    { sessionId: 's-d4e5f6a7b8c9', label: 'Check it' },
  ];
  const events = [
    ...s.turn(SHARED_PARENT, 'Write the notice', 'Two tasks.'),
    s.status(SHARED_PARENT, 'forking'),
    s.ev(SHARED_PARENT, 'forkStarted', {
      state: 'running',
      forkId: 'f-2e3f4a5b6c7d', source: 'model', tasks: ['Draft it', 'Check it'], children, isolation: 'shared', isolationReason: 'not a git repository',
    }),
    ...s.turn('s-c3d4e5f6a7b8', "You were assigned 'Draft it'", 'Drafted.', 'fork'),
  ];

  test('the fork and its children say why they share the folder, and offer no review', () => {
    const model = new CovenModel();
    model.applySessions([info(SHARED_PARENT)]);
    model.ingest(events);
    assert.match(present(model.fork('f-2e3f4a5b6c7d')!).tooltip, /share the parent's folder.*not a git repository/);
    const draft = present(model.session('s-c3d4e5f6a7b8')!);
    assert.match(draft.tooltip, /parent's folder.*not a git repository/);
    assert.doesNotMatch(draft.description, /applied|pending|file/);
    assert.deepEqual(reviewActions(draft.contextValue), []);
  });
});

describe('how each child is held', () => {
  // protocol.md's Child sandbox examples: a fenced child on its forkStarted entry, and an
  // unfenced one whose SessionInfo says why (a listing that arrives later keeps what it said).
  const FENCED = { fenced: true, by: 'claude', reason: null, network: 'full' };
  const WHY = 'bubblewrap (bwrap) not found on PATH: Install bubblewrap and socat';
  const UNFENCED = { fenced: false, by: null, reason: WHY, network: null };

  test('the tooltip says what fences a child and its network, or why it is unfenced', () => {
    const s = new Stream();
    const children = [{ ...CHILDREN[0]!, sandbox: FENCED }, CHILDREN[1]!];
    const events = [
      ...s.turn(PARENT, 'Plan the release', 'Two tasks, in parallel.'),
      s.ev(PARENT, 'forkStarted', { state: 'running', forkId: FORK, source: 'user', tasks: CHILDREN.map((c) => c.label), children, ...WORKTREE_FORK }),
    ];
    const model = modelOf(events, [info(BUGS, { parentId: PARENT, sandbox: UNFENCED } as Partial<SessionInfo>)]);
    assert.match(present(child(model, DOCS)).tooltip, /Fenced by claude \(network: full\)/);
    assert.match(present(child(model, BUGS)).tooltip, /Unfenced: bubblewrap \(bwrap\) not found on PATH/);
    model.applySessions([info(PARENT), info(BUGS, { parentId: PARENT })]);
    assert.match(present(child(model, BUGS)).tooltip, /Unfenced: bubblewrap/, 'a listing without it keeps it');
    assert.doesNotMatch(present(model.session(PARENT)!).tooltip, /enced/, 'a top-level session is not a fork child');
  });
});

describe('the diff view of a child', () => {
  const plan = (): DiffEntry[] => diffPlan(BUGS, bugsConflict);

  test('one entry per changed file; a rename shows its old path on the base side', () => {
    const [app, util] = plan();
    assert.equal(app!.base.shownPath, app!.child.shownPath, 'an edit in place is not shown as a rename');
    assert.equal(util!.base.shownPath, 'src/helpers.py');
    assert.equal(util!.child.shownPath, 'src/util.py');
    // Both sides ask coven/getChanges for the file by its new path.
    assert.deepEqual([util!.base.path, util!.child.path], ['src/util.py', 'src/util.py']);
  });

  test('an added file has no base side in the editor, a deleted one no child side', () => {
    const files = [
      { path: 'NEW.md', status: 'added' as const, oldPath: null, binary: false, linesAdded: 3, linesRemoved: 0 },
      { path: 'OLD.md', status: 'deleted' as const, oldPath: null, binary: false, linesAdded: 0, linesRemoved: 2 },
      { path: 'SAME.md', status: 'modified' as const, oldPath: null, binary: false, linesAdded: 1, linesRemoved: 1 },
    ];
    const [added, deleted, modified] = diffPlan(DOCS, { ...docsChanges('pending'), files }).map(shownSides);
    assert.deepEqual([added!.base, added!.child?.path], [undefined, 'NEW.md']);
    assert.deepEqual([deleted!.base?.path, deleted!.child], ['OLD.md', undefined]);
    assert.deepEqual([modified!.base?.path, modified!.child?.path], ['SAME.md', 'SAME.md']);
  });

  test('a side survives the trip through a URI, and another commit is another document', () => {
    const [, util] = plan();
    for (const ref of [util!.base, util!.child]) {
      const { path, query } = sideLocation(ref);
      assert.deepEqual(parseSide(path, query), ref);
    }
    const later = diffPlan(BUGS, { ...bugsConflict, commit: 'a0b1c2d3e4f5' })[1]!;
    assert.notEqual(sideLocation(later.child).query, sideLocation(util!.child).query);
    assert.equal(parseSide('/x', 'side=base'), undefined);
  });

  test("each side's text: the file's, empty where it does not exist, a note for a binary file", () => {
    const text = { path: 'docs/guide.md', oldPath: null, binary: false, base: '# Guide\n', child: '# Guide\n\n## Install\n' };
    assert.equal(sideText(text, 'base', 'modified'), '# Guide\n');
    assert.equal(sideText(text, 'child', 'modified'), '# Guide\n\n## Install\n');
    assert.equal(sideText({ ...text, base: null }, 'base', 'added'), '');
    assert.equal(sideText({ ...text, child: null }, 'child', 'deleted'), '');
    const binary = { ...text, binary: true, base: null, child: null };
    assert.match(sideText(binary, 'child', 'modified'), /binary/i);
    assert.match(sideText(binary, 'base', 'modified'), /binary/i);
    assert.equal(sideText(binary, 'base', 'added'), '');
  });

  test('applying: a conflict names the files and the branch the work stays on', () => {
    const conflict = applyOutcome('Fix the bugs', bugsConflict, BUGS_WORKTREE.branch);
    assert.equal(conflict.ok, false);
    assert.match(conflict.message, /src\/app\.py/);
    assert.match(conflict.message, new RegExp(BUGS_WORKTREE.branch));
    const applied = applyOutcome('Write the docs', docsChanges('applied'), DOCS_WORKTREE.branch);
    assert.equal(applied.ok, true);
    assert.match(applied.message, /\+40 −2 · 1 file/);
  });
});

describe('announcing a review', () => {
  /** Answers listSessions and getEvents from nothing: the test feeds events live. */
  const server: ServerConnection = {
    request: (async (method: string) => (method === 'coven/listSessions' ? { sessions: [] } : { events: [] })) as ServerConnection['request'],
    log: () => undefined,
  };

  function next<T>(subscribe: (listener: (value: T) => void) => { dispose(): void }, what: string, ms = 2000): Promise<T> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => (subscription.dispose(), reject(new Error(`no ${what} within ${ms} ms`))), ms);
      const subscription = subscribe((value) => {
        clearTimeout(timer);
        subscription.dispose();
        resolve(value);
      });
    });
  }

  test('a fork that begins reviewing is announced once, after the tree has it', async () => {
    const s = new Stream();
    const sync = new SessionSync(server, 5);
    sync.model.applySessions([info(PARENT)]);
    const announced: string[] = [];
    sync.onForkReviewing((fork) => announced.push(fork.forkId));
    const first = next<ForkNode>((l) => sync.onForkReviewing(l), 'announcement');
    for (const e of [...forkStory(s, WORKTREE_FORK), s.ev(DOCS, 'changes', { worktree: DOCS_WORKTREE, changes: docsChanges('pending') })]) sync.onEvent(e);
    sync.onEvent(s.status(PARENT, 'reviewing'));
    sync.onEvent(s.ev(PARENT, 'forkReviewing', { state: 'reviewing', forkId: FORK, pending: [DOCS] }));
    assert.equal((await first).forkId, FORK);
    // The next flush (a later event) announces nothing again.
    const flushed = next((l) => sync.onDidChange(l), 'flush');
    sync.onEvent(s.ev(DOCS, 'changes', { worktree: DOCS_WORKTREE, changes: docsChanges('applied') }));
    await flushed;
    assert.deepEqual(announced, [FORK]);
    sync.dispose();
  });

  test('a review decided within the same burst (a client catching up) is not announced', async () => {
    const s = new Stream();
    const sync = new SessionSync(server, 5);
    sync.model.applySessions([info(PARENT)]);
    const announced: string[] = [];
    sync.onForkReviewing((fork) => announced.push(fork.forkId));
    const flushed = next((l) => sync.onDidChange(l), 'flush');
    for (const e of [
      ...forkStory(s, WORKTREE_FORK),
      s.status(PARENT, 'reviewing'),
      s.ev(PARENT, 'forkReviewing', { state: 'reviewing', forkId: FORK, pending: [DOCS] }),
      s.ev(PARENT, 'forkFinished', { state: 'finished', forkId: FORK, results: [{ label: 'Write the docs', sessionId: DOCS, ok: true, merge: 'discarded' }] }),
    ]) {
      sync.onEvent(e);
    }
    await flushed;
    assert.deepEqual(announced, []);
    sync.dispose();
  });
});
