// A session as alive as the CLI: streamed text (coven/delta, getEvents' partial), the CLI's
// background subagents and the turns it starts to report them, API retries, tokens, the fork
// queue, cancelled turns. Fed the golden fixtures that show them (stream, background, queue,
// cancel_stream: a real coven-ls, the real CLI, the scripted model; see tests/fixtures/record.py)
// and, where no recording can show a case, hand-built events (./events.ts), each test saying why.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import {
  type Changes,
  CovenModel,
  firstLine,
  type ForkNode,
  type Node,
  type SessionNode,
  type SubagentNode,
  type TextNode,
  tokenUsage,
  type ToolNode,
  totalTokens,
  treeUsage,
  type TurnNode,
} from '../src/model';
import { formatCost, formatTokens, formatUsage, ordinal, present, retryText, summarize, tail } from '../src/present';
import type { CovenEvent, Delta, PartialBlock, SessionInfo } from '../src/protocol';
import { type ServerConnection, SessionSync } from '../src/sync';
import { renderTranscript } from '../src/transcript';
import { info, Stream } from './events';
import { atEvent, deltasOf, type EventOf, eventsOf, type Fixture, type Line, loadFixture, replay, rootOf } from './fixtures';
import { outline } from './outline';

const stream = loadFixture('stream');
const background = loadFixture('background');
const queue = loadFixture('queue');
const cancelled = loadFixture('cancel_stream');

/** The one event of `kind` (matching `match`) in a fixture. */
function the<K extends CovenEvent['kind']>(f: Fixture, kind: K, match: (e: EventOf<K>) => boolean = () => true): EventOf<K> {
  const found = f.events.filter((e): e is EventOf<K> => e.kind === kind).filter(match);
  assert.equal(found.length, 1, `${f.name}: ${found.length} ${kind} events`);
  return found[0]!;
}

/** Replays up to and including the `n`-th line that `match` accepts (from 1). */
function upTo(f: Fixture, match: (line: Line) => boolean, n = 1): CovenModel {
  let seen = 0;
  const at = f.lines.findIndex((line) => match(line) && ++seen === n);
  assert.ok(at >= 0, `${f.name}: no line #${n} that matches`);
  return replay(f, new CovenModel(), (_line, index) => index > at);
}

const isDelta =
  (kind?: string) =>
  (line: Line): boolean =>
    line.marker?.fixture === 'delta' && (kind === undefined || (line.marker.params as Record<string, unknown>).kind === kind);
const isEvent =
  <K extends CovenEvent['kind']>(kind: K, match: (e: EventOf<K>) => boolean = () => true) =>
  (line: Line): boolean =>
    line.event?.kind === kind && match(line.event as EventOf<K>);

function turns(session: SessionNode): TurnNode[] {
  return session.items.filter((i): i is TurnNode => i.kind === 'turn');
}

function streaming(model: CovenModel): TextNode[] {
  const found: TextNode[] = [];
  const walk = (items: readonly Node[]): void => {
    for (const n of items) {
      if ((n.kind === 'text' || n.kind === 'thinking') && n.streaming) found.push(n);
      if (n.kind === 'session') walk(n.items);
      if (n.kind === 'turn' || n.kind === 'tool' || n.kind === 'subagent' || n.kind === 'fork') walk(n.children);
    }
  };
  walk(model.roots());
  return found;
}

/** The text of a block as its pieces spelled it, up to the `n`-th piece. */
function piecesOf(f: Fixture, blockId: string, n = Infinity): string {
  return deltasOf(f)
    .filter((d) => d.blockId === blockId)
    .slice(0, n)
    .map((d) => d.text)
    .join('');
}

