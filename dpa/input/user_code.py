"""User map functions over whole batches: :class:`BatchMap`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from dpa.errors import ConfigError

logger = logging.getLogger(__name__)


class BatchMap:
    """Marks a ``map_fn`` that maps whole batches instead of single records.

    Args:
        fn: ``fn(batch) -> batch`` where batch is a ``pyarrow.Table`` (``format="arrow"``)
            or a ``pandas.DataFrame`` (``format="pandas"``).
        format: ``"arrow"`` or ``"pandas"``.
    """

    def __init__(self, fn: Callable[[Any], Any], format: str = "arrow") -> None:
        if not callable(fn):
            raise ConfigError(f"BatchMap needs a callable, got {type(fn).__name__}")
        if format not in ("arrow", "pandas"):
            raise ConfigError(f"BatchMap format must be 'arrow' or 'pandas', got {format!r}")
        self.fn = fn
        self.format = format

    def __call__(self, table: pa.Table) -> pa.Table:
        if self.format == "pandas":
            out = self.fn(table.to_pandas())
            return pa.Table.from_pandas(out, preserve_index=False)
        out = self.fn(table)
        if not isinstance(out, pa.Table):
            try:
                import pandas as pd

                if isinstance(out, pd.DataFrame):
                    return pa.Table.from_pandas(out, preserve_index=False)
            except ImportError:  # pragma: no cover - pandas is a dependency
                pass
            raise TypeError(f"BatchMap function must return a pyarrow.Table, got {type(out).__name__}")
        return out
