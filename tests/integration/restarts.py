"""Idempotent producers of both clients through one restart of the broker,
for the tests of each listener kind (SASL, TLS): librdkafka ("ck") and
kafka-python ("kp") write to partitions 0 and 1 while the broker is SIGTERMed
and started again, or SIGKILLed and started again, once librdkafka has 500
records acknowledged; each goes on after the restart until it has sent a
few thousand."""

import signal
import threading
import time
from typing import Any

import confluent_kafka as ck
import kafka

from harness.broker import Broker
from harness.waiting import wait_for


def produce_through_a_restart(b: Broker, topic: str, how: int, ck_conf: dict[str, Any],
                              kp_conf: dict[str, Any]) -> dict[str, set[bytes]]:
    """What each client had acknowledged when it was done; ``ck_conf`` and
    ``kp_conf`` are each client's settings for the listener (bootstrap included
    for librdkafka)."""
    acked: dict[str, set[bytes]] = {"ck": set(), "kp": set()}
    restarted = threading.Event()
    errors: list[BaseException] = []

    def with_librdkafka() -> None:
        producer = ck.Producer({**ck_conf, "enable.idempotence": True, "linger.ms": 2,
                                "message.timeout.ms": 120000})

        def delivered(err, msg) -> None:
            if err is None:
                acked["ck"].add(msg.value())
        i = 0
        while not restarted.is_set() or i < 4000:
            try:
                producer.produce(topic, b"ck-%d" % i, partition=i % 2, on_delivery=delivered)
                i += 1
            except BufferError:
                producer.poll(0.1)
            producer.poll(0.002 if i % 10 == 0 else 0)
        assert producer.flush(120) == 0

    def with_kafka_python() -> None:
        producer = kafka.KafkaProducer(bootstrap_servers=b.bootstrap, enable_idempotence=True, acks="all",
                                       linger_ms=2, delivery_timeout_ms=120000, request_timeout_ms=30000,
                                       reconnect_backoff_max_ms=1000, **kp_conf)
        futures = []
        i = 0
        while not restarted.is_set() or i < 2000:
            futures.append((b"kp-%d" % i, producer.send(topic, b"kp-%d" % i, partition=i % 2)))
            i += 1
            if i % 20 == 0:
                time.sleep(0.005)
        producer.flush(120)
        acked["kp"].update(v for v, f in futures if f.succeeded())
        producer.close(30)

    def guarded(work):
        def run():
            try:
                work()
            except BaseException as exc:  # noqa: BLE001 -- reported below
                errors.append(exc)
        return run
    threads = [threading.Thread(target=guarded(with_librdkafka)), threading.Thread(target=guarded(with_kafka_python))]
    for t in threads:
        t.start()
    wait_for(lambda: len(acked["ck"]) >= 500, 60, "records acknowledged before the restart")
    if how == signal.SIGKILL:
        b.kill()
        b.start()
    else:
        b.restart()
    restarted.set()
    for t in threads:
        t.join(240)
        assert not t.is_alive()
    assert not errors, errors
    return acked
