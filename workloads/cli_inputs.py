"""The named workloads of ``dpa``'s command line: ``dpa run WL4``, ``dpa simulate zipf``.

Each function here builds one kind of workload from the command line's options. They are
registered under the ``dpa.inputs`` entry point group in ``pyproject.toml`` (one entry per
name: ``WL1`` .. ``WL5``, ``zipf``, ``uniform``, ``lognormal``, ``LN1``, ``LN2``,
``drifting``), and ``dpa.tools.cli`` calls them as ``make(name, options)`` with the registered
name and a :class:`dpa.tools.cli.inputs.InputOptions`.
"""

from __future__ import annotations

import logging
from typing import Any

from dpa.tools.cli.inputs import Input, InputOptions
from workloads import generators
from workloads.paper import WORKLOAD_NAMES
from workloads.paper import workload as paper_items

logger = logging.getLogger(__name__)


def paper_workload(name: str, options: InputOptions) -> Input:
    """One of the DPA paper's WL1..WL5 (100 letters), repeated ``options.repeat`` times."""
    if name not in WORKLOAD_NAMES:
        raise ValueError(f"{name!r} is not a paper workload; use one of {', '.join(WORKLOAD_NAMES)}")
    if options.repeat < 1:
        raise ValueError(f"--repeat must be >= 1, got {options.repeat}")
    items = paper_items(name) * options.repeat
    label = f"{name}{f' x{options.repeat}' if options.repeat > 1 else ''}"
    return Input(items, None, label, len(items), name=name)


def _generated(name: str, table: Any, label: str, n: int) -> Input:
    return Input(table, "key", f"{label}, {n:,} records", table.num_rows, name=name)


def zipf(name: str, options: InputOptions) -> Input:
    """Zipf keys: ``--z``, ``--keys``, ``--records``, ``--seed``."""
    o = options
    table = generators.zipf(o.z, o.keys, o.records, seed=o.seed)
    return _generated(name, table, f"zipf(z={o.z}, keys={o.keys:,})", o.records)


def uniform(name: str, options: InputOptions) -> Input:
    """Uniform keys: ``--keys``, ``--records``, ``--seed``."""
    o = options
    return _generated(name, generators.uniform(o.keys, o.records, seed=o.seed), f"uniform(keys={o.keys:,})", o.records)


def lognormal(name: str, options: InputOptions) -> Input:
    """Log-normal key frequencies: ``--mu``, ``--sigma``, ``--records``, ``--seed``."""
    o = options
    table = generators.lognormal(o.mu, o.sigma, None, o.records, seed=o.seed)
    return _generated(name, table, f"lognormal(mu={o.mu}, sigma={o.sigma})", o.records)


def lognormal_preset(name: str, options: InputOptions) -> Input:
    """The PKG paper's LN1 / LN2 log-normal workloads: ``--records``, ``--seed``."""
    o = options
    return _generated(name, generators.lognormal_preset(name.upper(), o.records, seed=o.seed), name.upper(), o.records)


def drifting(name: str, options: InputOptions) -> Input:
    """A hot key that moves every ``--period`` records: ``--keys``, ``--hot-fraction``, ``--records``."""
    o = options
    period = o.period or max(1, o.records // 10)
    table = generators.drifting(o.keys, o.records, o.hot_fraction, period, seed=o.seed)
    label = f"drifting(keys={o.keys:,}, hot={o.hot_fraction}, period={period:,})"
    return _generated(name, table, label, o.records)
