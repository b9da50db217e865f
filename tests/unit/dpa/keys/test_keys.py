"""Tests for dpa.keys.encoding: canonical encoding, hashing and vectorised Arrow hashing."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import mmh3
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpa.errors import KeyEncodingError
from dpa.keys.columns import hash_key_columns
from dpa.keys.encoding import KeyHashCache, encode_key, hash_bytes, hash_key, hash_values
from dpa.keys.murmur3 import murmur3_32_batch, murmur3_32_words

# Keys whose hashes must be identical in every process; built from source literals so a
# child process can rebuild them with eval().
FIXED_KEYS_SRC = [
    "'a'",
    "''",
    "'hello world'",
    "'ünïcödé ✓ 日本'",
    "b''",
    "b'a'",
    "b'\\xff\\x00abc'",
    "bytearray(b'xy')",
    "0",
    "1",
    "-1",
    "2**63 - 1",
    "-(2**63)",
    "2**63",
    "-(2**63) - 1",
    "10**40",
    "-(10**40)",
    "0.0",
    "-0.0",
    "1.0",
    "-2.5",
    "float('nan')",
    "float('inf')",
    "float('-inf')",
    "1e300",
    "True",
    "False",
    "None",
    "()",
    "('a',)",
    "('a', 1)",
    "('ab', 'c')",
    "('a', 'bc')",
    "(1, (2.0, (None, b'x', True)), 'z')",
]

_CHILD = """
import json, sys
from dpa.keys.encoding import hash_key
srcs = json.loads(sys.argv[1])
print(json.dumps([hash_key(eval(s)) for s in srcs]))
"""


def test_hashes_are_stable_across_processes() -> None:
    here = [hash_key(eval(s)) for s in FIXED_KEYS_SRC]
    for seed in ("0", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, json.dumps(FIXED_KEYS_SRC)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            cwd=str(Path(__file__).resolve().parents[4]),
        )
        assert json.loads(out.stdout) == here


def test_known_values() -> None:
    # str keys hash exactly like the paper's mmh3(key).
    assert hash_key("token-0-0") == mmh3.hash("token-0-0", 0, signed=False)
    assert hash_key("a") == mmh3.hash(b"a", seed=0, signed=False)
    assert hash_bytes(b"abc") == mmh3.hash(b"abc", 0, signed=False)
    assert encode_key("é") == "é".encode()
    assert encode_key(None) == b"\xffN"
    assert encode_key(True) == b"\xffB\x01"
    assert encode_key(1) == b"\xffi" + (1).to_bytes(8, "big")
    assert encode_key(b"x") == b"\xffbx"


def test_int_float_bool_are_distinct() -> None:
    encodings = {encode_key(1), encode_key(1.0), encode_key(True)}
    assert len(encodings) == 3
    assert encode_key(0) != encode_key(False) != encode_key(0.0)
    assert hash_key(1) != hash_key(1.0)


def test_float_canonicalisation() -> None:
    assert encode_key(-0.0) == encode_key(0.0)
    nan1 = float("nan")
    nan2 = -float("nan")
    nan3 = float(np.frombuffer(np.array([0x7FF0000000000001], dtype=np.uint64).tobytes())[0])
    assert math.isnan(nan3)
    assert encode_key(nan1) == encode_key(nan2) == encode_key(nan3) == encode_key(np.nan)


def test_numpy_scalars_match_python() -> None:
    assert encode_key(np.int64(7)) == encode_key(7)
    assert encode_key(np.uint8(7)) == encode_key(7)
    assert encode_key(np.uint64(2**64 - 1)) == encode_key(2**64 - 1)
    assert encode_key(np.float32(1.5)) == encode_key(1.5)
    assert encode_key(np.float64(-0.0)) == encode_key(0.0)
    assert encode_key(np.bool_(True)) == encode_key(True)
    assert encode_key(memoryview(b"ab")) == encode_key(b"ab") == encode_key(bytearray(b"ab"))


def test_tuple_boundaries() -> None:
    assert encode_key(("ab", "c")) != encode_key(("a", "bc"))
    assert encode_key(("a",)) != encode_key("a")
    assert encode_key((("a",),)) != encode_key(("a",))
    assert encode_key(()) != encode_key((None,))


@pytest.mark.parametrize(
    "key, type_name",
    [([1, 2], "list"), ({1}, "set"), ({"a": 1}, "dict"), (object(), "object"), (1j, "complex")],
)
def test_bad_types_raise(key: object, type_name: str) -> None:
    with pytest.raises(KeyEncodingError, match=type_name) as info:
        encode_key(key)
    assert "str, bytes, int, float, bool, None or tuples" in str(info.value)
    with pytest.raises(TypeError):  # KeyEncodingError is a TypeError
        hash_key(key)


def test_lone_surrogate_raises_instead_of_crashing() -> None:
    # mmh3.hash() given such a str segfaults; dpa must encode first and raise.
    with pytest.raises(KeyEncodingError, match="UTF-8"):
        hash_key("a\ud800")
    with pytest.raises(KeyEncodingError):
        hash_values(["ok", ("x", "\udfff")])


def test_str_subclass_encodes_its_value() -> None:
    class Weird(str):
        def __str__(self) -> str:
            return "other"

    assert encode_key(Weird("abc")) == b"abc"


def test_list_key_suggests_tuple() -> None:
    with pytest.raises(KeyEncodingError, match=r"tuple\(\.\.\.\)"):
        encode_key([1, 2])
    with pytest.raises(KeyEncodingError, match="list"):
        encode_key(("a", [1]))


scalar_keys = st.one_of(
    st.text(max_size=8),
    st.binary(max_size=8),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
)
keys = st.recursive(
    scalar_keys, lambda inner: st.tuples(inner, inner) | st.tuples(inner), max_leaves=6
)


def _canonical(key: object) -> object:
    """A Python value that is equal iff dpa considers the keys equal."""
    if isinstance(key, tuple):
        return ("tuple", tuple(_canonical(k) for k in key))
    if isinstance(key, float):
        return ("float", 0.0 if key == 0 else key)
    return (type(key).__name__, key)


@settings(max_examples=300, deadline=None)
@given(st.lists(keys, min_size=2, max_size=6))
def test_encoding_is_injective(values: list) -> None:
    for a in values:
        for b in values:
            assert (encode_key(a) == encode_key(b)) == (_canonical(a) == _canonical(b))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=30))
def test_murmur_batch_matches_mmh3(items: list[bytes]) -> None:
    data = b"".join(items)
    offsets = np.cumsum([0] + [len(x) for x in items])
    got = murmur3_32_batch(data, offsets)
    assert got.dtype == np.uint32
    assert got.tolist() == [mmh3.hash(x, 0, signed=False) for x in items]


def test_murmur_batch_long_and_unaligned() -> None:
    rng = np.random.default_rng(3)
    items = [rng.bytes(int(n)) for n in rng.integers(0, 300, 200)]
    data = b"zz" + b"".join(items)  # unaligned start
    offsets = 2 + np.cumsum([0] + [len(x) for x in items])
    got = murmur3_32_batch(np.frombuffer(data, dtype=np.uint8), offsets)
    assert got.tolist() == [mmh3.hash(x, 0, signed=False) for x in items]


@given(st.integers(1, 13), st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_murmur_words_matches_mmh3(length: int, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    items = [rng.bytes(length) for _ in range(n)]
    padded = np.frombuffer(b"".join(x + b"\0" * (-length % 4) for x in items), dtype="<u4")
    words = [column.copy() for column in padded.reshape(n, -1).T]
    got = murmur3_32_words(words, length)
    assert got.tolist() == [mmh3.hash(x, 0, signed=False) for x in items]


@settings(max_examples=60)
@given(
    st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), max_size=40),
    st.lists(st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)), max_size=40),
    st.integers(0, 5),
)
def test_number_columns_hash_like_hash_key(ints: list, floats: list, offset: int) -> None:
    # Numbers are hashed from their bits, not from their encodings: every row must still
    # give hash_key's value (slices too, whose buffers start before the first row).
    for arr in (pa.array(ints, pa.int64()), pa.array(floats, pa.float64()), pa.array(floats, pa.float32())):
        t = pa.table({"k": arr}).slice(min(offset, len(arr)))
        assert hash_key_columns(t, ["k"]).tolist() == _rowwise(t, ["k"])


def _rowwise(table: pa.Table, cols: list[str]) -> list[int]:
    rows = table.select(cols).to_pylist()
    if len(cols) == 1:
        return [hash_key(r[cols[0]]) for r in rows]
    return [hash_key(tuple(r[c] for c in cols)) for r in rows]


MIXED = pa.table(
    {
        "s": pa.array(["a", None, "béé", "a", "", None, "long string key 123"]),
        "ls": pa.array(["a", None, "x", "a", "", None, "y"], type=pa.large_string()),
        "i": pa.array([1, 2, None, 1, -5, 2**62, -(2**63)], type=pa.int64()),
        "i8": pa.array([1, -2, None, 1, 0, 127, -128], type=pa.int8()),
        "u64": pa.array([1, 2**64 - 1, None, 1, 0, 2**63, 5], type=pa.uint64()),
        "f": pa.array([1.0, -0.0, float("nan"), None, 0.0, 2.5, float("inf")]),
        "f32": pa.array([1.0, -0.0, float("nan"), None, 0.0, 2.5, 1e10], type=pa.float32()),
        "b": pa.array([True, None, False, True, False, True, None]),
        "y": pa.array([b"x", None, b"", b"x", b"\xff", b"zz", b"\x00" * 9]),
        "fsb": pa.array([b"ab", b"cd", None, b"ab", b"\xff\xff", b"zz", b"00"], pa.binary(2)),
        "n": pa.nulls(7),
        "d": pa.array(["p", "q", None, "p", "r", "q", "p"]).dictionary_encode(),
    }
)


@pytest.mark.parametrize("col", MIXED.schema.names)
def test_hash_key_columns_single(col: str) -> None:
    got = hash_key_columns(MIXED, [col])
    assert got.dtype == np.uint32
    assert got.tolist() == _rowwise(MIXED, [col])


@pytest.mark.parametrize("col", MIXED.schema.names)
def test_hash_key_columns_distinct_hint_changes_no_hash(col: str) -> None:
    # The hint skips finding the distinct values first; rows that repeat a key (MIXED has
    # some) still get its one hash.
    assert hash_key_columns(MIXED, [col], distinct=True).tolist() == _rowwise(MIXED, [col])
    assert hash_key_columns(MIXED.slice(2), [col], distinct=True).tolist() == _rowwise(MIXED.slice(2), [col])


@pytest.mark.parametrize(
    "cols", [["s", "i"], ["i", "s"], ["s", "i", "f", "b", "y", "n"], ["f32", "u64", "d"]]
)
def test_hash_key_columns_multi(cols: list[str]) -> None:
    assert hash_key_columns(MIXED, cols).tolist() == _rowwise(MIXED, cols)


def test_hash_key_columns_chunked_and_batches() -> None:
    t = pa.concat_tables([MIXED, MIXED.slice(2, 3), MIXED])
    assert t.column("s").num_chunks == 3
    for cols in (["s"], ["i"], ["s", "y"]):
        assert hash_key_columns(t, cols).tolist() == _rowwise(t, cols)
    batch = MIXED.to_batches()[0].slice(1, 4)
    assert hash_key_columns(batch, ["s", "i"]).tolist() == _rowwise(pa.table(batch), ["s", "i"])


def test_hash_key_columns_random_large() -> None:
    rng = np.random.default_rng(0)
    n = 5000
    ints = rng.integers(-1000, 1000, n)
    strs = np.array([f"k{x}" for x in rng.integers(0, 300, n)], dtype=object)
    mask = rng.random(n) < 0.05
    t = pa.table(
        {
            "i": pa.array(ints, mask=mask),
            "s": pa.array(strs, type=pa.string()),
            "f": pa.array(rng.normal(size=n).round(1)),
        }
    )
    for cols in (["i"], ["s"], ["f"], ["i", "s"], ["s", "f", "i"]):
        assert hash_key_columns(t, cols).tolist() == _rowwise(t, cols)


def test_hash_key_columns_errors_and_empty() -> None:
    t = pa.table({"l": pa.array([[1], [2]]), "a": [1, 2]})
    with pytest.raises(KeyEncodingError, match="list"):
        hash_key_columns(t, ["l"])
    with pytest.raises(ValueError, match="missing|not found"):
        hash_key_columns(t, ["zz"])
    with pytest.raises(ValueError):
        hash_key_columns(t, [])
    assert hash_key_columns(t.slice(0, 0), ["a"]).tolist() == []


def test_cache_gives_identical_results() -> None:
    cache = KeyHashCache(max_entries=4)
    values = ["a", 1, 1.0, True, ("a", 1), ("a", 1.0), b"a", None, "a", 1, True] * 3
    expected = [hash_key(v) for v in values]
    assert hash_values(values).tolist() == expected
    assert hash_values(values, cache=cache).tolist() == expected
    assert len(cache) <= 4
    assert cache.hits > 0
    big = KeyHashCache()
    assert hash_key_columns(MIXED, ["s", "i"], cache=big).tolist() == _rowwise(MIXED, ["s", "i"])
    with pytest.raises(KeyEncodingError):
        cache.hash([1])
