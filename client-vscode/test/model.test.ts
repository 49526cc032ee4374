// The state model, fed what a real coven-ls sent: the golden fixtures recorded by
// tests/fixtures/record.py (see ./fixtures.ts). Hand-built events (./events.ts) remain only where
// no recording can show the case; each such test says why.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { CovenModel, firstLine, type ForkNode, type Node, tokenUsage, type ToolNode, totalTokens, type TurnNode } from '../src/model';
import { forkStateText, formatCost, formatDuration, formatTokens, present, summarize, ticks } from '../src/present';
import type { CovenEvent, SessionInfo } from '../src/protocol';
import { renderTranscript } from '../src/transcript';
import { info, Stream } from './events';
import { afterEvent, atEvent, type EventOf, eventsOf, type Fixture, infoOf, loadFixture, replay, rootOf, SCENARIOS } from './fixtures';

const tool = loadFixture('tool');
const fork = loadFixture('fork');
const reject = loadFixture('reject');
const cancel = loadFixture('cancel');
const failed = loadFixture('failed');
const crash = loadFixture('crash');
const subagent = loadFixture('subagent');
const restart = loadFixture('restart');

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

/** A session's total as the server listed it at the end, as the tree shows a cost. */
const listedCost = (f: Fixture, sessionId: string): string => formatCost(infoOf(f, sessionId).costUsd);

/** The one event of `kind` (matching `match`) in a fixture. */
function the<K extends CovenEvent['kind']>(f: Fixture, kind: K, match: (e: EventOf<K>) => boolean = () => true): EventOf<K> {
  const found = f.events.filter((e): e is EventOf<K> => e.kind === kind).filter(match);
  assert.equal(found.length, 1, `${f.name}: ${found.length} ${kind} events`);
  return found[0]!;
}

/** A fork row's tokens, from the recording's forkFinished event (what the server added up). */
function forkTokens(f: Fixture): string {
  const usage = tokenUsage(the(f, 'forkFinished').usage)!;
  return `${formatTokens(totalTokens(usage))} tokens`;
}

/** A finished subagent's figures, from the recording's last task event. */
function subagentStats(f: Fixture): string {
  const ended = f.events.filter((e): e is EventOf<'task'> => e.kind === 'task').at(-1)!;
  const uses = ended.toolUses ?? 0;
  return [
    `${uses} tool ${uses === 1 ? 'use' : 'uses'}`,
    `${formatTokens(ended.totalTokens ?? 0)} tokens`,
    formatDuration(ended.durationMs ?? 0),
  ].join(' · ');
}

/** The fork's children, in task order, from its forkStarted event. */
function childrenOf(f: Fixture): Array<{ sessionId: string; label: string }> {
  return the(f, 'forkStarted').children as Array<{ sessionId: string; label: string }>;
}

/** Every session's whole log as the server keeps it: what was fetched and what came live. */
function fullLogs(f: Fixture): Map<string, CovenEvent[]> {
  const bySeq = new Map<string, Map<number, CovenEvent>>();
  const add = (e: CovenEvent): void => {
    const log = bySeq.get(e.sessionId) ?? new Map<number, CovenEvent>();
    log.set(e.seq, e);
    bySeq.set(e.sessionId, log);
  };
  for (const line of f.lines) {
    if (line.event) add(line.event);
    else if (line.marker.method === 'coven/getEvents') (line.marker.result as { events: CovenEvent[] }).events.forEach(add);
  }
  return new Map([...bySeq].map(([sid, log]) => [sid, [...log.values()].sort((a, b) => a.seq - b.seq)]));
}

describe('every recorded scenario', () => {
  for (const name of SCENARIOS) {
    test(`${name}: replays into the tree the server lists, with nothing missing`, () => {
      const f = loadFixture(name);
      const model = replay(f);
      assert.deepEqual(model.gaps(), []);
      assert.deepEqual(model.unknownSessions(), []);
      assert.deepEqual(model.roots().map((r) => r.sessionId), [rootOf(f).sessionId]);
      for (const listed of f.sessions) {
        const session = model.session(listed.sessionId)!;
        assert.equal(session.status, listed.status, listed.sessionId);
        assert.ok(Math.abs(session.costUsd - listed.costUsd) < 1e-9, `${listed.sessionId}: ${session.costUsd} vs ${listed.costUsd}`);
        assert.equal(session.agentSessionId, listed.agentSessionId ?? undefined);
        assert.equal(session.parentId, listed.parentId ?? undefined);
        assert.equal(session.label, listed.label ?? undefined);
        assert.equal(session.lastSeq, Math.max(...(fullLogs(f).get(listed.sessionId) ?? []).map((e) => e.seq)));
      }
      // Tree ids are unique (VS Code rejects a tree with duplicates).
      const keys: string[] = [];
      const walk = (node?: Node): void => model.children(node).forEach((c) => (keys.push(c.key), walk(c)));
      walk();
      assert.equal(new Set(keys).size, keys.length, keys.join(' '));
    });
  }
});

