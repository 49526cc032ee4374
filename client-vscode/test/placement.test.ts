// Fork children on a cluster (issue 33): the row of a child placed on a node says where it runs,
// from forkStarted's entry (no node yet), the child's `placed` event and its SessionInfo; the
// placement choice is offered only by a server with a cluster. The events are shaped like
// protocol.md's examples ("Cluster placement"), ids included.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { placementChoices } from '../src/forkChoice';
import { CovenModel } from '../src/model';
import { present } from '../src/present';
import { info, Stream } from './events';

const PARENT = 's-3f9a1c02b7de';
const HERE = 's-7e2d9b4c1a08';
const THERE = 's-9a8b7c6d5e4f';
const FORK = 'f-0c1d2e3f4a5b';

function story(s: Stream) {
  const children = [
    { sessionId: HERE, label: 'Fix the parser' },
    { sessionId: THERE, label: 'Update docs', placement: { cluster: 'ray', node: null, nodeId: null } },
  ];
  return [
    ...s.turn(PARENT, 'Plan the release', 'Two tasks.'),
    s.status(PARENT, 'forking'),
    s.ev(PARENT, 'forkStarted', {
      state: 'running', forkId: FORK, source: 'user', tasks: children.map((c) => c.label), children,
      isolation: 'worktree', mergeMode: 'auto', base: '9c1e4f0a7b2d', placement: 'auto',
    }),
  ];
}

describe('where a fork child runs', () => {
  test("a child on the cluster says so before it has a node, then names its node", () => {
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info(PARENT)]);
    model.ingest(story(s));
    const waiting = present(model.session(THERE)!);
    assert.match(waiting.description, /on ray/);
    assert.match(waiting.tooltip, /Placed on the ray cluster \(waiting for a node\)/);

    model.ingest([s.ev(THERE, 'placed', { node: 'host-2', cluster: 'ray', nodeId: '5f0c2a9e' })]);
    const placed = present(model.session(THERE)!);
    assert.match(placed.description, /on host-2/);
    assert.match(placed.tooltip, /Runs on host-2 \(ray cluster\)/);
    assert.deepEqual(model.session(THERE)!.placement, { cluster: 'ray', node: 'host-2', nodeId: '5f0c2a9e' });

    // A child that runs here says nothing of it.
    const here = present(model.session(HERE)!);
    assert.doesNotMatch(here.description, /\bon \w/);
    assert.doesNotMatch(here.tooltip, /cluster/);
  });

  test('a listing names the node of a child it has not seen placed (a restarted server)', () => {
    const model = new CovenModel();
    model.applySessions([
      info(PARENT),
      info(THERE, { parentId: PARENT, forkId: FORK, label: 'Update docs', status: 'idle', placement: { cluster: 'ray', node: 'host-3', nodeId: null } }),
    ]);
    assert.match(present(model.session(THERE)!).description, /on host-3/);
  });
});

describe('a fork whose cluster cannot be reached', () => {
  test('says why its children run here, in its tooltip', () => {
    const s = new Stream();
    const model = new CovenModel();
    model.applySessions([info(PARENT)]);
    const why = 'the ray cluster cannot take children (no Ray cluster answers at ray://head:10001), so all run on this machine';
    model.ingest([
      ...s.turn(PARENT, 'Plan the release', 'Two tasks.'),
      s.ev(PARENT, 'forkStarted', {
        state: 'running', forkId: FORK, source: 'model', tasks: ['a'], children: [{ sessionId: HERE, label: 'a' }],
        isolation: 'worktree', mergeMode: 'auto', base: '9c1e4f0a7b2d', placement: 'auto', placementReason: why,
      }),
    ]);
    assert.match(present(model.fork(FORK)!).tooltip, /Every child runs on this machine: the ray cluster cannot take children/);
    assert.doesNotMatch(present(model.session(HERE)!).description, /\bon \w/);
  });
});

describe('the placement choice', () => {
  test('is offered only by a server with a cluster, the settings first', () => {
    assert.deepEqual(placementChoices(undefined), []);
    const choices = placementChoices('ray');
    assert.deepEqual(
      choices.map((c) => c.params),
      [{}, { placement: 'local' }, { placement: 'cluster' }, { placement: 'auto' }],
    );
    assert.match(choices[2]!.label, /ray cluster/);
  });
});
