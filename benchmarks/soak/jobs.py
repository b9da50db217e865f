"""What the soak's jobs run: map functions, keys and reducers (some that raise on
purpose), the input of a job in its source kind (:func:`prepare`) and the pure-Python
oracle its result is checked against (:func:`oracle`, :func:`compare`).
"""

from __future__ import annotations

import collections
import heapq
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

import dpa
from benchmarks.soak.specs import COST_S, POISON, POISON_STR, JobSpec

# ----------------------------------------------------------------------------- user code
# Module-level so that Ray can pickle them (by value: see _pickle_by_value).

def _value_of(record: Any) -> Any:
    """The ``v`` field of a dict/tuple record, or the scalar itself."""
    if isinstance(record, dict):
        return record["v"]
    if isinstance(record, tuple):
        return record[2]
    return record


def explode(record: Any) -> list[Any]:
    """A per-record ``map_fn``: drops about a fifth of the records and doubles another fifth."""
    v = _value_of(record)
    if v is None:
        return [record]
    if isinstance(v, str):
        last = v[-1]
        if last in "05":
            return []
        return [record, v + "x"] if last in "16" else [record]
    m = v % 5
    if m == 0:
        return []
    if m != 1:
        return [record]
    if isinstance(record, dict):
        return [record, {**record, "v": v + 1}]
    if isinstance(record, tuple):
        return [record, (record[0], record[1], v + 1, record[3])]
    return [record, v + 1]


def map_poison(record: Any) -> list[Any]:
    """A ``map_fn`` that raises on the poisoned record."""
    if _value_of(record) in (POISON, POISON_STR):
        raise ValueError(f"map_fn refuses the poisoned record {record!r}")
    return [record]


def batch_filter_arrow(table: pa.Table) -> pa.Table:
    """A ``BatchMap`` function: keeps the rows whose ``v`` is not a multiple of 4 (nor null)."""
    return table.filter(pc.not_equal(pc.bit_wise_and(table["v"], 3), 0))


def batch_filter_pandas(df: Any) -> Any:
    """:func:`batch_filter_arrow` on a pandas DataFrame (no nulls)."""
    return df[df["v"] % 4 != 0]


def _keep_batch_filtered(record: dict[str, Any]) -> list[dict[str, Any]]:
    """What the batch filters do to one record (the oracle's view)."""
    v = record["v"]
    return [record] if v is not None and v % 4 != 0 else []


def key_upper(record: dict[str, Any]) -> Any:
    """A callable key over dict records."""
    k = record["k"]
    return None if k is None else k.upper()


def key_pair(record: Any) -> tuple[Any, ...]:
    """A callable key returning a tuple (a composite key)."""
    if isinstance(record, dict):
        return (record["k2"], (record["k"] or "")[:3])
    return (record[1], record[0])


def key_tuple_field(record: tuple[Any, ...]) -> int:
    """A callable key over tuple records."""
    return record[1] - 2


def key_scalar(value: Any) -> Any:
    """A callable key over scalar records."""
    if value is None:
        return None
    return value[:2] if isinstance(value, str) else value % 7


def key_as_list(record: dict[str, Any]) -> list[Any]:
    """A bad key function: a list cannot be a key."""
    return [record["k"]]


def _span_add(acc: list[Any], value: Any) -> list[Any]:
    acc = list(acc)
    acc[0] += 1
    if value is not None:
        if acc[1] is None or value < acc[1]:
            acc[1] = value
        if acc[2] is None or value > acc[2]:
            acc[2] = value
    return acc


def _span_merge(a: list[Any], b: list[Any]) -> list[Any]:
    lows = [x for x in (a[1], b[1]) if x is not None]
    highs = [x for x in (a[2], b[2]) if x is not None]
    return [a[0] + b[0], min(lows) if lows else None, max(highs) if highs else None]


def span_text(count: int, low: Any, high: Any) -> str:
    """The output of :class:`Span`: records, smallest and largest non-null value."""
    return f"{count}|{low!r}|{high!r}"


class Span(dpa.Reducer):
    """A user reducer: ``"count|min|max"`` per key (nulls counted, not compared)."""

    def create(self) -> list[Any]:
        return [0, None, None]

    def add(self, acc: list[Any], value: Any) -> list[Any]:
        return _span_add(acc, value)

    def merge(self, a: list[Any], b: list[Any]) -> list[Any]:
        return _span_merge(a, b)

    def finalize(self, acc: list[Any]) -> str:
        return span_text(*acc)


class SpanNoMerge(dpa.Reducer):
    """:class:`Span` without ``merge``: valid only under policies that keep keys in place."""

    def create(self) -> list[Any]:
        return [0, None, None]

    def add(self, acc: list[Any], value: Any) -> list[Any]:
        return _span_add(acc, value)

    def finalize(self, acc: list[Any]) -> str:
        return span_text(*acc)


