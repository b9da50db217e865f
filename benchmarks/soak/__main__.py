"""``python -m benchmarks.soak``: the soak's command line."""

from benchmarks.soak.cli import _cli

_cli()
