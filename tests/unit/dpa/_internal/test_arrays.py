"""dpa._internal.arrays: the same arrays as pyarrow's conversions, and no pandas on the way."""

from __future__ import annotations

import decimal
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpa._internal.arrays import (
    as_float64,
    from_numpy,
    join_chunks,
    numpy_dtype,
    one_array,
    scalar,
    to_numpy,
)

NUMBER_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(),
                pa.uint64(), pa.float32(), pa.float64()]


def _values(dtype: pa.DataType, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    np_type = numpy_dtype(dtype)
    if np.issubdtype(np_type, np.integer):
        info = np.iinfo(np_type)
        return rng.integers(info.min, info.max, n, dtype=np_type, endpoint=True)
    out = rng.normal(0, 1e6, n).astype(np_type)
    out[rng.random(n) < 0.1] = np.nan
    out[rng.random(n) < 0.1] = -0.0
    return out


def _same(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from(NUMBER_TYPES), sizes=st.lists(st.integers(0, 40), min_size=0, max_size=4),
       offset=st.integers(0, 5), seed=st.integers(0, 2**16))
def test_to_numpy_equals_pyarrows_for_arrays_slices_and_chunks(dtype, sizes, offset, seed):
    chunks = [pa.array(_values(dtype, n + offset, seed + i), type=dtype).slice(offset) for i, n in enumerate(sizes)]
    chunked = pa.chunked_array(chunks, type=dtype)
    _same(to_numpy(chunked), chunked.to_numpy())
    for chunk in chunks:
        _same(to_numpy(chunk), chunk.to_numpy(zero_copy_only=False))


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from(NUMBER_TYPES), sizes=st.lists(st.integers(0, 40), min_size=0, max_size=4),
       offset=st.integers(0, 5), nulls=st.booleans(), seed=st.integers(0, 2**16))
def test_join_chunks_equals_arrows_concatenation(dtype, sizes, offset, nulls, seed):
    chunks = []
    for i, n in enumerate(sizes):
        values = _values(dtype, n + offset, seed + i)
        mask = np.random.default_rng(seed + i).random(len(values)) < 0.3 if nulls else None
        chunks.append(pa.array(values, type=dtype, mask=mask).slice(offset))
    joined = join_chunks(chunks, dtype)
    want = pa.concat_arrays(chunks) if chunks else pa.array([], dtype)
    assert joined.offset == 0  # (compact: a copy of its own)
    for got in (joined, one_array(pa.chunked_array(chunks, type=dtype))):
        assert got.type == dtype and got.null_count == want.null_count
        assert got.is_valid().equals(want.is_valid())
        _same(got.to_numpy(zero_copy_only=False), want.to_numpy(zero_copy_only=False))  # (NaN included)


def test_one_array_keeps_a_single_chunk_and_joins_other_types_by_arrow():
    array = pa.array(np.arange(10, dtype=np.int64))
    assert one_array(array) is array
    assert one_array(pa.chunked_array([array])).buffers()[1].address == array.buffers()[1].address
    words = pa.chunked_array([pa.array(["a", None]), pa.array(["b"])])
    assert one_array(words).equals(pa.array(["a", None, "b"]))
    days = pa.chunked_array([pa.array([1, 2], pa.date32()), pa.array([3], pa.date32())])
    assert one_array(days).equals(pa.array([1, 2, 3], pa.date32()))


def test_to_numpy_views_one_chunk_and_copies_several_as_pyarrow_does():
    array = pa.array(np.arange(10, dtype=np.int64))
    view = to_numpy(array)
    assert not view.flags.writeable and np.shares_memory(view, np.frombuffer(array.buffers()[1], np.int64))
    assert to_numpy(pa.chunked_array([array, array])).flags.writeable


def test_to_numpy_leaves_other_columns_to_pyarrow():
    with_nulls = pa.array([1, None, 3], pa.int64())
    np.testing.assert_array_equal(to_numpy(with_nulls), with_nulls.to_numpy(zero_copy_only=False))
    booleans = pa.array([True, False, True])
    np.testing.assert_array_equal(to_numpy(booleans), [True, False, True])
    dates = pa.array([0, 1], pa.date32())
    assert to_numpy(dates).dtype == dates.to_numpy(zero_copy_only=False).dtype
    assert list(to_numpy(pa.array(["a", "b"]))) == ["a", "b"]


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from(NUMBER_TYPES), n=st.integers(0, 50), step=st.sampled_from([1, 2]),
       nulls=st.booleans(), seed=st.integers(0, 2**16))
def test_from_numpy_equals_pa_array(dtype, n, step, nulls, seed):
    values = _values(dtype, n * step, seed)[::step]
    mask = np.random.default_rng(seed).random(len(values)) < 0.3 if nulls else None
    got = from_numpy(values, dtype, mask=mask)
    want = pa.array(values, type=dtype, mask=mask)
    assert got.type == want.type and got.null_count == want.null_count
    assert got.equals(want) or (pa.types.is_floating(dtype) and _same_floats(got, want))
    assert from_numpy(values).type == dtype  # (the ndarray's type by default)


