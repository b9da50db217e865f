"""``python -m dpa.tools.cli``: the ``dpa`` command line."""

from __future__ import annotations

import sys

from dpa.tools.cli import main

if __name__ == "__main__":
    sys.exit(main())
