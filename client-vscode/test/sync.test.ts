import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import type { Changes } from '../src/model';
import type { CovenEvent, SessionInfo } from '../src/protocol';
import { type ServerConnection, SessionSync } from '../src/sync';
import { forkStory, info, Stream } from './events';

/** A coven-ls stand-in that answers listSessions and getEvents from what it "has". */
class FakeServer implements ServerConnection {
  events: CovenEvent[] = [];
  sessions: SessionInfo[] = [];
  readonly calls: Array<{ method: string; params: Record<string, unknown> }> = [];
  readonly logs: string[] = [];
  /** While set, answers wait for it: a slow server, so that live events can race the answers. */
  gate: Promise<void> | undefined;

  async request<R>(method: string, params: unknown): Promise<R> {
    const p = params as Record<string, unknown>;
    this.calls.push({ method, params: p });
    await this.gate;
    if (method === 'coven/listSessions') return { sessions: this.sessions } as R;
    if (method === 'coven/getEvents') {
      return { events: this.events.filter((e) => e.sessionId === p.sessionId && e.seq > (p.afterSeq as number)) } as R;
    }
    throw new Error(`unexpected ${method}`);
  }

  log(line: string): void {
    this.logs.push(line);
  }

  count(method: string): number {
    return this.calls.filter((c) => c.method === method).length;
  }
}

const FAST = 5;
const settle = (ms = FAST * 4): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

