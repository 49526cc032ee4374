// Event builders for the tests: the shapes protocol.md promises, with seq numbered per session.

import type { CovenEvent, SessionInfo } from '../src/protocol';

export class Stream {
  private readonly seqs = new Map<string, number>();
  private clock = Date.parse('2026-11-22T01:36:13.000Z');

  /** Any kind and fields, unknown ones too: the model must take whatever a server sends. */
  ev(sessionId: string, kind: string, fields: Record<string, unknown> = {}): CovenEvent {
    const seq = (this.seqs.get(sessionId) ?? 0) + 1;
    this.seqs.set(sessionId, seq);
    this.clock += 7;
    return { sessionId, seq, kind, time: new Date(this.clock).toISOString(), ...fields } as CovenEvent;
  }

  status(sessionId: string, status: string): CovenEvent {
    return this.ev(sessionId, 'status', { status });
  }

  /** A whole plain turn: prompt, running, text, turnResult, idle. */
  turn(sessionId: string, prompt: string, answer: string, origin = 'user', cost = 0.01): CovenEvent[] {
    return [
      this.ev(sessionId, 'prompt', { text: prompt, origin }),
      this.status(sessionId, 'running'),
      this.ev(sessionId, 'text', { text: answer, messageId: `m-${sessionId}-${this.seqs.get(sessionId)}` }),
      this.ev(sessionId, 'turnResult', {
        text: answer, isError: false, subtype: 'success', costUsd: cost, durationMs: 10, numTurns: 1, agentSessionId: `a-${sessionId}`,
      }),
      this.status(sessionId, 'idle'),
    ];
  }
}

export function info(sessionId: string, fields: Partial<SessionInfo> = {}): SessionInfo {
  return {
    sessionId,
    parentId: null,
    forkId: null,
    label: null,
    title: `title of ${sessionId}`,
    status: 'idle',
    cwd: '/work',
    model: null,
    permissionMode: 'default',
    forkMode: 'approve',
    agentSessionId: null,
    createdAt: '2026-11-22T01:36:13.000Z',
    costUsd: 0,
    queued: 0,
    ...fields,
  };
}

/**
 * The fork story from the issue, as the server tells it: a parent whose answer proposes a fork of
 * two tasks, the user approves, both children run (child events interleaved with the parent's),
 * and the parent reintegrates their results.
 */
export function forkStory(s = new Stream()): { events: CovenEvent[]; sessions: SessionInfo[] } {
  const P = 's-parent';
  const A = 's-child-a';
  const B = 's-child-b';
  const events: CovenEvent[] = [
    s.status(P, 'starting'),
    s.ev(P, 'prompt', { text: 'Split the work', origin: 'user' }),
    s.status(P, 'running'),
    s.ev(P, 'text', { text: 'I will fork.\n<fork>\n- Task A\n- Task B\n</fork>', messageId: 'm1' }),
    s.ev(P, 'turnResult', { text: 'I will fork.', isError: false, subtype: 'success', costUsd: 0.02, durationMs: 5, numTurns: 1, agentSessionId: 'a-p' }),
    s.ev(P, 'forkProposed', { forkId: 'f1', tasks: ['Task A', 'Task B'] }),
    s.status(P, 'awaitingApproval'),
    s.ev(P, 'forkStarted', { forkId: 'f1', source: 'model', children: [{ sessionId: A, label: 'Task A' }, { sessionId: B, label: 'Task B' }] }),
    s.status(P, 'forking'),
    s.status(A, 'starting'),
    s.status(B, 'queued'),
    ...s.turn(A, "You were assigned 'Task A'", 'A is done', 'fork', 0.03),
    s.status(B, 'starting'),
    ...s.turn(B, "You were assigned 'Task B'", 'B is done', 'fork', 0.04),
    s.ev(P, 'forkFinished', { forkId: 'f1', results: [{ label: 'Task A', sessionId: A, ok: true }, { label: 'Task B', sessionId: B, ok: true }] }),
    ...s.turn(P, '<fork-results>…</fork-results>', 'Both tasks are done.', 'forkResults', 0.05),
  ];
  const sessions = [
    info(P, { title: 'Split the work', createdAt: '2026-11-22T01:36:13.001Z' }),
    info(A, { parentId: P, forkId: 'f1', label: 'Task A', createdAt: '2026-11-22T01:36:14.001Z' }),
    info(B, { parentId: P, forkId: 'f1', label: 'Task B', createdAt: '2026-11-22T01:36:14.002Z' }),
  ];
  return { events, sessions };
}
