// The tree as text, one node per line, indented: what a user would see with everything expanded.

import type { CovenModel, Node } from '../src/model';
import { present } from '../src/present';

export function outline(model: CovenModel, node?: Node, depth = 0): string[] {
  const lines: string[] = [];
  for (const child of model.children(node)) {
    const p = present(child);
    lines.push(`${'  '.repeat(depth)}${p.label}${p.description ? ` [${p.description}]` : ''}`);
    lines.push(...outline(model, child, depth + 1));
  }
  return lines;
}
