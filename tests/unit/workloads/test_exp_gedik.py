"""Smoke tests of Gedik's experiment (workloads.exp_gedik): growth, outputs, report and plots."""

from __future__ import annotations

from dpa.routing.policies.gedik.model import GedikParams
from workloads.exp_gedik import METHODS, Universe, grow, markdown, plot, run_experiment


# ---------------------------------------------------------------------------- the experiment
def test_experiment_core_smoke():
    uni = Universe.zipf(1.0, 3000, seed=0, replicas=50)
    params = GedikParams(resources="LLL", replicas=50, domain_size=3000)
    rows = {m: grow(uni, m, params, 6) for m in METHODS}
    for m, r in rows.items():
        assert [x["N"] for x in r] == list(range(1, 7)) and r[0]["m"] is None
        assert all(x["b"] > 0 and x["m"] > 0 for x in r[1:]), m
    assert rows["uniform"][-1]["m"] > 3  # hash % N moves most items: about N - 1 times the ideal
    assert rows["consistent"][-1]["m"] < 2.5
    assert rows["readj"][-1]["explicit"] > 0 and rows["consistent"][-1]["explicit"] == 0
    # the explicit hash helps balance compared with the plain consistent hash
    assert rows["readj"][-1]["b"] < rows["consistent"][-1]["b"]


def test_experiment_outputs(tmp_path):
    result = run_experiment(domain_size=2000, runs=1, max_channels=4, combos=("LCL", "LQL"),
                            skews=(0.25, 0.75), skew_channels=3, replicas=20, log=None)
    assert set(result["channels"]) == {"LCL", "LQL"}
    assert [r["z"] for r in result["skew"]["LCL"]["readj"]] == [0.25, 0.75]
    assert [r["z"] for r in result["skew"]["LQL"]["readj"]] == [0.25]  # LQL only up to z = 0.5
    md = markdown(result, "python -m workloads.exp_gedik --test", 1.0)
    assert "| paper | ours | verdict |" in md and "agree" in md
    paths = plot(result, tmp_path)
    assert [p.name for p in paths] == ["gedik_channels.png", "gedik_n10.png", "gedik_skew.png"]
    assert all(p.stat().st_size > 1000 for p in paths)
