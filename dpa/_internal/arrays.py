"""Arrow <-> numpy for fixed-width number columns (and number scalars), without pandas.

pyarrow converts between Arrow and numpy through a shim that imports pandas the first time
it is asked (``Array.to_numpy``, ``np.asarray(array)``, ``pa.array(ndarray)``,
``pa.scalar``, and so a compute function given a Python number), even for plain integers
and floats. In a fresh worker process that import is about 0.25 s of CPU and 35 MB of
memory, paid inside the first job of a pool. The columns dpa moves between Arrow and numpy
on its hot path (key hashes, weights, integer keys, group ids, aggregate outputs) are
fixed-width numbers, mostly without nulls, so they are read and built here from their
buffers: a view of the data buffer, or an Arrow array over the ndarray's memory. Anything
else (nulls on the way to numpy, booleans, dates and times, strings) goes through pyarrow,
with the same result.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: Arrow number types and their numpy types.
_NUMPY: dict[pa.DataType, np.dtype] = {
    pa.int8(): np.dtype(np.int8), pa.int16(): np.dtype(np.int16),
    pa.int32(): np.dtype(np.int32), pa.int64(): np.dtype(np.int64),
    pa.uint8(): np.dtype(np.uint8), pa.uint16(): np.dtype(np.uint16),
    pa.uint32(): np.dtype(np.uint32), pa.uint64(): np.dtype(np.uint64),
    pa.float32(): np.dtype(np.float32), pa.float64(): np.dtype(np.float64),
}
_ARROW: dict[np.dtype, pa.DataType] = {dtype: arrow for arrow, dtype in _NUMPY.items()}


def numpy_dtype(dtype: pa.DataType) -> np.dtype | None:
    """The numpy type of an Arrow integer or floating point type (None for any other type)."""
    return _NUMPY.get(dtype)


def to_numpy(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """``column.to_numpy(zero_copy_only=False)``, without pandas for numbers without nulls.

    An integer or floating point column without nulls comes back as a read-only view of its
    buffer (one chunk) or a new array (several chunks). Other columns go to pyarrow.

    Args:
        column: An Arrow array or chunked array.

    Returns:
        The values as a 1-D ndarray.
    """
    dtype = _NUMPY.get(column.type)
    if dtype is None or column.null_count:
        return column.to_numpy(zero_copy_only=False)
    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks == 1:
            return _view(column.chunk(0), dtype)
        if column.num_chunks == 0:
            return np.empty(0, dtype=dtype)
        return np.concatenate([_view(chunk, dtype) for chunk in column.chunks])
    return _view(column, dtype)


def join_chunks(chunks: list[pa.Array], type: pa.DataType) -> pa.Array:
    """Arrays of ``type`` as one new array (a copy, even of one array).

    Integers and floats without nulls are joined by numpy, several times faster than
    Arrow's concatenation of the same buffers; anything else by Arrow.

    Args:
        chunks: The arrays, in order.
        type: Their Arrow type.

    Returns:
        One array with compact buffers of its own.
    """
    dtype = _NUMPY.get(type)
    if dtype is None or any(chunk.null_count for chunk in chunks):
        return pa.concat_arrays(chunks) if chunks else pa.array([], type=type)
    return from_numpy(np.concatenate([_view(chunk, dtype) for chunk in chunks]) if chunks else np.empty(0, dtype), type)


def one_array(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The column as one array: an array or a chunked array's only chunk as it is, several
    chunks joined (:func:`join_chunks`)."""
    if isinstance(column, pa.Array):
        return column
    if column.num_chunks == 1:
        return column.chunk(0)
    return join_chunks(column.chunks, column.type)


def buffer_values(array: pa.Array) -> np.ndarray:
    """The data buffer of an integer or floating point array as a read-only ndarray, one
    value per slot, nulls included (a null's slot holds whatever the buffer holds there).

    Args:
        array: One Arrow array (not chunked) of a type :func:`numpy_dtype` knows.

    Returns:
        A view of the buffer.
    """
    return _view(array, _NUMPY[array.type])


def _view(array: pa.Array, dtype: np.dtype) -> np.ndarray:
    data = array.buffers()[1]
    if data is None or len(array) == 0:
        return np.empty(0, dtype=dtype)
    values = np.frombuffer(data, dtype=dtype, count=array.offset + len(array))[array.offset:]
    values.flags.writeable = False  # (Arrow arrays are immutable, whoever else holds the buffer)
    return values


