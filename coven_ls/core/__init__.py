"""The core: the agent backend, sessions, forks, the hub and the store. No pygls, no terminal: every
front end (the LSP server, the terminal client) is a thin adapter over the hub."""
