"""Integer sums that never wrap around: a cheap overflow bound, and an exact fallback.

Arrow sums signed integers as int64 and unsigned ones as uint64, wrapping around on
overflow. :class:`dpa.aggregates.builtins.Sum` asks :func:`sum_may_overflow` (one min/max pass at
most) whether a batch could overflow, and only then sums it exactly with
:func:`exact_int_sums`. A partial sum out of range stays exact (a *pending* decimal) and
:func:`finalize_int_sums` raises :class:`~dpa.errors.ArithmeticOverflowError`, as Spark's
ANSI mode does, for a key whose final sum is out of range.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from dpa.errors import ArithmeticOverflowError

_INT64_MAX = 2**63 - 1
_UINT64_MAX = 2**64 - 1
_EXACT = pa.decimal128(38, 0)  # holds any sum of < 10**19 int64/uint64 values exactly


def sum_may_overflow(column: pa.ChunkedArray | pa.Array) -> bool:
    """Whether summing groups of ``column`` could leave Arrow's integer sum type.

    Arrow sums signed integers as int64 and unsigned ones as uint64, wrapping around on
    overflow. This is a cheap, conservative test: False when no sum of any subset of the
    values can overflow (by the type's width, then ``n * min(x)`` and ``n * max(x)``, then
    the float64 sum of ``|x|``, each tried only if the previous one does not decide);
    True when an exact sum is needed. A decimal128 column may leave 38 digits (where Arrow's
    sum wraps around), see :func:`_decimal_sum_may_overflow`; other columns never overflow
    here (floats go to inf).

    Args:
        column: The values (e.g. a column of records, or of partial sums).

    Returns:
        True if the sums must be computed exactly (see :class:`Sum`).
    """
    dtype = column.type
    if pa.types.is_decimal128(dtype):
        return _decimal_sum_may_overflow(column)
    if not pa.types.is_integer(dtype):
        return False
    n = len(column) - column.null_count
    if n == 0:
        return False
    signed = pa.types.is_signed_integer(dtype)
    floor, limit = (-(2**63), _INT64_MAX) if signed else (0, _UINT64_MAX)
    low, high = (-(2 ** (dtype.bit_width - 1)), 2 ** (dtype.bit_width - 1) - 1) if signed else (0, 2**dtype.bit_width - 1)
    if floor <= low * n and high * n <= limit:
        return False
    low, high = pc.min_max(column).as_py().values()
    if floor <= min(low, 0) * n and max(high, 0) * n <= limit:
        return False
    # The sum of all |x| bounds every group's sum. Summed as float64 its relative error
    # is far below the factor of 2 of margin kept here.
    total = pc.sum(pc.abs(pc.cast(column, pa.float64(), safe=False))).as_py()
    return not total < limit / 2


#: Decimals of at most this precision are summed in ``decimal(p + 10, s)`` (Spark's sum
#: type), which no realistic number of their values leaves; wider ones are checked.
_NARROW_DECIMAL = 28


def _decimal_sum_may_overflow(column: pa.ChunkedArray | pa.Array) -> bool:
    """Whether a group sum of decimal128 ``column`` could leave 38 digits, where Arrow's
    128-bit sum wraps around without an error: False for ``p <= 28`` (10**10 values of
    ``p`` digits fit) and where the float64 sum of ``|x|`` stays below half of ``10**(38 - s)``."""
    dtype = column.type
    if dtype.precision <= _NARROW_DECIMAL or len(column) == column.null_count:
        return False
    total = pc.sum(pc.abs(pc.cast(column, pa.float64(), safe=False))).as_py()
    return not total < 10.0 ** (38 - dtype.scale) / 2


def exact_decimal_sums(table: pa.Table, group_cols: list[str], column: str, aggs: list[Any], names: list[str],
                       input_column: str | None, key_cols: list[str]) -> pa.Table:
    """Group sums of decimal128 ``column`` computed in decimal256, then ``decimal128(38, s)``.

    Raises:
        ArithmeticOverflowError: a group's sum has more than 38 digits (Spark's decimal
            ``sum`` fails there in ANSI mode and is null outside it; Arrow's would wrap).
    """
    dtype = table.schema.field(column).type
    idx = table.schema.get_field_index(column)
    wide = table.set_column(idx, column, pc.cast(table[column], pa.decimal256(76, dtype.scale)))
    out = wide.group_by(group_cols, use_threads=False).aggregate(aggs).rename_columns(names)
    sums = out[names[len(group_cols)]]
    target = pa.decimal128(38, dtype.scale)
    try:
        narrow = pc.cast(sums, target)
    except pa.ArrowInvalid:
        values = sums.to_pylist()
        limit = 10 ** (38 - dtype.scale)
        row = next(i for i, v in enumerate(values) if v is not None and abs(v) >= limit)
        key_values = [out[c][row].as_py() for c in key_cols]
        key = key_values[0] if len(key_values) == 1 else tuple(key_values)
        hint = (f"cast it to a smaller scale, e.g. decimal(38, {dtype.scale // 2}), or to float64" if dtype.scale
                else "cast it to float64")
        raise ArithmeticOverflowError(
            f"the sum of column {input_column!r} for key {key!r} has more than 38 digits ({values[row]}), past "
            f"{target}; dpa does not wrap around (like Spark in ANSI mode): {hint}",
            column=input_column, key=key,
        ) from None
    return out.set_column(len(group_cols), names[len(group_cols)], narrow)


def exact_int_sums(table: pa.Table, group_cols: list[str], column: str, aggs: list[Any], names: list[str],
                   input_column: str | None, hash_col: str) -> pa.Table:
    """Group sums of integer ``column`` computed as decimal128(38, 0), exactly.

    Sums inside the sum type's range (int64, or uint64 for unsigned columns) come back in
    that type. If any group's sum is outside it, the whole sum column stays exact as a
    *pending* decimal (:func:`pending_type`): a partial sum (of part of the input) may
    still come back into range, or meet floating point values that make the column a
    float; :func:`finalize_int_sums` decides at the end. ``hash_col`` is the internal hash
    column among ``group_cols``.
    """
    dtype = table.schema.field(column).type
    if pa.types.is_decimal128(dtype):
        return exact_decimal_sums(table, group_cols, column, aggs, names, input_column,
                                  [c for c in group_cols if c != hash_col] or list(group_cols))
    if is_pending(dtype):
        return table.group_by(group_cols, use_threads=False).aggregate(aggs).rename_columns(names)
    target = pa.int64() if pa.types.is_signed_integer(dtype) else pa.uint64()
    idx = table.schema.get_field_index(column)
    wide = table.set_column(idx, column, pc.cast(table[column], _EXACT))
    out = wide.group_by(group_cols, use_threads=False).aggregate(aggs).rename_columns(names)
    sums = out[names[len(group_cols)]]
    try:
        narrow = pc.cast(sums, target)
    except pa.ArrowInvalid:
        narrow = pc.cast(sums, pending_type(target))
    return out.set_column(len(group_cols), names[len(group_cols)], narrow)


#: Exact integer sums that left int64 / uint64 before the end of the job (see
#: :func:`exact_int_sums`): decimal256 with a precision no input decimal can have
#: (dpa widens decimals to at most 38 digits), one for each sum type.
_PENDING = {pa.int64(): pa.decimal256(40, 0), pa.uint64(): pa.decimal256(41, 0)}


def pending_type(target: pa.DataType) -> pa.DataType:
    """The exact type that holds integer sums of ``target`` (int64/uint64) out of its range."""
    return _PENDING[target]


def is_pending(dtype: pa.DataType) -> bool:
    """Whether ``dtype`` holds pending integer sums (see :func:`exact_int_sums`)."""
    return any(dtype.equals(t) for t in _PENDING.values())


def finalize_int_sums(table: pa.Table, column: str, key_cols: list[str], input_column: str | None) -> pa.Table:
    """Casts pending integer sums back to int64 / uint64, or raises if one is out of range.

    Raises:
        ArithmeticOverflowError: a key's sum is outside the sum type's range (names the
            column and the key).
    """
    dtype = table.schema.field(column).type
    if not is_pending(dtype):
        return table
    target = next(t for t, p in _PENDING.items() if p.equals(dtype))
    try:
        narrow = pc.cast(table[column], target)
    except pa.ArrowInvalid:
        values = table[column].to_pylist()
        low, high = (-(2**63), _INT64_MAX) if target == pa.int64() else (0, _UINT64_MAX)
        row = next(i for i, v in enumerate(values) if v is not None and not low <= v <= high)
        key_values = [table[c][row].as_py() for c in key_cols]
        key = key_values[0] if len(key_values) == 1 else tuple(key_values)
        raise ArithmeticOverflowError(
            f"Sum({input_column!r}) overflowed {target}: the sum of column {input_column!r} for key {key!r} "
            f"reached {values[row]}, outside [{low}, {high}]. dpa does not wrap around (like Spark in ANSI "
            f"mode); cast the column to float64 or decimal to sum beyond {target}, e.g. "
            f"pc.cast(table[{input_column!r}], pa.decimal128(38, 0)) or float(value) in the records",
            column=input_column, key=key,
        ) from None
    return table.set_column(table.schema.get_field_index(column), column, narrow)
