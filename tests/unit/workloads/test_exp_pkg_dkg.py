"""Smoke tests of the PKG / DKG paper reproduction scripts (workloads.exp_pkg, workloads.exp_dkg).

Tiny streams only: the whole file runs in a few seconds.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpa.errors import ConfigError
from dpa.tools.simulate import simulate
from workloads import exp_dkg, exp_pkg, pkg_report, pkg_streams
from workloads.generators import zipf, zipf_probabilities
from workloads.harness import markdown_table
from workloads.imbalance import hash_keys, imbalance_of, imbalance_series, imbalance_summary


# ----------------------------------------------------------------------------- common
def test_hash_keys_matches_the_simulator_hashing() -> None:
    keys = np.array([5, -3, 2**40, 5, 7], dtype=np.int64)
    a = simulate(keys, "hash", num_workers=7)
    b = simulate(hash_keys(keys), "hash", num_workers=7, keys_are_hashes=True)
    assert a.destinations.tolist() == b.destinations.tolist()
    with pytest.raises(ConfigError):
        hash_keys(np.array(["a", "b"]))


def test_imbalance_series_and_summary_match_the_simulator() -> None:
    keys = hash_keys(zipf(1.1, 500, 3_000, seed=1)["key"].to_numpy())
    r = simulate(keys, "pkg", num_sources=3, num_workers=4, keys_are_hashes=True, num_samples=50)
    t, s = imbalance_series(r.destinations, 4, 50)
    assert t.tolist() == r.sample_times.tolist()
    assert np.allclose(s, r.imbalance_series)
    m = imbalance_of(r)
    assert m["paper"] == pytest.approx(r.final_imbalance / r.num_messages)
    assert m["per_message"] == pytest.approx(r.imbalance_per_message)
    assert m["time_avg"] == pytest.approx(r.imbalance_fraction / 4)
    # hand-made: loads [1,0] [2,0] -> I = 0.5, 1.0
    hand = imbalance_summary(np.array([1, 2]), np.array([0.5, 1.0]), 2, 2)
    assert hand["paper"] == 0.5 and hand["final_messages"] == 1.0 and hand["time_avg"] == pytest.approx(0.75 / 1.5)


def test_markdown_table_escapes_pipes() -> None:
    md = markdown_table(["a", "b"], [[1, "x|y"]])
    assert md.splitlines() == ["| a | b |", "|---|---|", "| 1 | x\\|y |"]


# ----------------------------------------------------------------------------- PKG
@pytest.mark.parametrize("p1,K", [(0.0932, 50_000), (0.0267, 10_000), (0.5, 3), (0.01, 1_000)])
def test_zipf_exponent_solver_hits_the_target_p1(p1: float, K: int) -> None:
    z = pkg_streams.solve_zipf_exponent(p1, K)
    assert zipf_probabilities(z, K)[0] == pytest.approx(p1, rel=1e-6)
    assert pkg_streams.zipf_top_share(z + 0.01, K) > p1 > pkg_streams.zipf_top_share(z - 0.01, K)


def test_zipf_exponent_solver_rejects_unreachable_targets() -> None:
    with pytest.raises(ConfigError, match="out of range"):
        pkg_streams.solve_zipf_exponent(0.001, 100)  # p1 < 1/K: flatter than uniform
    with pytest.raises(ConfigError):
        pkg_streams.solve_zipf_exponent(1.0, 100)
    with pytest.raises(ConfigError):
        pkg_streams.solve_zipf_exponent(0.5, 1)


def test_zipf_stand_in_matches_the_dataset() -> None:
    s = pkg_streams.zipf_stream("WP", 40_000, seed=3)
    assert s.info["num_keys"] == pkg_streams.zipf_num_keys(pkg_streams.WP, 40_000) == round(40_000 * 2.9 / 22)
    assert s.info["p1_model"] == pytest.approx(0.0932, rel=1e-6)
    assert abs(s.p1 - 0.0932) < 0.005  # sampling noise on 40k messages
    assert len(s.hashes) == 40_000 and s.hashes.dtype == np.uint32
    with pytest.raises(ConfigError, match="unknown Zipf dataset"):
        pkg_streams.zipf_stream("XX", 10)


def test_replay_without_probing_is_the_simulators_local_estimation() -> None:
    hashes = pkg_streams.zipf_stream("TW", 20_000, seed=2).hashes
    for S in (1, 3, 7):
        ours = pkg_streams.replay_pkg(hashes, S, 5)
        sim = simulate(hashes, "pkg", num_sources=S, num_workers=5, keys_are_hashes=True)
        assert ours.tolist() == sim.destinations.tolist()


def test_probing_changes_decisions_only_with_several_sources() -> None:
    hashes = pkg_streams.zipf_stream("WP", 20_000, seed=4).hashes
    # one source: its local estimate is the true load, so a probe changes nothing
    assert pkg_streams.replay_pkg(hashes, 1, 5, probe_every=100).tolist() == pkg_streams.replay_pkg(hashes, 1, 5).tolist()
    lp = pkg_streams.replay_pkg(hashes, 4, 5, probe_every=100)
    assert lp.tolist() != pkg_streams.replay_pkg(hashes, 4, 5).tolist()
    assert np.bincount(lp, minlength=5).sum() == 20_000 and lp.min() >= 0 and lp.max() < 5
    with pytest.raises(ConfigError):
        pkg_streams.replay_pkg(hashes, 0, 5)
    with pytest.raises(ConfigError):
        pkg_streams.replay_pkg(hashes, 2, 5, probe_every=0)


def test_pkg_beats_hashing_and_hits_the_saturation_bound() -> None:
    stream = pkg_streams.zipf_stream("WP", 30_000, seed=0)
    variants = [pkg_streams.Variant("PKG", "pkg", shared=True), pkg_streams.Variant("H", "hash"),
                pkg_streams.Variant("Off", "off-greedy", shared=True)]
    grid = exp_pkg.run_grid([stream], [5, 50], variants)
    pkg, h, off = (grid["cells"]["WP"][k] for k in ("PKG", "H", "Off"))
    assert pkg[0]["paper"] * 30_000 <= 3  # balanced at W=5: a few messages
    assert h[0]["paper"] > 100 * max(pkg[0]["paper"], 1 / 30_000)
    # W=50 > 2/p1: the hot key's two workers dominate, I(n)/n ~ p1/2 - 1/W (and p1 - 1/W if bound)
    assert pkg[1]["paper"] == pytest.approx(stream.p1 / 2 - 1 / 50, abs=0.003)
    assert off[1]["paper"] == pytest.approx(stream.p1 - 1 / 50, abs=0.003)


def test_pkg_run_all_tiny_writes_report(tmp_path) -> None:
    sizes = pkg_streams.Sizes(table2=6_000, lognormal=6_000, sources=3_000, choices=3_000, drift=3_000)
    res = exp_pkg.run_all(sizes, seed=0, table2_workers=(5, 50), sources=(1, 4), sources_workers=(5,),
                          choices=(1, 2, 4), choices_workers=(5, 40), choices_keys=5_000, drift_workers=(5,))
    json.dumps(res)  # JSON-friendly
    assert set(res["table2"]["cells"]) == {"WP", "TW"} and set(res["lognormal"]["cells"]) == {"LN1", "LN2"}
    cell = res["sources"]["cells"]["WP"]["5"]
    assert set(cell["L"]) == {"1", "4"} and set(cell["LP"]) == {"1", "4"}
    assert "agreement_G_L5" not in cell  # measured at S = 5 only
    ch = res["choices"]["cells"]
    assert ch["5"]["4"]["paper"] < ch["5"]["1"]["paper"]  # more choices, less imbalance
    res["claims"] = [c.to_dict() for c in exp_pkg.claims(res)]
    claims = res["claims"]
    assert claims and all(isinstance(c["holds"], bool) and c["evidence"] for c in claims)
    md = exp_pkg.markdown(res)
    assert "Table II" in md and "| PKG |" in md and "Claims of the paper" in md
    for fn in (pkg_report.plot_grids, pkg_report.plot_choices):
        assert fn(res, tmp_path / f"{fn.__name__}.png").stat().st_size > 1000


# ----------------------------------------------------------------------------- DKG
def test_country_stream_has_exactly_the_hot_share() -> None:
    keys = exp_dkg.country_stream(0.3, 10_001, seed=5)
    assert int((keys == 0).sum()) == round(0.3 * 10_001)
    assert keys.min() == 0 and keys.max() == exp_dkg.COUNTRY_KEYS - 1
    assert np.array_equal(keys, exp_dkg.country_stream(0.3, 10_001, seed=5))
    assert (exp_dkg.country_stream(1.0, 100) == 0).all() and (exp_dkg.country_stream(0.0, 100) > 0).all()
    with pytest.raises(ConfigError):
        exp_dkg.country_stream(1.5, 100)


def test_election_tail_is_calibrated_to_the_papers_shuffle_dist_cost() -> None:
    assert exp_dkg.expected_shuffle_dist_cost(1e-9, 10) == pytest.approx(1.0, abs=1e-6)
    assert exp_dkg.expected_shuffle_dist_cost(1e4, 10) == pytest.approx(10.0)
    n = 60_000
    tail = exp_dkg.calibrate_tail_keys(n)
    lam = (1 - 0.68) * n / tail
    assert exp_dkg.expected_shuffle_dist_cost(lam, 10) == pytest.approx(2.4491, abs=0.01)
    keys, t2 = exp_dkg.election_stream(n, seed=1)
    assert t2 == tail and abs((keys == 0).mean() - 0.68) < 1e-4
    sg = exp_dkg.measure(hash_keys(keys), "shuffle", 10)
    assert sg["dist_cost"] == pytest.approx(2.4491, abs=0.1)
    with pytest.raises(ConfigError):
        exp_dkg.calibrate_tail_keys(n, target=10.0)


def test_dkg_metrics_on_a_skewed_stream() -> None:
    hashes = hash_keys(exp_dkg.country_stream(0.8, 60_000, seed=0))
    m = {p: exp_dkg.measure(hashes, p, 10) for p in exp_dkg.POLICIES}
    assert m["hash"]["dist_cost"] == 1.0 and m["shuffle"]["dist_cost"] == pytest.approx(10.0, abs=0.05)
    assert 1.0 < m["pkg"]["dist_cost"] <= 2.0
    assert 1.0 < m["dkg"]["dist_cost"] <= 10.0
    assert m["shuffle"]["stddev"] < m["dkg"]["stddev"] < m["pkg"]["stddev"] < m["hash"]["stddev"]
    assert m["hash"]["max_load_pct"] >= 80.0
    assert m["hash"]["dist_cost_rest"] == 1.0 and m["shuffle"]["dist_cost_rest"] <= 10.0
    assert m["pkg"]["dist_cost_rest"] <= 2.0
    assert m["dkg"]["options"] == {"promote_every": exp_dkg.dkg_promote_every(60_000, 5)}
    assert m["dkg"]["router_stats"]["scale_outs"] > 0
    assert exp_dkg.dkg_promote_every(7_800_000, 5) == 20_000


def test_dkg_run_all_tiny_writes_report(tmp_path) -> None:
    sizes = exp_dkg.Sizes(workers=20_000, sweep=10_000, sources=10_000)
    res = exp_dkg.run_all(sizes, workers=(10, 50), sweep=(0.0, 0.5, 1.0), sources=(5, 10))
    json.dumps(res)
    assert set(res["workers"]["cells"]) == {"country-r30", "country-r80", "election-r68"}
    assert res["thresholds"]["10"]["max_machines"] == 8
    res["claims"] = [c.to_dict() for c in exp_dkg.claims(res)]
    claims = {c["claim"]: c for c in res["claims"]}
    assert claims and all(isinstance(c["holds"], bool) for c in claims.values())
    assert next(c for c in res["claims"] if c["where"] == "Table 1")["holds"]
    md = exp_dkg.markdown(res)
    assert "Table 3" in md and "| DKG |" in md
    assert exp_dkg.plot_sweep(res, tmp_path / "s.png").stat().st_size > 1000
