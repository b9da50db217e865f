"""A job's result as a ``ray.data.Dataset`` whose blocks are the reducers' own output tables.

On the Ray runtime every reducer hands its finalized table to an object owned by the driver
(:attr:`dpa.Result.arrow_refs`). :func:`result_dataset` builds a dataset over those objects:
no block passes through the driver. Only their schemas do (the reducers hand each block's
rows and schema over with it; without them, one small task per block reads them), because reducers type their output from what they saw: one reducer's ``Sum`` over blocks that
were ``int64`` and another's over ``float64`` ones, or a reducer that got no key (an empty
table), give blocks of different types. Blocks that differ from the promoted schema are cast
where they are, by one task each, with the same promotion rules as
:meth:`dpa.Result.to_arrow` (:func:`dpa.aggregates.state.concat_results`), so that ``to_ray_dataset()``
and ``to_arrow()`` hold the same table. Empty blocks are dropped.

The approach is generic: it looks at Arrow schemas only, so any reducer's output type
(scalars, lists, structs, decimals, timestamps) goes through unchanged.
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa

logger = logging.getLogger(__name__)

__all__ = ["result_dataset", "tables_dataset"]

_remote_fns: dict[str, Any] = {}


def _schema_of(table: pa.Table) -> tuple[int, pa.Schema]:
    return table.num_rows, table.schema


def _unify(tables: list[pa.Table]) -> pa.Table:
    """:func:`dpa.input.records.unify` as :func:`dpa.aggregates.state.concat_results` calls it, on any tables."""
    from dpa.errors import SchemaError
    from dpa.input.records import unify

    try:
        return unify(tables)
    except SchemaError:
        return unify(tables, float_rounding=True)


def _conform(table: pa.Table, target: pa.Schema) -> pa.Table:
    return _unify([target.empty_table(), table]).cast(target)


def _remote(name: str) -> Any:
    """The Ray remote function ``name`` (defined once per process, on first use)."""
    fn = _remote_fns.get(name)
    if fn is None:
        import ray

        # num_cpus=0: schema reads and casts are light, and must not wait behind a busy pool.
        fn = ray.remote(num_cpus=0)({"schema_of": _schema_of, "conform": _conform}[name])
        _remote_fns[name] = fn
    return fn


def promoted_schema(schemas: list[pa.Schema], empty: pa.Table) -> pa.Schema:
    """The schema the blocks with ``schemas`` concatenate to (as :func:`dpa.aggregates.state.concat_results`)."""
    return _unify([s.empty_table() for s in schemas]).schema if schemas else empty.schema


def result_dataset(refs: list[Any], empty: pa.Table, meta: list[tuple[int, pa.Schema, int]] | None = None) -> Any:
    """A ``ray.data.Dataset`` over the result tables behind ``refs``.

    Args:
        refs: Object refs to the per-reducer result tables (driver-owned).
        empty: The result's empty table (its schema when every block is empty).
        meta: ``(rows, schema, bytes)`` of each block, as the reducers handed them over;
            None = read by one small task per block.

    Returns:
        A materialized ``ray.data.Dataset`` whose blocks are the non-empty result tables,
        all with one schema.
    """
    import ray
    import ray.data

    if not refs:
        return ray.data.from_arrow(empty)
    known = meta is not None and len(meta) == len(refs)
    if not known:
        meta = ray.get([_remote("schema_of").remote(r) for r in refs])
    kept = [(ref, m) for ref, m in zip(refs, meta) if m[0]]
    if not kept:
        return ray.data.from_arrow(empty)
    schemas = [m[1] for _, m in kept]
    # Concatenating empty tables of each schema gives the promoted schema (null -> any type,
    # narrower -> wider ints, int -> float).
    target = promoted_schema(schemas, empty)
    conform = _remote("conform")
    blocks = [ref if m[1].equals(target) else conform.remote(ref, target) for ref, m in kept]
    casts = sum(1 for _, m in kept if not m[1].equals(target))
    if casts:
        logger.debug("to_ray_dataset: %d of %d result blocks cast to %s", casts, len(kept), target)
    elif known:
        dataset = _dataset_of(blocks, [m for _, m in kept])
        if dataset is not None:
            return dataset
    return ray.data.from_arrow_refs(blocks)


def _dataset_of(blocks: list[Any], meta: list[tuple[int, pa.Schema, int]]) -> Any:
    """A materialized dataset over ``blocks`` whose ``(rows, schema, bytes)`` are known,
    built as ``ray.data.from_arrow_refs`` builds it, without its task per block that reads
    each block's metadata again. None if this Ray's Data internals differ (the caller then
    calls ``from_arrow_refs``)."""
    try:
        from ray.data._internal.logical.interfaces import LogicalPlan
        from ray.data._internal.logical.operators import FromArrow
        from ray.data._internal.stats import DatasetStats
        from ray.data.block import BlockMetadataWithSchema
        from ray.data.context import DataContext
        from ray.data.dataset import MaterializedDataset

        metadata = [BlockMetadataWithSchema(num_rows=int(rows), size_bytes=int(size), exec_stats=None,
                                            input_files=None, schema=schema) for rows, schema, size in meta]
        stats = DatasetStats(metadata={"FromArrow": metadata}, parent=None)
        context = DataContext.get_current().copy()
        return MaterializedDataset(LogicalPlan(FromArrow(blocks, metadata), context), context, stats)
    except Exception:  # (another Ray version's internals)
        logger.debug("building the result dataset from known metadata failed; using from_arrow_refs", exc_info=True)
        return None


def tables_dataset(tables: list[pa.Table | None], empty: pa.Table) -> Any:
    """A ``ray.data.Dataset`` over in-process result tables (``runtime="local"``)."""
    import ray.data

    from dpa.aggregates.state import concat_results

    return ray.data.from_arrow(concat_results(tables, empty))
