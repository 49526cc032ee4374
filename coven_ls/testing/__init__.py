"""What coven-ls ships for testing against it offline: a scripted Anthropic Messages API that the
real `claude` CLI can be pointed at (used by coven-ls' own tests, its demo and plugin authors)."""
