"""Means from exact sums: the state types of :class:`dpa.aggregates.builtins.Mean` and its
finalize, rounded once.

A mean of integers or decimals is kept as an *exact* sum and a count: integers as
Arrow's int64 / uint64 sums (:mod:`dpa.aggregates.int_sums` keeps a sum that leaves that
range exact as a pending decimal), a ``decimal(p, s)`` as a sum of its unscaled integers
in a wider decimal (:func:`mean_sum_type`). Partial states then merge exactly, in any
order, so every policy, runtime and reducer count gives the same answer. The one rounding
happens at the end:

* :func:`means_float64`: ``sum / count`` as the float64 nearest to the exact quotient
  (numpy's division of two integers below ``2**53``, exact float64 numbers, rounds once;
  larger ones are divided as Python integers, whose true division rounds correctly too);
* :func:`means_decimal`: Spark's ``avg`` of a decimal, ``decimal(min(38, p + 4),
  min(38, s + 4))``, with Spark's own rounding (see :func:`spark_avg_unscaled`).

Floating point columns keep a float64 sum (their mean is rounded anyway, as in Spark and
DuckDB, and the vectorised sum is what makes them fast).
"""

from __future__ import annotations

import decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpa._internal.arrays import fill_null, from_numpy, to_numpy

__all__ = ["mean_input_type", "mean_sum_type", "means_decimal", "means_float64", "spark_avg_type", "spark_avg_unscaled", "spark_avg_value"]

#: Integers a float64 holds exactly: a quotient of two of them is rounded once.
_EXACT = 2**53

#: Widest decimal precision Spark (and decimal128) has.
_MAX_PRECISION = 38

#: The scale Spark's decimal division rounds its quotient to first (``MAX_SCALE + 1``).
_DIVISION_SCALE = 39


def mean_sum_type(dtype: pa.DataType) -> pa.DataType:
    """The exact sum type of a mean over ``decimal(p, s)`` values: Spark's sum type,
    ``decimal128(min(38, p + 10), s)``.

    ``p + 10`` digits hold ``10**10`` values of ``p`` digits. A wider decimal's sums are
    checked (:func:`dpa.aggregates.int_sums.sum_may_overflow`): summed in 256 bits where
    they could leave 38 digits, and a key whose sum does raises
    :class:`~dpa.errors.ArithmeticOverflowError` (Spark's ``avg`` fails there too in ANSI
    mode, and is null outside it; DuckDB's fails), where Arrow's 128-bit sum would wrap.
    """
    return pa.decimal128(min(_MAX_PRECISION, dtype.precision + 10), dtype.scale)


def mean_input_type(sum_type: pa.DataType) -> pa.DataType:
    """The ``decimal(p, s)`` column whose mean is summed in ``sum_type`` (:func:`mean_sum_type`'s
    inverse; a ``decimal(38, s)`` sum is read as ``decimal(28, s)``'s: the reducer knows the
    column's type where it is wider)."""
    return pa.decimal128(max(sum_type.precision - 10, 1, sum_type.scale), sum_type.scale)


def spark_avg_type(dtype: pa.DataType) -> pa.DataType:
    """The type Spark gives ``avg`` of a ``decimal(p, s)``: ``decimal(min(38, p + 4), min(38, s + 4))``."""
    return pa.decimal128(min(_MAX_PRECISION, dtype.precision + 4), min(_MAX_PRECISION, dtype.scale + 4))


