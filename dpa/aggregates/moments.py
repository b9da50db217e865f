"""Variance and standard deviation per key, with a numerically stable parallel merge.

The state of a key is ``(n, mean, var)``: the number of non-null values, their mean and
their population variance, i.e. ``m2 / n`` with ``m2`` the sum of squared deviations from
the mean. A batch gets it from Arrow's hash ``count``, ``mean`` and ``variance``; partial
states merge with the pairwise formula of Chan, Golub and LeVeque (1979), generalised to
many parts:

    n = sum(n_i);  mean = sum(n_i * mean_i) / n;
    m2 = sum(m2_i) + sum(n_i * (mean_i - mean) ** 2)

which, unlike sums of squares, loses no precision when the values are large and close
together. Values are read as float64 (integers beyond 2**53 and decimals round, as
Spark's ``var_samp`` does); nulls are ignored; a NaN or an infinity makes the key's result
NaN. A sample variance of fewer than two values is null, as in Spark and DuckDB.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpa._internal.arrays import as_float64, from_numpy, scalar, to_numpy
from dpa.aggregates.builtins import Sum
from dpa.aggregates.contract import ColumnarReducer
from dpa.errors import ConfigError

__all__ = ["Std", "Var"]

#: A float64 zero as an Arrow scalar (a Python 0.0 given to a compute function goes
#: through pyarrow's pandas shim).
_ZERO = scalar(0.0, pa.float64())


class Var(ColumnarReducer):
    """Variance of ``column`` per key, sample (``ddof=1``, Spark's ``var_samp``, the default)
    or population (``sample=False``, ``var_pop``); float64.

    Args:
        column: The numeric column.
        sample: Sample (n - 1) or population (n) variance.
        name: Output column name.
    """

    kind = "var"
    default_name = "var"
    float_rounding = True
    check_type = Sum.check_type

    def __init__(self, column: str | None = None, sample: bool = True, name: str | None = None) -> None:
        if not isinstance(sample, bool):
            raise ConfigError(f"{type(self).__name__} sample must be True or False, got {sample!r}")
        super().__init__(column, name or self.default_name)
        self.sample = sample

    # -- scalar contract (Welford's update, Chan's merge) ------------------------------------
    def create(self) -> tuple[int, float, float]:
        return (0, 0.0, 0.0)

    def add(self, acc: tuple[int, float, float], value: Any) -> tuple[int, float, float]:
        if value is None:
            return acc
        n, mean, m2 = acc
        x = float(value)
        n += 1
        delta = x - mean
        mean += delta / n
        return (n, mean, m2 + delta * (x - mean))

    def merge(self, a: tuple[int, float, float], b: tuple[int, float, float]) -> tuple[int, float, float]:
        (na, ma, qa), (nb, mb, qb) = a, b
        if na == 0:
            return b
        if nb == 0:
            return a
        n = na + nb
        delta = mb - ma
        return (n, ma + delta * nb / n, qa + qb + delta * delta * na * nb / n)

    def finalize(self, acc: tuple[int, float, float]) -> float | None:
        n, _, m2 = acc
        if n == 0 or (self.sample and n < 2):
            return None
        return self._scale(m2 / (n - 1 if self.sample else n))

    def _scale(self, variance: float) -> float:
        return variance

    # -- columnar contract -------------------------------------------------------------------
    def prepare(self, table: pa.Table) -> pa.Table:
        idx = table.schema.get_field_index(self.column)
        return table.set_column(idx, self.column, as_float64(table[self.column]))

    def output_type(self, input_type: pa.DataType | None) -> pa.DataType:
        return pa.float64()

    def state_aggregations(self) -> list[tuple[str | None, str, str]]:
        # Plain Arrow aggregates (so a list of aggregates computes them in its one group-by):
        # the part's count, mean and population variance (Arrow's default ddof=0).
        return [(self.column, "count", "n"), (self.column, "mean", "mean"), (self.column, "variance", "var")]

    def merge_partials(self, table: pa.Table, group_cols: list[str]) -> pa.Table:
        from dpa.aggregates.composite import group_ids

        gid, size = group_ids(table, group_cols)
        _, first = np.unique(gid, return_index=True)
        keys = table.select(group_cols).take(pa.array(first))
        states = self.merge_groups(table, gid, size)
        return pa.table([keys[c] for c in group_cols] + states.columns, names=list(group_cols) + states.column_names)

    def merge_groups(self, table: pa.Table, gid: np.ndarray, size: int) -> pa.Table:
        """Merges partial states by group id (Chan et al.'s parallel combination).

        Args:
            table: State columns ``n``, ``mean`` and ``var`` (population variance of the part).
            gid: Group id per row, in ``[0, size)``.
            size: Number of groups.

        Returns:
            The merged states, row ``g`` for group ``g``.
        """
        n_i = to_numpy(table["n"]).astype(np.float64)
        mean_i = to_numpy(pc.fill_null(table["mean"], _ZERO)).astype(np.float64, copy=False)
        m2_i = to_numpy(pc.fill_null(table["var"], _ZERO)).astype(np.float64, copy=False) * n_i
        n = np.bincount(gid, weights=n_i, minlength=size)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.bincount(gid, weights=n_i * mean_i, minlength=size) / n
            mean = np.where(n > 0, mean, 0.0)
            spread = n_i * (mean_i - mean[gid]) ** 2
            spread = np.where(n_i > 0, spread, 0.0)  # (an empty part adds nothing, even beside a NaN mean)
            m2 = np.bincount(gid, weights=m2_i, minlength=size) + np.bincount(gid, weights=spread, minlength=size)
            var = np.where(n > 0, m2 / n, 0.0)
        return pa.table([from_numpy(n.astype(np.int64)), from_numpy(mean), from_numpy(var)], names=["n", "mean", "var"])

    def finalize_table(self, table: pa.Table, key_cols: list[str]) -> pa.Table:
        n = to_numpy(table["n"]).astype(np.float64)
        m2 = to_numpy(pc.fill_null(table["var"], _ZERO)).astype(np.float64, copy=False) * n
        denominator = n - 1 if self.sample else n
        with np.errstate(invalid="ignore", divide="ignore"):
            values = self._scale_array(m2 / denominator)
        valid = denominator > 0
        out = from_numpy(np.where(valid, values, 0.0), pa.float64(), mask=~valid)
        return pa.table([table[c] for c in key_cols] + [out], names=list(key_cols) + [self.name])

    def _scale_array(self, variance: np.ndarray) -> np.ndarray:
        return variance

    def spark_name(self) -> str:
        if self.name != self.default_name:
            return self.name
        return f"{'var' if self.kind == 'var' else 'stddev'}_{'samp' if self.sample else 'pop'}({self.column})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.column!r}{'' if self.sample else ', sample=False'})"


class Std(Var):
    """Standard deviation of ``column`` per key: the square root of :class:`Var` (sample by
    default, Spark's ``stddev_samp``; ``sample=False`` for ``stddev_pop``)."""

    kind = "std"
    default_name = "std"

    def _scale(self, variance: float) -> float:
        return math.sqrt(variance) if variance == variance else variance

    def _scale_array(self, variance: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return np.sqrt(variance)