describe('streaming (coven/delta)', () => {
  const sid = rootOf(stream).sessionId;
  const text = the(stream, 'text');
  const textBlock = String(text.blockId);

  test('the answer grows piece by piece in its turn, on one line, then the whole block replaces it (stream.jsonl)', () => {
    const labels: string[] = [];
    const pieces = deltasOf(stream).filter((d) => d.kind === 'text');
    for (let n = 1; n <= pieces.length; n++) {
      const model = upTo(stream, isDelta('text'), n);
      const [node] = streaming(model);
      assert.equal(node!.text, piecesOf(stream, textBlock, n));
      assert.equal(node!.parent, turns(model.session(sid)!)[0]);
      labels.push(present(node!).label);
    }
    assert.equal(labels[0], `${pieces[0]!.text}▍`);
    assert.ok(labels.every((l, i) => i === 0 || l !== labels[i - 1]), 'every piece shows');
    assert.equal(labels.at(-1), `${tail(String(text.text), 60)}▍`);
    assert.equal(present(streaming(upTo(stream, isDelta('text')))[0]!).description, 'writing…');

    // The whole block: a text node like any other, where the pieces were.
    const model = upTo(stream, isEvent('text'));
    assert.deepEqual(streaming(model), []);
    const turn = turns(model.session(sid)!)[0]!;
    const final = turn.children.find((c) => c.kind === 'text') as TextNode;
    assert.equal(final.text, text.text);
    assert.equal(final.messageId, text.messageId);
    assert.equal(present(final).label, firstLine(String(text.text)));
    assert.equal(present(final).contextValue, 'text-forkable');
    // Pieces leave no trace: the same tree as without any delta.
    const eventsOnly = new CovenModel();
    eventsOnly.applySessions(stream.sessions);
    eventsOnly.ingest(stream.events);
    assert.deepEqual(outline(replay(stream)), outline(eventsOnly));
  });

  test('thinking streams too: the turn says so, the tree hides it, the transcript shows it (stream.jsonl)', () => {
    const model = upTo(stream, isDelta('thinking'), 3);
    const turn = turns(model.session(sid)!)[0]!;
    assert.equal(present(turn).description, 'running · thinking…');
    assert.deepEqual(model.children(turn), []);
    assert.match(renderTranscript(model.session(sid)!, model), new RegExp(`> \\*${piecesOf(stream, String(the(stream, 'thinking').blockId), 3)}▍\\*`));
    const thought = upTo(stream, isEvent('thinking'));
    assert.equal(present(turns(thought.session(sid)!)[0]!).description, 'running');
  });

  test('the transcript grows with the text, a cursor at its end (stream.jsonl)', () => {
    const model = upTo(stream, isDelta('text'), 6);
    const md = renderTranscript(model.session(sid)!, model);
    assert.ok(md.includes(`${piecesOf(stream, textBlock, 6)}▍`), md);
    const done = replay(stream);
    assert.ok(renderTranscript(done.session(sid)!, done).includes(`${String(text.text)}\n`));
    assert.ok(!renderTranscript(done.session(sid)!, done).includes('▍'));
  });

  test('a piece redraws only its own row; a thinking piece no row, but the transcript (stream.jsonl)', () => {
    const before = upTo(stream, isDelta('text'), 2);
    before.takeChanges();
    const third = deltasOf(stream).filter((d) => d.kind === 'text')[2]!;
    before.applyDelta(third);
    const changes = before.takeChanges();
    assert.deepEqual(changes.nodes.map((n) => n.key), [`${sid}~${textBlock}`]);
    assert.deepEqual(changes.sessions.map((s) => s.sessionId), [sid]);

    const thinking = upTo(stream, isDelta('thinking'), 2);
    thinking.takeChanges();
    thinking.applyDelta(deltasOf(stream).filter((d) => d.kind === 'thinking')[2]!);
    const quiet = thinking.takeChanges();
    assert.deepEqual(quiet.nodes, []);
    assert.deepEqual(quiet.sessions.map((s) => s.sessionId), [sid]);
  });

  test("a client that comes in mid-message shows getEvents' partial, and the pieces after it continue it (stream.jsonl)", () => {
    const at = stream.lines.findIndex((l) => l.marker?.method === 'coven/getEvents');
    const answer = stream.lines[at]!.marker!.result as { events: CovenEvent[]; partial: PartialBlock[] };
    assert.equal(answer.partial.length, 1);
    const model = new CovenModel();
    model.applySessions(stream.sessions);
    model.ingest(answer.events);
    model.applyPartial(sid, answer.partial, Math.max(...answer.events.map((e) => e.seq)));
    const [node] = streaming(model);
    assert.equal(node!.text, answer.partial[0]!.text);
    // Exactly what a live client had at that point.
    assert.equal(node!.text, streaming(replay(stream, new CovenModel(), (_l, i) => i >= at))[0]!.text);
    // The pieces that came after the answer continue the block.
    for (const line of stream.lines.slice(at + 1)) {
      if (line.marker?.fixture === 'delta') model.applyDelta(line.marker.params as unknown as Delta);
      else if (line.event) model.ingest([line.event]);
      const live = streaming(model)[0];
      if (live) assert.ok(String(text.text).startsWith(live.text));
    }
    assert.deepEqual(outline(model), outline(replay(stream)));
  });

  test('a partial block without its event yet waits for it, and a block no longer listed is dropped', () => {
    // Hand-built: a getEvents answer races the live events only when a client reconnects.
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-1', { title: 'T', status: 'running' })]);
    const prompt = s.ev('s-1', 'prompt', { text: 'go', origin: 'user' });
    const block: PartialBlock = { blockId: 'm1:0', kind: 'text', text: 'Hello wo' };
    model.applyPartial('s-1', [block], 1); // the prompt is not in yet
    assert.deepEqual(streaming(model), []);
    model.ingest([prompt]);
    assert.equal(streaming(model)[0]!.text, 'Hello wo');
    model.applyDelta({ sessionId: 's-1', afterSeq: 1, blockId: 'm1:0', kind: 'text', text: 'rld' });
    assert.equal(streaming(model)[0]!.text, 'Hello world');
    model.applyPartial('s-1', [], 1);
    assert.deepEqual(streaming(model), []);
    assert.deepEqual(outline(model), ['T [running]', '  go [running]']);
  });

  test('pieces of a cut-off turn go when the turn ends without its block (turnResult, error, status)', () => {
    // Hand-built: Claude Code sends the cut block as a text event when a turn is cancelled
    // (cancel.jsonl); a turn that fails mid-stream or a CLI that dies sends none.
    const piece = (blockId: string, text: string, parentToolUseId?: string): Delta => ({
      sessionId: 's-1', afterSeq: 0, blockId, kind: 'text', text, ...(parentToolUseId ? { parentToolUseId } : {}),
    });
    for (const [name, ending] of [
      ['turnResult', (s: Stream) => [s.ev('s-1', 'turnResult', { text: 'API Error', isError: true, subtype: 'error', costUsd: 0, durationMs: 1, numTurns: 1 })]],
      ['error', (s: Stream) => [s.ev('s-1', 'error', { message: 'The Claude Code process ended.' }), s.status('s-1', 'failed')]],
      ['closed', (s: Stream) => [s.status('s-1', 'closed')]],
    ] as const) {
      const s = new Stream();
      const model = new CovenModel();
      model.applySessions([info('s-1', { title: 'T' })]);
      model.ingest([s.ev('s-1', 'prompt', { text: 'go', origin: 'user' }), s.status('s-1', 'running')]);
      model.applyDelta({ ...piece('m1:0', 'Half an ans'), afterSeq: 2 });
      assert.equal(streaming(model).length, 1, name);
      model.ingest(ending(s));
      assert.deepEqual(streaming(model), [], name);
      // A late piece of it does not bring it back.
      model.applyDelta({ ...piece('m1:0', 'wer'), afterSeq: 2 });
      assert.deepEqual(streaming(model), [], name);
    }
  });
});

