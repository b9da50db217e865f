"""Tests for workloads.generators."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from dpa.errors import ConfigError
from workloads import generators as gen

# ---------------------------------------------------------------------------------------
# Generators
# ---------------------------------------------------------------------------------------

ALL = {
    "zipf": lambda seed, **kw: gen.zipf(1.2, 1000, 5000, seed, **kw),
    "uniform": lambda seed, **kw: gen.uniform(1000, 5000, seed, **kw),
    "lognormal": lambda seed, **kw: gen.lognormal(1.789, 2.366, 1000, 5000, seed, **kw),
    "lognormal_unbounded": lambda seed, **kw: gen.lognormal(2.245, 1.133, None, 5000, seed, **kw),
    "drifting": lambda seed, **kw: gen.drifting(1000, 5000, 0.5, 700, seed, **kw),
}


@pytest.mark.parametrize("name", ALL)
def test_generators_deterministic_and_sized(name: str) -> None:
    make = ALL[name]
    a = make(1)
    b = make(1)
    c = make(2)
    assert isinstance(a, pa.Table)
    assert a.schema == pa.schema([("key", pa.int64())])
    assert a.num_rows == 5000
    assert a.equals(b)
    assert not a.equals(c)
    keys = a.column("key").to_numpy()
    assert keys.min() >= 0
    if name != "lognormal_unbounded":
        assert keys.max() < 1000
    s = make(1, as_str=True)
    assert s.schema == pa.schema([("key", pa.string())])
    assert s.column("key").to_pylist() == [str(k) for k in keys]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("batch_size", [1, 999, 5000, 10_000])
def test_batches_concatenate_to_table(name: str, batch_size: int) -> None:
    make = ALL[name]
    table = make(3)
    batches = list(make(3, batches=True, batch_size=batch_size))
    assert all(isinstance(x, pa.RecordBatch) for x in batches)
    assert all(x.num_rows <= batch_size for x in batches)
    assert pa.Table.from_batches(batches).equals(table)


def test_iter_functions_match() -> None:
    t = gen.zipf(0.8, 50, 1000, 4)
    assert pa.Table.from_batches(list(gen.iter_zipf(0.8, 50, 1000, 4, batch_size=64))).equals(t)
    t = gen.uniform(50, 1000, 4, as_str=True)
    it = gen.iter_uniform(50, 1000, 4, as_str=True, batch_size=64)
    assert pa.Table.from_batches(list(it)).equals(t)
    t = gen.lognormal(1.0, 1.0, None, 1000, 4)
    assert pa.Table.from_batches(list(gen.iter_lognormal(1.0, 1.0, None, 1000, 4))).equals(t)
    t = gen.drifting(50, 1000, 0.3, 100, 4)
    assert pa.Table.from_batches(list(gen.iter_drifting(50, 1000, 0.3, 100, 4))).equals(t)


def test_empty() -> None:
    assert gen.zipf(1.0, 10, 0).num_rows == 0
    assert list(gen.iter_uniform(10, 0)) == []


def test_zipf_frequencies_match_theory() -> None:
    n, k, z = 200_000, 100, 1.0
    keys = gen.zipf(z, k, n, seed=5).column("key").to_numpy()
    counts = Counter(keys.tolist())
    probs = gen.zipf_probabilities(z, k)
    top = counts.most_common(3)
    for (_, c), p in zip(top, probs[:3], strict=True):
        sd = np.sqrt(n * p * (1 - p))
        assert abs(c - n * p) < 5 * sd
    # Permutation: ranks map to different ids for different seeds; permute=False -> rank-1.
    hot_ids = {
        Counter(gen.zipf(z, k, 5000, seed=s).column("key").to_pylist()).most_common(1)[0][0]
        for s in range(6)
    }
    assert len(hot_ids) > 1
    plain = gen.zipf(z, k, 20_000, seed=5, permute=False).column("key").to_numpy()
    assert Counter(plain.tolist()).most_common(1)[0][0] == 0


def test_zipf_z0_is_uniform_and_bad_params() -> None:
    p = gen.zipf_probabilities(0.0, 4)
    assert np.allclose(p, 0.25)
    assert np.isclose(gen.zipf_probabilities(2.0, 1000).sum(), 1.0)
    with pytest.raises(ConfigError):
        gen.zipf(-1.0, 10, 10)
    with pytest.raises(ConfigError):
        gen.zipf(1.0, 0, 10)
    with pytest.raises(ConfigError):
        gen.uniform(10, -1)
    with pytest.raises(ConfigError):
        gen.uniform(10, 10, batches=True, batch_size=0)
    with pytest.raises(ConfigError):
        gen.drifting(10, 10, 1.5, 5)
    with pytest.raises(ConfigError):
        gen.drifting(10, 10, 0.5, 0)
    with pytest.raises(ConfigError):
        gen.lognormal_preset("LN3")


def test_lognormal_presets_match_pkg_table() -> None:
    assert (gen.LN1.mu, gen.LN1.sigma) == (1.789, 2.366)
    assert (gen.LN2.mu, gen.LN2.sigma) == (2.245, 1.133)
    n = 300_000
    for preset in (gen.LN1, gen.LN2):
        keys = gen.lognormal_preset(preset.name, n, seed=11).column("key").to_numpy()
        _, counts = np.unique(keys, return_counts=True)
        p1 = counts.max() / n
        assert abs(p1 - preset.p1) < 0.005, (preset.name, p1)


def test_drifting_hot_key_changes() -> None:
    n, period = 10_000, 1000
    keys = gen.drifting(500, n, 0.6, period, seed=9).column("key").to_numpy()
    hot = gen.drifting_hot_keys(500, n, period, seed=9)
    assert len(hot) == 10
    assert np.all(hot[1:] != hot[:-1])
    for s in range(10):
        seg = keys[s * period : (s + 1) * period]
        top, count = Counter(seg.tolist()).most_common(1)[0]
        assert top == hot[s]
        assert 0.5 < count / period < 0.7
