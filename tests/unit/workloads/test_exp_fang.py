"""Smoke tests of Fang et al.'s experiment (workloads.exp_fang)."""

from __future__ import annotations


# ---------------------------------------------------------------------------- experiment smoke test
def test_experiment_core_smoke(tmp_path):
    from workloads import exp_fang

    setup = exp_fang.Setup(num_keys=400, num_workers=4, intervals=5, tuples=8_000, table_limit=10)
    run = exp_fang.run_fluctuation(setup)
    for m in ("mixed", "mintable", "minmig"):
        s = run["series"][m]
        assert len(s["before"]) == len(s["table"]) == 5
        assert all(0.0 <= x <= 1.0 for x in s["migration"])
        assert all(a <= b + 1e-9 for a, b in zip(s["after"], s["before"], strict=True))
        assert run["summary"][m]["skew_after"] <= run["summary"]["hash"]["skew_before"]
    assert max(run["series"]["mixed"]["table"]) <= 10
    assert len(run["change"]) == 4 and all(c >= setup.fluctuation for c in run["change"])
    res = exp_fang.run_all(setup, windows=(1,), thetas=(0.08, 0.3), limits=(5, 50), fluctuations=(0.0, 1.0),
                           sweep_intervals=3, workers_grid=(2, 4), keys_grid=(200, 2000), log=None)
    claims = exp_fang.claims(res)
    assert claims and all(isinstance(c.holds, bool) for c in claims)
    md = exp_fang.markdown(res, "python -m workloads.exp_fang --out x", 1.0)
    assert "| hash |" in md and "Paper claims" in md
    paths = exp_fang.plot(res, tmp_path)
    assert all(p.exists() and p.stat().st_size > 0 for p in paths)


def test_experiment_compares_gedik_readj_when_available():
    from workloads import exp_fang

    setup = exp_fang.Setup(num_keys=400, num_workers=4, intervals=4, tuples=8_000, table_limit=10)
    run = exp_fang.run_fluctuation(setup, methods=("mixed",), gedik=True)
    g = run["series"]["gedik-readj"]
    assert len(g["before"]) == 4 and all(0.0 <= x <= 1.0 for x in g["migration"])
    assert run["summary"]["gedik-readj"]["table_mean"] > 0
