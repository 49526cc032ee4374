import assert from 'node:assert/strict';
import { test } from 'node:test';

import { forkChoices } from '../src/forkChoice';

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
