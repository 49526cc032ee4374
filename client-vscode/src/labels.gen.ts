// generated from coven_ls/protocol/labels.json by scripts/gen-protocol.mjs; do not edit.
// Regenerate with `npm run gen:protocol`; `npm test` fails while this file is stale.

export const statusMarks: Readonly<Record<string, string>> = {
  queued: "·",
  starting: "…",
  running: "▶",
  idle: "✓",
  awaitingApproval: "?",
  forking: "⑂",
  reviewing: "?",
  failed: "✗",
  cancelled: "■",
  closed: "◼",
  interrupted: "!",
};

export const statusLabels: Readonly<Record<string, string>> = {
  queued: "queued",
  starting: "starting",
  running: "running",
  idle: "done",
  awaitingApproval: "fork awaiting approval",
  forking: "forking",
  reviewing: "fork changes to review",
  failed: "failed",
  cancelled: "cancelled",
  closed: "closed",
  interrupted: "interrupted",
};

export const apiFailures: Readonly<Record<string, string>> = {
  "429": "API rate-limited",
  "529": "API overloaded",
};

export const fileMarks: Readonly<Record<string, string>> = {
  added: "A",
  modified: "M",
  deleted: "D",
  renamed: "R",
};
