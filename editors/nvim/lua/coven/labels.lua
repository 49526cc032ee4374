-- generated from coven_ls/protocol/labels.json by `python -m coven_ls.protocol.labels`;
-- do not edit (the unit tests fail while it is stale).
return {
  statusMarks = {
    queued = "·",
    starting = "…",
    running = "▶",
    idle = "✓",
    awaitingApproval = "?",
    forking = "⑂",
    reviewing = "?",
    failed = "✗",
    cancelled = "■",
    closed = "◼",
    interrupted = "!",
  },
  statusLabels = {
    queued = "queued",
    starting = "starting",
    running = "running",
    idle = "done",
    awaitingApproval = "fork awaiting approval",
    forking = "forking",
    reviewing = "fork changes to review",
    failed = "failed",
    cancelled = "cancelled",
    closed = "closed",
    interrupted = "interrupted",
  },
  apiFailures = {
    [429] = "API rate-limited",
    [529] = "API overloaded",
  },
  fileMarks = {
    added = "A",
    modified = "M",
    deleted = "D",
    renamed = "R",
  },
}
