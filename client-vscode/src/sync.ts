// Keeps the model in step with the server: live events and streamed pieces (coven/delta) in,
// gaps filled with coven/getEvents (with the text still streaming, its `partial`), unknown
// sessions resolved with coven/listSessions, a full rebuild on every (re)connect, and change
// reports coalesced so a burst of events or pieces costs one tree refresh.
//
// No `vscode` import: it talks to the server through the small interface below, so the tests
// drive it with a fake server.

import { type Disposable, Emitter } from './emitter';
import { type Changes, CovenModel, type ForkNode } from './model';
import { type CovenEvent, type Delta, Method, type ParamsOf, type RequestMethod, type ResultOf } from './protocol';

/** What the sync needs from the connection (CovenServer implements it). */
export interface ServerConnection {
  request<M extends RequestMethod>(method: M, params: ParamsOf<M>): Promise<ResultOf<M>>;
  log(line: string): void;
}

/** One view update per window at most: about an animation frame, without one's jitter. */
export const FLUSH_MS = 50;

export class SessionSync implements Disposable {
  readonly model = new CovenModel();
  private readonly changeEmitter = new Emitter<Changes>();
  /** Coalesced: fires at most once per FLUSH_MS. */
  readonly onDidChange = this.changeEmitter.event;
  private readonly proposalEmitter = new Emitter<ForkNode>();
  /** A fork waits for the user's decision (fired once per fork, after the tree shows it). */
  readonly onForkProposed = this.proposalEmitter.event;
  private readonly reviewEmitter = new Emitter<ForkNode>();
  /** A fork's children's changes wait for the user's review (fired once per fork, after the tree shows it). */
  readonly onForkReviewing = this.reviewEmitter.event;

  private flushTimer: ReturnType<typeof setTimeout> | undefined;
  /** Bumped on every rebuild; answers to requests from an older generation are dropped. */
  private generation = 0;
  private readonly fetching = new Set<string>();
  /** Gaps the server could not fill (it has no such events): do not ask again for the same seq. */
  private readonly stuck = new Map<string, number>();
  private listing = false;
  private listAgain = false;
  private lastUnresolved = '';
  private readonly announced = new Set<string>();
  private proposals: string[] = [];
  private readonly announcedReviews = new Set<string>();
  private reviews: string[] = [];
  private readonly waiters = new Map<string, Array<() => void>>();

  constructor(
    private readonly server: ServerConnection,
    private readonly flushMs = FLUSH_MS,
  ) {}

  /** A `coven/event` notification. */
  onEvent(event: CovenEvent): void {
    this.afterIngest(this.model.ingest([event]));
  }

  /** A `coven/delta` notification: a piece of streamed text, shown at the next flush. */
  onDelta(delta: Delta): void {
    this.model.applyDelta(delta);
    this.schedule();
  }

  /** The server is (again) up: forget everything and rebuild from what it says. */
  async rebuild(): Promise<void> {
    const generation = ++this.generation;
    this.fetching.clear();
    this.stuck.clear();
    this.lastUnresolved = '';
    this.model.reset();
    this.schedule();
    try {
      const { sessions } = await this.server.request(Method.listSessions, {});
      if (generation !== this.generation) return;
      this.model.applySessions(sessions);
      await Promise.all(sessions.map((s) => this.fetchEvents(s.sessionId, 0, generation)));
    } catch (error) {
      this.server.log(`rebuilding the session list failed: ${String(error)}`);
    }
    // Proposals and reviews still open after a reconnect need an answer just as much as live ones.
    for (const fork of this.model.proposedForks()) this.proposals.push(fork.forkId);
    for (const fork of this.model.reviewingForks()) this.reviews.push(fork.forkId);
    this.schedule();
  }

