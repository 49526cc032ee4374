"""coven-ls as an Agent Client Protocol agent (`coven-ls acp`): a thin adapter, built on the
official ACP Python SDK, over the same hub as the LSP server."""
