"""``python -m dpa.cli``: the ``dpa`` command line."""

from __future__ import annotations

import sys

from dpa.cli import main

if __name__ == "__main__":
    sys.exit(main())
