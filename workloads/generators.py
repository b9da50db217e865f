"""Seeded synthetic key streams as Arrow tables or streams of record batches.

Every generator takes a ``seed`` and is deterministic for it. It returns a
``pyarrow.Table`` with one column ``key`` (``int64`` ids, or their decimal strings with
``as_str=True``), or, with ``batches=True`` (or the ``iter_*`` twin), an iterator of
``pyarrow.RecordBatch`` of at most ``batch_size`` rows (these three keyword arguments,
common to every generator, are :class:`Output`). The batches concatenated are
exactly the table: the randomness is drawn sequentially from one ``numpy.random.Generator``
using only ``random()`` (uniform doubles) and ``standard_normal()``, whose streams do not
depend on how the draws are chunked.

Distributions:

* :func:`zipf`: bounded Zipf over ``K`` keys, ``p_k ∝ 1 / k**z`` for ranks ``k = 1..K``
  (any ``z >= 0``; ``z = 0`` is uniform), sampled by inverse CDF (cumulative
  probabilities + ``searchsorted``). ``numpy.random.zipf`` is not used: it is unbounded
  and needs ``z > 1``. Ranks are mapped to key ids by a seeded permutation of
  ``0..K-1``, so the hottest key is not always id 0 (``permute=False`` keeps id =
  rank - 1).
* :func:`uniform`: uniform over ``K`` keys.
* :func:`lognormal`: key = the nearest integer to a log-normal sample; with the PKG
  paper's presets :data:`LN1` and :data:`LN2` this reproduces its Table I (the most
  frequent key has 14.71 % resp. 7.01 % of the messages, ~16k resp. ~1.1k distinct keys
  in 10M messages).
* :func:`drifting`: a stream whose hot key changes every ``period`` records.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import numpy as np
import pyarrow as pa

from dpa.errors import ConfigError

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "LN1",
    "LN2",
    "LOGNORMAL_PRESETS",
    "LognormalPreset",
    "Output",
    "StreamOutput",
    "drifting",
    "drifting_hot_keys",
    "iter_drifting",
    "iter_lognormal",
    "iter_uniform",
    "iter_zipf",
    "lognormal",
    "lognormal_preset",
    "uniform",
    "zipf",
    "zipf_probabilities",
]

DEFAULT_BATCH_SIZE = 65536
"""Rows per record batch when streaming."""


@dataclass(frozen=True)
class LognormalPreset:
    """Parameters of a log-normal key distribution of the PKG paper (Nasir et al.).

    Attributes:
        name: Dataset symbol in the paper.
        mu: Mean of the underlying normal.
        sigma: Standard deviation of the underlying normal.
        messages: Number of messages of the paper's dataset.
        keys: Approximate number of distinct keys reported by the paper.
        p1: Fraction of messages with the most frequent key reported by the paper.
    """

    name: str
    mu: float
    sigma: float
    messages: int
    keys: int
    p1: float


LN1 = LognormalPreset("LN1", mu=1.789, sigma=2.366, messages=10_000_000, keys=16_000, p1=0.1471)
"""PKG's "Lognormal 1" (parameters from an analysis of Orkut)."""
LN2 = LognormalPreset("LN2", mu=2.245, sigma=1.133, messages=10_000_000, keys=1_100, p1=0.0701)
"""PKG's "Lognormal 2"."""
LOGNORMAL_PRESETS: dict[str, LognormalPreset] = {"LN1": LN1, "LN2": LN2}


class StreamOutput(TypedDict, total=False):
    """The keyword arguments of the streaming generators (``iter_*``) on their output.

    Attributes:
        as_str: Emit the ids as decimal strings (default False).
        batch_size: Rows per record batch (default :data:`DEFAULT_BATCH_SIZE`).
    """

    as_str: bool
    batch_size: int


class Output(StreamOutput, total=False):
    """The keyword arguments of every generator on its output.

    Those of :class:`StreamOutput` (``as_str``, ``batch_size``) and:

    Attributes:
        batches: Return an iterator of record batches (of at most ``batch_size`` rows)
            instead of a table (default False).
    """

    batches: bool


# ---------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------


