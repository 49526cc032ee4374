// The context gauge and a proposed fork's cost: what the model keeps of them (from the recorded
// fork: a real coven-ls, the real CLI and the scripted model) and how they are shown.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { forkQuestionText } from '../src/forkQuestion';
import { CovenModel, type ForkCost, forkCostOf } from '../src/model';
import { contextStatus, contextText, forkCostLines, formatTokens, present } from '../src/present';
import { info } from './events';
import type { CovenEvent } from '../src/protocol';
import { afterEvent, type EventOf, type Fixture, loadFixture, replay, rootOf } from './fixtures';

const fork = loadFixture('fork');

function all<K extends CovenEvent['kind']>(f: Fixture, kind: K): EventOf<K>[] {
  return f.events.filter((e): e is EventOf<K> => e.kind === kind);
}

describe('context gauge', () => {
  test("a proposed fork keeps the server's estimate and shows the context and the cost (fork.jsonl)", () => {
    const proposed = all(fork, 'forkProposed')[0]!;
    const model = replay(fork, new CovenModel(), afterEvent(fork, 'forkProposed'));
    const node = model.fork(String(proposed.forkId))!;
    const sent = proposed.estimate!;
    assert.deepEqual(node.estimate, forkCostOf(sent));
    assert.equal(node.estimate!.tokens, sent.children * sent.contextTokens);
    const lines = forkCostLines(node.estimate!);
    assert.equal(lines[0], `Context: ${formatTokens(sent.contextTokens)} / ${formatTokens(sent.window!)} tokens (1%)`);
    // The children read the parent's context from the cache and write their briefs and its last answer to it.
    assert.ok(sent.writeTokens! > 0);
    assert.equal(
      lines[1],
      `Fork cost: 2 × ${formatTokens(sent.contextTokens)} = ${formatTokens(sent.tokens)} tokens read from the cache + ${formatTokens(sent.writeTokens!)} written to it ≈ $${sent.costUsd!.toFixed(4)} (prices of ${sent.pricesAsOf})`,
    );
    assert.equal(lines.length, 2); // far from the window: no warning
  });

  test('the fork question (notification, quick pick) ends with the context and the cost (fork.jsonl)', () => {
    const proposed = all(fork, 'forkProposed')[0]!;
    const model = replay(fork, new CovenModel(), afterEvent(fork, 'forkProposed'));
    const node = model.fork(String(proposed.forkId))!;
    const text = forkQuestionText(node, model.session(node.sessionId));
    assert.ok(text.endsWith(` — ${forkCostLines(node.estimate!).join(' — ')}`), text);
    assert.ok(text.includes(' — Context: '), text);
  });

  test("the session's tooltip and the status bar show its last turn's context (fork.jsonl)", () => {
    const sid = rootOf(fork).sessionId;
    const model = replay(fork, new CovenModel());
    const turns = all(fork, 'turnResult').filter((e) => e.sessionId === sid);
    const last = turns[turns.length - 1]!.contextUsage!;
    const session = model.session(sid)!;
    assert.deepEqual(session.contextUsage, { tokens: last.tokens, window: last.window ?? undefined, model: last.model ?? undefined });
    assert.ok(present(session).tooltip.includes(`Context: ${contextText(session.contextUsage!)}`));
    const shown = contextStatus(session)!;
    assert.equal(shown.text, `$(dashboard) ${formatTokens(last.tokens)} / ${formatTokens(last.window!)} 1%`);
    assert.equal(shown.warning, false);
  });

  // Hand-built: no recording has a context past 80% of a 1M window, nor a model the table lacks.
  test('past 80% of the window the status bar warns; listSessions sets the gauge too', () => {
    const model = new CovenModel();
    model.applySessions([info('s-1', { contextUsage: { tokens: 170_000, window: 200_000, model: 'claude-sonnet-4-5' } })]);
    const shown = contextStatus(model.session('s-1'))!;
    assert.equal(shown.text, '$(dashboard) 170k / 200k 85%');
    assert.equal(shown.warning, true);
    assert.ok(shown.tooltip.endsWith('170k / 200k tokens (85%) · claude-sonnet-4-5'));
  });

  test('a model the table does not know: tokens only, and the approval says the cost is unknown', () => {
    const model = new CovenModel();
    model.applySessions([info('s-1', { contextUsage: { tokens: 12_345, window: null, model: 'claude-next-9' } })]);
    assert.equal(contextStatus(model.session('s-1'))!.text, '$(dashboard) 12.3k');
    assert.equal(contextText(model.session('s-1')!.contextUsage!), '12.3k tokens (window unknown: claude-next-9 is not in the table)');
    const unknown: ForkCost = forkCostOf({
      contextTokens: 12_345, window: null, model: 'claude-next-9', children: 3, tokens: 37_035,
      pricedAs: 'input', costUsd: null, pricesAsOf: '2026-11-26', warning: null,
    })!;
    assert.deepEqual(forkCostLines(unknown), [
      'Context: 12.3k tokens (window unknown: claude-next-9 is not in the table)',
      "Fork cost: 3 × 12.3k = 37k tokens at the full input price (cost unknown: claude-next-9 is not in coven-ls's price table)",
    ]);
    // Fresh and transcript children do not read the context as is: the line says what they are.
    const fresh = forkCostLines({ ...unknown, model: 'claude-sonnet-4-5', context: 'fresh', tokens: 504, costUsd: 0.0015 });
    assert.equal(fresh[1], 'Fork cost: 3 fresh children = 504 tokens at the full input price ≈ $0.0015 (prices of 2026-11-26)');
    assert.equal(forkCostOf({ ...sentLike(unknown), context: 'transcript' })!.context, 'transcript');
    assert.equal(unknown.context, 'inherit'); // an estimate without `context` (older servers)
    const warned = forkCostLines({ ...unknown, window: 14_000, model: 'm', costUsd: 0.5, warning: "the parent's context is 88% full (12,345 of 14,000 tokens)" });
    assert.equal(warned[2], "⚠ Warning: the parent's context is 88% full (12,345 of 14,000 tokens)");
  });

  test('no session selected or no request yet: no gauge', () => {
    const model = new CovenModel();
    model.applySessions([info('s-1')]);
    assert.equal(contextStatus(model.session('s-1')), undefined);
    assert.equal(contextStatus(undefined), undefined);
  });
});

function sentLike(c: ForkCost): Record<string, unknown> {
  return { ...c, window: c.window ?? null, costUsd: c.costUsd ?? null, warning: c.warning ?? null };
}