class BombOnAdd(Span):
    """A user reducer whose ``add`` raises on the poisoned value."""

    def add(self, acc: list[Any], value: Any) -> list[Any]:
        if value in (POISON, POISON_STR):
            raise ArithmeticError(f"add refuses the poisoned value {value!r}")
        return _span_add(acc, value)


class BombOnFinalize(Span):
    """A user reducer whose ``finalize`` raises."""

    def finalize(self, acc: list[Any]) -> str:
        raise ArithmeticError(f"finalize refuses {acc!r}")


# ----------------------------------------------------------------------------- data
SCHEMA = pa.schema([("k", pa.string()), ("k2", pa.int64()), ("v", pa.int64()), ("f", pa.float64())])
TUPLE_FIELD = {"k": "f0", "v": "f2", "f": "f3"}
TUPLE_INDEX = {"k": 0, "v": 2, "f": 3}


@dataclass
class Prepared:
    """A job's dpa arguments and the records its oracle sees."""

    source: Any
    key: Any
    reducer: dpa.Reducer
    map_fn: Any
    records: list[Any]
    py_key: Callable[[Any], Any]
    py_value: Callable[[Any], Any]
    py_map: Callable[[Any], list[Any]] | None


def _columns(spec: JobSpec) -> dict[str, list[Any]]:
    rng = random.Random(spec.seed)
    n = spec.size
    k = [f"k{int(rng.paretovariate(1.2)) % spec.vocab}" for _ in range(n)]
    k2 = [rng.randrange(4) for _ in range(n)]
    v = [rng.randint(-1000, 1000) for _ in range(n)]
    f = [round(rng.uniform(-100.0, 100.0), 3) for _ in range(n)]
    if spec.nulls:
        for col, p in ((k, 0.02), (v, 0.05), (f, 0.05)):
            for i in range(n):
                if rng.random() < p:
                    col[i] = None
    if n and (spec.map == "poison" or spec.reducer == "bomb_add"):
        v[-1] = POISON
        if spec.source == "scalars" and spec.scalar_type == "str":
            k[-1] = POISON_STR
    return {"k": k, "k2": k2, "v": v, "f": f}