describe('turns', () => {
  test('a tool turn: the tool call with its result as its state, the answers around it (tool.jsonl)', () => {
    const sid = rootOf(tool).sessionId;
    const model = replay(tool);
    assert.deepEqual(outline(model), [
      `Make a file [done · ${listedCost(tool, sid)}]`,
      '  Make a file',
      "    I'll make it.",
      '    Bash [touch made.txt && echo made-it]',
      '    Made the file.',
    ]);
    const session = model.session(sid)!;
    const turn = session.items[0] as TurnNode;
    // Thinking is kept (the transcript shows it) but not drawn in the tree.
    assert.deepEqual(turn.children.map((c) => c.kind), ['thinking', 'text', 'tool', 'text']);
    const bash = turn.children[2] as ToolNode;
    assert.equal(bash.state, 'ok');
    assert.equal(bash.result, 'made-it');
    assert.equal(present(bash).icon.id, 'pass');
    const result = the(tool, 'turnResult');
    assert.equal(turn.costUsd, result.costUsd);
    assert.equal(turn.durationMs, result.durationMs);
    const agent = the(tool, 'agent');
    assert.equal(session.model, agent.model);
    assert.equal(session.cwd, agent.cwd);
    assert.equal(session.claudeCodeVersion, agent.claudeCodeVersion);
  });

  test('status icons follow the stream: spinner, question while asking, spinner, check (tool.jsonl)', () => {
    const sid = rootOf(tool).sessionId;
    const at = <K extends CovenEvent['kind']>(kind: K, match?: (e: EventOf<K>) => boolean): CovenModel =>
      replay(tool, new CovenModel(), afterEvent(tool, kind, match));
    const starting = at('status', (e) => e.status === 'starting');
    assert.equal(present(starting.session(sid)!).icon.id, 'loading~spin');
    assert.equal(present(starting.session(sid)!).description, 'starting');

    const asking = at('permissionRequest');
    const session = asking.session(sid)!;
    assert.equal(present(session).icon.id, 'question');
    assert.equal(present(session).description, 'needs permission');
    const bash = (session.items[0] as TurnNode).children.find((c) => c.kind === 'tool') as ToolNode;
    assert.equal(bash.state, 'awaitingPermission');
    assert.match(summarize(asking).text, /1 waiting for you/);

    const allowed = at('permissionDecision');
    assert.equal(present(allowed.session(sid)!).icon.id, 'loading~spin');
    assert.equal(((allowed.session(sid)!.items[0] as TurnNode).children.find((c) => c.kind === 'tool') as ToolNode).state, 'running');

    const done = replay(tool);
    assert.equal(present(done.session(sid)!).icon.id, 'check');
    assert.equal(present(done.session(sid)!).description, `done · ${listedCost(tool, sid)}`);
  });

  test('a turn cancelled mid-way says so, and the session goes on (cancel.jsonl)', () => {
    const sid = rootOf(cancel).sessionId;
    const model = replay(cancel);
    assert.deepEqual(outline(model), [
      `Start the endless task [done · ${listedCost(cancel, sid)}]`,
      '  Start the endless task [cancelled]',
      '    Working on it.',
      '  Are you there?',
      '    Still here.',
    ]);
    const [cancelled, after] = model.session(sid)!.items as TurnNode[];
    assert.equal(present(cancelled!).icon.id, 'circle-slash');
    assert.equal(present(cancelled!).contextValue, 'turn-cancelled');
    assert.equal(after!.state, 'done');
  });

  test('a cancelled turn stops the tools still running in it', () => {
    // Hand-built: no recorded scenario cancels while a tool runs (cancel.jsonl cuts off text).
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-1')]);
    model.ingest([
      s.ev('s-1', 'prompt', { text: 'wait', origin: 'user' }),
      s.ev('s-1', 'toolUse', { toolUseId: 't1', name: 'Bash', input: { command: 'sleep 100' } }),
      s.ev('s-1', 'turnResult', { text: '', isError: true, subtype: 'error_during_execution', costUsd: 0, durationMs: 1, numTurns: 1, cancelled: true }),
    ]);
    const [turn] = model.session('s-1')!.items as TurnNode[];
    assert.equal((turn!.children[0] as ToolNode).state, 'interrupted');
    assert.equal(present(turn!).description, 'cancelled');
  });

  test('a turn whose model call failed says why; the session still takes messages (failed.jsonl)', () => {
    const sid = rootOf(failed).sessionId;
    const model = replay(failed);
    const session = model.session(sid)!;
    const [turn] = session.items as TurnNode[];
    assert.equal(turn!.state, 'failed');
    assert.equal(present(turn!).icon.id, 'error');
    const result = the(failed, 'turnResult');
    const labels = model.children(turn).map((n) => present(n).label);
    assert.equal(labels.at(-1), `Turn failed: ${firstLine(String(result.text))}`);
    assert.match(labels.at(-1)!, /^Turn failed: API Error: 500 model overloaded/);
    // An API error leaves the CLI alive: the session is idle, not failed.
    assert.equal(session.status, 'idle');
    assert.equal(present(session).contextValue, 'session-idle-top');
  });

  test('the CLI dying mid-turn fails the turn with its error; the next message resumes (crash.jsonl)', () => {
    const sid = rootOf(crash).sessionId;
    const error = the(crash, 'error');
    const model = replay(crash);
    assert.deepEqual(outline(model), [
      `Say hello [done · ${listedCost(crash, sid)}]`,
      '  Say hello',
      '    Hello.',
      '  Start the long task [failed]',
      `    ${firstLine(String(error.message))}`,
      '  Are you back?',
      '    Back again.',
    ]);
    const down = replay(crash, new CovenModel(), afterEvent(crash, 'status', (e) => e.status === 'failed'));
    const session = down.session(sid)!;
    assert.equal(present(session).icon.id, 'error');
    assert.equal(session.lastError, error.message);
    assert.ok(present(session).tooltip.includes(String(error.message)));
    assert.equal(present(session).contextValue, 'session-failed-top');
  });

  test('an error while no turn is open is a note in the timeline', () => {
    // Hand-built: the recorded crash (crash.jsonl) happens mid-turn; an error between turns is
    // what protocol.md's example shows when the CLI dies while idle.
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-1', { title: 'T' })]);
    model.ingest([...s.turn('s-1', 'hi', 'hello'), s.ev('s-1', 'error', { message: 'The Claude Code process ended.\nIts last output: …' }), s.status('s-1', 'failed')]);
    assert.deepEqual(outline(model), ['T [failed · $0.0100]', '  hi', '    hello', '  The Claude Code process ended.']);
  });

  test("an ACP agent's mode changes and restarts are notes", () => {
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-1', { title: 'T' })]);
    model.ingest([
      ...s.turn('s-1', 'hi', 'hello'),
      s.ev('s-1', 'modeChanged', { mode: 'plan' }),
      s.ev('s-1', 'agentRestarted', { reason: "The ACP agent 'opencode' was killed by SIGKILL.", restart: 1, maxRestarts: 3 }),
    ]);
    assert.deepEqual(outline(model), [
      'T [done · $0.0100]',
      '  hi',
      '    hello',
      '  Mode: plan',
      "  Agent started again (1 of 3): The ACP agent 'opencode' was killed by SIGKILL.",
    ]);
  });

  test("an ACP agent's plan is on its session and a running tool's updates on the tool", () => {
    // Hand-built: the golden fixtures are Claude's, which sends no plan or tool updates.
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-1', { title: 'T' })]);
    const plan = [
      { content: 'Read the test', status: 'completed', priority: 'high' },
      { content: 'Fix the parser', status: 'in_progress', priority: 'high' },
      { content: 'Run the tests', status: 'pending', priority: 'low' },
    ];
    model.ingest([
      s.ev('s-1', 'prompt', { text: 'fix it', origin: 'user' }),
      s.status('s-1', 'running'),
      s.ev('s-1', 'plan', { entries: plan }),
      s.ev('s-1', 'toolUse', { toolUseId: 'c9', name: 'Read', input: { path: 'src/parser.py' } }),
      s.ev('s-1', 'toolUpdate', { toolUseId: 'c9', status: 'in_progress', title: 'Read parser.py', locations: [{ path: '/w/src/parser.py', line: 12 }] }),
      s.ev('s-1', 'toolUpdate', { toolUseId: 'c9', content: 'def parse(text):' }),
    ]);
    assert.deepEqual(outline(model), ['T [running · plan 1/3: Fix the parser]', '  fix it [running]', '    Read [Read parser.py · in_progress]']);
    const session = present(model.session('s-1')!);
    assert.match(session.tooltip, /\*\*Plan:\*\*  \n\[x\] Read the test  \n\[>\] Fix the parser  \n\[ \] Run the tests/);
    const tool = (model.session('s-1')!.items[0] as TurnNode).children.find((c) => c.kind === 'tool') as ToolNode;
    assert.deepEqual(tool.progress, { status: 'in_progress', title: 'Read parser.py', output: 'def parse(text):', locations: [{ path: '/w/src/parser.py', line: 12 }] });
    const tip = present(tool).tooltip;
    assert.match(tip, /Status: in\\_progress/);
    assert.match(tip, /In: \/w\/src\/parser\.py:12/);
    assert.match(tip, /Output so far:\n[^]*def parse\(text\):/);
    // A new plan replaces the one before; the result ends the call's progress in its note.
    model.ingest([
      s.ev('s-1', 'plan', { entries: plan.map((e) => ({ ...e, status: 'completed' })) }),
      s.ev('s-1', 'toolResult', { toolUseId: 'c9', content: 'def parse(text):\n    return text', isError: false }),
    ]);
    assert.deepEqual(outline(model), ['T [running · plan 3/3]', '  fix it [running]', '    Read [src/parser.py]']);
  });

  test("a worktree child's environment and setup are notes, the setup's growing with its output", () => {
    // Hand-built: the recorded scenarios run no worktree setup (it needs a repository's files).
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-1', { title: 'Child' })]);
    model.ingest([
      s.status('s-1', 'queued'),
      s.ev('s-1', 'worktreeEnv', {
        port: 34120, childIndex: 1, copied: ['.env', 'node_modules/'], copiedFiles: 3, copiedBytes: 120,
        rewritten: ['.venv/: pyvenv.cfg, 2 scripts rewritten to name the child\'s worktree'],
        notices: ['.venv/ still names /p where the child\'s worktree has no such file'], setup: 'npm ci', setupSource: 'option',
      }),
      s.ev('s-1', 'setupOutput', { text: 'fetching\n' }),
      s.ev('s-1', 'setupOutput', { text: 'added 3 packages\n' }),
    ]);
    assert.deepEqual(outline(model).slice(1), [
      '  Environment: copied .env, node_modules/ · port 34120 · setup: npm ci',
      '  Worktree setup: added 3 packages',
    ]);
    assert.equal(
      (model.session('s-1')!.items[0] as { detail?: string }).detail,
      'npm ci\n.venv/: pyvenv.cfg, 2 scripts rewritten to name the child\'s worktree\n⚠ .venv/ still names /p where the child\'s worktree has no such file',
    );
    const setupNote = model.session('s-1')!.items[1]!;
    assert.equal(present(setupNote).icon.id, 'tools');
    model.ingest([s.ev('s-1', 'setupEnded', { ok: false, durationMs: 1500, exitCode: 1, error: 'the worktree setup failed (exit code 1): npm ci\nERR' })]);
    assert.equal(outline(model)[2], '  Worktree setup failed: the worktree setup failed (exit code 1): npm ci');
    assert.equal(present(setupNote).icon.id, 'error');
    assert.equal(present(model.session('s-1')!.items[0]!).icon.id, 'warning');
  });

  test('unknown kinds and fields are skipped but their seq counts', () => {
    // Hand-built: a kind from a newer server than the one that recorded the fixtures.
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-1')]);
    model.ingest([s.ev('s-1', 'prompt', { text: 'go' }), s.ev('s-1', 'somethingNew', { x: 1 }), s.ev('s-1', 'text', { text: 'hi', extra: true })]);
    assert.deepEqual(model.gaps(), []);
    assert.equal(model.session('s-1')!.lastSeq, 3);
    assert.equal((model.session('s-1')!.items[0] as TurnNode).children.length, 1);
  });

  test('malformed events do not throw', () => {
    // Hand-built: the server never sends these; the model must survive them anyway.
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
  test("a call of the CLI's own Agent tool is marked ▶ (subagent.jsonl)", () => {
    const sid = rootOf(subagent).sessionId;
    const model = replay(subagent);
    assert.deepEqual(outline(model), [
      `Research the code [done · ${listedCost(subagent, sid)}]`,
      '  Research the code',
      '    ▶ Agent [Look for TODOs]',
      `      Find TODOs [done · ${subagentStats(subagent)}]`,
      '        Found 3 TODOs.',
      '    There are 3 TODOs.',
    ]);
    const agent = (model.session(sid)!.items[0] as TurnNode).children[0] as ToolNode;
    assert.equal(agent.state, 'ok');
    assert.match(present(agent).contextValue, /-subagent$/);
    // The subagent's own words (forwarded by the server) nest under its call.
    assert.notEqual(present(agent).collapsible, 'none');
  });

  test("the events of a subagent nest under its tool call", () => {
    // Hand-built: Claude Code 2.1.330 sends no events of a foreground subagent (subagent.jsonl
    // has none with parentToolUseId); a background one's come after its call's result, in a
    // later turn. This is the nesting protocol.md describes, for CLIs that send them.
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-1', { title: 'Research' })]);
    model.ingest([
      s.ev('s-1', 'prompt', { text: 'Research it', origin: 'user' }),
      s.ev('s-1', 'toolUse', { toolUseId: 'task1', name: 'Agent', input: { description: 'Look around', prompt: 'look' } }),
      s.ev('s-1', 'text', { text: 'Subagent speaking', messageId: 'sm1', parentToolUseId: 'task1' }),
      s.ev('s-1', 'toolUse', { toolUseId: 'g1', name: 'Grep', input: { pattern: 'TODO' }, parentToolUseId: 'task1' }),
      s.ev('s-1', 'toolResult', { toolUseId: 'g1', content: '3 hits', isError: false, parentToolUseId: 'task1' }),
      s.ev('s-1', 'toolResult', { toolUseId: 'task1', content: 'Found 3 TODOs', isError: false }),
      s.ev('s-1', 'text', { text: 'Done: 3 TODOs', messageId: 'm2' }),
    ]);
    assert.deepEqual(outline(model), [
      'Research [done]',
      '  Research it [running]',
      '    ▶ Agent [look]',
      '      Subagent speaking',
      '      Grep [TODO]',
      '    Done: 3 TODOs',
    ]);
    const task = (model.session('s-1')!.items[0] as TurnNode).children[0] as ToolNode;
    assert.equal(present(task).collapsible, 'collapsed');
  });

  test('a fork nests its children under it, and the parent continues below the fork (fork.jsonl)', () => {
    const sid = rootOf(fork).sessionId;
    const [docs, bugs] = childrenOf(fork);
    const model = replay(fork);
    assert.deepEqual(outline(model), [
      `Plan the release [done · ${listedCost(fork, sid)}]`,
      '  Plan the release',
      '    Splitting.',
      `  ⑂ Fork · 2 tasks [done · ${forkTokens(fork)}]`,
      `    Write the docs [done · ${listedCost(fork, docs!.sessionId)}]`,
      "      You were assigned 'Write the docs' [assignment]",
      '        Docs written.',
      `    Fix the bugs [done · ${listedCost(fork, bugs!.sessionId)}]`,
      "      You were assigned 'Fix the bugs' [assignment]",
      '        Bugs fixed.',
      '  Fork results [reintegration turn]',
      '    Both done.',
    ]);
    // Children are not top-level sessions; the fork holds them in task order with the results.
    assert.deepEqual(model.roots().map((r) => r.sessionId), [sid]);
    const node = model.fork(String(the(fork, 'forkStarted').forkId))!;
    assert.deepEqual(node.children.map((c) => [c.label, c.status]), [['Write the docs', 'idle'], ['Fix the bugs', 'idle']]);
    assert.deepEqual(node.results?.map((r) => [r.label, r.ok]), [['Write the docs', true], ['Fix the bugs', true]]);
    assert.equal(node.source, 'model');
  });

  test('the fork node walks through proposed → running n of m → done (fork.jsonl)', () => {
    const forkId = String(the(fork, 'forkProposed').forkId);
    const model = new CovenModel();
    const states: string[] = [];
    replay(fork, model, () => {
      const node = model.fork(forkId);
      if (node?.placed && states[states.length - 1] !== forkStateText(node)) states.push(forkStateText(node));
      return false;
    });
    const node = model.fork(forkId)!;
    if (states[states.length - 1] !== forkStateText(node)) states.push(forkStateText(node));
    assert.deepEqual(states, ['proposed', 'running · 0 of 2 done', 'running · 1 of 2 done', 'running · 2 of 2 done', 'done']);
  });

  test('a proposed fork shows its tasks and waits for the user (fork.jsonl, until coven/decideFork)', () => {
    const sid = rootOf(fork).sessionId;
    const proposed = the(fork, 'forkProposed');
    // Up to the proposal: the decision's answer may come after the status it caused.
    const model = replay(fork, new CovenModel(), afterEvent(fork, 'forkProposed'));
    const node = model.fork(String(proposed.forkId))!;
    assert.equal(present(node).contextValue, 'fork-proposed');
    assert.equal(present(node).label, '⑂ Fork · 2 tasks');
    assert.deepEqual(model.children(node).map((n) => present(n).label), proposed.tasks);
    assert.deepEqual(model.proposedForks(), [node]);
    assert.equal(present(model.session(sid)!).icon.id, 'question');
    assert.match(summarize(model).text, /1 waiting for you/);
  });

  test('a rejected fork says so, and the parent carries on (reject.jsonl)', () => {
    const sid = rootOf(reject).sessionId;
    const model = replay(reject);
    assert.deepEqual(outline(model), [
      `Plan the release [done · ${listedCost(reject, sid)}]`,
      '  Plan the release',
      '    Splitting.',
      '  ⑂ Fork · 2 tasks [rejected: Not now.]',
      '    Write the docs [not run]',
      '    Fix the bugs [not run]',
      '  Told Claude the fork was declined [fork declined]',
      '    Fine, alone then.',
    ]);
    assert.deepEqual(model.proposedForks(), []);
  });

  test('children whose events come before their parent announces them wait, then appear in task order', () => {
    // The server sends forkStarted before the children's first events (fork.jsonl); children
    // first is what a rebuild can see, its getEvents answers arriving in any order.
    const sid = rootOf(fork).sessionId;
    const model = new CovenModel();
    model.applySessions([...fork.sessions].reverse());
    const before = model.ingest(fork.events.filter((e) => e.sessionId !== sid));
    assert.ok(before.length > 0);
    assert.deepEqual(model.roots().map((r) => r.sessionId), [sid]);
    model.ingest(fork.events.filter((e) => e.sessionId === sid));
    const node = model.fork(String(the(fork, 'forkStarted').forkId)) as ForkNode;
    assert.deepEqual(node.children.map((c) => c.label), ['Write the docs', 'Fix the bugs']);
    assert.equal(node.state, 'finished');
    assert.deepEqual(outline(model), outline(replay(fork)));
  });

  test('forks nest to any depth (children that fork again)', () => {
    // Hand-built: the recorded scenarios run with maxDepth 1, where children do not fork.
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-p', { title: 'Root' })]);
    model.ingest([
      s.ev('s-p', 'forkStarted', { state: 'running', forkId: 'f1', source: 'user', children: [{ sessionId: 's-c', label: 'Child' }] }),
      s.ev('s-c', 'prompt', { text: "You were assigned 'Child'", origin: 'fork' }),
      s.ev('s-c', 'forkStarted', { state: 'running', forkId: 'f2', source: 'model', children: [{ sessionId: 's-g', label: 'Grandchild' }] }),
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

  test('a parent closed while it forks takes its fork down', () => {
    // The real fork (fork.jsonl) up to `forking`, then a hand-built `closed`: coven/closeSession
    // on a forking parent is not recorded. (Cancelling a forking parent does not end the parent:
    // its children end `cancelled` and it gets their results, so no status says the fork ended.)
    const sid = rootOf(fork).sessionId;
    const model = replay(fork, new CovenModel(), afterEvent(fork, 'forkStarted'));
    const forkId = String(the(fork, 'forkStarted').forkId);
    assert.equal(model.fork(forkId)!.state, 'running');
    assert.deepEqual(model.runningForks().map((r) => r.fork.forkId), [forkId]);
    const parent = model.session(sid)!;
    model.ingest([{ sessionId: sid, seq: parent.lastSeq + 1, kind: 'status', time: 't', status: 'closed' }]);
    // The state stays the server's word; the fork is shown as cancelled and waits for nothing.
    const node = model.fork(forkId)!;
    assert.equal(node.state, 'running');
    assert.equal(forkStateText(node), 'cancelled');
    assert.equal(present(node).contextValue, 'fork-cancelled');
    assert.deepEqual(model.runningForks(), []);
  });
});

describe('persistence', () => {
  test('a fork the server was killed in is interrupted until resumed, then runs and finishes (restart.jsonl)', () => {
    const sid = rootOf(restart).sessionId;
    const children = childrenOf(restart);
    const forkId = String(the(restart, 'forkStarted').forkId);

    // The first server, up to its SIGKILL: the fork runs, both children too.
    const killed = replay(restart, new CovenModel(), (line) => line.marker?.fixture === 'serverKilled');
    assert.equal(forkStateText(killed.fork(forkId)!), 'running · 0 of 2 done');
    assert.deepEqual(children.map((c) => killed.session(c.sessionId)!.status), ['running', 'running']);

    // The restarted server: the extension rebuilds (reset, listSessions, getEvents), and the
    // fork waits for the user.
    // (Up to the parent's `forking`: coven/resumeFork's answer may come after what it caused.)
    const interruptedAt = the(restart, 'forkInterrupted').seq;
    const waiting = replay(restart, new CovenModel(), atEvent('status', (e) => e.sessionId === sid && e.status === 'forking' && e.seq > interruptedAt));
    const node = waiting.fork(forkId)!;
    assert.equal(forkStateText(node), 'interrupted · 0 of 2 done');
    assert.equal(present(node).contextValue, 'fork-interrupted');
    assert.deepEqual(waiting.interruptedForks(), [node]);
    assert.match(summarize(waiting).text, /1 waiting for you/);
    assert.equal(waiting.session(sid)!.status, 'interrupted');
    for (const child of children) {
      const session = waiting.session(child.sessionId)!;
      assert.equal(session.status, 'interrupted');
      assert.deepEqual((session.items as TurnNode[]).map((t) => t.state), ['interrupted']);
    }
    assert.deepEqual(waiting.gaps(), []);

    // coven/resumeFork: the parent forks again, the children run again, the fork finishes.
    const resumed = replay(restart, new CovenModel(), afterEvent(restart, 'forkResumed'));
    assert.equal(resumed.fork(forkId)!.state, 'running');
    assert.deepEqual(resumed.interruptedForks(), []);

    const done = replay(restart);
    assert.deepEqual(outline(done), [
      `Plan the release [done · ${listedCost(restart, sid)}]`,
      '  Plan the release',
      '    Splitting.',
      `  ⑂ Fork · 2 tasks [done · ${forkTokens(restart)}]`,
      `    Write the docs [done · ${listedCost(restart, children[0]!.sessionId)}]`,
      "      You were assigned 'Write the docs' [assignment · interrupted]",
      "      You were assigned 'Write the docs' [assignment]",
      '        Docs written.',
      `    Fix the bugs [done · ${listedCost(restart, children[1]!.sessionId)}]`,
      "      You were assigned 'Fix the bugs' [assignment · interrupted]",
      "      You were assigned 'Fix the bugs' [assignment]",
      '        Bugs fixed.',
      '  Fork results [reintegration turn]',
      '    Both done after the restart.',
    ]);
  });

  test('a client that stays connected across the restart (no rebuild) ends with the same tree (restart.jsonl)', () => {
    // Live events only, no reset: each session's log goes on at the seq it had reached.
    const model = new CovenModel();
    model.applySessions(restart.sessions);
    model.ingest(restart.events);
    assert.deepEqual(model.gaps(), []);
    assert.deepEqual(outline(model), outline(replay(restart)));
  });

  test('a deleted session leaves the tree with its subtree, whatever its seq', () => {
    // The real fork (fork.jsonl), then hand-built `deleted` events: deletion is not recorded.
    const sid = rootOf(fork).sessionId;
    const [docs, bugs] = childrenOf(fork).map((c) => c.sessionId);
    const forkId = String(the(fork, 'forkStarted').forkId);
    const other: SessionInfo = { ...infoOf(tool, rootOf(tool).sessionId) };
    const model = replay(fork);
    model.applySessions([other]);
    model.takeChanges();
    model.ingest([{ sessionId: bugs!, seq: 999, kind: 'deleted', time: 't', sessionIds: [bugs!] }]);
    assert.deepEqual(model.fork(forkId)!.children.map((c) => c.sessionId), [docs]);
    assert.deepEqual(model.takeChanges().nodes.map((n) => n.key), [`fork:${forkId}`]);
    model.ingest([{ sessionId: sid, seq: 999, kind: 'deleted', time: 't', sessionIds: [sid, docs!] }]);
    assert.deepEqual(model.roots().map((r) => r.sessionId), [other.sessionId]);
    assert.equal(model.session(docs!), undefined);
    assert.equal(model.fork(forkId), undefined);
    assert.equal(model.takeChanges().root, true);
    assert.deepEqual(model.gaps(), []);
  });

  test('an interrupted session says so and takes messages (restart.jsonl, listSessions after the restart)', () => {
    const sid = rootOf(restart).sessionId;
    const listing = restart.lines.find((l) => l.marker?.method === 'coven/listSessions')!.marker!;
    const listed = (listing.result as { sessions: SessionInfo[] }).sessions;
    const model = new CovenModel();
    model.applySessions(listed);
    const p = present(model.session(sid)!);
    assert.equal(p.description, `interrupted · ${formatCost(listed.find((s) => s.sessionId === sid)!.costUsd)}`);
    assert.equal(p.icon.id, 'debug-pause');
    assert.equal(p.contextValue, 'session-interrupted-top');
    model.ingest(fullLogs(restart).get(sid)!.filter((e) => e.seq <= Number(the(restart, 'forkResumed').seq)));
    assert.match(present(model.session(sid)!).description, /^forking · /);
  });
});

describe('ordering and gaps', () => {
  test('events applied in seq order whatever order they arrive in (fork.jsonl shuffled)', () => {
    const expected = replay(fork);
    for (const seed of [1, 2, 3, 42, 1234]) {
      const model = new CovenModel();
      model.applySessions(fork.sessions);
      const applied = model.ingest(shuffled(fork.events, seed));
      assert.equal(applied.length, fork.events.length);
      assert.deepEqual(outline(model), outline(expected), `seed ${seed}`);
      assert.deepEqual(model.gaps(), []);
    }
  });

  test('a jump in seq is a gap: later events wait until getEvents fills it (tool.jsonl)', () => {
    const sid = rootOf(tool).sessionId;
    const all = eventsOf(tool, sid);
    const model = new CovenModel();
    model.applySessions(tool.sessions);
    model.ingest(all.slice(0, 3));
    model.ingest(all.slice(5)); // seq 4 and 5 lost
    assert.deepEqual(model.gaps(), [{ sessionId: sid, afterSeq: 3 }]);
    assert.equal(model.session(sid)!.lastSeq, 3);
    // What coven/getEvents(afterSeq: 3) returns: everything after 3, overlapping what we hold.
    const applied = model.ingest(all.slice(3));
    assert.deepEqual(applied.map((e) => e.seq), all.slice(3).map((e) => e.seq));
    assert.deepEqual(model.gaps(), []);
    assert.equal(model.session(sid)!.status, 'idle');
  });

  test('a session first seen mid-stream is a gap from seq 0 (tool.jsonl)', () => {
    const sid = rootOf(tool).sessionId;
    const model = new CovenModel();
    model.ingest(eventsOf(tool, sid).slice(3));
    assert.deepEqual(model.gaps(), [{ sessionId: sid, afterSeq: 0 }]);
    assert.deepEqual(model.unknownSessions(), [sid]);
  });

  test('duplicates are dropped (tool.jsonl twice)', () => {
    const sid = rootOf(tool).sessionId;
    const model = new CovenModel();
    model.ingest(tool.events);
    assert.deepEqual(model.ingest(tool.events), []);
    assert.equal(model.sessions().length, 0, 'not known until listSessions says what it is');
    model.applySessions(tool.sessions);
    assert.equal((model.session(sid)!.items[0] as TurnNode).children.length, 4);
  });

  test('sessions are newest first', () => {
    // Hand-built SessionInfo (no events): each recording has one top-level session.
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
  test('reset + listSessions + getEvents rebuilds the same tree (fork.jsonl)', () => {
    const live = replay(fork);
    const before = outline(live);
    live.reset();
    assert.equal(live.takeChanges().root, true);
    assert.deepEqual(outline(live), []);
    // As the extension does it: the list first, then each session's events from seq 0.
    live.applySessions(fork.sessions);
    for (const { sessionId } of fork.sessions) live.ingest(eventsOf(fork, sessionId));
    assert.deepEqual(outline(live), before);
    assert.equal(live.session(rootOf(fork).sessionId)!.costUsd.toFixed(6), rootOf(fork).costUsd.toFixed(6));
  });

  test('the whole log of a restarted server rebuilds the tree the live client has (restart.jsonl)', () => {
    const model = new CovenModel();
    model.applySessions(restart.sessions);
    for (const log of fullLogs(restart).values()) model.ingest(log);
    assert.deepEqual(outline(model), outline(replay(restart)));
  });

  test('live events that race the rebuild are neither lost nor doubled (fork.jsonl)', () => {
    const sid = rootOf(fork).sessionId;
    const model = new CovenModel();
    model.applySessions(fork.sessions);
    const parent = eventsOf(fork, sid);
    // A live event arrives after listSessions, before getEvents answers.
    model.ingest([parent[parent.length - 1]!]);
    assert.deepEqual(model.gaps().map((g) => g.sessionId), [sid]);
    model.ingest(fork.events);
    assert.deepEqual(model.gaps(), []);
    assert.equal(model.session(sid)!.lastSeq, parent.length);
  });

  test('a listSessions total stands in for cost until the events are in (fork.sessions.json)', () => {
    const model = new CovenModel();
    model.applySessions(fork.sessions);
    for (const listed of fork.sessions) assert.equal(model.session(listed.sessionId)!.costUsd, listed.costUsd);
  });
});

describe('change tracking', () => {
  test('only the changed node is reported, topmost only (tool.jsonl, cancel.jsonl)', () => {
    const sid = rootOf(tool).sessionId;
    const toolUse = the(tool, 'toolUse');
    const prompt = the(tool, 'prompt');
    const model = replay(tool, new CovenModel(), atEvent('toolResult'));
    model.takeChanges();
    model.ingest([the(tool, 'toolResult')]);
    const changes = model.takeChanges();
    assert.equal(changes.root, false);
    assert.deepEqual(changes.nodes.map((n) => n.key), [`${sid}#${toolUse.seq}`]);
    assert.deepEqual(changes.sessions.map((n) => n.sessionId), [sid]);
    // A streaming turn refreshes itself (its new item with it), not its session.
    model.ingest([eventsOf(tool, sid).find((e) => e.seq === Number(the(tool, 'toolResult').seq) + 1)!]);
    assert.deepEqual(model.takeChanges().nodes.map((n) => n.key), [`${sid}/turn${prompt.seq}`]);

    // A new turn changes the session.
    const cid = rootOf(cancel).sessionId;
    const second = eventsOf(cancel, cid).filter((e) => e.kind === 'prompt')[1]!;
    const later = replay(cancel, new CovenModel(), atEvent('prompt', (e) => e.seq === second.seq));
    later.takeChanges();
    later.ingest([second]);
    assert.deepEqual(later.takeChanges().nodes.map((n) => n.key), [cid]);
  });

  test('tree ids are unique, also for output that no prompt started', () => {
    // Hand-built: the server always sends a prompt before a turn's output; the model still gives
    // stray output a turn of its own (and unique ids) rather than lose it.
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

  test('a new top-level session changes the root; a new child changes its fork (fork.jsonl)', () => {
    const forkId = String(the(fork, 'forkStarted').forkId);
    const model = new CovenModel();
    model.applySessions([rootOf(fork)]);
    assert.equal(model.takeChanges().root, true);
    const started = replay(fork, model, atEvent('forkStarted'));
    started.takeChanges();
    started.ingest([the(fork, 'forkStarted')]);
    const changes = started.takeChanges();
    assert.equal(changes.root, false);
    assert.deepEqual(changes.nodes.map((n) => n.key), [`fork:${forkId}`]);
  });

  test('changes in sessions nobody can see yet are not reported (a child of fork.jsonl alone)', () => {
    const model = new CovenModel();
    model.ingest(eventsOf(fork, childrenOf(fork)[0]!.sessionId));
    assert.deepEqual(model.takeChanges().nodes, []);
  });
});

/** Milliseconds of this process's CPU time (user and system) since `since`. */
function cpuMs(since: NodeJS.CpuUsage): number {
  const used = process.cpuUsage(since);
  return (used.user + used.system) / 1000;
}

describe('many events', () => {
  test('10k events reduce in well under a second, with bounded change reports', () => {
    // Hand-built on purpose: a volume test, not a protocol one.
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
    // The reducer's cost is the CPU time it takes, not the wall time, which a busy machine
    // stretches at will (this failed at 2.2 s wall time with CPUs shared by other work).
    const start = process.cpuUsage();
    // In bursts of 100, as they would arrive between two tree refreshes.
    let reported = 0;
    for (let i = 0; i < events.length; i += 100) {
      model.ingest(events.slice(i, i + 100));
      reported += model.takeChanges().nodes.length;
    }
    const elapsed = cpuMs(start);
    assert.ok(elapsed < 1000, `took ${elapsed.toFixed(0)} ms of CPU`);
    assert.ok(reported <= 100 * 10, `one refresh per session per burst at most, got ${reported}`);
    assert.equal(model.session('s-3')!.lastSeq, 1000);
    // Rendering a long transcript stays cheap too.
    const t0 = process.cpuUsage();
    const md = renderTranscript(model.session('s-3')!, model);
    const rendering = cpuMs(t0);
    assert.ok(rendering < 500, `rendering took ${rendering.toFixed(0)} ms of CPU`);
    assert.ok(md.includes('line 998'));
  });
});

describe('status bar and transcript', () => {
  test('the status bar counts fork progress (fork.jsonl)', () => {
    const [docs, bugs] = childrenOf(fork).map((c) => c.sessionId);
    // Both children created (queued), none started: the parent forks, nothing runs yet.
    const queued = replay(fork, new CovenModel(), afterEvent(fork, 'status', (e) => e.sessionId === bugs && e.status === 'queued'));
    // With what the sessions spent so far: tokens (from the turns' usage) and cost.
    const spent = (m: CovenModel): string => formatCost(m.sessions().reduce((sum, s) => sum + s.costUsd, 0));
    const tokens = (m: CovenModel): string =>
      `${formatTokens(m.sessions().reduce((sum, s) => sum + (s.usage ? totalTokens(s.usage) : 0), 0))} tokens`;
    assert.equal(summarize(queued).text, `$(repo-forked) Coven: $(repo-forked) 0/2 · ${tokens(queued)} · ${spent(queued)}`);
    // The first child to finish counts.
    const first = fork.events.find((e) => (e.sessionId === docs || e.sessionId === bugs) && e.kind === 'status' && e.status === 'idle')!;
    const one = replay(fork, new CovenModel(), afterEvent(fork, 'status', (e) => e === first));
    assert.match(summarize(one).text, /\$\(repo-forked\) 1\/2 · [\d.]+k? tokens · \$[\d.]+$/);
    const done = replay(fork);
    assert.equal(summarize(done).text, `$(repo-forked) Coven: ${tokens(done)} · ${spent(done)}`);
  });

  test('the transcript has every turn, the fork and its children (fork.jsonl)', () => {
    const model = replay(fork);
    const md = renderTranscript(model.session(rootOf(fork).sessionId)!, model);
    for (const piece of ['# Plan the release', '## You', '> Plan the release', '## ⑂ Fork · 2 tasks — done', '### Write the docs — done', 'Docs written.', '## Fork results', 'Both done.']) {
      assert.ok(md.includes(piece), `missing ${JSON.stringify(piece)} in\n${md}`);
    }
    assert.ok(md.indexOf('Bugs fixed.') < md.indexOf('Both done.'));
  });
});

describe("the fork's state is the server's", () => {
  test('after each fork event, the fork is in the state the event says (every fixture)', () => {
    let checked = 0;
    for (const name of SCENARIOS) {
      const fixture = loadFixture(name);
      fixture.lines.forEach((line, index) => {
        const e = line.event;
        if (e === undefined || !('forkId' in e) || !('state' in e)) return;
        const model = replay(fixture, new CovenModel(), (_l, i) => i > index);
        assert.equal(model.fork(String(e.forkId))!.state, e.state, `${name}: after ${e.kind} (seq ${e.seq})`);
        checked++;
      });
    }
    assert.ok(checked >= 14, `only ${checked} fork events in the fixtures`);
  });

  test("a listing alone gives the parent's latest fork and its state (lastFork)", () => {
    const fork = loadFixture('fork');
    const root = rootOf(fork);
    assert.equal(root.lastFork?.state, 'finished');
    const model = new CovenModel();
    model.applySessions(fork.sessions);
    assert.equal(model.fork(root.lastFork!.forkId)!.state, 'finished');
    // Children fork nothing of their own.
    assert.deepEqual(fork.sessions.filter((s) => s.parentId !== null).map((s) => s.lastFork), [null, null]);
  });

  test('a listing older than the events does not take a fork back; an unknown state is ignored', () => {
    const fork = loadFixture('fork');
    const root = rootOf(fork);
    const forkId = String(the(fork, 'forkStarted').forkId);
    const model = replay(fork, new CovenModel(), afterEvent(fork, 'forkStarted'));
    assert.equal(model.fork(forkId)!.state, 'running');
    model.applySessions([{ ...root, lastFork: { forkId, state: 'proposed' } }]);
    assert.equal(model.fork(forkId)!.state, 'running');
    const parent = model.session(root.sessionId)!;
    model.ingest([{ sessionId: root.sessionId, seq: parent.lastSeq + 1, kind: 'forkFinished', time: 't', forkId, state: 'someday', results: [] } as unknown as CovenEvent]);
    assert.equal(model.fork(forkId)!.state, 'running');
  });
});

describe('fork limits', () => {
  test("a running child shows its spend against its fork's limits; a stopped one says which limit", () => {
    // Hand-built: the recorded scenarios set no limits (the e2e tests in tests/e2e/test_limits_e2e.py do).
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-p', { title: 'Parent' })]);
    model.ingest([
      ...s.turn('s-p', 'plan', 'ready'),
      s.ev('s-p', 'forkStarted', {
        forkId: 'f-1', state: 'running', source: 'user', tasks: ['Loop'], children: [{ sessionId: 's-c', label: 'Loop' }],
        limits: { childTokens: 5000, childSeconds: 60, forkCostUsd: 2 },
      }),
      s.status('s-c', 'queued'),
      s.ev('s-c', 'prompt', { text: "You were assigned 'Loop'", origin: 'fork' }),
      s.status('s-c', 'running'),
      s.ev('s-c', 'spend', { usage: { inputTokens: 1000, outputTokens: 200, cacheReadTokens: 2000, cacheCreationTokens: 0 }, costUsd: 0.25, seconds: 12.4 }),
    ]);
    const child = model.session('s-c')!;
    const spentAt = child.spend!.at;
    assert.equal(present(child, spentAt).description, 'running · 3.2k/5k tokens · 12s/60s · fork $0.2500/$2.00');
    assert.match(present(child, spentAt).tooltip, /Tokens: 3,200 of 5,000/);
    assert.match(present(child).tooltip, /The whole fork: \$0\.2500 of \$2\.00/);
    model.ingest([
      s.status('s-c', 'cancelled'),
      s.ev('s-p', 'forkFinished', {
        forkId: 'f-1', state: 'finished',
        results: [{ label: 'Loop', sessionId: 's-c', ok: false, error: 'stopped: it reached its limit of 5,000 tokens', stopped: 'limit', limit: 'childTokens' }],
      }),
    ]);
    assert.doesNotMatch(present(child).description, /tokens/);
    assert.match(present(child).tooltip, /Stopped: it reached its token limit \(`childTokens`\)/);
  });

  test("a working child's clock moves each second between its spend events, from its start before any", () => {
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-p', { title: 'Parent' })]);
    model.ingest([
      ...s.turn('s-p', 'plan', 'ready'),
      s.ev('s-p', 'forkStarted', {
        forkId: 'f-1', state: 'running', source: 'user', tasks: ['Loop'], children: [{ sessionId: 's-c', label: 'Loop' }],
        limits: { childSeconds: 60 },
      }),
      s.status('s-c', 'queued'),
      s.status('s-c', 'starting'),
    ]);
    const child = model.session('s-c')!;
    const started = child.startedAt!;
    assert.ok(ticks(child), 'a child at work against a time limit ticks');
    assert.equal(present(child, started + 3_400).description, 'starting · 3s/60s', 'before any spend: from its start');
    model.ingest([
      s.status('s-c', 'running'),
      s.ev('s-c', 'spend', { usage: { inputTokens: 1, outputTokens: 1, cacheReadTokens: 0, cacheCreationTokens: 0 }, costUsd: 0, seconds: 12.4 }),
    ]);
    const at = child.spend!.at;
    assert.equal(present(child, at).description, 'running · 12s/60s');
    assert.equal(present(child, at + 1_000).description, 'running · 13s/60s');
    assert.equal(present(child, at + 2_000).description, 'running · 14s/60s');
    assert.match(present(child, at + 2_000).tooltip, /Time: 14 s of 60 s/);
    const idle = s.status('s-c', 'idle');
    model.ingest([idle]);
    assert.ok(!ticks(child), 'a child that stopped working does not tick');
    const worked = Math.floor(12.4 + (Date.parse(idle.time) - at) / 1000);
    assert.match(present(child, at + 60_000).tooltip, new RegExp(`Time: ${worked} s of 60 s`), 'its clock stands where it stopped');
  });
});
