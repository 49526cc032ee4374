"""``python -m coven_ls.testing``: serve the scripted Anthropic Messages API (see ``--help`` and
docs/testing.md). The same as ``python -m coven_ls.testing.scripted_model``."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
