"""Reading a plain parquet scan straight from its files, bypassing the JVM.

``spark.read.parquet(path)`` (optionally narrowed with ``select`` of plain columns) needs no
Spark computation at all: the rows are exactly what the files hold. For such a DataFrame
:func:`parquet_scan` returns a :class:`dpa.ParquetFiles` over the files Spark resolved
(after its own path globbing and filtering), and dpa's mappers read their row groups
themselves with pyarrow; the rows never pass through Spark's executors, Arrow
serialisation in the JVM or the object store. Any other DataFrame (filters, joins, derived
columns, partitioned directories, non-local files, a column type Spark would read
differently from pyarrow) gets ``None`` and goes the general way through Spark.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame

    from dpa.input.sources import ParquetFiles

logger = logging.getLogger(__name__)

__all__ = ["parquet_scan"]


def _name(obj: Any) -> str:
    return str(obj.getClass().getSimpleName())


def _scan_relation(df: DataFrame) -> Any | None:
    """The ``HadoopFsRelation`` under the optimised plan, if it is a bare scan (or plain projection)."""
    node = df._jdf.queryExecution().optimizedPlan()
    if _name(node) == "Project":
        projection = node.projectList()
        if any(_name(projection.apply(i)) != "AttributeReference" for i in range(projection.size())):
            return None
        node = node.child()
    if _name(node) != "LogicalRelation":
        return None
    relation = node.relation()
    if _name(relation) != "HadoopFsRelation" or _name(relation.fileFormat()) != "ParquetFileFormat":
        return None
    return relation


def parquet_scan(df: DataFrame, columns: list[str]) -> ParquetFiles | None:
    """``df``'s files as a :class:`dpa.ParquetFiles` of ``columns``, or None if it is not a plain scan.

    Args:
        df: A Spark DataFrame.
        columns: The columns the job reads (key and reducer input columns).

    Returns:
        The files, when ``df`` is a bare parquet scan (possibly a projection of columns)
        of local, non-partitioned files whose ``columns`` pyarrow reads with exactly the
        Arrow types Spark's types map to; otherwise None (the caller goes through Spark).
    """
    from pyspark.sql.pandas.types import to_arrow_type

    from dpa.errors import DPAError
    from dpa.input.sources import ParquetFiles

    try:
        relation = _scan_relation(df)
    except Exception as exc:  # a plan shape this Spark version does not expose: go through Spark
        logger.debug("no parquet pushdown: cannot read the plan (%s)", exc)
        return None
    if relation is None:
        logger.debug("no parquet pushdown: the DataFrame is not a bare parquet scan")
        return None
    if relation.partitionSchema().length() > 0:
        logger.debug("no parquet pushdown: partitioned directory (partition columns come from paths)")
        return None
    uris = [str(u) for u in relation.location().inputFiles()]
    if not uris or any(urlparse(u).scheme not in ("file", "") for u in uris):
        logger.debug("no parquet pushdown: no files, or files that are not local (%s)", uris[:1])
        return None
    paths = [unquote(urlparse(u).path) for u in uris]
    try:
        files = ParquetFiles(paths, columns)
    except DPAError as exc:  # a column Spark fills with nulls, schemas that differ per file, ...
        logger.debug("no parquet pushdown: %s", exc)
        return None
    fields = {f.name: f for f in df.schema.fields}
    for name in columns:
        try:
            want = to_arrow_type(fields[name].dataType)
        except (KeyError, TypeError):
            return None
        if files.schema.field(name).type != want:
            logger.debug("no parquet pushdown: column %r is %s in the files but %s in Spark", name,
                         files.schema.field(name).type, want)
            return None
    logger.info("parquet pushdown: dpa's mappers read %d file(s) directly", len(paths))
    return files