def from_numpy(values: Any, type: pa.DataType | None = None, mask: np.ndarray | None = None) -> pa.Array:
    """``pa.array(values, type=type, mask=mask)``, without pandas for 1-D number arrays.

    A 1-D integer or floating point ndarray whose numpy type is ``type``'s (or any such
    array when ``type`` is None) becomes an Arrow array over its memory (a contiguous copy
    first if it is strided); ``mask`` (True: null) becomes the validity bitmap. Anything
    else goes to ``pa.array``.

    Args:
        values: The values.
        type: The Arrow type (default: the ndarray's).
        mask: Optional boolean ndarray, True where the value is null.

    Returns:
        The Arrow array.
    """
    arrow = _ARROW.get(values.dtype) if isinstance(values, np.ndarray) and values.ndim == 1 else None
    if arrow is None or (type is not None and not arrow.equals(type)) or (mask is not None and len(mask) != len(values)):
        return pa.array(values, type=type, mask=mask)
    values = np.ascontiguousarray(values)
    validity, nulls = None, 0
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)
        nulls = int(np.count_nonzero(mask))
        if nulls:
            validity = pa.py_buffer(np.packbits(~mask, bitorder="little"))
    return pa.Array.from_buffers(arrow, len(values), [validity, pa.py_buffer(values)], null_count=nulls)


def scalar(value: Any, type: pa.DataType) -> pa.Scalar:
    """``pa.scalar(value, type)``, without pandas for None, numbers of a number type and
    booleans.

    Args:
        value: None, a Python or numpy number that ``type`` holds, or a bool.
        type: The Arrow type.

    Returns:
        The Arrow scalar (what compute functions take instead of a Python number).
    """
    if value is None:
        return pa.nulls(1, type)[0]
    if pa.types.is_boolean(type) and isinstance(value, (bool, np.bool_)):
        return pa.Array.from_buffers(type, 1, [None, pa.py_buffer(bytes([bool(value)]))])[0]
    dtype = _NUMPY.get(type)
    if dtype is None or isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        return pa.scalar(value, type)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        if not (isinstance(value, (int, np.integer)) and info.min <= value <= info.max):
            return pa.scalar(value, type)  # (pyarrow's own error or conversion)
    return from_numpy(np.array([value], dtype=dtype))[0]


#: Powers of ten that a float64 holds exactly (a decimal's scale divides by one of them).
_EXACT_POWERS = 22

#: Unscaled decimal values a float64 holds exactly.
_EXACT_INTEGERS = 2**53


def fill_null(values: pa.Array | pa.ChunkedArray, value: Any) -> pa.Array | pa.ChunkedArray:
    """``values.fill_null(value)`` with the fill value made by :func:`scalar`: pyarrow's own
    conversion of a Python number or bool goes through its pandas shim, which would load
    pandas in every process that aggregates."""
    return pc.fill_null(values, scalar(value, values.type))


def as_float64(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """``column`` as float64, each value the float64 nearest to it (nulls stay null).

    Integers and floats are cast as Arrow casts them (integers beyond ``2**53`` round).
    Arrow casts a decimal by multiplying its unscaled integer by ``10**-scale``, which is
    not a float64 itself, so ``3.30`` becomes ``3.3000000000000003``. Here an unscaled value
    below ``2**53`` is divided by ``10**scale`` instead: both are exact float64 numbers and
    IEEE division rounds once, to the nearest float64 (``3.3``, as Spark and DuckDB have it).
    Larger unscaled values, scales beyond 22 and decimal256 columns keep Arrow's cast.

    Args:
        column: A number column (integer, floating point or decimal).

    Returns:
        The float64 column, chunked as ``column`` is.
    """
    if isinstance(column, pa.ChunkedArray):
        return pa.chunked_array([as_float64(c) for c in column.chunks], pa.float64())
    cast = pc.cast(column, pa.float64(), safe=False)
    dtype = column.type
    if not (pa.types.is_decimal128(dtype) and 0 < dtype.scale <= _EXACT_POWERS) or len(column) == 0:
        return cast
    # decimal128: 16 bytes per value, the low then the high 64 bits of a two's complement integer.
    words = np.frombuffer(column.buffers()[1], dtype=np.int64, count=2 * (column.offset + len(column)))
    low, high = words[2 * column.offset::2], words[2 * column.offset + 1::2]
    small = (high == (low >> 63)) & (np.abs(low) < _EXACT_INTEGERS)  # (fits int64, then exact as float64)
    values = np.where(small, low.astype(np.float64) / float(10**dtype.scale), buffer_values(cast))
    return from_numpy(values, pa.float64(), mask=_null_mask(column))


def _null_mask(array: pa.Array) -> np.ndarray | None:
    """True where ``array`` is null, read from its validity bitmap; None without nulls."""
    if array.null_count == 0:
        return None
    bits = np.unpackbits(np.frombuffer(array.buffers()[0], dtype=np.uint8), bitorder="little")
    return bits[array.offset:array.offset + len(array)] == 0
