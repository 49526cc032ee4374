import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';

import { CovenModel, type Node } from '../src/model';
import { present } from '../src/present';
import { info, Stream } from './events';
import { packageRoot } from './fixtures';

// What package.json contributes for the commands of issues 23 and 24, checked against the rows
// present() draws: a menu whose `when` never matches a row is a command nobody can reach.
const pkg = JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as {
  contributes: {
    keybindings: Array<{ command: string; key: string; when: string; args?: unknown }>;
    menus: Record<string, Array<{ command: string; when: string }>>;
  };
};

/** The `viewItem =~ /…/` of a menu entry, as a RegExp. */
function viewItemPattern(command: string): RegExp {
  const entry = pkg.contributes.menus['view/item/context']!.find((m) => m.command === command);
  assert.ok(entry, `no context menu entry for ${command}`);
  const found = /viewItem =~ \/(.*)\/$/.exec(entry.when);
  assert.ok(found, entry.when);
  return new RegExp(found[1]!);
}

function rows(): { session: Node; answer: Node; running: Node } {
  const s = new Stream();
  const m = new CovenModel();
  m.ingest([...s.turn('p1', 'Write the parser', 'Done.'), s.ev('r1', 'prompt', { text: 'Busy', origin: 'user' }), s.status('r1', 'running')]);
  m.applySessions([info('p1'), info('r1', { status: 'running' })]);
  const session = m.session('p1')!;
  const answer = m.children(m.children(session)[0])[0]!;
  return { session, answer, running: m.session('r1')! };
}

describe('package.json contributions', () => {
  test('Alt+Shift+F forks the selection only while the Coven view has focus', () => {
    const keys = pkg.contributes.keybindings.filter((k) => k.key === 'alt+shift+f');
    assert.deepEqual(keys, [{ command: 'coven.forkSession', key: 'alt+shift+f', when: 'focusedView == coven.sessions', args: 'coven:selection' }]);
    // The command reads that argument as "the tree's selection".
    assert.match(readFileSync(join(packageRoot(), 'src', 'commands.ts'), 'utf8'), /export const SELECTION = 'coven:selection';/);
  });

  test('Branch Here is offered on an idle session and on an assistant message, not on a busy session', () => {
    const { session, answer, running } = rows();
    assert.equal(answer.kind, 'text');
    assert.match(present(session).contextValue, viewItemPattern('coven.branchSession'));
    assert.doesNotMatch(present(running).contextValue, viewItemPattern('coven.branchSession'));
    assert.match(present(answer).contextValue, viewItemPattern('coven.branchFromHere'));
    assert.doesNotMatch(present(session).contextValue, viewItemPattern('coven.branchFromHere'));
  });

  test('Branch Here on a message is not in the palette (it needs the message)', () => {
    const palette = pkg.contributes.menus.commandPalette!;
    assert.deepEqual(palette.find((m) => m.command === 'coven.branchFromHere'), { command: 'coven.branchFromHere', when: 'false' });
  });
});
