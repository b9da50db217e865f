"""The result of a job: the merged table (:class:`Result`) and what happened (:class:`Stats`)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, fields
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from dpa.aggregates.state import concat_results
from dpa.engine.output import JobFigures, RunOutput
from dpa.errors import ConfigError
from dpa.metrics import skew


@dataclass(kw_only=True)
class Stats(JobFigures):
    """What happened in a job: the runtime's figures (:class:`~dpa.engine.output.JobFigures`:
    ``processed``, ``forwarded``, ``emitted``, ``blocks_per_mapper``, ``rebalances``,
    ``merged``, ``wall_time_s``, ``virtual_time_s``, ``peak_queue``, ``timeline``,
    ``recoveries``, ``checkpoints``, ``merged_keys``, ``state_moves``, ``scaling``,
    ``group_apply``, ``extra``) and what the job was.

    Attributes:
        final_tokens: Tokens per reducer at the end (ring policies), else None.
        ring_version: Routing-state version at the end (0 = never changed).
        runtime: ``"ray"`` or ``"local"``.
        policy: Policy name.
        num_keys: Keys in the result (groups, for a per-group function).
        job_id: The job's short id, as metrics and logs tag it.
    """

    final_tokens: list[int] | None
    ring_version: int
    runtime: str
    policy: str
    num_keys: int = 0
    job_id: str = ""

    @classmethod
    def from_output(cls, out: RunOutput, *, runtime: str, policy: str, job_id: str) -> Stats:
        """The stats of a run from what its runtime returned (its figures, each list and
        dict copied)."""
        figures = {f.name: copy.copy(getattr(out, f.name)) for f in fields(JobFigures)}
        snap = out.final_snapshot
        return cls(**figures, final_tokens=list(snap.token_counts) if hasattr(snap, "token_counts") else None,
                   ring_version=snap.version, runtime=runtime, policy=policy, job_id=job_id)

    @property
    def skew(self) -> float:
        """The DPA paper's skew ``S = (W - U) / (M - U)`` over :attr:`processed` (eq. 2)."""
        return skew(self.processed)

    @property
    def total_processed(self) -> int:
        return sum(self.processed)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict of every field plus ``skew``."""
        return {
            "processed": list(self.processed),
            "forwarded": list(self.forwarded),
            "emitted": list(self.emitted),
            "blocks_per_mapper": list(self.blocks_per_mapper),
            "rebalances": [e.to_dict() for e in self.rebalances],
            "final_tokens": self.final_tokens,
            "ring_version": self.ring_version,
            "merged": self.merged,
            "wall_time_s": self.wall_time_s,
            "virtual_time_s": self.virtual_time_s,
            "peak_queue": list(self.peak_queue),
            "runtime": self.runtime,
            "policy": self.policy,
            "num_keys": self.num_keys,
            "job_id": self.job_id,
            "skew": self.skew,
            "timeline": [{"time_s": t, "queue_lengths": list(q), "version": v} for t, q, v in self.timeline],
            "recoveries": [r.as_dict() for r in self.recoveries],
            "checkpoints": self.checkpoints,
            "merged_keys": self.merged_keys,
            "state_moves": self.state_moves,
            "scaling": [e.as_dict() for e in self.scaling],
            "group_apply": self.group_apply,
            **self.extra,
        }


def restore_key_types(table: pa.Table, key_types: dict[str, pa.DataType]) -> pa.Table:
    """``table`` with the named key columns cast back to their input types (a dictionary
    key column is decoded while the job runs, so the output keeps the input's type)."""
    for name, dtype in key_types.items():
        if name in table.column_names and table.schema.field(name).type != dtype:
            idx = table.schema.get_field_index(name)
            column = pc.dictionary_encode(table[name]) if pa.types.is_dictionary(dtype) else table[name]
            try:
                column = column.cast(dtype)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # e.g. another index width
                pass
            table = table.set_column(idx, table.schema.field(name).with_type(column.type), column)
    return table


class Result:
    """The merged result of a job, with its :class:`Stats`.

    The result has the key column(s) followed by the reducer's output column. On the Ray
    runtime the per-reducer parts stay in the object store (:attr:`arrow_refs`) until
    asked for, so :meth:`to_ray_dataset` and the Spark bridge hand them on without
    collecting on the driver; :meth:`to_arrow`, :meth:`to_pandas` and :meth:`to_dict`
    gather them. The result of a Spark DataFrame's job (``dpa.run(spark_df, ...)``) also
    holds the result as a Spark DataFrame: :meth:`to_spark`.
    """

    def __init__(self, tables: list[pa.Table] | None, empty: pa.Table, key_cols: list[str],
                 value_col: str | list[str], stats: Stats, arrow_refs: list[Any] | None = None,
                 key_types: dict[str, pa.DataType] | None = None,
                 result_meta: list[tuple[int, pa.Schema, int]] | None = None) -> None:
        self._tables = tables
        self._empty = empty
        self._table: pa.Table | None = None
        self.key_columns = key_cols
        #: The output columns after the keys: one per aggregate.
        self.value_columns = [value_col] if isinstance(value_col, str) else list(value_col)
        self.value_column = self.value_columns[0] if len(self.value_columns) == 1 else None
        self.stats = stats
        self.arrow_refs = arrow_refs
        self._result_meta = result_meta  # (rows, schema, bytes) per ref, as the reducers handed them over
        self._dataset: Any = None
        # Key columns whose input type the job decoded (dictionaries): cast back in to_arrow.
        self._key_types = dict(key_types or {})
        self._spark_frame: Any = None

    @property
    def schema(self) -> pa.Schema:
        """Schema of the result table."""
        return self.to_arrow().schema if self._tables is not None or self.arrow_refs is None else self._empty.schema

    def to_arrow(self) -> pa.Table:
        """The result as one ``pyarrow.Table``."""
        if self._table is None:
            tables = self._tables
            if tables is None:
                import ray

                tables = ray.get(list(self.arrow_refs or []))
                self._tables = tables
            self._table = restore_key_types(concat_results(tables, self._empty), self._key_types)
        return self._table

    def to_ray_dataset(self) -> Any:
        """The result as a ``ray.data.Dataset``, without gathering it on the driver.

        On the Ray runtime the dataset's blocks are the reducers' result tables, where they
        already are in the object store (:func:`dpa.runtime.ray.dataset.result_dataset`): their
        schemas come with them from the reducers, and a block whose column types differ
        from the others' is cast in place. It holds the same rows and types as :meth:`to_arrow`. The in-process
        runtime's table is put into the object store. The dataset is built once per result.
        """
        if self._dataset is None:
            from dpa.runtime.ray.dataset import result_dataset, tables_dataset

            if self.arrow_refs is not None:
                self._dataset = result_dataset(list(self.arrow_refs), self._empty, self._result_meta)
            else:
                self._dataset = tables_dataset(list(self._tables or []), self._empty)
        return self._dataset

    def to_spark(self) -> Any:
        """The result as a ``pyspark.sql.DataFrame``, for a job whose input was a Spark
        DataFrame (the key columns keep their Spark types; see :mod:`spark_bridge`).

        Raises:
            ConfigError: The input was not a Spark DataFrame.
        """
        if self._spark_frame is None:
            raise ConfigError("to_spark() needs a job whose input was a Spark DataFrame; for this result use "
                              "spark.createDataFrame(result.to_pandas()) or result.to_arrow()")
        return self._spark_frame

    def set_spark_frame(self, frame: Any) -> None:
        """Attaches the Spark DataFrame :meth:`to_spark` returns (set by :mod:`spark_bridge`)."""
        self._spark_frame = frame

    def to_pandas(self) -> Any:
        """The result as a ``pandas.DataFrame``."""
        return self.to_arrow().to_pandas()

    def to_dict(self, row: str = "tuple") -> dict[Any, Any]:
        """``{key: value}``; multi-column keys become tuples.

        Args:
            row: For several aggregates per job (a list of reducers), each key's values as a
                ``"tuple"`` (in the list's order, the default) or a ``"dict"`` of output
                column -> value. A single reducer gives its value either way.
        """
        if row not in ("tuple", "dict"):
            raise ValueError(f"row must be 'tuple' or 'dict', got {row!r}")
        if not self.key_columns:
            raise ConfigError("this result has no per-key value (a per-group function's rows, dpa.GroupApply): "
                              "use to_arrow(), to_pandas() or to_ray_dataset()")
        table = self.to_arrow()
        if self.value_column is not None:
            values = table[self.value_column].to_pylist()
        else:
            columns = [table[c].to_pylist() for c in self.value_columns]
            values = (list(zip(*columns)) if row == "tuple"
                      else [dict(zip(self.value_columns, v)) for v in zip(*columns)])
        if len(self.key_columns) == 1:
            keys = table[self.key_columns[0]].to_pylist()
        else:
            keys = list(zip(*(table[c].to_pylist() for c in self.key_columns)))
        return dict(zip(keys, values))

    def __len__(self) -> int:
        return self.to_arrow().num_rows

    def __repr__(self) -> str:
        return f"Result({len(self)} keys, S={self.stats.skew:.3f}, {len(self.stats.rebalances)} rebalances)"
