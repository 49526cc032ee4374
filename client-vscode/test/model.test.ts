import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { CovenModel, type ForkNode, type Node, type SessionNode, type ToolNode, type TurnNode } from '../src/model';
import { forkStateText, present, summarize } from '../src/present';
import { renderTranscript } from '../src/transcript';
import type { CovenEvent, Status } from '../src/protocol';
import { forkStory, info, Stream } from './events';

/** The tree as text, one node per line, indented: what a user would see with everything expanded. */
function outline(model: CovenModel, node?: Node, depth = 0): string[] {
  const lines: string[] = [];
  for (const child of model.children(node)) {
    const p = present(child);
    lines.push(`${'  '.repeat(depth)}${p.label}${p.description ? ` [${p.description}]` : ''}`);
    lines.push(...outline(model, child, depth + 1));
  }
  return lines;
}

function shuffled<T>(items: T[], seed: number): T[] {
  const out = [...items];
  let x = seed;
  for (let i = out.length - 1; i > 0; i--) {
    x = (x * 1103515245 + 12345) & 0x7fffffff;
    const j = x % (i + 1);
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

describe('turns', () => {
  test('a session shows its turns in order, with tool results as their state', () => {
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-1', { title: 'Count the files' })]);
    model.ingest([
      s.status('s-1', 'starting'),
      s.ev('s-1', 'prompt', { text: 'Count the files in src/', origin: 'user' }),
      s.status('s-1', 'running'),
      s.ev('s-1', 'thinking', { text: 'A pipeline will do.', messageId: 'm0' }),
      s.ev('s-1', 'text', { text: 'Let me count them.', messageId: 'm1' }),
      s.ev('s-1', 'toolUse', { toolUseId: 't1', name: 'Bash', input: { command: 'ls src | wc -l' }, messageId: 'm1' }),
      s.ev('s-1', 'toolResult', { toolUseId: 't1', content: '42', isError: false }),
      s.ev('s-1', 'text', { text: 'There are 42 files.\nSecond line.', messageId: 'm2' }),
    ]);
    assert.deepEqual(outline(model), [
      'Count the files [running]',
      '  Count the files in src/ [running]',
      '    Let me count them.',
      '    Bash [ls src | wc -l]',
      '    There are 42 files.',
    ]);
    const turn = model.session('s-1')!.items[0] as TurnNode;
    const tool = turn.children[2] as ToolNode;
    assert.equal(tool.state, 'ok');
    assert.equal(tool.result, '42');
    assert.equal(present(tool).icon.id, 'pass');
  });

  test('status icons: spinner while running, question while asking, check when idle', () => {
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-1')]);
    const session = model.session('s-1')!;
    model.ingest([s.ev('s-1', 'prompt', { text: 'go', origin: 'user' }), s.status('s-1', 'running')]);
    assert.equal(present(session).icon.id, 'loading~spin');
    model.ingest([
      s.ev('s-1', 'toolUse', { toolUseId: 't1', name: 'Bash', input: { command: 'rm x' } }),
      s.ev('s-1', 'permissionRequest', { toolUseId: 't1', toolName: 'Bash', input: { command: 'rm x' } }),
    ]);
    assert.equal(present(session).icon.id, 'question');
    assert.equal(present(session).description, 'needs permission');
    model.ingest([s.ev('s-1', 'permissionDecision', { toolUseId: 't1', toolName: 'Bash', allow: false, message: 'no' })]);
    assert.equal(present(session).icon.id, 'loading~spin');
    const tool = (session.items[0] as TurnNode).children[0] as ToolNode;
    assert.equal(tool.state, 'denied');
    model.ingest([
      s.ev('s-1', 'turnResult', { text: '', isError: false, subtype: 'success', costUsd: 0.0356, durationMs: 1, numTurns: 1 }),
      s.status('s-1', 'idle'),
    ]);
    assert.equal(present(session).icon.id, 'check');
    assert.equal(present(session).description, 'done · $0.0356');
    model.ingest([s.status('s-1', 'failed')]);
    assert.equal(present(session).icon.id, 'error');
  });

  test('a cancelled turn says so and stops its running tools; a failed one says why', () => {
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-1')]);
    model.ingest([
      s.ev('s-1', 'prompt', { text: 'wait', origin: 'user' }),
      s.ev('s-1', 'toolUse', { toolUseId: 't1', name: 'Bash', input: { command: 'sleep 100' } }),
      s.ev('s-1', 'turnResult', { text: '', isError: true, subtype: 'cancelled', costUsd: 0, durationMs: 1, numTurns: 1, cancelled: true }),
      s.ev('s-1', 'prompt', { text: 'again', origin: 'user' }),
      s.ev('s-1', 'turnResult', { text: 'API Error: 500 overloaded', isError: true, subtype: 'success', costUsd: 0, durationMs: 1, numTurns: 1 }),
    ]);
    const [cancelled, failed] = model.session('s-1')!.items as TurnNode[];
    assert.equal((cancelled!.children[0] as ToolNode).state, 'interrupted');
    assert.equal(present(cancelled!).description, 'cancelled');
    assert.equal(present(cancelled!).icon.id, 'circle-slash');
    assert.equal(present(failed!).icon.id, 'error');
    assert.deepEqual(model.children(failed).map((n) => present(n).label), ['Turn failed: API Error: 500 overloaded']);
  });

  test('an error between turns is a note in the timeline', () => {
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-1', { title: 'T' })]);
    model.ingest([...s.turn('s-1', 'hi', 'hello'), s.ev('s-1', 'error', { message: 'The Claude Code process ended.\nIts last output: …' }), s.status('s-1', 'failed')]);
    assert.deepEqual(outline(model), ['T [failed · $0.0100]', '  hi', '    hello', '  The Claude Code process ended.']);
  });

  test('unknown kinds and fields are skipped but their seq counts', () => {
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-1')]);
    model.ingest([s.ev('s-1', 'prompt', { text: 'go' }), s.ev('s-1', 'somethingNew', { x: 1 }), s.ev('s-1', 'text', { text: 'hi', extra: true })]);
    assert.deepEqual(model.gaps(), []);
    assert.equal(model.session('s-1')!.lastSeq, 3);
    assert.equal((model.session('s-1')!.items[0] as TurnNode).children.length, 1);
  });

  test('malformed events do not throw', () => {
    const model = new CovenModel();
    const junk: unknown[] = [
      { sessionId: 's-1', seq: 1, kind: 'toolUse', time: 't' },
      { sessionId: 's-1', seq: 2, kind: 'forkStarted', time: 't', children: 'nope' },
      { sessionId: 's-1', seq: 3, kind: 'toolResult', time: 't', toolUseId: 42 },
      { sessionId: 7, seq: 1, kind: 'text', time: 't' },
      { sessionId: 's-1', seq: 'x', kind: 'text', time: 't' },
      { sessionId: 's-1', seq: 4, kind: 'forkFinished', time: 't', forkId: 'f', results: [null, 3] },
    ];
    model.ingest(junk as never);
    assert.equal(model.unknownSessions().length, 1);
  });
});

describe('nesting', () => {
  test("the CLI's subagents nest under their tool call, with a ▶ marker", () => {
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-1', { title: 'Research' })]);
    model.ingest([
      s.ev('s-1', 'prompt', { text: 'Research it', origin: 'user' }),
      s.ev('s-1', 'toolUse', { toolUseId: 'task1', name: 'Task', input: { description: 'Look around', prompt: 'look' } }),
      s.ev('s-1', 'text', { text: 'Subagent speaking', messageId: 'sm1', parentToolUseId: 'task1' }),
      s.ev('s-1', 'toolUse', { toolUseId: 'g1', name: 'Grep', input: { pattern: 'TODO' }, parentToolUseId: 'task1' }),
      s.ev('s-1', 'toolResult', { toolUseId: 'g1', content: '3 hits', isError: false, parentToolUseId: 'task1' }),
      s.ev('s-1', 'toolResult', { toolUseId: 'task1', content: 'Found 3 TODOs', isError: false }),
      s.ev('s-1', 'text', { text: 'Done: 3 TODOs', messageId: 'm2' }),
    ]);
    assert.deepEqual(outline(model), [
      'Research [done]',
      '  Research it [running]',
      '    ▶ Task [look]',
      '      Subagent speaking',
      '      Grep [TODO]',
      '    Done: 3 TODOs',
    ]);
    const task = (model.session('s-1')!.items[0] as TurnNode).children[0] as ToolNode;
    assert.equal(present(task).collapsible, 'collapsed');
    assert.match(present(task).contextValue, /-subagent$/);
  });

  test('a fork nests its children under it, and the parent continues below the fork', () => {
    const { events, sessions } = forkStory();
    const model = new CovenModel();
    model.ingest(events);
    model.applySessions(sessions);
    assert.deepEqual(outline(model), [
      'Split the work [done · $0.0700]',
      '  Split the work',
      '    I will fork.',
      '  ⑂ Fork · 2 tasks [done]',
      '    Task A [done · $0.0300]',
      "      You were assigned 'Task A' [assignment]",
      '        A is done',
      '    Task B [done · $0.0400]',
      "      You were assigned 'Task B' [assignment]",
      '        B is done',
      '  Fork results [reintegration turn]',
      '    Both tasks are done.',
    ]);
    // Children are not top-level sessions.
    assert.deepEqual(model.roots().map((r) => r.sessionId), ['s-parent']);
  });

  test('the fork node walks through proposed → running n of m → done', () => {
    const { events } = forkStory();
    const model = new CovenModel();
    const states: string[] = [];
    for (const e of events) {
      model.ingest([e]);
      const fork = model.fork('f1');
      if (fork && states[states.length - 1] !== forkStateText(fork)) states.push(forkStateText(fork));
    }
    assert.deepEqual(states, ['proposed', 'running · 0 of 2 done', 'running · 1 of 2 done', 'running · 2 of 2 done', 'done']);
  });

  test('a proposed fork shows its tasks; a rejected one says so', () => {
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-1', { title: 'T' })]);
    model.ingest([s.ev('s-1', 'forkProposed', { forkId: 'f9', tasks: ['One', 'Two', 'Three'] }), s.status('s-1', 'awaitingApproval')]);
    const fork = model.fork('f9')!;
    assert.equal(present(fork).contextValue, 'fork-proposed');
    assert.equal(present(fork).label, '⑂ Fork · 3 tasks');
    assert.deepEqual(model.children(fork).map((n) => present(n).label), ['One', 'Two', 'Three']);
    assert.deepEqual(model.proposedForks(), [fork]);
    assert.equal(present(model.session('s-1')!).icon.id, 'question');
    model.ingest([s.ev('s-1', 'forkRejected', { forkId: 'f9', reason: 'Not now' }), s.status('s-1', 'idle')]);
    assert.equal(forkStateText(fork), 'rejected: Not now');
    assert.deepEqual(model.proposedForks(), []);
  });

  test('children found before the parent announces them wait, then appear in task order', () => {
    const { events, sessions } = forkStory();
    const model = new CovenModel();
    // Every child event first, then the parent's: the worst interleaving a client can see.
    const childFirst = [...events.filter((e) => e.sessionId !== 's-parent'), ...events.filter((e) => e.sessionId === 's-parent')];
    model.applySessions([...sessions].reverse());
    const before = model.ingest(childFirst.filter((e) => e.sessionId !== 's-parent'));
    assert.ok(before.length > 0);
    assert.deepEqual(model.roots().map((r) => r.sessionId), ['s-parent']);
    model.ingest(childFirst.filter((e) => e.sessionId === 's-parent'));
    const fork = model.fork('f1') as ForkNode;
    assert.deepEqual(fork.children.map((c) => c.label), ['Task A', 'Task B']);
    assert.equal(fork.state, 'done');
  });

  test('forks nest to any depth (children that fork again)', () => {
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-p', { title: 'Root' })]);
    model.ingest([
      s.ev('s-p', 'forkStarted', { forkId: 'f1', source: 'user', children: [{ sessionId: 's-c', label: 'Child' }] }),
      s.ev('s-c', 'prompt', { text: "You were assigned 'Child'", origin: 'fork' }),
      s.ev('s-c', 'forkStarted', { forkId: 'f2', source: 'model', children: [{ sessionId: 's-g', label: 'Grandchild' }] }),
      s.ev('s-g', 'prompt', { text: "You were assigned 'Grandchild'", origin: 'fork' }),
      s.ev('s-g', 'text', { text: 'deep', messageId: 'g1' }),
    ]);
    assert.deepEqual(outline(model), [
      'Root [done]',
      '  ⑂ Fork · 1 task [running · 0 of 1 done]',
      '    Child [starting]',
      "      You were assigned 'Child' [assignment · running]",
      '      ⑂ Fork · 1 task [running · 0 of 1 done]',
      '        Grandchild [starting]',
      "          You were assigned 'Grandchild' [assignment · running]",
      '            deep',
    ]);
  });

  test('cancelling a forking parent cancels the fork', () => {
    const { events, sessions } = forkStory();
    const model = new CovenModel();
    model.applySessions(sessions);
    const forking = events.findIndex((e) => e.kind === 'status' && e.status === 'forking');
    model.ingest(events.slice(0, forking + 1));
    assert.equal(model.fork('f1')!.state, 'running');
    const parent = model.session('s-parent')!;
    model.ingest([{ sessionId: 's-parent', seq: parent.lastSeq + 1, kind: 'status', time: 't', status: 'cancelled' }]);
    assert.equal(model.fork('f1')!.state, 'cancelled');
  });
});

describe('persistence', () => {
  test('a fork the server stopped is interrupted until resumed, then runs and finishes', () => {
    const { events, sessions } = forkStory();
    const model = new CovenModel();
    model.applySessions(sessions);
    const forking = events.findIndex((e) => e.kind === 'status' && e.status === 'forking');
    model.ingest(events.slice(0, forking + 3)); // parent forking, children starting / queued
    const seqOf = (sid: string): number => model.session(sid)!.lastSeq;
    const next = (sid: string, status: Status): CovenEvent => ({ sessionId: sid, seq: seqOf(sid) + 1, kind: 'status', time: 't', status });
    // The restarted server says so in a status event per busy session.
    model.ingest([next('s-parent', 'interrupted'), next('s-child-a', 'interrupted'), next('s-child-b', 'interrupted')]);
    const fork = model.fork('f1')!;
    assert.equal(forkStateText(fork), 'interrupted · 0 of 2 done');
    assert.equal(present(fork).contextValue, 'fork-interrupted');
    assert.deepEqual(model.interruptedForks(), [fork]);
    assert.match(summarize(model).text, /1 waiting for you/);
    // coven/resumeFork: the parent forks again, the unfinished children are queued again.
    model.ingest([next('s-parent', 'forking'), next('s-child-a', 'queued'), next('s-child-b', 'queued')]);
    assert.equal(fork.state, 'running');
    assert.deepEqual(model.interruptedForks(), []);
  });

  test('a deleted session leaves the tree with its subtree, whatever its seq', () => {
    const { events, sessions } = forkStory();
    const model = new CovenModel();
    model.applySessions([...sessions, info('s-other')]);
    model.ingest(events);
    model.takeChanges();
    // Deleting a child: it leaves its fork.
    model.ingest([{ sessionId: 's-child-b', seq: 999, kind: 'deleted', time: 't', sessionIds: ['s-child-b'] }]);
    assert.deepEqual(model.fork('f1')!.children.map((c) => c.sessionId), ['s-child-a']);
    assert.deepEqual(model.takeChanges().nodes.map((n) => n.key), ['fork:f1']);
    // Deleting the parent takes its fork and the remaining child along.
    model.ingest([{ sessionId: 's-parent', seq: 999, kind: 'deleted', time: 't', sessionIds: ['s-parent', 's-child-a'] }]);
    assert.deepEqual(model.roots().map((r) => r.sessionId), ['s-other']);
    assert.equal(model.session('s-child-a'), undefined);
    assert.equal(model.fork('f1'), undefined);
    assert.equal(model.takeChanges().root, true);
    assert.deepEqual(model.gaps(), []);
  });

  test('an interrupted session says so and takes messages', () => {
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-1', { title: 'T', status: 'interrupted' })]);
    const p = present(model.session('s-1')!);
    assert.equal(p.description, 'interrupted');
    assert.equal(p.icon.id, 'debug-pause');
    assert.equal(p.contextValue, 'session-interrupted-top');
    model.ingest([s.status('s-1', 'running')]);
    assert.equal(present(model.session('s-1')!).description, 'running');
  });
});

describe('ordering and gaps', () => {
  test('events applied in seq order whatever order they arrive in', () => {
    const { events, sessions } = forkStory();
    const expected = new CovenModel();
    expected.applySessions(sessions);
    expected.ingest(events);
    for (const seed of [1, 2, 3, 42, 1234]) {
      const model = new CovenModel();
      model.applySessions(sessions);
      const applied = model.ingest(shuffled(events, seed));
      assert.equal(applied.length, events.length);
      assert.deepEqual(outline(model), outline(expected), `seed ${seed}`);
      assert.deepEqual(model.gaps(), []);
    }
  });

  test('a jump in seq is a gap: later events wait until getEvents fills it', () => {
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-1', { title: 'T' })]);
    const all = [s.status('s-1', 'running'), ...s.turn('s-1', 'hello', 'hi')];
    model.ingest(all.slice(0, 2));
    model.ingest(all.slice(4)); // seq 3 and 4 lost
    assert.deepEqual(model.gaps(), [{ sessionId: 's-1', afterSeq: 2 }]);
    assert.equal(model.session('s-1')!.lastSeq, 2);
    // What coven/getEvents(afterSeq: 2) returns: everything after 2, overlapping what we hold.
    const applied = model.ingest(all.slice(2));
    assert.deepEqual(applied.map((e) => e.seq), [3, 4, 5, 6]);
    assert.deepEqual(model.gaps(), []);
    assert.equal(model.session('s-1')!.status, 'idle');
  });

  test('a session first seen mid-stream is a gap from seq 0', () => {
    const s = new Stream();
    const model = new CovenModel();
    const all = s.turn('s-late', 'hello', 'hi');
    model.ingest(all.slice(3));
    assert.deepEqual(model.gaps(), [{ sessionId: 's-late', afterSeq: 0 }]);
    assert.deepEqual(model.unknownSessions(), ['s-late']);
  });

  test('duplicates are dropped', () => {
    const s = new Stream();
    const model = new CovenModel();
    const all = s.turn('s-1', 'hello', 'hi');
    model.ingest(all);
    assert.deepEqual(model.ingest(all), []);
    assert.equal(model.sessions().length, 0, 'not known until listSessions says what it is');
    model.applySessions([info('s-1')]);
    assert.equal((model.session('s-1')!.items[0] as TurnNode).children.length, 1);
  });

  test('sessions are newest first', () => {
    const model = new CovenModel();
    model.applySessions([
      info('s-old', { createdAt: '2026-11-22T01:00:00.000Z' }),
      info('s-new', { createdAt: '2026-11-22T02:00:00.000Z' }),
      info('s-mid', { createdAt: '2026-11-22T01:30:00.000Z' }),
    ]);
    assert.deepEqual(model.roots().map((r) => r.sessionId), ['s-new', 's-mid', 's-old']);
  });
});

describe('reconnect', () => {
  test('reset + listSessions + getEvents rebuilds the same tree', () => {
    const { events, sessions } = forkStory();
    const live = new CovenModel();
    live.applySessions(sessions);
    live.ingest(events);
    const before = outline(live);

    live.reset();
    assert.equal(live.takeChanges().root, true);
    assert.deepEqual(outline(live), []);
    // As the extension does it: the list first, then each session's events from seq 0.
    live.applySessions(sessions);
    for (const { sessionId } of sessions) live.ingest(events.filter((e) => e.sessionId === sessionId));
    assert.deepEqual(outline(live), before);
    assert.equal(live.session('s-parent')!.costUsd.toFixed(2), '0.07');
  });

  test('live events that race the rebuild are neither lost nor doubled', () => {
    const { events, sessions } = forkStory();
    const model = new CovenModel();
    model.applySessions(sessions);
    const parent = events.filter((e) => e.sessionId === 's-parent');
    // A live event arrives after listSessions, before getEvents answers.
    model.ingest([parent[parent.length - 1]!]);
    assert.deepEqual(model.gaps().map((g) => g.sessionId), ['s-parent']);
    model.ingest(events);
    assert.deepEqual(model.gaps(), []);
    assert.equal(model.session('s-parent')!.lastSeq, parent.length);
  });

  test('a listSessions total stands in for cost until the events are in', () => {
    const model = new CovenModel();
    model.applySessions([info('s-1', { costUsd: 0.5 })]);
    assert.equal(model.session('s-1')!.costUsd, 0.5);
  });
});

describe('change tracking', () => {
  test('only the changed node is reported, topmost only', () => {
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-1'), info('s-2')]);
    model.ingest([
      s.ev('s-1', 'prompt', { text: 'go', origin: 'user' }),
      s.ev('s-1', 'toolUse', { toolUseId: 't1', name: 'Bash', input: {} }),
      s.ev('s-2', 'prompt', { text: 'go', origin: 'user' }),
      s.ev('s-2', 'text', { text: 'x' }),
    ]);
    model.takeChanges();

    model.ingest([s.ev('s-1', 'toolResult', { toolUseId: 't1', content: 'ok', isError: false })]);
    const changes = model.takeChanges();
    assert.equal(changes.root, false);
    assert.deepEqual(changes.nodes.map((n) => n.key), ['s-1#2']);
    assert.deepEqual(changes.sessions.map((n) => n.sessionId), ['s-1']);

    // A streaming turn refreshes itself (its new item with it), not its session.
    model.ingest([s.ev('s-1', 'text', { text: 'more' })]);
    assert.deepEqual(model.takeChanges().nodes.map((n) => n.key), ['s-1/turn1']);
    // A new turn changes the session.
    model.ingest([s.ev('s-1', 'prompt', { text: 'next', origin: 'user' })]);
    assert.deepEqual(model.takeChanges().nodes.map((n) => n.key), ['s-1']);
  });

  test('tree ids are unique, also for output that no prompt started', () => {
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-1')]);
    model.ingest([s.ev('s-1', 'toolUse', { toolUseId: 't1', name: 'Bash', input: {} }), ...s.turn('s-1', 'hi', 'ho')]);
    const keys: string[] = [];
    const walk = (node?: Node): void => model.children(node).forEach((c) => (keys.push(c.key), walk(c)));
    walk();
    assert.equal(new Set(keys).size, keys.length, keys.join(' '));
    assert.equal(present(model.session('s-1')!.items[0]!).label, 'Claude (no prompt)');
  });

  test('a new top-level session changes the root; a new child changes its fork', () => {
    const { events } = forkStory();
    const model = new CovenModel();
    model.applySessions([info('s-parent')]);
    assert.equal(model.takeChanges().root, true);
    const forkAt = events.findIndex((e) => e.kind === 'forkStarted');
    model.ingest(events.slice(0, forkAt));
    model.takeChanges();
    model.ingest([events[forkAt]!]);
    const changes = model.takeChanges();
    assert.equal(changes.root, false);
    assert.deepEqual(changes.nodes.map((n) => n.key), ['fork:f1']);
  });

  test('changes in sessions nobody can see yet are not reported to the tree', () => {
    const s = new Stream();
    const model = new CovenModel();
    model.ingest([s.ev('s-x', 'text', { text: 'x' })]);
    assert.deepEqual(model.takeChanges().nodes, []);
  });
});

describe('many events', () => {
  test('10k events reduce in well under a second, with bounded change reports', () => {
    const s = new Stream();
    const model = new CovenModel();
    const sessions = Array.from({ length: 10 }, (_, i) => info(`s-${i}`));
    model.applySessions(sessions);
    const events = [];
    for (let i = 0; i < 10_000; i++) {
      const sid = `s-${i % 10}`;
      const n = Math.floor(i / 10);
      if (n % 100 === 0) events.push(s.ev(sid, 'prompt', { text: `turn ${n}`, origin: 'user' }));
      else if (n % 3 === 0) events.push(s.ev(sid, 'toolUse', { toolUseId: `t${n}`, name: 'Bash', input: { command: `echo ${n}` } }));
      else if (n % 3 === 1) events.push(s.ev(sid, 'toolResult', { toolUseId: `t${n - 1}`, content: String(n), isError: false }));
      else events.push(s.ev(sid, 'text', { text: `line ${n}`, messageId: `m${n}` }));
    }
    const start = performance.now();
    // In bursts of 100, as they would arrive between two tree refreshes.
    let reported = 0;
    for (let i = 0; i < events.length; i += 100) {
      model.ingest(events.slice(i, i + 100));
      reported += model.takeChanges().nodes.length;
    }
    const elapsed = performance.now() - start;
    assert.ok(elapsed < 1000, `took ${elapsed.toFixed(0)} ms`);
    assert.ok(reported <= 100 * 10, `one refresh per session per burst at most, got ${reported}`);
    assert.equal(model.session('s-3')!.lastSeq, 1000);
    // Rendering a long transcript stays cheap too.
    const t0 = performance.now();
    const md = renderTranscript(model.session('s-3')!, model);
    assert.ok(performance.now() - t0 < 500);
    assert.ok(md.includes('line 998'));
  });
});

describe('status bar and transcript', () => {
  test('the status bar counts running sessions and fork progress', () => {
    const { events } = forkStory();
    const model = new CovenModel();
    const forkAt = events.findIndex((e) => e.kind === 'forkStarted');
    model.ingest(events.slice(0, forkAt + 4));
    model.applySessions(forkStory().sessions);
    const summary = summarize(model);
    assert.match(summary.text, /Coven: 1 running · \$\(repo-forked\) 0\/2$/);
  });

  test('the transcript has every turn, the fork and its children', () => {
    const { events, sessions } = forkStory();
    const model = new CovenModel();
    model.applySessions(sessions);
    model.ingest(events);
    const md = renderTranscript(model.session('s-parent') as SessionNode, model);
    for (const piece of ['# Split the work', '## You', '> Split the work', '## ⑂ Fork · 2 tasks — done', '### Task A — done', 'A is done', '## Fork results', 'Both tasks are done.']) {
      assert.ok(md.includes(piece), `missing ${JSON.stringify(piece)} in\n${md}`);
    }
    assert.ok(md.indexOf('B is done') < md.indexOf('Both tasks are done.'));
  });
});
