// Event builders for the few tests that cannot use a recorded stream (./fixtures.ts): cases the
// recorded scenarios do not show, or that no server sends (unknown kinds, malformed input, volume).
// The shapes are protocol.md's, with seq numbered per session; each test that uses them says why.

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
    agent: 'claude',
    createdAt: '2026-11-22T01:36:13.000Z',
    costUsd: 0,
    queued: 0,
    queuePosition: null,
    usage: { inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheCreationTokens: 0 },
    treeUsage: { inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheCreationTokens: 0 },
    backgroundTasks: [],
    isolation: null,
    isolationReason: null,
    worktree: null,
    changes: null,
    branchedFrom: null,
    ...fields,
  };
}
