"""The Prometheus endpoint: samples of every worker, aggregated by the acceptor."""

import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from harness.broker import free_port
from harness.waiting import wait_for
from tests.integration.clients import ck_consume, ck_produce, topic_name


def scrape(port: int) -> dict:
    """{(sample name, frozenset(labels)): value}"""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scrape_when(port: int, ready: Callable[[dict], bool]) -> dict | None:
    """The samples once ``ready`` holds for them; None before (``wait_for`` scrapes again)."""
    samples = scrape(port)
    return samples if ready(samples) else None


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_metrics_cover_requests_topics_partitions_and_restarts(broker_factory):
    port = free_port()
    broker = broker_factory({"metrics.listen": f"127.0.0.1:{port}", "num.partitions": "2"})
    topic = topic_name("metrics")
    records = [{"key": b"k%d" % i, "value": b"v" * 100} for i in range(200)]
    ck_produce(broker.bootstrap, topic, records)
    got = ck_consume(broker.bootstrap, topic, [0, 1], len(records))
    assert len(got) == len(records)

    def both_partitions_counted(s: dict) -> bool:
        return (value(s, "hpbroker_log_end_offset", topic=topic, partition="0")
                + value(s, "hpbroker_log_end_offset", topic=topic, partition="1") == 200)

    samples = wait_for(lambda: scrape_when(port, both_partitions_counted), timeout=30,
                       what="partition gauges of both workers")
    assert value(samples, "hpbroker_topic_records_in_total", topic=topic) == 200
    assert value(samples, "hpbroker_topic_bytes_in_total", topic=topic) > 200 * 100
    assert (value(samples, "hpbroker_topic_bytes_out_total", topic=topic)
            >= value(samples, "hpbroker_topic_bytes_in_total", topic=topic))
    assert value(samples, "hpbroker_requests_total", api="Produce") >= 1
    assert value(samples, "hpbroker_request_seconds_count", api="Fetch") >= 1
    assert value(samples, "hpbroker_log_segments", topic=topic, partition="0") == 1

    broker.kill_worker(0)
    samples = wait_for(lambda: scrape_when(port, lambda s: value(s, "hpbroker_worker_restarts_total") == 1),
                       timeout=30, what="the restart counted")
    # counters of the dead worker are kept: nothing appended is forgotten
    assert value(samples, "hpbroker_topic_records_in_total", topic=topic) == 200


def test_a_metrics_port_in_use_is_a_clear_start_error(broker_factory, tmp_path):
    import socket
    import subprocess
    import sys

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "hpbroker", "serve", "--data-dir", str(tmp_path / "d"),
                                 "--listen", f"127.0.0.1:{free_port()}", "--set", f"metrics.listen=127.0.0.1:{port}"],
                                capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith(
        f"hpbroker serve: cannot serve metrics on 127.0.0.1:{port}")
    assert "Traceback" not in result.stderr
