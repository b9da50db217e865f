"""What mappers and reducers share: the outcomes of a push, a batch's weight in records,
the key counts of a batch of arrivals, and a reducer's unit of work (:class:`Chunk`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpa.engine.instructions import Forward
from dpa.input.records import WEIGHT_COL

#: What a reducer tells a mapper about its push: accepted at once by a reducer that knows
#: its cost (the mapper may grow its pushes), accepted while the cost was still unknown
#: (keep the size), or made to wait by a full queue (shrink).
PUSH_GROW, PUSH_KEEP, PUSH_SHRINK = 0, 1, 2

def top_key_counts(hashes: np.ndarray, weights: np.ndarray | None, top: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The ``top`` most frequent key hashes of a batch of arrivals (a reducer's key report).

    Args:
        hashes: Key hashes of the arrivals (repeats allowed).
        weights: Records each arrival stands for (None = 1 each).
        top: Most hashes to return.

    Returns:
        ``(hashes, counts, total)``: distinct ``uint32`` hashes, most frequent first, their
        ``int64`` record counts, and the records of all arrivals.
    """
    keys, inverse = np.unique(hashes, return_inverse=True)
    counts = np.bincount(inverse, weights=weights, minlength=len(keys)).astype(np.int64)
    total = int(counts.sum())
    if len(keys) > top:
        pick = np.argpartition(-counts, top - 1)[:top]
        keys, counts = keys[pick], counts[pick]
    order = np.argsort(-counts, kind="stable")
    return keys[order].astype(np.uint32), counts[order], total



@dataclass
class Chunk:
    """Work taken from a reducer's queue: records it owns and records to forward.

    Attributes:
        owned: The records to fold into the state (None if every record is forwarded).
        forwards: Records to send to the reducers that own them now.
        cost_s: The :class:`~dpa.aggregates.contract.WithCost` cost to pay before applying.
        rows: Rows taken off the queue (what the reducer's cost estimate is per).
    """

    owned: pa.Table | None
    forwards: list[Forward]
    cost_s: float
    rows: int = 0
    epoch: int = 0

    @property
    def num_owned(self) -> int:
        """Records owned (a map-side combined row counts as the records it stands for)."""
        return 0 if self.owned is None else weight(self.owned)


def weight(table: pa.Table) -> int:
    """Records a batch stands for: its rows, or the sum of WEIGHT_COL for combined batches."""
    if WEIGHT_COL in table.column_names:
        return int(pc.sum(table[WEIGHT_COL]).as_py() or 0)
    return table.num_rows


