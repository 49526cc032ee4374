"""The workspace: where a fork's children work, and how their work comes back (docstring filled in
with the split)."""
