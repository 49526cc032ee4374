import assert from 'node:assert/strict';
import { test } from 'node:test';

import type { Changes, Node } from '../src/model';
import { RefreshThrottle, TREE_REFRESH_MS } from '../src/throttle';

const nodes = new Map<string, Node>();
const node = (key: string): Node => nodes.get(key) ?? nodes.set(key, { key } as unknown as Node).get(key)!;
const changes = (keys: string[], root = false): Changes => ({ root, nodes: keys.map(node), sessions: [] });
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

test('refreshes go out at once when quiet, then at most once per interval, merged', async () => {
  // VS Code drops refreshes that come faster than its 200 ms debounce, until they stop.
  assert.ok(TREE_REFRESH_MS > 200);
  const fired: Array<{ at: number; root: boolean; keys: string[] }> = [];
  const throttle = new RefreshThrottle((root, list) => fired.push({ at: Date.now(), root, keys: list.map((n) => n.key) }), 60);
  throttle.push(changes(['a']));
  assert.deepEqual(fired.map((f) => f.keys), [['a']], 'the first at once');
  // A stream: a change every 10 ms for 300 ms, each refresh still going out.
  const started = Date.now();
  for (let i = 0; Date.now() - started < 300; i++) {
    throttle.push(changes([`n${i % 3}`]));
    await sleep(10);
  }
  await sleep(100);
  assert.ok(fired.length >= 3 && fired.length <= 7, `${fired.length} refreshes in 300 ms`);
  for (let i = 1; i < fired.length; i++) assert.ok(fired[i]!.at - fired[i - 1]!.at >= 55, 'paced');
  assert.ok(fired.slice(1).every((f) => new Set(f.keys).size === f.keys.length && f.keys.length <= 3), 'merged');
  assert.deepEqual(new Set(fired.slice(1).flatMap((f) => f.keys)), new Set(['n0', 'n1', 'n2']));
  // A root change covers everything pending.
  fired.length = 0;
  await sleep(80);
  throttle.push(changes(['x']));
  throttle.push(changes(['y']));
  throttle.push(changes([], true));
  throttle.push(changes(['z']));
  await sleep(100);
  assert.deepEqual(fired.map(({ root, keys }) => ({ root, keys })), [
    { root: false, keys: ['x'] },
    { root: true, keys: [] },
  ]);
  // Nothing changed: nothing to refresh.
  fired.length = 0;
  throttle.push(changes([]));
  await sleep(80);
  assert.deepEqual(fired, []);
  throttle.dispose();
});
