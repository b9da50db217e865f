"""Metrics read back from the node's Prometheus endpoint, during and after a job."""

from __future__ import annotations

import re
import threading
import time
import urllib.request

import ray

import dpa
from workloads.paper import workload

_LINE = re.compile(r"^(ray_dpa_\w+)\{(.*)\} ([0-9.eE+-]+)$")


def scrape() -> list[tuple[str, dict[str, str], float]]:
    out = []
    for node in ray.nodes():
        if not node["Alive"]:
            continue
        url = f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        for line in text.splitlines():
            m = _LINE.match(line)
            if m:
                tags = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
                out.append((m.group(1), tags, float(m.group(3))))
    return out


def values(samples, name, job_id, by):
    return {tags.get(by): v for n, tags, v in samples if n == name and tags.get("job_id") == job_id}


def test_metrics_match_stats_and_show_the_straggler(ray_session):
    words = workload("WL4") * 4  # reducer 0 holds 85% under halving
    # A slow, patient balancer (first round after ~1.5 s) keeps the straggler visible for
    # longer than Ray's 1 s metrics export interval; the job still rebalances and forwards.
    cfg = dpa.JobConfig(policy="halving", max_rounds=4, batch_size=20, chunk_size=1, tau=0.2,
                        lb_interval_s=0.5,
                        policy_options={"patience": 3, "token_spacing": "hashed", "lookahead": False})  # the paper's
    reducer = dpa.WithCost(dpa.Count(), 0.01)
    dpa.run(words[:20], reducer=reducer, config=cfg)  # warm pool
    during: list = []
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            try:
                during.append((time.monotonic(), scrape()))
            except OSError:
                pass
            time.sleep(0.5)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    res = dpa.run(words, reducer=reducer, config=cfg)
    time.sleep(3.5)  # > 1 s report interval, plus export latency
    stop.set()
    poller.join()
    job = res.stats.job_id
    final = scrape()
    processed = values(final, "ray_dpa_records_processed_total", job, "reducer")
    assert {int(k): int(v) for k, v in processed.items() if v} == {i: n for i, n in enumerate(res.stats.processed) if n}
    forwarded = values(final, "ray_dpa_records_forwarded_total", job, "reducer")
    assert sum(forwarded.values()) == sum(res.stats.forwarded) > 0
    emitted = values(final, "ray_dpa_records_emitted_total", job, "mapper")
    assert sum(emitted.values()) == len(words)
    rebalances = [v for n, t, v in final if n == "ray_dpa_rebalances_total" and t.get("job_id") == job]
    assert sum(rebalances) == len(res.stats.rebalances) >= 1
    assert values(final, "ray_dpa_ring_version", job, "job_id")[job] == res.stats.ring_version
    assert values(final, "ray_dpa_job_progress", job, "job_id")[job] == 1.0
    assert values(final, "ray_dpa_job_records_processed", job, "job_id")[job] == len(words)
    tokens = values(final, "ray_dpa_tokens_owned", job, "reducer")
    assert {int(k): int(v) for k, v in tokens.items()} == dict(enumerate(res.stats.final_tokens))
    # While the job ran, the straggler's queue-length gauge rose above every other queue.
    straggler = str(res.stats.rebalances[0].reducer)
    seen_above = False
    for _, samples in during:
        q = values(samples, "ray_dpa_queue_length", job, "reducer")
        if straggler in q and len(q) > 1 and q[straggler] > max(v for k, v in q.items() if k != straggler):
            seen_above = True
    assert seen_above, "the overloaded reducer's queue gauge never rose above the others"