def _check_counts(num_keys: int | None, n: int, batch_size: int) -> None:
    if num_keys is not None and (not isinstance(num_keys, (int, np.integer)) or num_keys < 1):
        raise ConfigError(f"num_keys must be an integer >= 1, got {num_keys!r}")
    if not isinstance(n, (int, np.integer)) or n < 0:
        raise ConfigError(f"n (number of records) must be an integer >= 0, got {n!r}")
    if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ConfigError(f"batch_size must be an integer >= 1, got {batch_size!r}")


def _key_array(ids: np.ndarray, as_str: bool) -> pa.Array:
    arr = pa.array(ids.astype(np.int64, copy=False), type=pa.int64())
    return arr.cast(pa.string()) if as_str else arr


def _schema(as_str: bool) -> pa.Schema:
    return pa.schema([("key", pa.string() if as_str else pa.int64())])


def _stream(
    draw: Callable[[int, int], np.ndarray], n: int, batch_size: int, as_str: bool
) -> Iterator[pa.RecordBatch]:
    """Yields batches of ``draw(start, count)`` ids."""
    schema = _schema(as_str)
    start = 0
    while start < n:
        count = min(batch_size, n - start)
        ids = draw(start, count)
        yield pa.RecordBatch.from_arrays([_key_array(ids, as_str)], schema=schema)
        start += count


def _table(draw: Callable[[int, int], np.ndarray], n: int, as_str: bool) -> pa.Table:
    ids = draw(0, n) if n > 0 else np.zeros(0, dtype=np.int64)
    return pa.Table.from_arrays([_key_array(ids, as_str)], schema=_schema(as_str))


