"""Latencies handed over summed (``metrics.SummedHistogram``) scrape as the
same histogram prometheus-client's own ``Histogram`` makes of the same
observations one by one, in the multiprocess mode the broker runs in."""

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import bisect, json
    from prometheus_client import CollectorRegistry, Histogram, multiprocess
    from hpbroker.server.metrics import SummedHistogram
    buckets = (0.0005, 0.001, 0.01, 1.0)
    one_by_one = Histogram("one_by_one", "doc", ["api"], buckets=buckets)
    summed = SummedHistogram("summed", "doc", ["api"], buckets)
    for part in ([0.0001, 0.0005, 0.0007, 0.003], [0.2, 0.2, 7.5, 20.0]):  # two flushes
        counts = [0] * len(summed.bounds)
        for seconds in part:
            one_by_one.labels("Produce").observe(seconds)
            counts[bisect.bisect_left(summed.bounds, seconds)] += 1
        summed.add(("Produce",), sum(part), counts)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    print(json.dumps({metric.name: sorted((s.name.removeprefix(metric.name), sorted(s.labels.items()), s.value)
                                          for s in metric.samples) for metric in registry.collect()}))
""")


def test_summed_latencies_scrape_as_observed_ones(tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT], env={"PROMETHEUS_MULTIPROC_DIR": str(tmp_path)},
                          capture_output=True, text=True, check=True)
    found = json.loads(done.stdout)
    assert found["summed"] == found["one_by_one"]
    assert ["_count", [["api", "Produce"]], 8.0] in found["summed"]
    assert ["_bucket", [["api", "Produce"], ["le", "0.0005"]], 2.0] in found["summed"]