describe('SessionSync', () => {
  test('a lost event is fetched with getEvents from the last seq applied', async () => {
    const server = new FakeServer();
    const s = new Stream();
    server.sessions = [info('s-1', { title: 'T' })];
    server.events = [s.status('s-1', 'running'), ...s.turn('s-1', 'hello', 'hi')];
    const sync = new SessionSync(server, FAST);
    await sync.rebuild();
    const live = [s.ev('s-1', 'prompt', { text: 'again', origin: 'user' }), s.status('s-1', 'running'), s.status('s-1', 'idle')];
    server.events.push(...live);
    sync.onEvent(live[0]!);
    sync.onEvent(live[2]!); // live[1] never arrives
    await settle();
    assert.deepEqual(server.calls.at(-1), { method: 'coven/getEvents', params: { sessionId: 's-1', afterSeq: 7 } });
    assert.equal(sync.model.session('s-1')!.lastSeq, 9);
    assert.deepEqual(sync.model.gaps(), []);
    sync.dispose();
  });

  test('a gap the server cannot fill is asked about once, not in a loop', async () => {
    const server = new FakeServer();
    const s = new Stream();
    server.sessions = [info('s-1')];
    const all = s.turn('s-1', 'hello', 'hi');
    server.events = all.filter((e) => e.seq !== 2);
    const sync = new SessionSync(server, FAST);
    await sync.rebuild();
    sync.onEvent(s.ev('s-1', 'text', { text: 'more' }));
    sync.onEvent(s.ev('s-1', 'text', { text: 'more' }));
    await settle();
    assert.equal(server.count('coven/getEvents'), 1 + 1);
    assert.match(server.logs.join('\n'), /did not fill the gap in s-1 after seq 1/);
    sync.dispose();
  });

  test('children announced before their parent says so are resolved with one listSessions', async () => {
    const server = new FakeServer();
    const { events, sessions } = forkStory();
    server.sessions = sessions;
    server.events = events;
    const sync = new SessionSync(server, FAST);
    await sync.rebuild();
    const listsAfterRebuild = server.count('coven/listSessions');
    // The same story again, live, on a fresh sync that only knows the parent, with the children's
    // events first (coven-ls creates a child, so its `queued` status, before the parent's forkStarted).
    const live = new SessionSync(server, FAST);
    live.model.applySessions([sessions[0]!]);
    const childFirst = [...events.filter((e) => e.sessionId !== 's-parent'), ...events.filter((e) => e.sessionId === 's-parent')];
    for (const e of childFirst) live.onEvent(e);
    await settle();
    assert.equal(server.count('coven/listSessions'), listsAfterRebuild + 1);
    assert.deepEqual(
      live.model.fork('f1')!.children.map((c) => c.label),
      ['Task A', 'Task B'],
    );
    sync.dispose();
    live.dispose();
  });

  test('rebuild: live events that race the getEvents answers are neither lost nor doubled', async () => {
    const server = new FakeServer();
    const { events, sessions } = forkStory();
    const cut = events.length - 4;
    server.sessions = sessions;
    server.events = events.slice(0, cut);
    const slow = gate();
    server.gate = slow.promise;
    const sync = new SessionSync(server, FAST);
    const rebuilt = sync.rebuild();
    await settle();
    // The server moves on while its answers are still on the way.
    server.events = events;
    for (const e of events.slice(cut)) sync.onEvent(e);
    server.gate = undefined;
    slow.open();
    await rebuilt;
    await settle();
    const reference = new SessionSync(new FakeServer(), FAST);
    reference.model.applySessions(sessions);
    reference.model.ingest(events);
    for (const { sessionId } of sessions) {
      assert.equal(sync.model.session(sessionId)!.lastSeq, reference.model.session(sessionId)!.lastSeq, sessionId);
      assert.equal(sync.model.session(sessionId)!.items.length, reference.model.session(sessionId)!.items.length, sessionId);
    }
    assert.equal(sync.model.fork('f1')!.state, 'done');
    sync.dispose();
    reference.dispose();
  });

  test('a rebuild forgets the old server: answers from before it are dropped', async () => {
    const server = new FakeServer();
    server.sessions = [info('s-old')];
    const slow = gate();
    server.gate = slow.promise;
    const sync = new SessionSync(server, FAST);
    const first = sync.rebuild();
    await settle();
    server.sessions = [info('s-new')];
    server.gate = undefined;
    const second = sync.rebuild();
    slow.open();
    await Promise.all([first, second]);
    await settle();
    assert.deepEqual(sync.model.roots().map((r) => r.sessionId), ['s-new']);
    sync.dispose();
  });

  test('a burst of events is one change report', async () => {
    const server = new FakeServer();
    const s = new Stream();
    server.sessions = Array.from({ length: 5 }, (_, i) => info(`s-${i}`));
    const sync = new SessionSync(server);
    await sync.rebuild();
    await settle(80);
    const reports: Changes[] = [];
    sync.onDidChange((c) => reports.push(c));
    const started = Date.now();
    for (let i = 0; i < 500; i++) sync.onEvent(s.ev(`s-${i % 5}`, 'text', { text: `t${i}` }));
    await settle(120);
    assert.equal(reports.length, 1, 'one report for the burst');
    assert.deepEqual(reports[0]!.nodes.map((n) => n.key).sort(), ['s-0', 's-1', 's-2', 's-3', 's-4']);
    assert.ok(Date.now() - started < 1000);
    sync.dispose();
  });

  test('a proposed fork is announced once, after the tree has it; not if decided in the same burst', async () => {
    const server = new FakeServer();
    const s = new Stream();
    server.sessions = [info('s-1'), info('s-2')];
    const sync = new SessionSync(server, FAST);
    await sync.rebuild();
    const announced: string[] = [];
    sync.onForkProposed((f) => announced.push(f.forkId));
    sync.onEvent(s.ev('s-1', 'forkProposed', { forkId: 'f-a', tasks: ['x'] }));
    sync.onEvent(s.ev('s-2', 'forkProposed', { forkId: 'f-b', tasks: ['y'] }));
    sync.onEvent(s.ev('s-2', 'forkRejected', { forkId: 'f-b' }));
    await settle();
    assert.deepEqual(announced, ['f-a']);
    // A reconnect re-announces nothing it announced already.
    server.events = [];
    await sync.rebuild();
    await settle();
    assert.deepEqual(announced, ['f-a']);
    sync.dispose();
  });

  test('whenKnown resolves once the session is in the tree', async () => {
    const server = new FakeServer();
    const s = new Stream();
    server.sessions = [info('s-9')];
    const sync = new SessionSync(server, FAST);
    const known = sync.whenKnown('s-9');
    sync.onEvent(s.status('s-9', 'starting')); // unknown → listSessions → known
    assert.equal(await known, true);
    assert.equal(await sync.whenKnown('s-nope', 30), false);
    sync.dispose();
  });
});
