"""The wire contract: every method, event, status and error a client sees. Imports nothing else of
coven-ls, so every other part (and every client written in Python) can depend on it."""
