"""Approximate distinct counts and quantiles per key.

* :class:`ApproxCountDistinct` keeps a HyperLogLog state per key (:mod:`dpa.aggregates.hll`,
  ``lg_k=12`` by default): at most ``2**lg_k`` bytes per key however many values it has
  (4 KiB), merged register-wise. Relative standard error ``1.04 / sqrt(2**lg_k)`` (1.6% at
  ``lg_k=12``); dpa's tests hold every estimate within three of them (4.9%). Keys with at
  most ``2**lg_k / 8`` distinct values are counted exactly (their states keep the values'
  64-bit hashes).
* :class:`ApproxQuantile` / :class:`Median` keep a KLL sketch per key
  (:class:`dpa.aggregates.kll.KLL`, ``k=200``: DataSketches' algorithm with reproducible
  compactions), merged with KLL's merge. The value returned for ``q`` has a normalised
  rank within ``±1.33%`` of ``q`` with 99% confidence
  (:func:`dpa.aggregates.kll.normalized_rank_error`); a key with at most ``k`` values is
  exact. The same partial states give the same sketch whatever order they merge in. The quantile is the smallest value whose rank (the
  fraction of values ``<=`` it) is at least ``q``, as Spark's ``percentile_approx``.

The HLL states of all keys of a batch are built and merged with numpy at once (hashes
sorted by key, registers maxed by key); KLL reads whole numpy arrays per key, so the Python
work per batch is per key, not per record.
Nulls are ignored. Values order as in Spark and DuckDB: NaN is larger than every number
and equal to itself — the quantile sketch counts NaNs beside the KLL sketch (which skips
them), so a key's high quantiles are NaN when enough of its values are. ApproxCountDistinct
counts NaN as one value and ``-0.0`` as ``0.0``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpa._internal.arrays import as_float64, from_numpy
from dpa.aggregates import hll
from dpa.aggregates.builtins import Sum
from dpa.aggregates.contract import ColumnarReducer
from dpa.aggregates.dense import group_order
from dpa.aggregates.distinct import canonical_value
from dpa.aggregates.kll import KLL, normalized_rank_error
from dpa.errors import ConfigError, SchemaError
from dpa.keys.encoding import encode_key

__all__ = ["ApproxCountDistinct", "ApproxQuantile", "Median"]

class ApproxCountDistinct(ColumnarReducer):
    """Approximate number of distinct non-null values of ``column`` per key (HLL; int64).

    A key's state is the set of its values' 64-bit hashes while it has at most
    ``2**lg_k / 8`` distinct values (counted exactly), then ``2**lg_k`` HLL registers
    (:mod:`dpa.aggregates.hll`), built and merged with numpy for all keys of a batch at once.

    Args:
        column: The column.
        lg_k: log2 of the HLL sketch's registers, 4..21 (default 12: 1.6% standard error).
        name: Output column name.
    """

    kind = "approx_count_distinct"
    default_name = "approx_count_distinct"

    def __init__(self, column: str | None = None, lg_k: int = 12, name: str | None = None) -> None:
        if isinstance(lg_k, bool) or not isinstance(lg_k, int) or not 4 <= lg_k <= 21:
            raise ConfigError(f"ApproxCountDistinct lg_k must be an int in 4..21, got {lg_k!r}")
        super().__init__(column, name or self.default_name)
        self.lg_k = lg_k

    @property
    def relative_error(self) -> float:
        """The sketch's relative standard error, ``1.04 / sqrt(2**lg_k)``."""
        return 1.04 / (2 ** self.lg_k) ** 0.5

    # -- scalar contract: (hashes column, registers column) of one key ----------------------
    def create(self) -> tuple[pa.Array, pa.Array]:
        return hll.build_states(self.lg_k, 1, np.zeros(0, np.int64), np.zeros(0, np.uint64))

    def add_batch(self, acc: tuple[pa.Array, pa.Array], values: list[Any]) -> tuple[pa.Array, pa.Array]:
        try:
            array = pa.array([canonical_value(v) for v in values])
        except (pa.ArrowException, TypeError, ValueError):  # (mixed types: by their key encoding)
            array = pa.array([None if v is None else encode_key(v) for v in values], pa.binary())
        hashes, valid = hll.hash_column(array)
        batch = hll.build_states(self.lg_k, 1, np.zeros(int(valid.sum()), np.int64), hashes[valid])
        return self.merge(acc, batch)

    def add(self, acc: tuple[pa.Array, pa.Array], value: Any) -> tuple[pa.Array, pa.Array]:
        return self.add_batch(acc, [value])

    def merge(self, a: tuple[pa.Array, pa.Array], b: tuple[pa.Array, pa.Array]) -> tuple[pa.Array, pa.Array]:
        return self._merged(pa.concat_arrays([a[0], b[0]]), pa.concat_arrays([a[1], b[1]]), np.zeros(2, np.int64), 1)

    def finalize(self, acc: tuple[pa.Array, pa.Array]) -> int:
        return int(self._estimates(acc[0], acc[1])[0])

    # -- columnar contract -----------------------------------------------------------------
    def check_type(self, dtype: pa.DataType) -> None:
        if pa.types.is_nested(dtype):
            raise SchemaError(f"ApproxCountDistinct({self.column!r}) cannot hash values of type {dtype}")

    def output_type(self, input_type: pa.DataType | None) -> pa.DataType:
        return pa.int64()

    def output_field(self, input_schema: pa.Schema | None) -> pa.Field | None:
        field = super().output_field(input_schema)
        return None if field is None else field.with_nullable(False)

    def state_aggregations(self) -> list[tuple[str | None, str, str]]:
        return [(self.column, "hll_hashes", "hll"), (self.column, "hll_registers", "hll_regs")]

    def partial_from_batch(self, table: pa.Table, group_cols: list[str], weight_col: str | None = None) -> pa.Table:
        from dpa.aggregates.composite import group_ids

        n = table.num_rows
        gid, size = group_ids(table, group_cols) if n else (np.zeros(0, np.int64), 0)
        hashes, valid = hll.hash_column(table[self.column])
        hash_col, reg_col = hll.build_states(self.lg_k, size, gid[valid], hashes[valid])
        order = group_order(gid, size)
        first = order[np.searchsorted(gid[order], np.arange(size))]
        keys = table.select(group_cols).take(pa.array(first, pa.int64()))
        columns = [keys[c] for c in group_cols] + [hash_col, reg_col]
        names = list(group_cols) + ["hll", "hll_regs"]
        if weight_col is not None:
            columns.append(pa.array(np.bincount(gid, minlength=size).astype(np.int64)))
            names.append(weight_col)
        return pa.table(columns, names=names)

    def _merged(self, hash_col: Any, reg_col: Any, gid: np.ndarray, size: int) -> tuple[pa.Array, pa.Array]:
        rows, hashes, reg_rows, regs = hll.state_arrays(hash_col, reg_col, self.lg_k)
        return hll.build_states(self.lg_k, size, gid[rows], hashes, gid[reg_rows], regs)

    def merge_partials(self, table: pa.Table, group_cols: list[str]) -> pa.Table:
        from dpa.aggregates.composite import group_ids

        gid, size = group_ids(table, group_cols)
        hash_col, reg_col = self._merged(table["hll"], table["hll_regs"], gid, size)
        order = group_order(gid, size)
        first = order[np.searchsorted(gid[order], np.arange(size))]
        keys = table.select(group_cols).take(pa.array(first, pa.int64()))
        return pa.table([keys[c] for c in group_cols] + [hash_col, reg_col],
                        names=list(group_cols) + ["hll", "hll_regs"])

    def _estimates(self, hash_col: Any, reg_col: Any) -> np.ndarray:
        """Each row's count: its number of hashes, or its registers' estimate, rounded."""
        rows, _, reg_rows, regs = hll.state_arrays(hash_col, reg_col, self.lg_k)
        out = np.bincount(rows, minlength=len(hash_col)).astype(np.float64)
        out[reg_rows] = hll.estimates(regs, self.lg_k)
        return np.round(out).astype(np.int64)

    def finalize_table(self, table: pa.Table, key_cols: list[str]) -> pa.Table:
        estimates = self._estimates(table["hll"], table["hll_regs"])
        return pa.table([table[c] for c in key_cols] + [pa.array(estimates, pa.int64())],
                        names=list(key_cols) + [self.name])

    def spark_name(self) -> str:
        return self.name if self.name != self.default_name else f"approx_count_distinct({self.column})"

    def __repr__(self) -> str:
        return f"ApproxCountDistinct({self.column!r}, lg_k={self.lg_k})"


