import assert from 'node:assert/strict';
import { test } from 'node:test';

import { parseLimits } from '../src/forkLimits';

test('limits are typed by name, any case, for coven/decideFork', () => {
  assert.deepEqual(parseLimits('childTokens=200000, child-seconds=600 forkcostusd=2.5 childCostUsd=0'), {
    limits: { childTokens: 200000, childSeconds: 600, forkCostUsd: 2.5, childCostUsd: 0 },
  });
  assert.deepEqual(parseLimits('   '), { limits: {} }, 'nothing typed: the session\'s limits');
});

test('a bad limit says what to type', () => {
  const said = (text: string): string => {
    const parsed = parseLimits(text);
    assert.ok('error' in parsed, text);
    return parsed.error;
  };
  assert.match(said('tokens=5'), /^'tokens=5' is not a limit: type name=value, the names being childTokens, childCostUsd/);
  assert.match(said('childTokens'), /^'childTokens' is not a limit/);
  assert.equal(said('childTokens=1.5'), "childTokens takes a whole number, not '1.5'");
  assert.equal(said('forkCostUsd=lots'), "forkCostUsd takes a number, not 'lots'");
  assert.equal(said('childSeconds='), "childSeconds takes a number, not ''");
  assert.equal(said('childSeconds=-1'), 'childSeconds must be 0 (no limit) or more, not -1');
  assert.equal(said('childTokens=Infinity'), 'childTokens must be 0 (no limit) or more, not Infinity');
});
