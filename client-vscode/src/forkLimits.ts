// A fork's limits typed on one line (`childTokens=200000 forkCostUsd=2.5`) when the user approves
// a proposed fork with edits: coven/decideFork's `limits`. Free of `vscode`, so it is unit-tested
// in plain node; commands.ts asks it in an input box. The same line as `coven-ls run`'s `l`
// (coven_ls/term/limits.py): ForkLimits' names, any case; 0 lifts a limit; one left out keeps
// the session's.

import type { ForkLimits } from './protocol';

type LimitName = keyof ForkLimits;

/** ForkLimits' fields, and whether each is a whole number. */
const LIMITS: Record<LimitName, boolean> = {
  childTokens: true,
  childCostUsd: false,
  childSeconds: false,
  forkCostUsd: false,
};

export const LIMITS_EXAMPLE = 'childTokens=200000 childCostUsd=1 childSeconds=600 forkCostUsd=2.5';

const BY_KEY = new Map(Object.keys(LIMITS).map((name) => [name.toLowerCase(), name as LimitName]));

/** The limits on a typed line, or what is wrong with it (said so the user can type it again). */
export function parseLimits(text: string): { limits: ForkLimits } | { error: string } {
  const limits: ForkLimits = {};
  for (const item of text.replace(/,/g, ' ').split(/\s+/).filter(Boolean)) {
    const at = item.indexOf('=');
    const name = at < 0 ? undefined : BY_KEY.get(item.slice(0, at).replace(/[-_]/g, '').toLowerCase());
    if (name === undefined) {
      return { error: `'${item}' is not a limit: type name=value, the names being ${Object.keys(LIMITS).join(', ')} (e.g. ${LIMITS_EXAMPLE}; 0: no limit)` };
    }
    const raw = item.slice(at + 1);
    const value = Number(raw);
    const whole = LIMITS[name];
    if (raw.trim() === '' || Number.isNaN(value) || (whole && !Number.isInteger(value) && Number.isFinite(value))) {
      return { error: `${name} takes ${whole ? 'a whole number' : 'a number'}, not '${raw}'` };
    }
    if (value < 0 || !Number.isFinite(value)) return { error: `${name} must be 0 (no limit) or more, not ${raw}` };
    limits[name] = value;
  }
  return { limits };
}