describe('cancelled turns', () => {
  const sid = rootOf(cancelled).sessionId;

  test('a turn cancelled mid-stream reads cancelled, not failed; what it wrote stays (cancel recording)', () => {
    const result = the(cancelled, 'turnResult', (e) => e.cancelled === true);
    // The server's shape of a cancelled turn: no error, no text.
    assert.equal(result.isError, false);
    assert.equal(result.text, '');
    const model = replay(cancelled);
    assert.deepEqual(outline(model), [
      `Write a long essay [done · ${formatCost(model.session(sid)!.costUsd)}]`,
      '  Write a long essay [cancelled]',
      `    ${the(cancelled, 'text', (e) => e.seq < result.seq).text}`,
      '  Are you there?',
      '    Still here.',
    ]);
    const [turn] = turns(model.session(sid)!);
    assert.equal(turn!.state, 'cancelled');
    assert.equal(present(turn!).icon.id, 'circle-slash');
    assert.ok(!turn!.children.some((c) => c.kind === 'note'), 'no "Turn failed" note');
    assert.match(renderTranscript(model.session(sid)!, model), /\*Turn cancelled\.\*/);
    assert.doesNotMatch(renderTranscript(model.session(sid)!, model), /failed/i);
  });

  test('the old shape (isError true with cancelled true, cancel.jsonl) reads cancelled too', () => {
    const old = loadFixture('cancel');
    const model = replay(old);
    const [turn] = turns(model.session(rootOf(old).sessionId)!);
    assert.equal(turn!.state, 'cancelled');
    assert.ok(!turn!.children.some((c) => c.kind === 'note'));
  });
});

