import assert from 'node:assert/strict';
import { test } from 'node:test';

import { forkChoices } from '../src/forkChoice';
import { CovenModel } from '../src/model';
import { present, startText } from '../src/present';

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
