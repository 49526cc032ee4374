import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { CovenModel } from '../src/model';
import { present } from '../src/present';
import { info, Stream } from './events';

// Hand-built listings: the recorded scenarios hold no branch and no Codex session (the shapes are
// protocol.md's SessionInfo: a branch has a parentId, no forkId and a branchedFrom marker).
describe('branches and agents in the tree', () => {
  let s = new Stream();

  /** A fresh model (and stream: each session's seq starts at 1) with a parent, its branch and a Codex session. */
  function model(): CovenModel {
    s = new Stream();
    const m = new CovenModel();
    m.ingest([...s.turn('p1', 'Write the parser', 'Done.'), ...s.turn('b1', 'Try a generator', 'Tried.'), ...s.turn('x1', 'Count files', '3.')]);
    m.applySessions([
      info('p1', { title: 'Write the parser' }),
      info('b1', { title: 'Try a generator', parentId: 'p1', branchedFrom: { atMessageId: 'msg_7' } }),
      info('x1', { title: 'Count files', agent: 'codex', agentSessionId: 'thr_1' }),
    ]);
    return m;
  }

  test('a branch is a session of its own at the top level, marked as a branch, not a fork child', () => {
    const m = model();
    const branch = m.session('b1')!;
    assert.deepEqual(branch.branchedFrom, { sessionId: 'p1', atMessageId: 'msg_7' });
    assert.equal(branch.parentId, undefined, 'not a fork child');
    assert.ok(m.roots().includes(branch));
    const look = present(branch);
    assert.match(look.description, /^⎇ branch · done/);
    assert.match(look.tooltip, /Branch of `p1` at message `msg_7`/);
    assert.match(look.contextValue, /^session-idle-top$/);
    assert.equal(m.session('p1')!.branchedFrom, undefined);
  });

  test('a branch of the whole conversation says so', () => {
    const m = new CovenModel();
    m.applySessions([info('p1'), info('b2', { parentId: 'p1', branchedFrom: { atMessageId: null } })]);
    assert.match(present(m.session('b2')!).tooltip, /Branch of `p1`: a conversation/);
  });

  test("each session's agent: Codex marked in the row, every agent named in the tooltip", () => {
    const m = model();
    const codex = present(m.session('x1')!);
    assert.match(codex.description, /^Codex · done/);
    assert.match(codex.tooltip, /Agent: Codex/);
    assert.match(codex.tooltip, /Codex thread: `thr_1`/);
    const claude = present(m.session('p1')!);
    assert.match(claude.description, /^done/, 'Claude, the default, reads as before');
    assert.match(claude.tooltip, /Agent: Claude Code/);
  });

  test('a branch made without a first message is idle, not done, until its first turn', () => {
    const m = new CovenModel();
    m.ingest(s.turn('p1', 'Write the parser', 'Done.'));
    m.applySessions([
      info('p1', { title: 'Write the parser', agentSessionId: 'a-p1' }),
      info('b3', { title: 'b3', parentId: 'p1', branchedFrom: { atMessageId: null } }),
    ]);
    const fresh = present(m.session('b3')!);
    assert.match(fresh.description, /^⎇ branch · idle$/);
    assert.equal(fresh.icon.id, 'circle-outline');
    assert.match(fresh.contextValue, /^session-idle-top$/, 'its menus are an idle session\'s');
    assert.match(present(m.session('p1')!).description, /^done/, 'a session whose turn ended is done');

    m.ingest(s.turn('b3', 'Try a generator', 'Tried.'));
    const after = present(m.session('b3')!);
    assert.match(after.description, /^⎇ branch · done/);
    assert.equal(after.icon.id, 'check');
  });

  test('a session listed before its events are read is done when its agent has a session', () => {
    const m = new CovenModel();
    m.applySessions([info('old', { agentSessionId: 'a-old' })]);
    assert.match(present(m.session('old')!).description, /^done/);
  });

  test('a fork child with a parent is not taken for a branch', () => {
    const m = new CovenModel();
    m.applySessions([info('p1'), info('c1', { parentId: 'p1', forkId: 'f1', label: 'task', branchedFrom: null })]);
    assert.equal(m.session('c1')!.branchedFrom, undefined);
    assert.equal(m.session('c1')!.parentId, 'p1');
  });

  test("a Codex parent's fork children are marked Codex before any listing names them", () => {
    const m = model();
    m.ingest([
      s.ev('x1', 'forkStarted', { forkId: 'fx', state: 'running', source: 'model', tasks: ['Count the notes'], children: [{ sessionId: 'xc1', label: 'Count the notes' }] }),
      ...s.turn('xc1', "You were assigned 'Count the notes'", 'Seven lines.', 'fork'),
    ]);
    const child = m.session('xc1')!;
    assert.equal(child.agent, undefined, 'no listing yet');
    assert.equal(child.parent?.kind, 'fork');
    assert.match(present(child).description, /^Codex · done/);
    // A fork into the other agent says so in forkStarted: its children are that agent's.
    m.ingest([s.ev('x1', 'forkStarted', { forkId: 'fy', state: 'running', source: 'user', tasks: ['Ask Claude'], agent: 'claude', context: 'transcript', children: [{ sessionId: 'xc2', label: 'Ask Claude' }] })]);
    assert.doesNotMatch(present(m.session('xc2')!).description, /Codex/);
    // A listing that names another agent wins over the parent's.
    m.applySessions([info('xc1', { parentId: 'x1', forkId: 'fx', label: 'Count the notes', agent: 'claude' })]);
    assert.doesNotMatch(present(m.session('xc1')!).description, /Codex/);
  });
});
