import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import type { Changes } from '../src/model';
import type { CovenEvent, SessionInfo } from '../src/protocol';
import { type ServerConnection, SessionSync } from '../src/sync';
import { info, Stream } from './events';
import { eventsOf, loadFixture, replay, rootOf } from './fixtures';

// Recorded streams (tests/fixtures/record.py); hand-built events only where a test says why.
const tool = loadFixture('tool');
const fork = loadFixture('fork');
const cancel = loadFixture('cancel');
const forkId = String(fork.events.find((e) => e.kind === 'forkStarted')!.forkId);

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
  test('a lost event is fetched with getEvents from the last seq applied (cancel.jsonl)', async () => {
    const server = new FakeServer();
    const sid = rootOf(cancel).sessionId;
    const all = eventsOf(cancel, sid);
    const firstIdle = all.findIndex((e) => e.kind === 'status' && e.status === 'idle');
    server.sessions = cancel.sessions;
    server.events = all.slice(0, firstIdle + 1);
    const sync = new SessionSync(server, FAST);
    await sync.rebuild();
    const live = all.slice(firstIdle + 1);
    server.events = all;
    sync.onEvent(live[0]!);
    sync.onEvent(live[2]!); // live[1] never arrives
    await settle();
    assert.deepEqual(server.calls.at(-1), { method: 'coven/getEvents', params: { sessionId: sid, afterSeq: live[0]!.seq } });
    assert.equal(sync.model.session(sid)!.lastSeq, all.length);
    assert.deepEqual(sync.model.gaps(), []);
    sync.dispose();
  });

  test('a gap the server cannot fill is asked about once, not in a loop (tool.jsonl without seq 2)', async () => {
    const server = new FakeServer();
    const sid = rootOf(tool).sessionId;
    const all = eventsOf(tool, sid);
    server.sessions = tool.sessions;
    server.events = all.filter((e) => e.seq !== 2);
    const sync = new SessionSync(server, FAST);
    await sync.rebuild();
    await settle();
    // More of the session's events come live: they wait behind the gap, nobody asks again.
    sync.onEvent(all[all.length - 2]!);
    sync.onEvent(all[all.length - 1]!);
    await settle();
    assert.equal(server.count('coven/getEvents'), 1 + 1);
    assert.match(server.logs.join('\n'), new RegExp(`did not fill the gap in ${sid} after seq 1`));
    sync.dispose();
  });

  test('children announced before their parent says so are resolved with one listSessions (fork.jsonl)', async () => {
    const server = new FakeServer();
    const sid = rootOf(fork).sessionId;
    server.sessions = fork.sessions;
    server.events = fork.events;
    const sync = new SessionSync(server, FAST);
    await sync.rebuild();
    const listsAfterRebuild = server.count('coven/listSessions');
    // The same story again, live, on a fresh sync that only knows the parent, with the children's
    // events first. (coven-ls sends the parent's forkStarted before its children's first events,
    // as fork.jsonl shows; a client can still meet the children first, e.g. when it fetches.)
    const live = new SessionSync(server, FAST);
    live.model.applySessions([rootOf(fork)]);
    const childFirst = [...fork.events.filter((e) => e.sessionId !== sid), ...fork.events.filter((e) => e.sessionId === sid)];
    for (const e of childFirst) live.onEvent(e);
    await settle();
    assert.equal(server.count('coven/listSessions'), listsAfterRebuild + 1);
    assert.deepEqual(
      live.model.fork(forkId)!.children.map((c) => c.label),
      ['Write the docs', 'Fix the bugs'],
    );
    sync.dispose();
    live.dispose();
  });

  test('rebuild: live events that race the getEvents answers are neither lost nor doubled (fork.jsonl)', async () => {
    const server = new FakeServer();
    const events = fork.events;
    const cut = events.length - 4;
    server.sessions = fork.sessions;
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
    const reference = replay(fork);
    for (const { sessionId } of fork.sessions) {
      assert.equal(sync.model.session(sessionId)!.lastSeq, reference.session(sessionId)!.lastSeq, sessionId);
      assert.equal(sync.model.session(sessionId)!.items.length, reference.session(sessionId)!.items.length, sessionId);
    }
    assert.equal(sync.model.fork(forkId)!.state, 'finished');
    sync.dispose();
  });

  test('a rebuild forgets the old server: answers from before it are dropped', async () => {
    const server = new FakeServer();
    server.sessions = tool.sessions;
    const slow = gate();
    server.gate = slow.promise;
    const sync = new SessionSync(server, FAST);
    const first = sync.rebuild();
    await settle();
    server.sessions = [rootOf(fork)];
    server.gate = undefined;
    const second = sync.rebuild();
    slow.open();
    await Promise.all([first, second]);
    await settle();
    assert.deepEqual(sync.model.roots().map((r) => r.sessionId), [rootOf(fork).sessionId]);
    sync.dispose();
  });

  test('a burst of events is one change report', async () => {
    // Hand-built on purpose: a volume test (500 events over 5 sessions), not a protocol one.
    const server = new FakeServer();
    const s = new Stream();
    server.sessions = Array.from({ length: 5 }, (_, i) => info(`s-${i}`));
    const sync = new SessionSync(server);
    await sync.rebuild();
    await settle(80);
    const reports: Changes[] = [];
    sync.onDidChange((c) => reports.push(c));
    // CPU time, not wall time: a busy machine stretches the latter at will.
    const started = process.cpuUsage();
    for (let i = 0; i < 500; i++) sync.onEvent(s.ev(`s-${i % 5}`, 'text', { text: `t${i}` }));
    await settle(120);
    assert.equal(reports.length, 1, 'one report for the burst');
    assert.deepEqual(reports[0]!.nodes.map((n) => n.key).sort(), ['s-0', 's-1', 's-2', 's-3', 's-4']);
    const used = process.cpuUsage(started);
    assert.ok((used.user + used.system) / 1000 < 1000, `took ${(used.user + used.system) / 1000} ms of CPU`);
    sync.dispose();
  });

  test('a proposed fork is announced once, after the tree has it; not if decided in the same burst (fork.jsonl)', async () => {
    const server = new FakeServer();
    const sid = rootOf(fork).sessionId;
    const parent = eventsOf(fork, sid);
    const proposedAt = parent.findIndex((e) => e.kind === 'forkProposed');
    const startedAt = parent.findIndex((e) => e.kind === 'forkStarted');
    server.sessions = fork.sessions;
    const sync = new SessionSync(server, FAST);
    await sync.rebuild();
    const announced: string[] = [];
    sync.onForkProposed((f) => announced.push(f.forkId));
    for (const e of parent.slice(0, proposedAt + 1)) sync.onEvent(e);
    await settle();
    assert.deepEqual(announced, [forkId]);
    // A reconnect re-announces nothing it announced already.
    server.events = parent.slice(0, proposedAt + 1);
    await sync.rebuild();
    await settle();
    assert.deepEqual(announced, [forkId]);
    sync.dispose();

    // Proposed and approved within one burst (a client that catches up): nothing to ask.
    const late = new SessionSync(server, FAST);
    late.model.applySessions([rootOf(fork)]);
    const quiet: string[] = [];
    late.onForkProposed((f) => quiet.push(f.forkId));
    for (const e of parent.slice(0, startedAt + 1)) late.onEvent(e);
    await settle();
    assert.deepEqual(quiet, []);
    late.dispose();
  });

  test('whenKnown resolves once the session is in the tree (tool.jsonl)', async () => {
    const server = new FakeServer();
    const sid = rootOf(tool).sessionId;
    server.sessions = tool.sessions;
    const sync = new SessionSync(server, FAST);
    const known = sync.whenKnown(sid);
    sync.onEvent(eventsOf(tool, sid)[0]!); // unknown → listSessions → known
    assert.equal(await known, true);
    assert.equal(await sync.whenKnown('s-nope', 30), false);
    sync.dispose();
  });
});
