"""What a command reads: files given with ``--input``, or a named workload.

Files are CSV/TSV, parquet (a file or a directory), JSON lines, or plain text (whose words
are counted). Named workloads (``dpa run WL4``, ``dpa simulate zipf --records 100k``) come
from the packages that register them in the ``dpa.inputs`` entry point group
(:mod:`dpa.tools.cli.plugins`): each entry is a function ``make(name, options) -> Input``, called
with the name it is registered under and the command line's :class:`InputOptions`.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpa.tools.cli import plugins
from dpa.tools.cli.errors import UsageError

logger = logging.getLogger(__name__)


@dataclass
class Input:
    """A job's source and what ``dpa.run`` needs to read it.

    Attributes:
        source: What ``dpa.run`` takes: an Arrow table, or a list of keys (then ``key`` is None).
        key: The key column of ``source`` (None for a list of keys).
        label: One-line description for the command's first output line.
        total: Records the job will process, when known (the progress bar's 100%).
        map_fn: Optional ``map_fn`` for ``dpa.run`` (e.g. splitting text into words).
        name: Short name for report titles (defaults to ``label``).
    """

    source: Any
    key: Any
    label: str
    total: int | None
    map_fn: Any = None
    name: str | None = None

    def __post_init__(self) -> None:
        if self.name is None:
            self.name = self.label


@dataclass(frozen=True)
class InputOptions:
    """The command line's options for named workloads; each uses those it understands.

    Attributes:
        records: Records of a generated workload.
        keys: Distinct keys of a generated workload.
        z: Zipf exponent.
        mu: Log-normal mu.
        sigma: Log-normal sigma.
        hot_fraction: Share of the hot key of a drifting workload.
        period: Records per hot key of a drifting workload (None: the workload's default).
        seed: Generator seed.
        repeat: How many times to repeat a fixed workload.
    """

    records: int = 1_000_000
    keys: int = 10_000
    z: float = 1.1
    mu: float = 1.789
    sigma: float = 2.366
    hot_fraction: float = 0.3
    period: int | None = None
    seed: int = 0
    repeat: int = 1

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> InputOptions:
        """The options parsed by :func:`dpa.tools.cli.parser.add_source_arguments`."""
        return cls(records=args.records, keys=args.keys, z=args.z, mu=args.mu, sigma=args.sigma,
                   hot_fraction=args.hot_fraction, period=args.period, seed=args.seed, repeat=args.repeat)


def load_input(args: argparse.Namespace) -> Input:
    """Builds the source named on the command line (a named workload or ``--input`` files)."""
    if args.workload and args.input:
        raise UsageError("give either a WORKLOAD or --input files, not both")
    if args.input:
        return _load_files(args)
    if not args.workload:
        names = list(plugins.registered(plugins.INPUTS))
        which = f" ({', '.join(names)})" if names else ""
        raise UsageError(f"name a WORKLOAD{which} or give --input FILE")
    return named_input(args.workload, InputOptions.from_args(args))


def named_input(name: str, options: InputOptions) -> Input:
    """The workload an installed package registers as ``name`` (case-insensitive)."""
    if not plugins.registered(plugins.INPUTS):
        raise UsageError(f"{plugins.not_installed_message(plugins.INPUTS)}; give --input FILE")
    registered_name, make = plugins.load(plugins.INPUTS, name, ignore_case=True)
    inp = make(registered_name, options)
    if not isinstance(inp, Input):
        raise TypeError(f"the dpa.inputs entry {registered_name!r} returned {type(inp).__name__}, not an Input")
    return inp


def keys_of(inp: Input) -> Any:
    """The key stream of an input, in order (a list or a numpy array)."""
    import pyarrow as pa

    source = inp.source
    if isinstance(source, list):
        return source
    table = source if isinstance(source, pa.Table) else pa.table(source)
    if inp.map_fn is not None:
        table = inp.map_fn(table)
    column = table.column(inp.key)
    if pa.types.is_integer(column.type) and column.null_count == 0:
        return column.to_numpy()
    return column.to_pylist()


# ================================================================================= files
def _split_words_of(column: str) -> Any:
    import dpa

    def split(batch: Any) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc

        text = pc.cast(batch.column(column), pa.string())
        words = pc.list_flatten(pc.split_pattern_regex(pc.utf8_lower(text), r"[^\w']+"))
        words = pc.filter(words, pc.not_equal(words, ""))
        return pa.table({"word": words})

    return dpa.BatchMap(split)


def _read_file(path: str) -> tuple[Any, str]:
    """(table, kind) of one input file; kind is 'text' or 'table'."""
    import pyarrow as pa

    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"input {path!r} does not exist")
    suffix = p.suffix.lower()
    if suffix in (".parquet", ".pq") or (p.is_dir() and any(p.glob("*.parquet"))):
        import pyarrow.parquet as pq

        return pq.read_table(p), "table"
    if p.is_dir():
        raise ValueError(f"input directory {path!r} has no parquet files")
    if suffix in (".csv", ".tsv"):
        import pyarrow.csv as pacsv

        opts = pacsv.ParseOptions(delimiter="\t" if suffix == ".tsv" else ",")
        try:
            return pacsv.read_csv(p, parse_options=opts), "table"
        except pa.ArrowInvalid as exc:
            raise ValueError(f"cannot read {path!r} as CSV: {exc}") from None
    if suffix in (".jsonl", ".ndjson"):
        import pyarrow.json as pajson

        try:
            return pajson.read_json(p), "table"
        except pa.ArrowInvalid as exc:
            raise ValueError(f"cannot read {path!r} as JSON lines: {exc}") from None
    with open(p, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    return pa.table({"line": pa.array(lines, type=pa.string())}), "text"


def _load_files(args: argparse.Namespace) -> Input:
    import pyarrow as pa

    tables, kinds = [], set()
    for path in args.input:
        table, kind = _read_file(path)
        tables.append(table)
        kinds.add(kind)
    if len(kinds) > 1:
        raise UsageError("cannot mix text files with CSV/parquet/JSON input in one job")
    try:
        table = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise ValueError(f"the input files have incompatible columns: {exc}") from None
    label = ", ".join(args.input) + f" ({table.num_rows:,} rows)"
    name = Path(args.input[0]).name + (f" +{len(args.input) - 1}" if len(args.input) > 1 else "")
    if kinds == {"text"}:
        return Input(table, "word", label, None, map_fn=_split_words_of("line"), name=name)
    key = args.key
    if key is None:
        if table.num_columns != 1:
            raise UsageError(f"--key is needed to choose among the columns: {', '.join(table.column_names)}")
        key = table.column_names[0]
    if key not in table.column_names:
        raise UsageError(f"column {key!r} is not in the input; columns: {', '.join(table.column_names)}")
    if args.words:
        return Input(table, "word", label, None, map_fn=_split_words_of(key), name=name)
    return Input(table, key, label, table.num_rows, name=name)