class ApproxQuantile(ColumnarReducer):
    """Approximate quantile(s) of ``column`` per key (KLL sketch; float64).

    A key's numbers stay as they are until it has more than ``k`` of them (its quantiles are
    then exact); NaN ranks above every number, nulls are skipped, a key without values gets
    null, and a quantile that is zero is ``0.0`` (never ``-0.0``).

    Args:
        column: A numeric column (read as float64).
        q: A quantile in [0, 1] (the output is a float64) or a list of them (a list of
            float64, in the given order).
        k: The KLL sketch's size parameter (default 200: rank error ±1.33% at 99%).
        name: Output column name.
    """

    kind = "approx_quantile"
    default_name = "approx_quantile"
    check_type = Sum.check_type

    def __init__(self, column: str | None = None, q: float | Sequence[float] = 0.5, k: int = 200,
                 name: str | None = None) -> None:
        qs = [q] if isinstance(q, (int, float)) and not isinstance(q, bool) else list(q) if isinstance(q, (list, tuple)) else None
        if not qs or any(isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x <= 1 for x in qs):
            raise ConfigError(f"{type(self).__name__} q must be a number in [0, 1] or a non-empty list of them, got {q!r}")
        if isinstance(k, bool) or not isinstance(k, int) or not 8 <= k <= 65535:
            raise ConfigError(f"{type(self).__name__} k must be an int in 8..65535, got {k!r}")
        super().__init__(column, name or self.default_name)
        self.q = q
        self.quantiles = [float(x) for x in qs]
        self.k = k
        self.input_typed = False  # typed as Spark's percentile_approx (spark_types)

    @property
    def rank_error(self) -> float:
        """Normalised rank error of one quantile at 99% confidence."""
        return normalized_rank_error(self.k)

    def _new(self) -> Any:
        return KLL(self.k)

    # -- scalar contract: (sketch bytes, NaN count) ----------------------------------------
    def create(self) -> tuple[bytes, int]:
        return (self._new().serialize(), 0)

    def add_batch(self, acc: tuple[bytes, int], values: list[Any]) -> tuple[bytes, int]:
        x = np.array([float(v) for v in values if v is not None], dtype=np.float64)
        sketch = self._new()
        nans = int(np.isnan(x).sum())
        if len(x) - nans:
            sketch.update(x[~np.isnan(x)])
        return self.merge(acc, (sketch.serialize(), nans))

    def add(self, acc: tuple[bytes, int], value: Any) -> tuple[bytes, int]:
        return self.add_batch(acc, [value])

    def merge(self, a: tuple[bytes, int], b: tuple[bytes, int]) -> tuple[bytes, int]:
        return (_kll_merge([a[0], b[0]]), a[1] + b[1])

    def finalize(self, acc: tuple[bytes, int]) -> Any:
        values = _quantiles(KLL.deserialize(acc[0]), acc[1], self.quantiles)
        return values if isinstance(self.q, (list, tuple)) else values[0]

    # -- columnar contract -----------------------------------------------------------------
    def output_type(self, input_type: pa.DataType | None) -> pa.DataType:
        value = pa.float64()
        if self.input_typed and input_type is not None and (
                pa.types.is_integer(input_type) or pa.types.is_floating(input_type) or pa.types.is_decimal(input_type)):
            value = input_type
        # (a list of quantiles holds no null, as Spark's array of percentile_approx)
        return pa.list_(pa.field("item", value, nullable=False)) if isinstance(self.q, (list, tuple)) else value

    def spark_types(self, input_schema: pa.Schema | None = None) -> ApproxQuantile:
        """This aggregate typed as Spark's ``percentile_approx``: the input column's own type
        (the quantile is one of the column's values; the Spark bridge casts the float64 it
        is computed as back to that type: exact for integers, floats and decimals of up to
        15 digits, which float64 holds; a wider decimal comes back as the decimal nearest
        to its float64, as Spark's own ``percentile_approx``, which computes in doubles too)."""
        out = copy.copy(self)
        out.input_typed = True
        return out

    def state_aggregations(self) -> list[tuple[str | None, str, str]]:
        # A key's numbers are kept as they are ("vals") until there are more than k of them,
        # then in a KLL sketch ("kll", null before): a sketch of at most k numbers holds them
        # all anyway, and most keys of a block have few, so few sketches are ever built.
        return [(self.column, "kll", "kll"), (self.column, "vals", "vals"), (self.column, "nans", "nans")]

    def partial_from_batch(self, table: pa.Table, group_cols: list[str], weight_col: str | None = None) -> pa.Table:
        from dpa.aggregates.composite import group_ids

        n = table.num_rows
        gid, size = group_ids(table, group_cols) if n else (np.zeros(0, np.int64), 0)
        values = np.asarray(as_float64(table[self.column]).fill_null(np.nan), dtype=np.float64)
        valid = np.asarray(table[self.column].is_valid(), dtype=bool) if n else np.zeros(0, bool)
        keep = ~np.isnan(values)
        order = group_order(gid, size)
        first = order[np.searchsorted(gid[order], np.arange(size))]
        kept = order[keep[order]]  # the numbers, grouped by key
        vals = pa.ListArray.from_arrays(_offsets(np.bincount(gid[kept], minlength=size)), pa.array(values[kept]))
        keys = table.select(group_cols).take(pa.array(first, pa.int64()))
        nans = np.bincount(gid, weights=np.isnan(values) & valid, minlength=size).astype(np.int64)
        kll, vals = self._sketch_large(pa.nulls(size, pa.binary()), vals)
        columns = [keys[c] for c in group_cols] + [kll, vals, pa.array(nans)]
        names = list(group_cols) + ["kll", "vals", "nans"]
        if weight_col is not None:
            columns.append(pa.array(np.bincount(gid, minlength=size).astype(np.int64)))
            names.append(weight_col)
        return pa.table(columns, names=names)

    def merge_partials(self, table: pa.Table, group_cols: list[str]) -> pa.Table:
        from dpa.aggregates.composite import group_ids

        gid, size = group_ids(table, group_cols)
        order = group_order(gid, size)
        bounds = np.searchsorted(gid[order], np.arange(size + 1))
        rows = table.take(pa.array(order, pa.int64()))
        lists = rows["vals"].combine_chunks()
        lengths = np.asarray(pc.list_value_length(lists).fill_null(0), dtype=np.int64)
        counts = np.add.reduceat(lengths, bounds[:-1]) if len(lengths) else np.zeros(size, np.int64)
        vals = pa.ListArray.from_arrays(_offsets(counts), lists.flatten())
        blobs = rows["kll"].to_pylist()
        kll: list[bytes | None] = [None] * size
        has = np.asarray(pc.is_valid(rows["kll"]), dtype=bool)
        for g in np.unique(gid[order][has]).tolist():  # the keys that have a sketch
            parts = [b for b in blobs[bounds[g]:bounds[g + 1]] if b is not None]
            kll[g] = _kll_merge(parts)
        kll_arr, vals = self._sketch_large(pa.array(kll, pa.binary()), vals)
        first = order[bounds[:-1]]
        keys = table.select(group_cols).take(pa.array(first, pa.int64()))
        nans = np.bincount(gid, weights=np.asarray(table["nans"], dtype=np.float64), minlength=size).astype(np.int64)
        return pa.table([keys[c] for c in group_cols] + [kll_arr, vals, pa.array(nans)],
                        names=list(group_cols) + ["kll", "vals", "nans"])

    def _sketch_large(self, kll: pa.Array, vals: pa.ListArray) -> tuple[pa.Array, pa.ListArray]:
        """Moves the numbers of keys that have a sketch, or more than ``k`` numbers, into
        their sketch; the others keep theirs as they are."""
        lengths = np.asarray(pc.list_value_length(vals).fill_null(0), dtype=np.int64)
        has = np.asarray(kll.is_valid(), dtype=bool)
        todo = np.flatnonzero((lengths > self.k) | (has & (lengths > 0)))
        if not len(todo):
            return kll, vals
        blobs = kll.to_pylist()
        offsets = vals.offsets.to_numpy()
        flat = vals.flatten().to_numpy(zero_copy_only=False)
        for g in todo.tolist():
            sketch = KLL.deserialize(blobs[g]) if blobs[g] is not None else self._new()
            sketch.update(np.array(flat[offsets[g]:offsets[g + 1]], dtype=np.float64))  # (a writable copy)
            blobs[g] = sketch.serialize()
        lengths[todo] = 0
        keep = np.repeat(lengths > 0, np.diff(offsets))
        return pa.array(blobs, pa.binary()), pa.ListArray.from_arrays(_offsets(lengths), pa.array(flat[keep]))

    def finalize_table(self, table: pa.Table, key_cols: list[str]) -> pa.Table:
        n = table.num_rows
        vals = table["vals"].combine_chunks() if isinstance(table["vals"], pa.ChunkedArray) else table["vals"]
        vals = vals.fill_null([]) if vals.null_count else vals
        lengths = np.asarray(pc.list_value_length(vals), dtype=np.int64) if n else np.zeros(0, np.int64)
        nans = np.asarray(table["nans"], dtype=np.int64) if n else np.zeros(0, np.int64)
        has = np.asarray(table["kll"].is_valid(), dtype=bool) if n else np.zeros(0, bool)
        # A key without a sketch and at most k numbers: a sketch of them would hold them all,
        # so its quantiles are read off the sorted numbers as the sketch reads them.
        exact = ~has & (lengths <= self.k)
        flat = np.asarray(vals.flatten().to_numpy(zero_copy_only=False), dtype=np.float64)
        bounds = np.concatenate([[0], np.cumsum(lengths)])
        out = np.full((n, len(self.quantiles)), np.nan)
        out[exact] = _exact_quantiles(flat, bounds, nans, self.quantiles)[exact]
        blobs = table["kll"].to_pylist() if (~exact).any() else []
        empty = exact & ((lengths + nans) == 0)  # no value at all: null
        for g in np.flatnonzero(~exact).tolist():
            sketch = KLL.deserialize(blobs[g]) if blobs[g] is not None else self._new()
            if lengths[g]:
                sketch.update(np.array(flat[bounds[g]:bounds[g + 1]], dtype=np.float64))  # (a writable copy)
            empty[g] = sketch.n + nans[g] == 0
            out[g] = [np.nan if v is None else v for v in _quantiles(sketch, int(nans[g]), self.quantiles)]
        out += 0.0  # (-0.0 and 0.0 are one number: which of the two a tie yields is not the answer's)
        if isinstance(self.q, (list, tuple)):
            flat_out = from_numpy(out.reshape(-1))
            column = pa.ListArray.from_arrays(_offsets(np.full(n, len(self.quantiles))), flat_out,
                                              mask=pa.array(empty) if empty.any() else None)
        else:
            column = from_numpy(out[:, 0], pa.float64(), mask=empty if empty.any() else None)
        return pa.table([table[c] for c in key_cols] + [column], names=list(key_cols) + [self.name])

    def spark_name(self) -> str:
        if self.name != self.default_name:
            return self.name
        q = ", ".join(repr(x) for x in self.quantiles)
        return f"percentile_approx({self.column}, {'array(' + q + ')' if isinstance(self.q, (list, tuple)) else q})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.column!r}, q={self.q!r})"