describe('API retries', () => {
  const sid = rootOf(stream).sessionId;
  const retries = stream.events.filter((e): e is EventOf<'apiRetry'> => e.kind === 'apiRetry');

  test('a retry shows on the session and its turn while the CLI waits, and goes once the model answers (stream.jsonl)', () => {
    assert.equal(retries.length, 2);
    const second = retries[1]!;
    const model = upTo(stream, isEvent('apiRetry'), 2);
    const session = model.session(sid)!;
    const [turn] = turns(session);
    const expected = `API overloaded — retrying in ${Number((second.retryDelayMs / 1000).toFixed(1))} s (2/${second.maxRetries})`;
    assert.equal(retryText(session.retry!), expected);
    assert.equal(present(session).description, `running · ${expected}`);
    assert.equal(present(turn!).description, `running · ${expected}`);
    assert.deepEqual(present(session).icon, { id: 'sync~spin', color: 'charts.yellow' });
    assert.deepEqual(present(turn!).icon, { id: 'sync~spin', color: 'charts.yellow' });
    assert.ok(present(session).tooltip.includes(expected));
    // The model answers (its first streamed piece): the retry is over.
    const answering = upTo(stream, isDelta());
    assert.equal(answering.session(sid)!.retry, undefined);
    assert.equal(present(answering.session(sid)!).description, 'running');
    assert.equal(present(turns(answering.session(sid)!)[0]!).icon.id, 'loading~spin');
  });

  test('what failed, by HTTP status', () => {
    const r = { attempt: 3, maxRetries: 10, retryDelayMs: 4000, errorStatus: undefined as number | undefined, error: undefined as string | undefined };
    assert.equal(retryText({ ...r, errorStatus: 529, error: 'overloaded' }), 'API overloaded — retrying in 4 s (3/10)');
    assert.equal(retryText({ ...r, errorStatus: 429, error: 'rate_limit' }), 'API rate-limited — retrying in 4 s (3/10)');
    assert.equal(retryText({ ...r, errorStatus: 503 }), 'API server error (503) — retrying in 4 s (3/10)');
    assert.equal(retryText({ ...r, error: 'Connection error.' }), 'Connection error. — retrying in 4 s (3/10)');
    assert.equal(retryText({ ...r, retryDelayMs: 549 }), 'API error — retrying in 0.5 s (3/10)');
    assert.equal(retryText({ ...r, retryDelayMs: 32_400 }), 'API error — retrying in 32 s (3/10)');
  });

  test('a turn that ends while retrying clears it, and so does a session that stops', () => {
    // Hand-built: the recording's retries succeed; these end otherwise.
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-1', { title: 'T' })]);
    const retry = (): CovenEvent => s.ev('s-1', 'apiRetry', { attempt: 1, maxRetries: 10, retryDelayMs: 500, errorStatus: 500 });
    model.ingest([s.ev('s-1', 'prompt', { text: 'go' }), s.status('s-1', 'running'), retry()]);
    assert.notEqual(model.session('s-1')!.retry, undefined);
    model.ingest([s.ev('s-1', 'turnResult', { text: 'API Error: 500', isError: true, subtype: 'error', costUsd: 0, durationMs: 9, numTurns: 1 })]);
    assert.equal(model.session('s-1')!.retry, undefined);
    assert.equal(turns(model.session('s-1')!)[0]!.retry, undefined);
    model.ingest([s.status('s-1', 'idle'), s.ev('s-1', 'prompt', { text: 'again' }), s.status('s-1', 'running'), retry(), s.status('s-1', 'closed')]);
    assert.equal(model.session('s-1')!.retry, undefined);
    assert.doesNotMatch(outline(model).join('\n'), /retrying/);
  });
});

