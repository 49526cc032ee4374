import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { agentChoices, agentName } from '../src/agentChoice';

describe('agent choice for New Session', () => {
  test('nothing is asked when the server finds one agent (or an older server says nothing)', () => {
    assert.deepEqual(agentChoices(['claude'], 'claude'), []);
    assert.deepEqual(agentChoices(['claude'], 'codex'), []);
    assert.deepEqual(agentChoices([], undefined), []);
  });

  test('with both, the coven.agent setting comes first and is marked', () => {
    const claudeFirst = agentChoices(['claude', 'codex'], 'claude');
    assert.deepEqual(claudeFirst.map((c) => c.agent), ['claude', 'codex']);
    assert.match(claudeFirst[0]!.description, /coven\.agent/);
    assert.doesNotMatch(claudeFirst[1]!.description, /coven\.agent/);
    const codexFirst = agentChoices(['claude', 'codex'], 'codex');
    assert.deepEqual(codexFirst.map((c) => [c.agent, c.label]), [['codex', 'Codex'], ['claude', 'Claude Code']]);
    assert.match(codexFirst[0]!.description, /coven\.agent/);
  });

  test('a setting the server cannot run keeps the server order; an unknown agent shows by name', () => {
    assert.deepEqual(agentChoices(['claude', 'codex'], 'gemini').map((c) => c.agent), ['claude', 'codex']);
    assert.ok(agentChoices(['claude', 'codex'], 'gemini').every((c) => !c.description.includes('coven.agent')));
    assert.equal(agentChoices(['claude', 'other'], undefined)[1]!.label, 'other');
    assert.equal(agentName(undefined), 'Claude');
    assert.equal(agentName('codex'), 'Codex');
  });
});
