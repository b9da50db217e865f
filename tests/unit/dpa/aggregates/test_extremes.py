"""MaxBy / MinBy: against DuckDB's ``arg_max_null`` / ``arg_min_null`` where the ordering
values do not tie, against the documented tie rule where they do, and through the scalar
contract (a list with a user-defined reducer) as through the columnar one."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import dpa
from dpa.errors import ConfigError, SchemaError

duckdb = pytest.importorskip("duckdb")

KEYS = ["hot", "a", "é", "", None]
SETTINGS = settings(max_examples=30, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def tables(draw, ties: bool):
    """Skewed keys; ``v`` strings (some null); ``bi`` integer and ``bf`` float ordering
    values (some null; ``bf`` holds NaN and ``-0.0``). Without ``ties`` every ordering
    value of a column is distinct (one NaN at most), so the answer is one row's."""
    n = draw(st.integers(0, 200))
    hot = draw(st.floats(0.3, 0.95))
    keys = [("hot" if draw(st.floats(0, 1)) < hot else draw(st.sampled_from(KEYS))) for _ in range(n)]
    values = [draw(st.one_of(st.none(), st.text("xyz", max_size=2))) for _ in range(n)]
    if ties:
        bi = [draw(st.one_of(st.none(), st.integers(0, 3))) for _ in range(n)]
        bf = [draw(st.one_of(st.none(), st.sampled_from([math.nan, -0.0, 0.0, 1.5]))) for _ in range(n)]
    else:
        order = draw(st.permutations(range(n)))
        bi = [None if draw(st.floats(0, 1)) < 0.2 else o - n // 2 for o in order]
        bf = [None if b is None else float(b) for b in bi]
        if n:
            bf[draw(st.integers(0, n - 1))] = math.nan
        bf = [-0.0 if b == 0.0 else b for b in bf]
    return pa.table({"k": pa.array(keys, pa.string()), "v": pa.array(values, pa.string()),
                     "bi": pa.array(bi, pa.int64()), "bf": pa.array(bf, pa.float64())})


def _ours(table: pa.Table, reducers: list, policy: str, batch_size: int) -> dict:
    named = [r.alias(f"a{i}") for i, r in enumerate(reducers)]
    out = dpa.run(table, key="k", reducer=named, runtime="local", policy=policy, batch_size=batch_size)
    return {r["k"]: tuple(r[f"a{i}"] for i in range(len(reducers))) for r in out.to_arrow().to_pylist()}


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


@SETTINGS
@given(table=tables(ties=False), policy=st.sampled_from(["hybrid", "hash", "shuffle", "pkg"]),
       batch_size=st.sampled_from([5, 32, 1000]))
def test_equal_duckdb_where_ordering_values_do_not_tie(table, policy, batch_size):
    reducers = [dpa.MaxBy("v", by="bi"), dpa.MinBy("v", by="bi"), dpa.MaxBy("v", by="bf"), dpa.MinBy("v", by="bf"),
                dpa.MaxBy("bi", by="bf"), dpa.MinBy("bf", by="bi")]
    ours = _ours(table, reducers, policy, batch_size)
    con = duckdb.connect()
    con.register("t", table)
    theirs = {r[0]: r[1:] for r in con.execute(
        "SELECT k, arg_max_null(v, bi), arg_min_null(v, bi), arg_max_null(v, bf), arg_min_null(v, bf), "
        "arg_max_null(bi, bf), arg_min_null(bf, bi) FROM t GROUP BY k").fetchall()}
    assert ours.keys() == theirs.keys()
    for k, want in theirs.items():
        assert all(_same(a, b) for a, b in zip(ours[k], want)), (k, ours[k], want)


def _rank(value) -> tuple:
    """The documented order of ordering values: NaN above every number."""
    nan = isinstance(value, float) and math.isnan(value)
    return (nan, 0.0 if nan else value)  # (every NaN one rank: NaN != NaN)


def _oracle(rows: list[dict], value: str, by: str, largest: bool) -> dict:
    """The documented rule, row by row: the best ``by``; among ties, a value before a NaN
    before a null, then the largest (MaxBy) or smallest (MinBy) value."""
    best: dict = {}
    for r in rows:
        best.setdefault(r["k"], None)
        if r[by] is None:
            continue
        v = r[value]
        bad = (v is None, isinstance(v, float) and math.isnan(v))
        cand = (_rank(r[by]), bad, v)
        old = best[r["k"]]
        if old is None:
            best[r["k"]] = cand
            continue
        if cand[0] != old[0]:
            better = (cand[0] > old[0]) == largest
        elif cand[1] != old[1]:
            better = cand[1] < old[1]
        else:
            better = not any(cand[1]) and ((v > old[2]) if largest else (v < old[2]))
        if better:
            best[r["k"]] = cand
    return {k: None if b is None else b[2] for k, b in best.items()}


@SETTINGS
@given(table=tables(ties=True), policy=st.sampled_from(["hybrid", "shuffle", "pkg"]),
       batch_size=st.sampled_from([3, 16, 1000]))
def test_ties_are_broken_by_the_value_whatever_the_split(table, policy, batch_size):
    """Many rows share an ordering value: the answer is the documented rule's, however the
    records were batched and the hot key split."""
    cases = [("v", "bi", True), ("v", "bi", False), ("v", "bf", True), ("v", "bf", False), ("bf", "bi", True),
             ("bf", "bi", False)]
    reducers = [(dpa.MaxBy if largest else dpa.MinBy)(value, by=by) for value, by, largest in cases]
    ours = _ours(table, reducers, policy, batch_size)
    rows = table.to_pylist()
    for i, (value, by, largest) in enumerate(cases):
        want = _oracle(rows, value, by, largest)
        assert ours.keys() == want.keys()
        for k in want:
            got = ours[k][i]
            if value == "bf" and got == 0.0 and want[k] == 0.0:
                continue  # -0.0 and 0.0 tie as values too: either may come out
            assert _same(got, want[k]), (reducers[i], k, got, want[k])


class Tag(dpa.Reducer):
    """A user reducer (no columnar path): the list becomes a record-by-record composite."""

    def __init__(self) -> None:
        super().__init__("v", "tags")

    def create(self):
        return 0

    def add(self, acc, value):
        return acc + (value is not None)

    def merge(self, a, b):
        return a + b


@SETTINGS
@given(table=tables(ties=True), batch_size=st.sampled_from([3, 1000]))
def test_the_scalar_contract_answers_as_the_columnar_one(table, batch_size):
    reducers = [dpa.MaxBy("v", by="bi"), dpa.MinBy("v", by="bf"), dpa.MaxBy("bf", by="bf")]
    columnar = _ours(table, reducers, "shuffle", batch_size)
    scalar = _ours(table, [*reducers, Tag()], "shuffle", batch_size)
    assert columnar.keys() == scalar.keys()
    for k, got in columnar.items():
        assert all(_same(a, b) or a == b == 0.0 for a, b in zip(got, scalar[k][:3])), (k, got, scalar[k])


def test_latest_status_per_order():
    table = pa.table({"order": [1, 1, 1, 2, 2, 3], "status": ["new", "paid", "sent", "new", None, "new"],
                      "ts": [10, 30, 20, 5, 7, None]})
    out = dpa.run(table, key="order", reducer=[dpa.MaxBy("status", by="ts"), dpa.MinBy("status", by="ts")],
                  runtime="local").to_arrow().sort_by("order")
    assert out.column_names == ["order", "max_by(status, ts)", "min_by(status, ts)"]
    # order 2's latest row has a null status (the result, as in Spark); order 3 has no ts.
    assert out.to_pydict() == {"order": [1, 2, 3], "max_by(status, ts)": ["paid", None, None],
                               "min_by(status, ts)": ["new", "new", None]}
    alone = dpa.run(table, key="order", reducer=dpa.MaxBy("status", by="ts"), runtime="local").to_arrow()
    assert alone.schema.field("max_by").type == pa.string()


def test_values_of_any_type_come_back_with_their_type():
    items = pa.array([[1], [2, 3], None, [4]], pa.list_(pa.int32()))
    table = pa.table({"k": [1, 1, 2, 2], "items": items, "ts": pa.array([1, 2, 3, 4], pa.timestamp("us"))})
    out = dpa.run(table, key="k", reducer=dpa.MinBy("items", by="ts"), runtime="local", batch_size=1).to_arrow()
    assert out.schema.field("min_by").type == pa.list_(pa.int32())
    assert dict(zip(out["k"].to_pylist(), out["min_by"].to_pylist())) == {1: [1], 2: None}


@pytest.mark.parametrize("make, needle", [
    (lambda: dpa.MaxBy(), "needs the column whose value it returns"),
    (lambda: dpa.MaxBy("v"), "needs by=, the column that orders the rows"),
    (lambda: dpa.MinBy("v", by=""), "needs by="),
])
def test_missing_columns_are_config_errors(make, needle):
    with pytest.raises(ConfigError, match=needle):
        make()


@pytest.mark.parametrize("reducer, needle", [
    (dpa.MaxBy("v", by="nope"), "reads column 'nope', which the input does not have"),
    (dpa.MaxBy("nope", by="ts"), "reads column 'nope'"),
    (dpa.MinBy("v", by="tags"), "cannot order rows by values of type list"),
])
def test_bad_columns_are_schema_errors_before_the_job(reducer, needle):
    table = pa.table({"k": [1], "v": ["a"], "ts": [1], "tags": pa.array([["x"]])})
    with pytest.raises(SchemaError, match=needle):
        dpa.run(table, key="k", reducer=reducer, runtime="local")