describe('background subagents', () => {
  const sid = rootOf(background).sessionId;
  const [findStarted, watchStarted] = background.events.filter((e): e is EventOf<'task'> => e.kind === 'task' && e.status === 'started');
  const agentCall = (model: CovenModel, description: string): ToolNode =>
    turns(model.session(sid)!)
      .flatMap((t) => t.children)
      .find((c): c is ToolNode => c.kind === 'tool' && c.input.description === description)!;

  test('a task nests under its Agent call as a subagent holding what it says; it runs on after the turn (background.jsonl)', () => {
    // The turn that started it has ended; the subagent works on.
    const model = upTo(background, isEvent('toolUse', (e) => e.name === 'Bash'));
    const call = agentCall(model, 'Find TODOs');
    const sub = call.subagent!;
    assert.equal(sub.taskId, findStarted!.taskId);
    assert.deepEqual(model.children(call), [sub]);
    assert.equal(present(call).collapsible, 'expanded');
    const p = present(sub);
    assert.equal(p.label, 'Find TODOs');
    assert.equal(p.icon.id, 'loading~spin');
    assert.equal(p.contextValue, 'subagent-running');
    assert.equal(p.collapsible, 'expanded');
    assert.deepEqual(model.children(sub).map((n) => present(n).label), ['Let me search.', 'Bash']);
    assert.equal(turns(model.session(sid)!)[0]!.state, 'done');
    // An idle session whose subagent runs is not done.
    assert.equal(present(model.session(sid)!).description.split(' · ')[0], '1 subagent running');
    assert.equal(present(model.session(sid)!).icon.id, 'loading~spin');
    assert.deepEqual(model.runningSubagents(), [sub]);
  });

  test('progress shows its tokens, tool uses and time (background.jsonl)', () => {
    const progress = the(background, 'task', (e) => e.status === 'running');
    const model = upTo(background, isEvent('task', (e) => e.status === 'running'));
    const sub = agentCall(model, 'Find TODOs').subagent!;
    assert.equal(sub.description, 'Find TODOs');
    // The server fills a progress event's description in with the task's own (the CLI puts what
    // it does now there): no activity to show beside it.
    assert.equal(progress.description, 'Find TODOs');
    assert.equal(sub.activity, undefined);
    const p = present(sub);
    assert.equal(
      p.description,
      `running · ${progress.toolUses} tool use · ${formatTokens(progress.totalTokens!)} tokens · ${(progress.durationMs! / 1000).toFixed(1)} s`,
    );
    assert.ok(p.tooltip.includes(`${formatTokens(progress.totalTokens!)} tokens`));
    assert.ok(p.tooltip.includes(`Last tool: ${progress.lastToolName}`));
  });

  test('it ends with a check, and the CLI starts a turn to report it (prompt origin "task") (background.jsonl)', () => {
    const model = replay(background);
    const find = agentCall(model, 'Find TODOs').subagent!;
    assert.equal(find.state, 'completed');
    assert.deepEqual(present(find).icon, { id: 'pass', color: 'testing.iconPassed' });
    assert.equal(present(find).contextValue, 'subagent-completed');
    const reports = turns(model.session(sid)!).filter((t) => t.origin === 'task');
    const prompts = background.events.filter((e): e is EventOf<'prompt'> => e.kind === 'prompt' && e.origin === 'task');
    assert.deepEqual(reports.map((t) => present(t).label), prompts.map((p) => firstLine(p.text)));
    assert.match(present(reports[0]!).label, /^Background task completed: /);
    assert.equal(present(reports[0]!).description, 'from the agent');
    assert.equal(present(reports[0]!).icon.id, 'bell');
    assert.equal(present(model.session(sid)!).description.split(' · ')[0], 'done');
    const md = renderTranscript(model.session(sid)!, model);
    assert.match(md, /\*\*Subagent: Find TODOs\*\* — done/);
    assert.match(md, /The agent \(a background task ended\)/);
    assert.ok(md.indexOf('Let me search.') > md.indexOf('**Subagent: Find TODOs**'));
  });

  test('Stop Subagent: coven/stopTask on a running one, which then reads stopped (background.jsonl)', () => {
    const request = background.lines.find((l) => l.marker?.method === 'coven/stopTask')!.marker!;
    assert.deepEqual(request.params, { sessionId: sid, taskId: watchStarted!.taskId });
    // Up to its `stopped` (the request's answer may come after it).
    const running = replay(background, new CovenModel(), atEvent('task', (e) => e.taskId === watchStarted!.taskId && e.status === 'stopped'));
    const watching = agentCall(running, 'Watch the logs').subagent!;
    assert.equal(present(watching).contextValue, 'subagent-running');
    const model = replay(background);
    const stopped = agentCall(model, 'Watch the logs').subagent!;
    assert.equal(stopped.state, 'stopped');
    assert.equal(present(stopped).icon.id, 'debug-stop');
    assert.equal(present(stopped).contextValue, 'subagent-stopped');
    assert.deepEqual(model.runningSubagents(), []);
  });

  test('messages of a subagent that came before its task are moved under it; its streamed pieces go there too', () => {
    // Hand-built: Claude Code announces the task before the subagent speaks (background.jsonl)
    // and does not stream a subagent's text; the protocol allows both.
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-1', { title: 'T' })]);
    model.ingest([
      s.ev('s-1', 'prompt', { text: 'go' }),
      s.ev('s-1', 'toolUse', { toolUseId: 'a1', name: 'Agent', input: { description: 'Dig', prompt: 'dig', run_in_background: true } }),
      s.ev('s-1', 'text', { text: 'Digging.', messageId: 'x', parentToolUseId: 'a1' }),
    ]);
    model.applyDelta({ sessionId: 's-1', afterSeq: 3, blockId: 'sub:0', kind: 'text', text: 'Found ', parentToolUseId: 'a1' });
    model.ingest([s.ev('s-1', 'task', { taskId: 't1', status: 'started', toolUseId: 'a1', description: 'Dig' })]);
    model.applyDelta({ sessionId: 's-1', afterSeq: 4, blockId: 'sub:0', kind: 'text', text: 'gold', parentToolUseId: 'a1' });
    assert.deepEqual(outline(model), [
      'T [1 subagent running]',
      '  go [running]',
      '    ▶ Agent [dig]',
      '      Dig [running]',
      '        Digging.',
      '        Found gold▍ [writing…]',
    ]);
    // The subagent's end drops what it did not finish.
    model.ingest([s.ev('s-1', 'task', { taskId: 't1', status: 'failed', summary: 'It broke.' })]);
    assert.deepEqual(outline(model).slice(3), ['      Dig [failed]', '        Digging.']);
    assert.ok(present((agentCall2(model).subagent as SubagentNode)).tooltip.includes('It broke.'));
  });

  test("a turn that ends does not stop the running subagent's tools; the subagent's end does", () => {
    // Hand-built: in background.jsonl the subagent's Bash call runs between turns.
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-1', { title: 'T' })]);
    model.ingest([
      s.ev('s-1', 'prompt', { text: 'go' }),
      s.ev('s-1', 'toolUse', { toolUseId: 'a1', name: 'Agent', input: { description: 'Dig', prompt: 'dig', run_in_background: true } }),
      s.ev('s-1', 'task', { taskId: 't1', status: 'started', toolUseId: 'a1', description: 'Dig' }),
      s.ev('s-1', 'toolResult', { toolUseId: 'a1', content: 'Async agent launched', isError: false }),
      s.ev('s-1', 'toolUse', { toolUseId: 'b1', name: 'Bash', input: { command: 'sleep 5' }, parentToolUseId: 'a1' }),
      ...s.turn('s-1', 'and meanwhile?', 'It digs.'),
    ]);
    const bash = (): ToolNode => agentCall2(model).subagent!.children[0] as ToolNode;
    assert.equal(bash().state, 'running');
    model.ingest([s.ev('s-1', 'task', { taskId: 't1', status: 'stopped' })]);
    assert.equal(bash().state, 'interrupted');
  });

  test('a session that stops takes its running subagents down (a server restart says nothing of them)', () => {
    // Hand-built: a restart while a subagent runs is not recorded.
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-1', { title: 'T' })]);
    model.ingest([
      s.ev('s-1', 'prompt', { text: 'go' }),
      s.ev('s-1', 'toolUse', { toolUseId: 'a1', name: 'Agent', input: { description: 'Dig', prompt: 'dig' } }),
      s.ev('s-1', 'task', { taskId: 't1', status: 'started', toolUseId: 'a1', description: 'Dig' }),
      s.status('s-1', 'interrupted'),
    ]);
    assert.equal(agentCall2(model).subagent!.state, 'stopped');
    assert.equal(model.session('s-1')!.backgroundTasks, 0);
  });

  test('a task without a tool call of its own shows in its turn', () => {
    // Hand-built: a background shell or a CLI that does not name the call.
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-1', { title: 'T' })]);
    model.ingest([s.ev('s-1', 'prompt', { text: 'go' }), s.ev('s-1', 'task', { taskId: 't9', status: 'started', description: 'Tail the log' })]);
    assert.deepEqual(outline(model), ['T [1 subagent running]', '  go [running]', '    Tail the log [running]']);
  });

  test('listSessions stands in for the running tasks until the events are in', () => {
    const model = new CovenModel();
    model.applySessions([info('s-1', { title: 'T', backgroundTasks: ['t1', 't2'] })]);
    assert.equal(present(model.session('s-1')!).description, '2 subagents running');
  });
});

