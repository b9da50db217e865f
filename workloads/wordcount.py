"""The main job: a skewed word count read through Spark on Ray and counted by dpa.

Run it with ``./run.sh main`` (or ``python -m workloads.wordcount``). By default it
generates a Zipf-distributed corpus (no download), reads it through Spark (RayDP on the
local Ray), counts words with dpa twice — without load balancing and with it — writes the
balanced result back through Spark as parquet, and prints the top words, the per-reducer
load with and without load balancing, the skew S and the rebalances that happened.

Give ``--input`` to count your own text (one document per line), CSV (``--column``) or
parquet files instead.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import dpa

logger = logging.getLogger(__name__)


def make_vocabulary(size: int, seed: int = 7) -> list[str]:
    """Deterministic pronounceable pseudo-words (consonant-vowel syllables)."""
    rng = np.random.default_rng(seed)
    consonants, vowels = list("bcdfghklmnprstvz"), list("aeiou")
    words: set[str] = set()
    while len(words) < size:
        syllables = rng.integers(1, 4)
        words.add("".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(syllables)))
    return sorted(words)


def generate_corpus(path: Path, lines: int, words_per_line: int = 12, vocab: int = 5000, z: float = 1.1,
                    seed: int = 1) -> Path:
    """Writes a text corpus whose words follow Zipf(z) over ``vocab`` pseudo-words."""
    from workloads.generators import zipf

    words = np.array(make_vocabulary(vocab), dtype=object)
    ids = zipf(z, vocab, lines * words_per_line, seed=seed)["key"].to_numpy()
    tokens = words[ids % vocab].reshape(lines, words_per_line)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in tokens:
            f.write(" ".join(row))
            f.write("\n")
    return path


def split_words(batch: pa.Table) -> pa.Table:
    """Vectorised map function: lines (column ``value``) -> one row per lower-cased word."""
    lines = batch.column(0)
    words = pc.list_flatten(pc.split_pattern_regex(pc.utf8_lower(lines), r"[^\w']+"))
    words = pc.filter(words, pc.not_equal(words, ""))
    return pa.table({"word": words})


def read_input(spark, path: str, column: str | None):
    """Reads text, CSV or parquet through Spark into a one-column DataFrame of text."""
    suffix = Path(path).suffix.lower()
    if suffix == ".parquet" or Path(path).is_dir() and any(Path(path).glob("*.parquet")):
        df = spark.read.parquet(path)
    elif suffix == ".csv":
        df = spark.read.option("header", True).csv(path)
    else:
        return spark.read.text(path)
    if column is None:
        strings = [f.name for f in df.schema.fields if f.dataType.simpleString() == "string"]
        if not strings:
            raise SystemExit(f"error: {path} has no string column to count words in; columns: {df.columns}")
        column = strings[0]
    if column not in df.columns:
        raise SystemExit(f"error: column {column!r} not in {path}; columns: {', '.join(df.columns)}")
    return df.select(column)


def quiet_ray_data() -> None:
    """Hides Ray Data's INFO logs and progress bars (``--verbose`` keeps them)."""
    from ray.data import DataContext  # importing ray.data configures its logger: quiet it after

    logging.getLogger("ray").setLevel(logging.WARNING)
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    ctx = DataContext.get_current()
    ctx.enable_progress_bars = False
    if hasattr(ctx, "print_on_execution_start"):
        ctx.print_on_execution_start = False


def describe(label: str, stats: dpa.Stats) -> str:
    total = max(1, sum(stats.processed))
    loads = "  ".join(f"r{i}={n:,} ({100 * n / total:.0f}%)" for i, n in enumerate(stats.processed))
    return f"  {label:<10} S={stats.skew:.3f}  {loads}  forwarded={sum(stats.forwarded):,}  time={stats.wall_time_s:.2f}s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.wordcount", description=__doc__.splitlines()[0])
    parser.add_argument("--input", help="text/CSV/parquet to count (default: a generated Zipf corpus)")
    parser.add_argument("--column", help="text column for CSV/parquet input (default: first string column)")
    parser.add_argument("--lines", type=int, default=100_000, help="lines of the generated corpus")
    parser.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent of the generated corpus")
    parser.add_argument("--out", default="out/wordcount", help="output directory")
    parser.add_argument("--policy", default="doubling", choices=sorted(dpa.policies()))
    parser.add_argument("--tau", type=float, default=0.2)
    parser.add_argument("--rounds", type=int, default=1, help="max rebalances per reducer")
    parser.add_argument("--mappers", type=int, default=None, help="mapper actors (default: dpa's, one per CPU)")
    parser.add_argument("--reducers", type=int, default=None, help="reducer actors (default: dpa's, one per CPU, >= 2)")
    parser.add_argument("--cost-us", type=float, default=2.0,
                        help="per-word processing cost in microseconds (models a compute-heavy reducer)")
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--verbose", action="store_true", help="show Ray, Ray Data and Spark progress logs")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:
        quiet_ray_data()
    from dpa.ray_session import ensure_ray

    ensure_ray(log_to_driver=args.verbose)  # without --verbose, no worker log lines on the console

    from spark_bridge import run_with_result, spark_session

    out_dir = Path(args.out)
    source = args.input
    if source is None:
        source = str(generate_corpus(out_dir / "corpus.txt", args.lines, z=args.zipf))
        print(f"generated corpus: {source} ({args.lines:,} lines, Zipf z={args.zipf})")
    elif not os.path.exists(source):
        print(f"error: input {source!r} does not exist", file=sys.stderr)
        return 2

    reducer = dpa.Count()
    if args.cost_us > 0:
        reducer = dpa.WithCost(reducer, args.cost_us * 1e-6, mode="sleep")
    base = dict(num_mappers=args.mappers, num_reducers=args.reducers, policy=args.policy, tau=args.tau,
                batch_size=16_384, chunk_size=4_096)
    t0 = time.perf_counter()
    with spark_session() as spark:
        df = read_input(spark, source, args.column)
        print(f"Spark on Ray up in {time.perf_counter() - t0:.1f}s; counting with dpa ({args.policy}, tau={args.tau})")
        _, no_lb = run_with_result(df, key="word", reducer=reducer, map_fn=dpa.BatchMap(split_words),
                                   config=dpa.JobConfig(max_rounds=0, **base))
        counts, lb = run_with_result(df, key="word", reducer=reducer, map_fn=dpa.BatchMap(split_words),
                                     config=dpa.JobConfig(max_rounds=args.rounds, **base))
        target = str(out_dir / "counts.parquet")
        counts.write.mode("overwrite").parquet(target)
        top = counts.orderBy(counts["count"].desc(), counts["word"]).limit(args.top).collect()
        same = no_lb.to_dict() == lb.to_dict()

    print(f"\nwrote {target}")
    print(f"\ntop {args.top} words of {sum(lb.stats.processed):,}:")
    for row in top:
        print(f"  {row['word']:<12} {row['count']:>10,}")
    print("\nper-reducer load (records processed):")
    print(describe("no LB", no_lb.stats))
    print(describe(f"{args.policy}", lb.stats))
    print(f"\nrebalances ({len(lb.stats.rebalances)}):")
    for e in lb.stats.rebalances:
        print(f"  t={e.time_s:.3f}s {e.action:<9} reducer {e.reducer}  queues={list(e.queue_lengths)}"
              f"  tokens after={list(e.tokens_after)}  v{e.version}")
    if not same:
        print("error: balanced and unbalanced counts differ", file=sys.stderr)
        return 1
    print(f"\nbalanced and unbalanced counts agree; total time {time.perf_counter() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