def _generate(
    num_keys: int | None,
    n: int,
    make_draw: Callable[[], Callable[[int, int], np.ndarray]],
    *,
    as_str: bool = False,
    batches: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> pa.Table | Iterator[pa.RecordBatch]:
    """Checks the counts, then draws ``n`` ids with ``make_draw()`` as a table or batches."""
    _check_counts(num_keys, n, batch_size)
    draw = make_draw()
    if batches:
        return _stream(draw, int(n), batch_size, as_str)
    return _table(draw, int(n), as_str)


# ---------------------------------------------------------------------------------------
# Zipf
# ---------------------------------------------------------------------------------------


def zipf_probabilities(z: float, num_keys: int) -> np.ndarray:
    """Probabilities ``p_k = (1 / k**z) / sum_x (1 / x**z)`` of ranks ``k = 1..K``.

    Args:
        z: Exponent (>= 0).
        num_keys: Number of keys ``K``.

    Returns:
        A ``float64`` array of ``K`` probabilities, in rank order.
    """
    if not (isinstance(z, (int, float, np.number)) and z >= 0 and math.isfinite(z)):
        raise ConfigError(f"the Zipf exponent z must be a finite number >= 0, got {z!r}")
    _check_counts(num_keys, 0, 1)
    weights = np.arange(1, int(num_keys) + 1, dtype=np.float64) ** (-float(z))
    return weights / weights.sum()


def _zipf_draw(
    z: float, num_keys: int, seed: int, permute: bool
) -> Callable[[int, int], np.ndarray]:
    probs = zipf_probabilities(z, num_keys)
    cdf = np.cumsum(probs)
    cdf[-1] = 1.0
    rng = np.random.default_rng(seed)
    perm = rng.permutation(num_keys).astype(np.int64) if permute else None

    def draw(start: int, count: int) -> np.ndarray:
        ranks = np.searchsorted(cdf, rng.random(count), side="right")
        np.minimum(ranks, num_keys - 1, out=ranks)
        return perm[ranks] if perm is not None else ranks.astype(np.int64)

    return draw


def zipf(
    z: float, num_keys: int, n: int, seed: int = 0, *, permute: bool = True, **output: Unpack[Output]
) -> pa.Table | Iterator[pa.RecordBatch]:
    """Bounded Zipf keys: key of rank ``k`` has probability ``∝ 1 / k**z``.

    Args:
        z: Exponent (>= 0; 0 is uniform).
        num_keys: Number of distinct keys ``K``; ids are in ``[0, K)``.
        n: Number of records.
        seed: Seed of the generator (also of the rank -> id permutation).
        permute: Map ranks to ids with a seeded permutation (default). ``False`` makes
            rank ``k`` the id ``k - 1`` (the hottest key is 0).
        **output: ``as_str``, ``batches``, ``batch_size`` (:class:`Output`).

    Returns:
        A table with a ``key`` column, or an iterator of record batches.

    Raises:
        ConfigError: On invalid parameters.
    """
    return _generate(num_keys, n, lambda: _zipf_draw(z, int(num_keys), seed, permute), **output)


def iter_zipf(
    z: float, num_keys: int, n: int, seed: int = 0, *, permute: bool = True, **output: Unpack[StreamOutput]
) -> Iterator[pa.RecordBatch]:
    """Streaming :func:`zipf`: record batches whose concatenation equals the table."""
    return zipf(z, num_keys, n, seed, permute=permute, batches=True, **output)  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------
# Uniform
# ---------------------------------------------------------------------------------------


def _uniform_draw(num_keys: int, seed: int) -> Callable[[int, int], np.ndarray]:
    rng = np.random.default_rng(seed)

    def draw(start: int, count: int) -> np.ndarray:
        ids = (rng.random(count) * num_keys).astype(np.int64)
        np.minimum(ids, num_keys - 1, out=ids)
        return ids

    return draw


def uniform(num_keys: int, n: int, seed: int = 0, **output: Unpack[Output]) -> pa.Table | Iterator[pa.RecordBatch]:
    """Keys drawn uniformly from ``[0, num_keys)``.

    Args:
        num_keys: Number of distinct keys.
        n: Number of records.
        seed: Seed of the generator.
        **output: ``as_str``, ``batches``, ``batch_size`` (:class:`Output`).

    Returns:
        A table with a ``key`` column, or an iterator of record batches.
    """
    return _generate(num_keys, n, lambda: _uniform_draw(int(num_keys), seed), **output)


def iter_uniform(num_keys: int, n: int, seed: int = 0, **output: Unpack[StreamOutput]) -> Iterator[pa.RecordBatch]:
    """Streaming :func:`uniform`."""
    return uniform(num_keys, n, seed, batches=True, **output)  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------
# Log-normal
# ---------------------------------------------------------------------------------------


def _lognormal_draw(
    mu: float, sigma: float, num_keys: int | None, seed: int
) -> Callable[[int, int], np.ndarray]:
    if not (math.isfinite(mu) and math.isfinite(sigma) and sigma >= 0):
        raise ConfigError(f"lognormal needs finite mu and sigma >= 0, got mu={mu}, sigma={sigma}")
    rng = np.random.default_rng(seed)
    limit = float(np.iinfo(np.int64).max // 2)

    def draw(start: int, count: int) -> np.ndarray:
        values = np.exp(mu + sigma * rng.standard_normal(count))
        ids = np.rint(np.minimum(values, limit)).astype(np.int64)
        if num_keys is not None:
            ids %= num_keys
        return ids

    return draw


def lognormal(
    mu: float, sigma: float, num_keys: int | None, n: int, seed: int = 0, **output: Unpack[Output]
) -> pa.Table | Iterator[pa.RecordBatch]:
    """Log-normal keys: the key is ``round(exp(mu + sigma * N(0, 1)))``.

    Rounding to the nearest integer is what reproduces the PKG paper's reported
    most-frequent-key shares for :data:`LN1` and :data:`LN2`.

    Args:
        mu: Mean of the underlying normal.
        sigma: Standard deviation of the underlying normal (>= 0).
        num_keys: ``None`` for the unbounded key space of the paper, or ``K`` to fold the
            ids into ``[0, K)`` with ``id % K`` (which keeps the hot keys distinct).
        n: Number of records.
        seed: Seed of the generator.
        **output: ``as_str``, ``batches``, ``batch_size`` (:class:`Output`).

    Returns:
        A table with a ``key`` column, or an iterator of record batches.
    """
    return _generate(num_keys, n, lambda: _lognormal_draw(float(mu), float(sigma), num_keys, seed), **output)


def iter_lognormal(
    mu: float, sigma: float, num_keys: int | None, n: int, seed: int = 0, **output: Unpack[StreamOutput]
) -> Iterator[pa.RecordBatch]:
    """Streaming :func:`lognormal`."""
    return lognormal(mu, sigma, num_keys, n, seed, batches=True, **output)  # type: ignore[return-value]


def lognormal_preset(
    name: str, n: int | None = None, seed: int = 0, **output: Unpack[Output]
) -> pa.Table | Iterator[pa.RecordBatch]:
    """The PKG paper's ``"LN1"`` or ``"LN2"`` data set.

    Args:
        name: ``"LN1"`` or ``"LN2"``.
        n: Number of records (default: the paper's 10M).
        seed: Seed of the generator.
        **output: ``as_str``, ``batches``, ``batch_size`` (:class:`Output`).

    Returns:
        The table or record batches of :func:`lognormal`.
    """
    try:
        preset = LOGNORMAL_PRESETS[name]
    except KeyError:
        raise ConfigError(
            f"unknown lognormal preset {name!r}; use one of {', '.join(LOGNORMAL_PRESETS)}"
        ) from None
    return lognormal(preset.mu, preset.sigma, None, preset.messages if n is None else n, seed, **output)


# ---------------------------------------------------------------------------------------
# Drifting hot key
# ---------------------------------------------------------------------------------------


def drifting_hot_keys(num_keys: int, n: int, period: int, seed: int = 0) -> np.ndarray:
    """The hot key of each ``period``-long segment of a :func:`drifting` stream.

    Consecutive segments always have different hot keys (when ``num_keys > 1``).

    Args:
        num_keys: Number of distinct keys.
        n: Number of records.
        period: Records per segment.
        seed: Seed of the stream.

    Returns:
        An ``int64`` array with ``ceil(n / period)`` hot key ids.
    """
    segments = max(1, -(-int(n) // int(period)))
    rng = np.random.default_rng([int(seed), 0x5EED])
    if num_keys == 1:
        return np.zeros(segments, dtype=np.int64)
    # Each step moves to a different key: add an offset in [1, K) modulo K.
    first = int(rng.random() * num_keys) % num_keys
    steps = 1 + (rng.random(segments - 1) * (num_keys - 1)).astype(np.int64)
    np.minimum(steps, num_keys - 1, out=steps)
    hot = (first + np.concatenate([[0], np.cumsum(steps)])) % num_keys
    return hot.astype(np.int64)


def _drifting_draw(
    num_keys: int, n: int, hot_fraction: float, period: int, seed: int
) -> Callable[[int, int], np.ndarray]:
    if not 0.0 <= hot_fraction <= 1.0:
        raise ConfigError(f"hot_fraction must be in [0, 1], got {hot_fraction!r}")
    if not isinstance(period, (int, np.integer)) or period < 1:
        raise ConfigError(f"period must be an integer >= 1, got {period!r}")
    hot = drifting_hot_keys(num_keys, n, period, seed)
    rng = np.random.default_rng(seed)

    def draw(start: int, count: int) -> np.ndarray:
        u = rng.random(2 * count).reshape(count, 2)
        ids = (u[:, 1] * num_keys).astype(np.int64)
        np.minimum(ids, num_keys - 1, out=ids)
        segment = (np.arange(start, start + count, dtype=np.int64)) // period
        is_hot = u[:, 0] < hot_fraction
        ids[is_hot] = hot[segment[is_hot]]
        return ids

    return draw


def drifting(
    num_keys: int, n: int, hot_fraction: float, period: int, seed: int = 0, **output: Unpack[Output]
) -> pa.Table | Iterator[pa.RecordBatch]:
    """A stream whose hot key changes every ``period`` records.

    Record ``i`` is, with probability ``hot_fraction``, the hot key of segment
    ``i // period`` (see :func:`drifting_hot_keys`), and otherwise a key drawn uniformly
    from ``[0, num_keys)``.

    Args:
        num_keys: Number of distinct keys.
        n: Number of records.
        hot_fraction: Share of records carrying the current hot key, in ``[0, 1]``.
        period: Records between hot key changes (>= 1).
        seed: Seed of the generator.
        **output: ``as_str``, ``batches``, ``batch_size`` (:class:`Output`).

    Returns:
        A table with a ``key`` column, or an iterator of record batches.
    """
    return _generate(
        num_keys, n, lambda: _drifting_draw(int(num_keys), int(n), float(hot_fraction), period, seed), **output
    )


def iter_drifting(
    num_keys: int, n: int, hot_fraction: float, period: int, seed: int = 0, **output: Unpack[StreamOutput]
) -> Iterator[pa.RecordBatch]:
    """Streaming :func:`drifting`."""
    return drifting(num_keys, n, hot_fraction, period, seed, batches=True, **output)  # type: ignore[return-value]
