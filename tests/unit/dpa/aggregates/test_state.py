"""Tests for dpa.aggregates.state helpers: splitting a table by a label per row."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from dpa.aggregates.state import split_by


@settings(max_examples=80, deadline=None)
@given(st.integers(min_value=1, max_value=40), st.lists(st.integers(min_value=0, max_value=10_000), max_size=300),
       st.randoms(use_true_random=False))
def test_split_by_keeps_every_row_in_order_in_its_part(n: int, values: list[int], rnd) -> None:
    # Few parts take a pass per part, many a radix sort of the labels: the same split.
    labels = np.array([rnd.randrange(n) for _ in values], dtype=np.int64)
    table = pa.table({"v": pa.array(values, pa.int64()), "row": pa.array(range(len(values)), pa.int64())})
    parts = split_by(table, labels, n)
    assert len(parts) == n
    for i, part in enumerate(parts):
        assert part.schema == table.schema
        assert part["row"].to_pylist() == np.flatnonzero(labels == i).tolist()
        assert part["v"].to_pylist() == [values[r] for r in part["row"].to_pylist()]