def _arrow_chunks(table: pa.Table, rng: random.Random, raise_after: int | None) -> Iterator[pa.Table]:
    """A generator of Arrow tables of random sizes (some empty) covering ``table``."""
    start, emitted = 0, 0
    while start < table.num_rows or emitted == 0:
        if raise_after is not None and emitted >= raise_after:
            raise RuntimeError(f"the input generator broke after {emitted} tables")
        length = rng.choice((0, 1, max(1, table.num_rows // 8), max(1, table.num_rows // 3)))
        yield table.slice(start, length)
        start += length
        emitted += 1
    if raise_after is not None:
        raise RuntimeError(f"the input generator broke after {emitted} tables")


def prepare(spec: JobSpec) -> Prepared:
    """Builds the job's source, key, reducer and ``map_fn``, and the oracle's records."""
    cols = _columns(spec)
    kind = spec.kind
    if kind == "dict":
        records: list[Any] = [dict(zip(cols, row)) for row in zip(*cols.values())]
    elif kind == "tuple":
        records = list(zip(cols["k"], cols["k2"], cols["v"], cols["f"]))
    else:
        records = list(cols["k"] if spec.scalar_type == "str" else cols["v"])

    if spec.source == "arrow":
        source: Any = pa.table(cols, schema=SCHEMA)
    elif spec.source == "pandas":
        source = pa.table(cols, schema=SCHEMA).to_pandas()
    elif spec.source == "arrow_gen":
        raise_after = 2 if spec.bad == "generator_raises" else None
        source = _arrow_chunks(pa.table(cols, schema=SCHEMA), random.Random(spec.seed + 1), raise_after)
    else:
        source = list(records)

    # Key: dpa's argument and the oracle's function.
    py_key: Callable[[Any], Any]
    if spec.key == "missing":
        key: Any = "no_such_column"
        py_key = key_upper
    elif spec.key == "list":
        key = py_key = key_as_list
    elif kind == "dict":
        key, py_key = {
            "column": ("k", lambda r: r["k"]),
            "multi": (["k", "k2"], lambda r: (r["k"], r["k2"])),
            "callable": (key_upper, key_upper),
            "callable_tuple": (key_pair, key_pair),
        }[spec.key]
    elif kind == "tuple":
        key, py_key = {
            "column": ("f0", lambda r: r[0]),
            "column_int": (0, lambda r: r[0]),
            "multi": (["f0", "f1"], lambda r: (r[0], r[1])),
            "callable": (key_tuple_field, key_tuple_field),
            "callable_tuple": (key_pair, key_pair),
        }[spec.key]
    else:
        key, py_key = (None, lambda r: r) if spec.key == "default" else (key_scalar, key_scalar)

    # Reducer column: dpa's name and the oracle's accessor.
    col = spec.column
    if kind == "dict" and col is not None:
        dpa_col: str | None = col
        py_value: Callable[[Any], Any] = lambda r: r[col]  # noqa: E731
    elif kind == "tuple" and col is not None:
        dpa_col, idx = TUPLE_FIELD[col], TUPLE_INDEX[col]
        py_value = lambda r: r[idx]  # noqa: E731
    else:
        dpa_col, py_value = None, lambda r: r  # noqa: E731
    reducer: dpa.Reducer = {
        "count": lambda: dpa.Count(),
        "sum": lambda: dpa.Sum(dpa_col),
        "min": lambda: dpa.Min(dpa_col),
        "max": lambda: dpa.Max(dpa_col),
        "mean": lambda: dpa.Mean(dpa_col),
        "collect": lambda: dpa.Collect(dpa_col),
        "topk": lambda: dpa.TopK(dpa_col, k=spec.topk_k),
        "user": lambda: Span(dpa_col, name="span"),
        "nomerge": lambda: SpanNoMerge(dpa_col, name="span"),
        "cost": lambda: dpa.WithCost(dpa.Count(), COST_S),
        "bomb_add": lambda: BombOnAdd(dpa_col, name="span"),
        "bomb_finalize": lambda: BombOnFinalize(dpa_col, name="span"),
    }[spec.reducer]()
    if spec.long:
        reducer = dpa.WithCost(reducer, spec.cost_s)

    map_fn: Any = None
    py_map: Callable[[Any], list[Any]] | None = None
    if spec.map == "explode":
        map_fn = py_map = explode
    elif spec.map == "poison":
        map_fn = py_map = map_poison
    elif spec.map == "batch_arrow":
        map_fn, py_map = dpa.BatchMap(batch_filter_arrow), _keep_batch_filtered
    elif spec.map == "batch_pandas":
        map_fn, py_map = dpa.BatchMap(batch_filter_pandas, format="pandas"), _keep_batch_filtered
    return Prepared(source, key, reducer, map_fn, records, py_key, py_value, py_map)


# ----------------------------------------------------------------------------- oracle
def oracle(spec: JobSpec, prep: Prepared) -> tuple[dict[Any, Any], int]:
    """The expected ``{key: value}`` in pure Python, and the records the reducers should see."""
    records = prep.records
    if prep.py_map is not None:
        records = [out for r in records for out in prep.py_map(r)]
    keys = [prep.py_key(r) for r in records]
    if spec.reducer in ("count", "cost"):
        return dict(collections.Counter(keys)), len(records)
    groups: dict[Any, list[Any]] = {}
    for key, record in zip(keys, records):
        groups.setdefault(key, []).append(prep.py_value(record))
    out: dict[Any, Any] = {}
    for key, values in groups.items():
        present = [x for x in values if x is not None]
        if spec.reducer == "sum":
            out[key] = (math.fsum(present) if isinstance(present[0], float) else sum(present)) if present else None
        elif spec.reducer == "min":
            out[key] = min(present) if present else None
        elif spec.reducer == "max":
            out[key] = max(present) if present else None
        elif spec.reducer == "mean":
            out[key] = math.fsum(present) / len(present) if present else None
        elif spec.reducer == "collect":
            out[key] = values
        elif spec.reducer == "topk":
            out[key] = heapq.nlargest(spec.topk_k, present)
        else:  # Span, SpanNoMerge
            out[key] = span_text(len(values), min(present) if present else None, max(present) if present else None)
    return out, len(records)


def _same(reducer: str, got: Any, want: Any) -> bool:
    if reducer == "collect":
        return got is not None and collections.Counter(got) == collections.Counter(want)
    if isinstance(want, float) or isinstance(got, float):
        if got is None or want is None:
            return got is want
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-6)
    return got == want


def compare(spec: JobSpec, got: dict[Any, Any], want: dict[Any, Any]) -> str | None:
    """None if ``got`` equals the oracle's ``want``, else what differs (a few examples)."""
    problems = []
    missing = [k for k in want if k not in got]
    extra = [k for k in got if k not in want]
    if missing:
        problems.append(f"{len(missing)} keys missing, e.g. {missing[:3]!r}")
    if extra:
        problems.append(f"{len(extra)} unexpected keys, e.g. {extra[:3]!r}")
    wrong = [(k, got[k], want[k]) for k in want if k in got and not _same(spec.reducer, got[k], want[k])]
    if wrong:
        shown = "; ".join(f"{k!r}: got {str(g)[:60]} want {str(w)[:60]}" for k, g, w in wrong[:3])
        problems.append(f"{len(wrong)} of {len(want)} values differ, e.g. {shown}")
    return "; ".join(problems) or None


# ----------------------------------------------------------------------------- one job
