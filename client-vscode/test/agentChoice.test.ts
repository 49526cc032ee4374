import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { agentChoices, agentName, offerHints, offersOf } from '../src/agentChoice';

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

describe("the server's agents (capabilities.experimental.coven.agents)", () => {
  const v2 = {
    protocolVersion: 2,
    agents: [
      { name: 'claude', kind: 'claude', fork: 'inherit', cost: true },
      { name: 'codex', kind: 'codex', fork: 'inherit', cost: true },
      { name: 'codex-acp', kind: 'acp', fork: 'transcript', cost: false },
      { name: 'opencode', kind: 'acp', fork: null, cost: null },
    ],
  };

  test('are read in either shape; a server older than the field offers Claude only', () => {
    assert.deepEqual(offersOf(v2), [
      { name: 'claude', kind: 'claude', fork: 'inherit', cost: true },
      { name: 'codex', kind: 'codex', fork: 'inherit', cost: true },
      { name: 'codex-acp', kind: 'acp', fork: 'transcript', cost: false },
      { name: 'opencode', kind: 'acp' },
    ]);
    assert.deepEqual(offersOf({ protocolVersion: 1, agents: ['claude', 'codex', 'mine'] }), [
      { name: 'claude', kind: 'claude' },
      { name: 'codex', kind: 'codex' },
      { name: 'mine' },
    ]);
    assert.deepEqual(offersOf({ protocolVersion: 1 }), [{ name: 'claude', kind: 'claude' }]);
    assert.deepEqual(offersOf(undefined), [{ name: 'claude', kind: 'claude' }]);
    assert.deepEqual(offersOf({ agents: [3, { kind: 'acp' }, 'ok'] }), [{ name: 'ok' }]);
  });

  test('New Session lists every agent by name with its kind and what it lacks', () => {
    const choices = agentChoices(offersOf(v2), 'opencode');
    assert.deepEqual(
      choices.map((c) => [c.agent, c.label, c.description]),
      [
        ['opencode', 'opencode', 'ACP agent · coven.agent'],
        ['claude', 'Claude Code', 'Anthropic'],
        ['codex', 'Codex', 'OpenAI, with your ~/.codex configuration'],
        ['codex-acp', 'codex-acp', 'ACP agent · no fork: transcript children · reports no cost'],
      ],
    );
    assert.deepEqual(offerHints({ name: 'x', kind: 'acp', fork: 'inherit', cost: true }), ['ACP agent']);
    assert.equal(agentName('opencode'), 'opencode');
  });

  test('one ACP agent alone asks nothing: the server default applies', () => {
    assert.deepEqual(agentChoices(offersOf({ agents: [{ name: 'opencode', kind: 'acp' }] }), undefined), []);
  });
});
