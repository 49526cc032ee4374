"""The terminal client: `coven-ls run` and `coven-ls demo`, an LSP client of the server plus a tree
renderer. Talks to the server only over LSP, as any editor would."""