class Median(ApproxQuantile):
    """Approximate median of ``column`` per key: ``ApproxQuantile(column, 0.5)``."""

    kind = "median"
    default_name = "median"

    def __init__(self, column: str | None = None, k: int = 200, name: str | None = None) -> None:
        super().__init__(column, 0.5, k, name)

    def spark_name(self) -> str:
        return self.name if self.name != self.default_name else f"median({self.column})"

    def spark_types(self, input_schema: pa.Schema | None = None) -> Median:
        return self  # Spark's median is a double, as dpa's

    def __repr__(self) -> str:
        return f"Median({self.column!r})"


def _offsets(counts: np.ndarray) -> pa.Array:
    """List offsets of lists with ``counts`` items each."""
    return pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))


def _kll_merge(parts: list[bytes]) -> bytes:
    """One sketch of the sketches ``parts``, the same in whatever order they come
    (:meth:`dpa.aggregates.kll.KLL.merge_all`)."""
    if len(parts) == 1:
        return parts[0]
    return KLL.merge_all([KLL.deserialize(b) for b in parts]).serialize()


def _exact_quantiles(flat: np.ndarray, bounds: np.ndarray, nans: np.ndarray, quantiles: list[float]) -> np.ndarray:
    """:func:`_quantiles` of every row as if its numbers (``flat[bounds[i]:bounds[i + 1]]``
    for row ``i``, no NaN among them) were all in a sketch that holds them exactly, at
    once: ``(rows, quantiles)`` floats, NaN
    where a quantile ranks among the NaNs or a row has no value (the caller makes those rows
    null).

    A KLL sketch of ``n`` numbers of weight 1 answers ``get_quantile(r, inclusive=True)``
    with the number at sorted position ``max(ceil(r * n), 1) - 1``; ``r`` is worked out
    with the same float operations as :func:`_quantiles` does.
    """
    rows = len(bounds) - 1
    lengths = np.diff(bounds)
    out = np.full((rows, len(quantiles)), np.nan)
    if rows == 0:
        return out
    row_of = np.repeat(np.arange(rows), lengths)
    by_value = np.argsort(flat)
    ordered = flat[by_value][group_order(row_of[by_value], rows)]  # each row's numbers, ascending
    start = bounds[:-1]
    total = lengths + nans
    with np.errstate(invalid="ignore", divide="ignore"):
        for j, q in enumerate(quantiles):
            rank = q * total.astype(np.float64)
            ok = (total > 0) & (lengths > 0) & (rank <= lengths)
            r = np.minimum(1.0, rank[ok] / lengths[ok])
            weight = np.ceil(r * lengths[ok]).astype(np.int64)
            position = np.minimum(np.maximum(weight, 1) - 1, lengths[ok] - 1)
            out[ok, j] = ordered[start[ok] + position]
    return out


def _quantiles(sketch: Any, nans: int, quantiles: list[float]) -> list[float | None]:
    """The quantiles of a key whose numbers are in ``sketch`` and which has ``nans`` NaNs
    besides (NaN ranks above every number)."""
    n = sketch.n
    total = n + nans
    if total == 0:
        return [None] * len(quantiles)
    out: list[float | None] = []
    for q in quantiles:
        rank = q * total  # the smallest value with at least this many values <= it
        if rank > n or n == 0:
            out.append(float("nan"))
        else:
            out.append(float(sketch.get_quantile(min(1.0, rank / n), True)))
    return out
