// The "Sessions" view: a TreeDataProvider over the model. Every row's look comes from present.ts;
// this file only turns it into TreeItems and refreshes exactly the nodes the model reports.

import * as vscode from 'vscode';

import type { Changes, CovenModel, Node } from './model';
import { present, ticks } from './present';
import { RefreshThrottle } from './throttle';

/** Fork rows carry a resourceUri in this scheme so that a FileDecoration can colour their label. */
const NODE_SCHEME = 'coven-node';

const COLLAPSIBLE = {
  none: vscode.TreeItemCollapsibleState.None,
  collapsed: vscode.TreeItemCollapsibleState.Collapsed,
  expanded: vscode.TreeItemCollapsibleState.Expanded,
} as const;

export class SessionTree implements vscode.TreeDataProvider<Node>, vscode.FileDecorationProvider {
  private readonly treeEmitter = new vscode.EventEmitter<Node | Node[] | undefined>();
  readonly onDidChangeTreeData = this.treeEmitter.event;
  /** TreeItems by node, rebuilt only when the node's version moved. */
  private readonly items = new WeakMap<Node, { version: number; item: vscode.TreeItem }>();
  /** Paced so that VS Code's own debounce never swallows a stream of them (see throttle.ts). */
  private readonly throttle = new RefreshThrottle((root, nodes) => this.treeEmitter.fire(root ? undefined : nodes));

  /** Rows drawn with a clock that moves (a fork child at work against a time limit): redrawn each second. */
  private readonly ticking = new Set<Node>();
  private readonly clock = setInterval(() => this.tick(), 1000);

  constructor(private readonly model: CovenModel) {}

  /** Each second, the rows whose clock moved: drawn again, once more after it stops (its final time). */
  private tick(): void {
    if (this.ticking.size === 0) return;
    const nodes: Node[] = [];
    for (const node of this.ticking) {
      if (!ticks(node)) this.ticking.delete(node);
      // A session gone from the tree (deleted, the server restarted) is not drawn again.
      if (node.kind === 'session' && this.model.session(node.sessionId) !== node) {
        this.ticking.delete(node);
        continue;
      }
      this.items.delete(node);
      nodes.push(node);
    }
    if (nodes.length > 0) this.treeEmitter.fire(nodes);
  }

  /** One refresh for a coalesced batch: the root if the top level changed, else just the changed nodes. */
  apply(changes: Changes): void {
    this.throttle.push(changes);
  }

  getChildren(node?: Node): Node[] {
    return this.model.children(node);
  }

  getParent(node: Node): Node | undefined {
    return node.parent;
  }

  getTreeItem(node: Node): vscode.TreeItem {
    const cached = this.items.get(node);
    if (cached?.version === node.version) return cached.item;
    const p = present(node);
    if (ticks(node)) this.ticking.add(node);
    const item = new vscode.TreeItem(p.label, COLLAPSIBLE[p.collapsible]);
    item.id = node.key;
    item.description = p.description;
    item.tooltip = new vscode.MarkdownString(p.tooltip);
    item.iconPath = new vscode.ThemeIcon(p.icon.id, p.icon.color !== undefined ? new vscode.ThemeColor(p.icon.color) : undefined);
    item.contextValue = p.contextValue;
    if (p.decorated) item.resourceUri = vscode.Uri.from({ scheme: NODE_SCHEME, path: `/${node.key}` });
    item.accessibilityInformation = { label: [p.label, p.description].filter(Boolean).join(', ') };
    this.items.set(node, { version: node.version, item });
    return item;
  }

  provideFileDecoration(uri: vscode.Uri): vscode.FileDecoration | undefined {
    if (uri.scheme !== NODE_SCHEME) return undefined;
    return { color: new vscode.ThemeColor('coven.forkForeground') };
  }

  dispose(): void {
    clearInterval(this.clock);
    this.throttle.dispose();
    this.treeEmitter.dispose();
  }
}