def _same_floats(a: pa.Array, b: pa.Array) -> bool:
    """Equal bits where valid (Arrow's equals treats NaN as unequal to itself)."""
    valid = np.asarray(b.is_valid())
    x, y = to_numpy(a.fill_null(0)), to_numpy(b.fill_null(0))
    return a.is_valid().equals(b.is_valid()) and np.array_equal(x[valid].view(np.uint8), y[valid].view(np.uint8))


def test_from_numpy_leaves_other_inputs_to_pa_array():
    assert from_numpy(np.array([1, 2], np.int64), pa.int32()).type == pa.int32()  # (a cast)
    assert from_numpy(np.array([True, False])).type == pa.bool_()
    assert from_numpy([1, 2]).equals(pa.array([1, 2]))
    with pytest.raises(pa.ArrowInvalid):
        from_numpy(np.array([300], np.int64), pa.int8())  # pa.array's checked cast


@pytest.mark.parametrize("value, dtype", [
    (None, pa.float64()), (None, pa.int32()), (0, pa.int64()), (0.0, pa.float64()), (-3, pa.int8()),
    (2**64 - 1, pa.uint64()), (float("nan"), pa.float32()), (np.int16(7), pa.int16()), (1.5, pa.float32()),
    ("x", pa.string()), (True, pa.bool_()), (False, pa.bool_()), (np.bool_(True), pa.bool_()),
])
def test_scalar_equals_pa_scalar(value, dtype):
    got, want = scalar(value, dtype), pa.scalar(value, dtype)
    assert got.type == want.type and got.is_valid == want.is_valid
    assert got.equals(want) or (value != value and got.as_py() != got.as_py())  # (NaN)


def test_scalar_raises_as_pa_scalar_does():
    with pytest.raises(OverflowError):
        scalar(2**70, pa.int64())


def test_the_conversions_do_not_import_pandas():
    script = textwrap.dedent("""
        import sys
        import numpy as np
        import pyarrow as pa
        from dpa._internal.arrays import as_float64, from_numpy, scalar, to_numpy
        a = from_numpy(np.arange(5, dtype=np.uint32))
        d = pa.Array.from_buffers(pa.decimal128(5, 2), 2, [pa.py_buffer(np.array([1], np.uint8)),
                                                           pa.py_buffer(np.array([330, 0, 7, 0], np.int64))])
        assert to_numpy(as_float64(d).fill_null(scalar(0.0, pa.float64()))).tolist() == [3.3, 0.0]
        b = from_numpy(np.arange(5.0), pa.float64(), mask=np.arange(5) % 2 == 0)
        assert b.null_count == 3
        assert scalar(0.0, pa.float64()).as_py() == 0.0 and scalar(None, pa.int64()).as_py() is None
        assert scalar(False, pa.bool_()).as_py() is False and scalar(True, pa.bool_()).as_py() is True
        assert to_numpy(pa.chunked_array([a, a])).sum() == 20 and to_numpy(a.slice(1)).tolist() == [1, 2, 3, 4]
        assert "pandas" not in sys.modules, "pandas was imported"
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


DECIMALS = st.lists(st.one_of(st.none(), st.integers(-(2**70), 2**70)), max_size=40)


@settings(max_examples=200, deadline=None)
@given(unscaled=DECIMALS, precision_scale=st.sampled_from([(38, 2), (38, 0), (38, 6), (30, 22), (38, 23), (24, 9)]),
       start=st.integers(0, 5))
def test_as_float64_gives_each_decimal_its_nearest_float(unscaled, precision_scale, start):
    precision, scale = precision_scale
    limit = 10**precision
    values = [None if u is None else decimal.Decimal(max(-limit + 1, min(limit - 1, u))).scaleb(-scale)
              for u in unscaled]
    array = pa.array(values, pa.decimal128(precision, scale)).slice(min(start, len(values)))
    got = as_float64(array)
    assert got.type == pa.float64() and len(got) == len(array)
    arrow = pa.compute.cast(array, pa.float64(), safe=False).to_pylist()
    for value, mine, theirs in zip(array.to_pylist(), got.to_pylist(), arrow):
        if value is None:
            assert mine is None
        elif abs(value.scaleb(scale)) < 2**53 and 0 < scale <= 22:
            assert mine == float(value)  # Python's float(Decimal) rounds once, to the nearest
        else:
            assert mine == theirs  # (beyond that, Arrow's own cast)


def test_as_float64_fixes_what_arrows_cast_rounds_twice():
    array = pa.array([decimal.Decimal("3.30"), decimal.Decimal("-0.07"), None], pa.decimal128(10, 2))
    assert pa.compute.cast(array, pa.float64(), safe=False).to_pylist()[0] != 3.3  # what this is for
    assert as_float64(array).to_pylist() == [3.3, -0.07, None]
    assert as_float64(pa.chunked_array([array, array.slice(1)])).to_pylist() == [3.3, -0.07, None, -0.07, None]
    assert as_float64(pa.array([1, None, 2**60 + 1])).to_pylist() == [1.0, None, float(2**60)]
