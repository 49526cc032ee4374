// The golden fixtures: what a client of a real coven-ls received, recorded by
// tests/fixtures/record.py (real `claude` CLI, scripted model), the one corpus every client's
// tests replay. Read at test time from ../tests/fixtures/events (relative to this package), so a
// re-recording needs no rebuild.
//
// A fixture's lines are, in arrival order, either a `coven/event`'s params, verbatim (they have
// `sessionId`, `seq` and `kind`), or a line with a `fixture` field: `serverStarted` (with the
// `protocolVersion` its initialize result announced), `serverKilled`, `request` (a request the
// client sent, where its response arrived, with `method`, `params` and `result`),
// `serverRequest` (a request the server sent) or `delta` (a `coven/delta` notification's
// `params`).

import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

import { CovenModel } from '../src/model';
import type { CovenEvent, Delta, PartialBlock, SessionInfo } from '../src/protocol';

export const SCENARIOS = [
  'tool', 'fork', 'reject', 'cancel', 'failed', 'crash', 'subagent', 'restart', 'review',
  'stream', 'background', 'queue', 'cancel_stream', 'codex',
] as const;
export type Scenario = (typeof SCENARIOS)[number];

export interface Marker {
  fixture: 'serverStarted' | 'serverKilled' | 'request' | 'serverRequest' | 'delta';
  server?: number;
  protocolVersion?: number;
  method?: string;
  params?: Record<string, unknown>;
  result?: unknown;
  [field: string]: unknown;
}

export type Line = { event: CovenEvent; marker?: undefined } | { event?: undefined; marker: Marker };

export interface Fixture {
  name: string;
  lines: Line[];
  /** Every `coven/event` received live, in arrival order (all servers). */
  events: CovenEvent[];
  /** The `coven/listSessions` result once the scenario was over. */
  sessions: SessionInfo[];
}

/** The package root (where package.json is), whether this runs bundled (out/test) or not. */
export function packageRoot(): string {
  for (let dir = __dirname; ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    if (dirname(dir) === dir) throw new Error(`no package.json above ${__dirname}`);
  }
}

export const FIXTURE_DIR = join(packageRoot(), '..', 'tests', 'fixtures', 'events');

export function loadFixture(name: Scenario): Fixture {
  return load(FIXTURE_DIR, name);
}

/** The `coven/delta` notifications of a fixture, in arrival order. */
export function deltasOf(fixture: Fixture): Delta[] {
  return fixture.lines.flatMap((l) => (l.marker?.fixture === 'delta' ? [l.marker.params as unknown as Delta] : []));
}

function load(dir: string, name: string): Fixture {
  const text = readFileSync(join(dir, `${name}.jsonl`), 'utf8');
  const lines: Line[] = text
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .map((o) => (typeof o.fixture === 'string' ? { marker: o as Marker } : { event: o as unknown as CovenEvent }));
  const { sessions } = JSON.parse(readFileSync(join(dir, `${name}.sessions.json`), 'utf8')) as { sessions: SessionInfo[] };
  return { name, lines, events: lines.flatMap((l) => (l.event ? [l.event] : [])), sessions };
}

/** Where a session's events come from: the fixture, one session. */
export function eventsOf(fixture: Fixture, sessionId: string): CovenEvent[] {
  return fixture.events.filter((e) => e.sessionId === sessionId);
}

export function infoOf(fixture: Fixture, sessionId: string): SessionInfo {
  const found = fixture.sessions.find((s) => s.sessionId === sessionId);
  if (found === undefined) throw new Error(`${sessionId} is not in ${fixture.name}.sessions.json`);
  return found;
}

/** The top-level session (the one the scenario started). */
export function rootOf(fixture: Fixture): SessionInfo {
  const roots = fixture.sessions.filter((s) => s.parentId === null);
  if (roots.length !== 1) throw new Error(`${fixture.name} has ${roots.length} top-level sessions`);
  return roots[0]!;
}

/**
 * Feeds a fixture to a model the way the extension does (SessionSync): every live event as it
 * came; a restarted server resets the model, and its recorded listSessions / getEvents answers
 * are applied where they arrived. A session seen only in events is resolved with
 * listSessions, as the sync does: answered with the server's next recorded listSessions if there
 * is one, else with the final one (the fixture has nothing closer to that moment).
 * `until(line, index)` stops before the first line it accepts.
 */
export function replay(
  fixture: Fixture,
  model = new CovenModel(),
  until?: (line: Line, index: number) => boolean,
): CovenModel {
  // For each line, the listSessions answer that stands in for one asked at that point.
  const listings: SessionInfo[][] = [];
  let next = fixture.sessions;
  for (let i = fixture.lines.length - 1; i >= 0; i--) {
    const marker = fixture.lines[i]!.marker;
    if (marker?.fixture === 'request' && marker.method === 'coven/listSessions') next = (marker.result as { sessions: SessionInfo[] }).sessions;
    listings[i] = next;
    if (marker?.fixture === 'serverStarted') next = fixture.sessions;
  }
  for (const [index, line] of fixture.lines.entries()) {
    if (until?.(line, index)) break;
    if (line.event) {
      model.ingest([line.event]);
      const unknown = new Set(model.unknownSessions());
      if (unknown.size > 0) model.applySessions(listings[index]!.filter((s) => unknown.has(s.sessionId)));
      continue;
    }
    const marker = line.marker;
    // The extension rebuilds on every connection; the first one finds the model empty anyway, so
    // only a restart resets (a test may have put something into the model before replaying).
    if (marker.fixture === 'serverStarted' && marker.server !== 1) model.reset();
    if (marker.fixture === 'delta') model.applyDelta(marker.params as unknown as Delta);
    if (marker.fixture !== 'request') continue;
    const result = (marker.result ?? {}) as { sessions?: SessionInfo[]; events?: CovenEvent[]; partial?: PartialBlock[] };
    if (marker.method === 'coven/listSessions' && result.sessions) model.applySessions(result.sessions);
    if (marker.method === 'coven/getEvents' && result.events) {
      model.ingest(result.events);
      const sessionId = String(marker.params?.sessionId);
      const upTo = Math.max(Number(marker.params?.afterSeq ?? 0), ...result.events.map((e) => e.seq));
      if (result.partial) model.applyPartial(sessionId, result.partial, upTo);
    }
  }
  return model;
}

/** Stops a replay at the first event of `kind` (optionally matching `match`), before applying it. */
/** The event type of one kind. */
export type EventOf<K extends CovenEvent['kind']> = Extract<CovenEvent, { kind: K }>;

function isKind<K extends CovenEvent['kind']>(event: CovenEvent | undefined, kind: K): event is EventOf<K> {
  return event !== undefined && event.kind === kind;
}

export function atEvent<K extends CovenEvent['kind']>(kind: K, match: (e: EventOf<K>) => boolean = () => true): (line: Line) => boolean {
  return (line) => isKind(line.event, kind) && match(line.event);
}

/** Stops a replay right after the first event of `kind` has been applied. */
export function afterEvent<K extends CovenEvent['kind']>(
  fixture: Fixture,
  kind: K,
  match: (e: EventOf<K>) => boolean = () => true,
): (line: Line, index: number) => boolean {
  const at = fixture.lines.findIndex((l) => isKind(l.event, kind) && match(l.event));
  if (at < 0) throw new Error(`no ${kind} event in ${fixture.name}`);
  return (_line, index) => index > at;
}