/** The one Agent call of a hand-built session s-1. */
function agentCall2(model: CovenModel): ToolNode {
  return turns(model.session('s-1')!)
    .flatMap((t) => t.children)
    .find((c): c is ToolNode => c.kind === 'tool' && c.name === 'Agent')!;
}

describe('tokens', () => {
  const sid = rootOf(queue).sessionId;
  const forkId = String(the(queue, 'forkStarted').forkId);

  test('compact counts', () => {
    assert.deepEqual([0, 950, 4500, 12_345, 41_200, 99_960, 412_000, 1_234_567].map(formatTokens), ['0', '950', '4.5k', '12.3k', '41.2k', '100k', '412k', '1.2M']);
    assert.equal(
      formatUsage({ inputTokens: 12_345, outputTokens: 4512, cacheReadTokens: 41_200, cacheCreationTokens: 2210 }),
      '12.3k in · 4.5k out · 41.2k cached · 2.2k cache write',
    );
    assert.equal(formatUsage({ inputTokens: 24, outputTokens: 310, cacheReadTokens: 0, cacheCreationTokens: 0 }), '24 in · 310 out');
    assert.deepEqual([1, 2, 3, 4, 11, 12, 13, 21, 22, 101].map(ordinal), ['1st', '2nd', '3rd', '4th', '11th', '12th', '13th', '21st', '22nd', '101st']);
  });

  test('each turn, session and fork adds up what the server says; the tree total is listSessions\' treeUsage (queue.jsonl)', () => {
    const model = replay(queue);
    for (const listed of queue.sessions) {
      const session = model.session(listed.sessionId)!;
      assert.deepEqual(session.usage, listed.usage, listed.sessionId);
      assert.deepEqual(treeUsage(session), listed.treeUsage, listed.sessionId);
    }
    const root = model.session(sid)!;
    const [first] = turns(root);
    const firstResult = eventsOf(queue, sid).find((e): e is EventOf<'turnResult'> => e.kind === 'turnResult')!;
    assert.ok(present(first!).tooltip.includes(`Tokens: ${formatUsage(first!.usage!)}`));
    assert.deepEqual(first!.usage, firstResult.usage);
    assert.ok(present(root).tooltip.includes(`Tokens: ${formatUsage(root.usage)}`));
    assert.ok(present(root).tooltip.includes(`With its forks: ${formatUsage(treeUsage(root))}`));
    // The fork shows what forkFinished counted for its children.
    const finished = the(queue, 'forkFinished');
    const fork = model.fork(forkId) as ForkNode;
    assert.deepEqual(fork.usage, finished.usage);
    const total = totalTokens(tokenUsage(finished.usage)!);
    assert.equal(present(fork).description, `done · ${formatTokens(total)} tokens`);
    assert.ok(present(fork).tooltip.includes(`Tokens of its children: ${formatUsage(fork.usage!)}`));
  });

  test('the status bar sums the top-level sessions with their forks, and their cost (queue.jsonl)', () => {
    const model = replay(queue);
    const listed = queue.sessions.find((s) => s.sessionId === sid)!;
    const tokens = totalTokens(tokenUsage(listed.treeUsage)!);
    const cost = queue.sessions.reduce((sum, s) => sum + s.costUsd, 0);
    const summary = summarize(model);
    assert.equal(summary.text, `$(repo-forked) Coven: ${formatTokens(tokens)} tokens · ${formatCost(cost)}`);
    assert.match(summary.tooltip, new RegExp(`Tokens of all sessions and their forks: ${formatUsage(listed.treeUsage as never)}`));
  });

  test('listSessions stands in for the tokens until the events are in; then the events count (queue.sessions.json)', () => {
    const model = new CovenModel();
    model.applySessions(queue.sessions);
    for (const listed of queue.sessions) assert.deepEqual(model.session(listed.sessionId)!.usage, listed.usage);
    for (const listed of queue.sessions) model.ingest(eventsOf(queue, listed.sessionId));
    for (const listed of queue.sessions) assert.deepEqual(model.session(listed.sessionId)!.usage, listed.usage);
  });

  test('cache reads and writes show in a tooltip', () => {
    // Hand-built: the scripted model reports no cache use.
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info('s-1', { title: 'T' })]);
    const usage = { inputTokens: 24, outputTokens: 310, cacheReadTokens: 41_200, cacheCreationTokens: 2210 };
    model.ingest([s.ev('s-1', 'prompt', { text: 'go' }), s.ev('s-1', 'turnResult', { text: 'ok', isError: false, subtype: 'success', costUsd: 0.0356, durationMs: 3120, numTurns: 2, usage })]);
    const [turn] = turns(model.session('s-1')!);
    assert.match(present(turn!).tooltip, /\$0\.0356 · 3\.1 s · Tokens: 24 in · 310 out · 41\.2k cached · 2\.2k cache write$/);
    assert.match(present(model.session('s-1')!).tooltip, /Tokens: 24 in · 310 out · 41\.2k cached · 2\.2k cache write/);
  });
});

