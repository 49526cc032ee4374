// Tree refreshes paced for VS Code. The extension host debounces a TreeDataProvider's
// onDidChangeTreeData by 200 ms, restarting the wait on every event (extHostTreeViews.ts): a
// provider that fires more often than that, as a streaming answer makes the model do, gets no
// refresh at all until the stream stops. So changes are merged here and passed on at most once
// per interval longer than that: the first one at once, the rest at the end of the interval.
// No `vscode` import, so the tests can drive it.

import type { Changes, Node } from './model';

/** Longer than VS Code's 200 ms, so that every refresh we send goes through at once. */
export const TREE_REFRESH_MS = 250;

export class RefreshThrottle {
  private root = false;
  private readonly nodes = new Set<Node>();
  private last = -Infinity;
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly refresh: (root: boolean, nodes: Node[]) => void,
    private readonly intervalMs = TREE_REFRESH_MS,
    private readonly now: () => number = () => Date.now(),
  ) {}

  push(changes: Changes): void {
    if (changes.root) {
      this.root = true;
      this.nodes.clear();
    } else if (!this.root) {
      for (const node of changes.nodes) this.nodes.add(node);
    }
    if (!this.root && this.nodes.size === 0) return;
    if (this.timer !== undefined) return;
    const wait = this.last + this.intervalMs - this.now();
    if (wait <= 0) this.flush();
    else this.timer = setTimeout(() => this.flush(), wait);
  }

  dispose(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
  }

  private flush(): void {
    this.timer = undefined;
    const root = this.root;
    const nodes = [...this.nodes];
    this.root = false;
    this.nodes.clear();
    this.last = this.now();
    this.refresh(root, nodes);
  }
}
