"""The straggler benchmarks' helpers: the first ring planned on a forecast."""

from __future__ import annotations


def test_first_rings_of_other_sizes_never_plan_worse_when_every_key_is_counted(repo_benchmark):
    first_ring = repo_benchmark("first_ring")
    out = first_ring.main(["--seeds", "3", "--rows", "4000", "--keys", "300"])  # every key named: exact
    rows = {(r["policy"], r["first rings"]): r for r in out["rows"]}
    for method in ("doubling", "halving"):
        alone, more = rows[method, "the policy's"], rows[method, "other sizes too"]
        assert 1.0 <= more["worst"] <= alone["worst"] + 1e-9 and more["mean"] <= alone["mean"] + 1e-9