describe('the fork queue', () => {
  const started = the(queue, 'forkStarted');
  const [docs, bugs, tag] = (started.children as Array<{ sessionId: string }>).map((c) => c.sessionId);

  test('a queued child says its place in line, which moves up, and goes when it starts (queue.jsonl)', () => {
    const place = (model: CovenModel, id: string): string => present(model.session(id)!).description;
    const lined = upTo(queue, isEvent('queuePosition', (e) => e.sessionId === tag));
    assert.equal(place(lined, bugs!), 'queued · next in line');
    assert.equal(place(lined, tag!), 'queued · 2nd in line');
    assert.equal(present(lined.session(tag!)!).icon.id, 'watch');
    // Its assignment is there, waiting.
    const waiting = turns(lined.session(tag!)!)[0]!;
    assert.equal(present(waiting).description, 'assignment · waiting for a slot');
    assert.equal(present(waiting).icon.id, 'watch');
    assert.match(place(lined, docs!), /^(starting|running)/);

    const moved = upTo(queue, isEvent('status', (e) => e.sessionId === bugs && e.status === 'starting'));
    assert.equal(place(moved, tag!), 'queued · next in line');
    assert.match(place(moved, bugs!), /^(starting|running)/);
    assert.equal(moved.session(bugs!)!.queuePosition, undefined);
    assert.equal(present(turns(moved.session(bugs!)!)[0]!).description, 'assignment · running');
  });

  test('listSessions stands in for the place in line until the events are in', () => {
    const model = new CovenModel();
    model.applySessions([info('s-q', { status: 'queued', queuePosition: 3, parentId: 's-p', forkId: 'f', label: 'Later' })]);
    assert.equal(present(model.session('s-q')!).description, 'queued · 3rd in line');
  });
});

