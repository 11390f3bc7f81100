"""Idempotent producers of both clients running while a broker's workers are
SIGKILLed, and the check such a run ends with: nothing acknowledged missing,
nothing stored twice."""

import threading
import time
from collections.abc import Callable
from typing import Any

import confluent_kafka as ck
import kafka


def produce_through_worker_kills(broker, topic: str, total: int, value_of: Callable[[str, int], bytes],
                                 partition_of: Callable[[str, int], int], *, linger_ms: int, pace_every: int,
                                 pace_s: float, workers=(0, 1),
                                 before_kills: Callable[[], object] | None = None,
                                 ck_conf: dict[str, Any] | None = None,
                                 kp_conf: dict[str, Any] | None = None) -> dict[str, set[bytes]]:
    """librdkafka ("ck") and kafka-python ("kp"), both idempotent, each send
    ``total`` records (``value_of(client, i)`` to ``partition_of(client, i)``,
    resting ``pace_s`` every ``pace_every`` so that the kills land among the
    requests) while each of ``workers`` is SIGKILLed in turn, once librdkafka
    has an acknowledgement (and ``before_kills`` returned, when given);
    ``ck_conf`` and ``kp_conf`` add to each client's settings (a login). What
    each client had acknowledged when it was done."""
    acked: dict[str, set[bytes]] = {"ck": set(), "kp": set()}
    kp_extra: dict[str, Any] = kp_conf or {}
    sending = threading.Event()

    def with_librdkafka() -> None:
        one_per_request = {"batch.num.messages": 1} if linger_ms == 0 else {}
        producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                                "linger.ms": linger_ms, "message.timeout.ms": 120000, **one_per_request,
                                **(ck_conf or {})})

        def delivered(err, msg) -> None:
            if err is None:
                acked["ck"].add(msg.value())
                sending.set()
        for i in range(total):
            while True:
                try:
                    producer.produce(topic, value_of("ck", i), partition=partition_of("ck", i),
                                     on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(pace_s if i % pace_every == 0 else 0)
        assert producer.flush(120) == 0

    def with_kafka_python() -> None:
        producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True, acks="all",
                                       linger_ms=linger_ms, request_timeout_ms=30000, delivery_timeout_ms=120000,
                                       **kp_extra)
        futures = []
        for i in range(total):
            payload = value_of("kp", i)
            futures.append((payload, producer.send(topic, payload, partition=partition_of("kp", i))))
            if i % pace_every == 0:
                time.sleep(pace_s)
        producer.flush(120)
        acked["kp"].update(payload for payload, future in futures if future.succeeded())
        producer.close(30)

    threads = [threading.Thread(target=with_librdkafka), threading.Thread(target=with_kafka_python)]
    for t in threads:
        t.start()
    assert sending.wait(60), "librdkafka acknowledged nothing"
    if before_kills is not None:
        before_kills()
    for worker in workers:
        broker.kill_worker(worker)
    for t in threads:
        t.join(240)
        assert not t.is_alive()
    return acked


def assert_acknowledged_once(stored: list[bytes], acknowledged: set[bytes]) -> None:
    """Every acknowledged value is among ``stored`` (what the log holds), and no value is there twice."""
    assert len(stored) == len(set(stored)), "no record is stored twice"
    missing = acknowledged - set(stored)
    assert not missing, f"{len(missing)} acknowledged records are not in the log: {sorted(missing)[:5]}"
