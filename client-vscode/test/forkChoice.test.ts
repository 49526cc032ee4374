import assert from 'node:assert/strict';
import { test } from 'node:test';

import { forkChoices, withCosts } from '../src/forkChoice';
import { CovenModel, forkCostOf } from '../src/model';
import { forkCostLines, present, startText } from '../src/present';

test('a Claude session forks by default into children that continue its conversation', () => {
  const choices = forkChoices('claude');
  assert.deepEqual(choices[0]!.params, {}, 'the default sends nothing: the server decides');
  assert.deepEqual(
    choices.map((c) => c.params),
    [{}, { context: 'fresh' }, { context: 'transcript' }, { agent: 'codex', context: 'transcript' }, { agent: 'codex', context: 'fresh' }],
  );
  assert.match(choices[3]!.label, /^Codex children/);
});

test('a Codex session offers Claude children, and never another agent with inherit', () => {
  const choices = forkChoices('codex');
  assert.match(choices[0]!.description, /Codex child resumes/);
  assert.deepEqual(choices[3]!.params, { agent: 'claude', context: 'transcript' });
  for (const choice of [...choices, ...forkChoices('claude'), ...forkChoices(undefined)]) {
    assert.ok(choice.params.agent === undefined || choice.params.context !== 'inherit', choice.label);
  }
});

test("an ACP agent's session offers children of each of the server's agents, by name", () => {
  const offers = [
    { name: 'claude', kind: 'claude', fork: 'inherit', cost: true },
    { name: 'codex-acp', kind: 'acp', fork: 'transcript', cost: false },
    { name: 'opencode', kind: 'acp', fork: 'inherit' },
  ];
  const choices = forkChoices('opencode', offers);
  assert.match(choices[0]!.description, /each opencode child resumes this conversation \(default\)/);
  assert.deepEqual(
    choices.map((c) => c.params),
    [
      {},
      { context: 'fresh' },
      { context: 'transcript' },
      { agent: 'claude', context: 'transcript' },
      { agent: 'claude', context: 'fresh' },
      { agent: 'codex-acp', context: 'transcript' },
      { agent: 'codex-acp', context: 'fresh' },
    ],
  );
  assert.equal(choices[5]!.label, 'codex-acp children, from a transcript');
  assert.match(choices[5]!.description, /it reports no cost/);
  assert.doesNotMatch(choices[3]!.description, /no cost/);
});

test('a session of an agent without session/fork offers no "continue": its default is a transcript', () => {
  const offers = [
    { name: 'claude', kind: 'claude', fork: 'inherit' },
    { name: 'codex-acp', kind: 'acp', fork: 'transcript' },
  ];
  const choices = forkChoices('codex-acp', offers);
  assert.deepEqual(choices[0]!.params, {}, 'the default sends nothing: the server makes it a transcript');
  assert.equal(choices[0]!.label, 'Start from a transcript');
  assert.match(choices[0]!.description, /codex-acp has no session\/fork/);
  assert.ok(!choices.some((c) => c.label === 'Continue the conversation'));
  assert.deepEqual(
    choices.map((c) => c.params),
    [{}, { context: 'fresh' }, { agent: 'claude', context: 'transcript' }, { agent: 'claude', context: 'fresh' }],
  );
});

test('a session whose agent is not known yet is taken for a Claude one', () => {
  assert.deepEqual(forkChoices(undefined), forkChoices('claude'));
});

test("a fork's tooltip says how its children started when they did not continue the conversation", () => {
  const model = new CovenModel();
  const started = (forkId: string, extra: object): unknown => ({
    sessionId: 's-1', seq: forkId === 'f-1' ? 1 : 2, kind: 'forkStarted', time: 't', forkId, state: 'running', source: 'user',
    tasks: ['a'], children: [{ sessionId: `${forkId}-c`, label: 'a' }], ...extra,
  });
  model.ingest([started('f-1', { context: 'transcript', agent: 'codex' }), started('f-2', {})] as never);
  const codex = model.fork('f-1')!;
  assert.deepEqual([codex.context, codex.agent], ['transcript', 'codex']);
  assert.match(present(codex).tooltip, /The children are Codex sessions with the parent's conversation written into their first prompt/);
  assert.equal(startText(model.fork('f-2')!), '');
});

test("approve-with-edits shows each way to start with the server's estimate of it", () => {
  // What coven/estimateFork answers for a 170k context and two children, inherit and fresh.
  const base = { contextTokens: 170_000, window: 200_000, model: 'claude-sonnet-4-5', children: 2, pricesAsOf: '2026-11-26', warning: null };
  const inherit = forkCostOf({ ...base, tokens: 340_000, pricedAs: 'cacheRead', costUsd: 0.102, context: 'inherit' })!;
  const fresh = forkCostOf({ ...base, tokens: 504, pricedAs: 'input', costUsd: 0.0015, context: 'fresh' })!;
  const costs = [forkCostLines(inherit)[1], forkCostLines(fresh)[1], undefined, undefined, undefined];
  const shown = withCosts(forkChoices('claude'), costs);
  assert.equal(shown[0]!.detail, 'Fork cost: 2 × 170k = 340k tokens read from the cache ≈ $0.10 (prices of 2026-11-26)');
  assert.equal(shown[1]!.detail, 'Fork cost: 2 fresh children = 504 tokens at the full input price ≈ $0.0015 (prices of 2026-11-26)');
  assert.ok(!('detail' in shown[2]!), 'a choice the server did not price has no cost line');
  assert.deepEqual(shown.map((c) => c.params), forkChoices('claude').map((c) => c.params));
});