describe('the sync with streaming', () => {
  const sid = rootOf(stream).sessionId;

  /** A coven-ls stand-in that answers getEvents with a fixed answer, once `gate` opens. */
  class Server implements ServerConnection {
    calls = 0;
    constructor(
      private readonly sessions: SessionInfo[],
      private readonly answer: () => { events: CovenEvent[]; partial?: PartialBlock[] },
      readonly gate?: Promise<void>,
    ) {}
    async request<R>(method: string): Promise<R> {
      if (method === 'coven/listSessions') return { sessions: this.sessions } as R;
      this.calls++;
      await this.gate;
      return this.answer() as R;
    }
    log(): void {}
  }

  test('a reconnect mid-message: the pieces that raced the answer are not doubled, the ones after it continue (stream.jsonl)', async () => {
    const at = stream.lines.findIndex((l) => l.marker?.method === 'coven/getEvents');
    const answer = stream.lines[at]!.marker!.result as { events: CovenEvent[]; partial: PartialBlock[] };
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const server = new Server(stream.sessions, () => answer, gate);
    const sync = new SessionSync(server, 5);
    const reports: Changes[] = [];
    sync.onDidChange((c) => reports.push(c));
    const rebuilt = sync.rebuild();
    await new Promise((r) => setTimeout(r, 10));
    // listSessions has answered, getEvents not yet: pieces the server sent before its answer
    // arrive first, and the answer's `partial` has them too.
    const before = deltasOf(stream).filter((d) => d.blockId === answer.partial[0]!.blockId).slice(0, 2);
    for (const d of before) sync.onDelta(d);
    open();
    await rebuilt;
    assert.equal(streaming(sync.model)[0]!.text, answer.partial[0]!.text);
    for (const line of stream.lines.slice(at + 1)) {
      if (line.marker?.fixture === 'delta') sync.onDelta(line.marker.params as unknown as Delta);
      else if (line.event) sync.onEvent(line.event);
    }
    await new Promise((r) => setTimeout(r, 30));
    assert.deepEqual(outline(sync.model), outline(replay(stream)));
    assert.equal(server.calls, 1);
    assert.ok(reports.length >= 1);
    sync.dispose();
  });

  test('pieces are coalesced: a burst of them is one change report naming the streaming row (stream.jsonl)', async () => {
    const server = new Server(stream.sessions, () => ({ events: [] }));
    const sync = new SessionSync(server, 20);
    sync.model.applySessions(stream.sessions);
    const textAt = stream.lines.findIndex(isDelta('text'));
    for (const line of stream.lines.slice(0, textAt)) if (line.event) sync.onEvent(line.event);
    await new Promise((r) => setTimeout(r, 40));
    const reports: Changes[] = [];
    sync.onDidChange((c) => reports.push(c));
    for (const d of deltasOf(stream).filter((x) => x.kind === 'text')) sync.onDelta(d);
    await new Promise((r) => setTimeout(r, 60));
    assert.equal(reports.length, 1);
    assert.deepEqual(
      reports[0]!.nodes.map((n) => n.key),
      [`${turns(sync.model.session(sid)!)[0]!.key}`],
      'the turn (it gained the streaming row): one refresh covers the row',
    );
    sync.dispose();
  });
});

describe('the transcript of a subagent', () => {
  test('every line of what a subagent did is quoted under its call, fenced results too (background.jsonl)', () => {
    const model = replay(background);
    const md = renderTranscript(model.session(rootOf(background).sessionId)!, model);
    const lines = md.split('\n');
    const start = lines.findIndex((l) => l.startsWith('> **Subagent: Find TODOs**'));
    assert.ok(start > 0, md);
    const end = lines.findIndex((l, i) => i > start && !l.startsWith('>'));
    const quoted = lines.slice(start, end);
    assert.ok(quoted.some((l) => l === '> 3 TODOs found'), quoted.join('\n'));
    assert.ok(quoted.some((l) => l.startsWith('> Found 3 TODOs')), quoted.join('\n'));
  });
});
