import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { permissionAnswer, permissionButtons } from '../src/permissionChoice';
import type { PermissionOption } from '../src/protocol';

const OPTIONS: PermissionOption[] = [
  { optionId: 'once', kind: 'allow_once', name: 'Allow once' },
  { optionId: 'always', kind: 'allow_always', name: 'Always allow' },
  { optionId: 'nope', kind: 'reject_once', name: 'Reject' },
];

describe('tool permission buttons', () => {
  test("Claude's and Codex's questions are Allow / Deny", () => {
    assert.deepEqual(permissionButtons(undefined), ['Allow', 'Deny']);
    assert.deepEqual(permissionButtons([]), ['Allow', 'Deny']);
    assert.deepEqual(permissionAnswer(undefined, 'Allow'), { allow: true });
    assert.deepEqual(permissionAnswer(null, 'Deny'), { allow: false, message: 'Denied by the user.' });
    assert.equal(permissionAnswer(undefined, undefined).allow, false);
  });

  test("an ACP agent's question shows its options and answers with the one picked", () => {
    assert.deepEqual(permissionButtons(OPTIONS), ['Allow once', 'Always allow', 'Reject']);
    assert.deepEqual(permissionAnswer(OPTIONS, 'Always allow'), { allow: true, optionId: 'always' });
    assert.deepEqual(permissionAnswer(OPTIONS, 'Reject'), { allow: false, message: 'Denied by the user.', optionId: 'nope' });
    assert.deepEqual(permissionAnswer(OPTIONS, undefined), { allow: false, message: 'Denied: the question was dismissed.' });
  });
});