def _unscaled(total: pa.Array) -> list[int | None]:
    """Exact integers of an integer or decimal column (a decimal's unscaled values)."""
    values = total.to_pylist()
    if not pa.types.is_decimal(total.type):
        return values
    scale = total.type.scale
    out: list[int | None] = []
    for v in values:
        if v is None:
            out.append(None)
            continue
        numerator, denominator = v.as_integer_ratio()  # exact (Decimal arithmetic would round at 28 digits)
        out.append(numerator * 10**scale // denominator)
    return out


def _small_unscaled(total: pa.Array) -> tuple[np.ndarray, np.ndarray] | None:
    """``(values, small)``: an integer or decimal128 column's unscaled values as int64 where
    they fit (``small``) within ``2**53``; None for other types."""
    dtype = total.type
    if pa.types.is_integer(dtype):
        raw = to_numpy(fill_null(total, 0)) if total.null_count else to_numpy(total)
        if pa.types.is_unsigned_integer(dtype):
            small = raw <= _EXACT
            return np.where(small, raw, 0).astype(np.int64), small
        raw = raw.astype(np.int64, copy=False)
        return raw, np.abs(raw) <= _EXACT
    if pa.types.is_decimal128(dtype) and len(total):
        words = np.frombuffer(total.buffers()[1], dtype=np.int64, count=2 * (total.offset + len(total)))
        low, high = words[2 * total.offset::2], words[2 * total.offset + 1::2]
        small = (high == (low >> 63)) & (np.abs(low) <= _EXACT)
        return np.where(small, low, 0), small
    return None


def means_float64(total: pa.Array | pa.ChunkedArray, count: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``total / count`` per row as the float64 nearest to the exact quotient; null where
    ``count`` is 0.

    Args:
        total: Sums: float64 (divided as floats), or exact integers or decimals.
        count: Non-null values per row (int64).

    Returns:
        A float64 array.
    """
    total = total.combine_chunks() if isinstance(total, pa.ChunkedArray) else total
    count = count.combine_chunks() if isinstance(count, pa.ChunkedArray) else count
    n = to_numpy(fill_null(count, 0)).astype(np.int64, copy=False)
    empty = n == 0
    if pa.types.is_floating(total.type):
        sums = to_numpy(fill_null(pc.cast(total, pa.float64()), 0.0))
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where(empty, 0.0, sums / np.where(empty, 1, n))
        return from_numpy(out, pa.float64(), mask=empty if empty.any() else None)
    scale = total.type.scale if pa.types.is_decimal(total.type) else 0
    out = np.zeros(len(n), dtype=np.float64)
    fast = _small_unscaled(total)
    if fast is not None and 10**scale <= _EXACT:
        values, small = fast
        divisor = n * 10**scale
        small &= (n <= _EXACT // 10**scale) & ~empty
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where(small, values.astype(np.float64) / np.where(small, divisor, 1).astype(np.float64), 0.0)
    else:
        small = np.zeros(len(n), dtype=bool)
    rest = np.flatnonzero(~small & ~empty)
    if len(rest):
        exact = _unscaled(total.take(from_numpy(rest)))
        for i, value in zip(rest.tolist(), exact):
            out[i] = value / (int(n[i]) * 10**scale)  # Python's int / int: rounded once
    return from_numpy(out, pa.float64(), mask=empty if empty.any() else None)


def _half_up(numerator: int, denominator: int) -> int:
    """``numerator / denominator`` (denominator > 0) rounded to an integer, halves away from zero."""
    q, r = divmod(abs(numerator), denominator)
    if 2 * r >= denominator:
        q += 1
    return -q if numerator < 0 else q


def spark_avg_unscaled(total: int, count: int, scale: int, avg_scale: int) -> int:
    """Spark's ``avg`` of a decimal from its exact sum, as an unscaled integer at ``avg_scale``.

    Spark divides the sum by the count (``DecimalDivideWithOverflowCheck``): the quotient
    is rounded half up to 39 decimals (``Decimal./``, ``DecimalType.MAX_SCALE + 1``), then
    half up again to the result type's scale. Both roundings are reproduced here.

    Args:
        total: The exact sum of the unscaled values (of scale ``scale``).
        count: The number of values (> 0).
        scale: The column's scale ``s``.
        avg_scale: The result type's scale.
    """
    quotient = _half_up(total * 10 ** (_DIVISION_SCALE - scale), count)
    return _half_up(quotient, 10 ** (_DIVISION_SCALE - avg_scale))


def spark_avg_value(total: int, count: int, input_type: pa.DataType) -> decimal.Decimal | None:
    """Spark's ``avg`` of a ``decimal(p, s)`` column whose unscaled values sum to ``total``
    over ``count`` values (> 0); None where it does not fit :func:`spark_avg_type` (Spark's
    ``avg`` is null there, outside ANSI mode). Spark's ``avg`` is null too where its own
    ``decimal(min(38, p + 10), s)`` sum overflows; the sum here is exact and the mean is
    given wherever it fits the result type."""
    out_type = spark_avg_type(input_type)
    unscaled = spark_avg_unscaled(total, count, input_type.scale, out_type.scale)
    if abs(unscaled) >= 10**out_type.precision:
        return None
    return decimal.Decimal(f"{unscaled}E-{out_type.scale}")  # (exact: Decimal arithmetic rounds at 28 digits)


def means_decimal(total: pa.Array | pa.ChunkedArray, count: pa.Array | pa.ChunkedArray,
                  input_type: pa.DataType | None = None) -> pa.Array:
    """Spark's ``avg`` of a ``decimal(p, s)`` column per row (:func:`spark_avg_value`), from
    exact sums of its values.

    Args:
        total: Exact sums of the values, typed by :func:`mean_sum_type`.
        count: Non-null values per row.
        input_type: The column's ``decimal(p, s)`` (default: :func:`mean_input_type` of the sums').

    Returns:
        A :func:`spark_avg_type` array; null where the count is 0 or the mean does not fit.
    """
    input_type = input_type or mean_input_type(total.type)
    total = total.combine_chunks() if isinstance(total, pa.ChunkedArray) else total
    values = [None if value is None or not n else spark_avg_value(value, n, input_type)
              for value, n in zip(_unscaled(total), count.to_pylist())]
    return pa.array(values, spark_avg_type(input_type))
