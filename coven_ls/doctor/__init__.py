"""`coven-ls doctor`: is this machine set up for a session? A front end of its own over the
core (which CLI, which store), never the LSP or ACP layers."""