  /** Resolves once the session is in the tree (or after `timeoutMs`, with undefined). */
  whenKnown(sessionId: string, timeoutMs = 5000): Promise<boolean> {
    if (this.model.session(sessionId)) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), timeoutMs);
      const list = this.waiters.get(sessionId) ?? [];
      list.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
      this.waiters.set(sessionId, list);
    });
  }

  dispose(): void {
    if (this.flushTimer !== undefined) clearTimeout(this.flushTimer);
    this.changeEmitter.dispose();
    this.proposalEmitter.dispose();
    this.reviewEmitter.dispose();
  }

  private afterIngest(applied: CovenEvent[]): void {
    for (const event of applied) {
      if (event.kind === 'forkProposed' && typeof event.forkId === 'string') this.proposals.push(event.forkId);
      if (event.kind === 'forkReviewing' && typeof event.forkId === 'string') this.reviews.push(event.forkId);
    }
    this.fetchMissing();
    this.schedule();
  }

  private fetchMissing(): void {
    for (const gap of this.model.gaps()) {
      if (this.fetching.has(gap.sessionId) || this.stuck.get(gap.sessionId) === gap.afterSeq) continue;
      void this.fetchEvents(gap.sessionId, gap.afterSeq, this.generation);
    }
    const unresolved = this.model.unknownSessions();
    if (unresolved.length > 0) this.listSessions(unresolved.sort().join(','));
  }

  private async fetchEvents(sessionId: string, afterSeq: number, generation: number): Promise<void> {
    this.fetching.add(sessionId);
    let applied: CovenEvent[] = [];
    try {
      const { events, partial } = await this.server.request(Method.getEvents, { sessionId, afterSeq });
      if (generation !== this.generation) return;
      applied = this.model.ingest(events);
      // What streams now, as the server had it when it answered: the pieces before the answer are
      // in it, the ones after it continue it. (A server without streaming sends none.)
      if (Array.isArray(partial)) {
        const upTo = events.reduce((max, e) => (typeof e.seq === 'number' && e.seq > max ? e.seq : max), afterSeq);
        this.model.applyPartial(sessionId, partial, upTo);
      }
    } catch (error) {
      this.server.log(`coven/getEvents for ${sessionId} after seq ${afterSeq} failed: ${String(error)}`);
    } finally {
      if (generation === this.generation) this.fetching.delete(sessionId);
    }
    if (generation !== this.generation) return;
    const gap = this.model.gaps().find((g) => g.sessionId === sessionId);
    if (gap !== undefined && gap.afterSeq === afterSeq) {
      this.server.log(`coven/getEvents did not fill the gap in ${sessionId} after seq ${afterSeq}; its later events stay hidden`);
      this.stuck.set(sessionId, afterSeq);
    }
    this.afterIngest(applied);
  }

  private listSessions(unresolved: string): void {
    if (this.listing) {
      this.listAgain = true;
      return;
    }
    // The same unknown ids as last time: the server did not list them then, asking again per event would spin.
    if (unresolved === this.lastUnresolved) return;
    this.listing = true;
    const generation = this.generation;
    void this.server
      .request(Method.listSessions, {})
      .then(
        ({ sessions }) => {
          if (generation === this.generation) this.model.applySessions(sessions);
        },
        (error) => this.server.log(`coven/listSessions failed: ${String(error)}`),
      )
      .finally(() => {
        this.listing = false;
        if (generation === this.generation) this.lastUnresolved = unresolved;
        if (this.listAgain) {
          this.listAgain = false;
          this.fetchMissing();
        }
        this.schedule();
      });
  }

  private schedule(): void {
    this.flushTimer ??= setTimeout(() => this.flush(), this.flushMs);
  }

  private flush(): void {
    this.flushTimer = undefined;
    const changes = this.model.takeChanges();
    if (changes.root || changes.nodes.length > 0 || changes.sessions.length > 0) this.changeEmitter.fire(changes);
    for (const [sessionId, resolvers] of this.waiters) {
      if (this.model.session(sessionId) === undefined) continue;
      this.waiters.delete(sessionId);
      resolvers.forEach((resolve) => resolve());
    }
    const proposals = this.proposals;
    this.proposals = [];
    for (const forkId of proposals) {
      const fork = this.model.fork(forkId);
      if (fork?.state !== 'proposed' || !fork.placed || this.announced.has(forkId)) continue;
      this.announced.add(forkId);
      this.proposalEmitter.fire(fork);
    }
    const reviews = this.reviews;
    this.reviews = [];
    for (const forkId of reviews) {
      const fork = this.model.fork(forkId);
      if (fork?.state !== 'reviewing' || !fork.placed || this.announcedReviews.has(forkId)) continue;
      this.announcedReviews.add(forkId);
      this.reviewEmitter.fire(fork);
    }
  }
}
