"""Record the requests real clients send, as seeds for the fuzz tests.

Starts a broker, puts a recording TCP proxy in front of it, and runs
confluent-kafka (librdkafka), kafka-python and aiokafka through a producer,
a group consumer and admin calls.  Every distinct (client, api key, version)
request is kept once, records batches small, in tests/golden/requests.jsonl
(base64 frames without their size prefix).

    .venv/bin/python -m tests.capture_requests
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import struct
import tempfile
import threading
import time
from pathlib import Path

from harness.broker import Broker, free_port, metadata_ping
from harness.waiting import wait_for
from tests.fuzz_requests import CAPTURED

MAX_FRAME = 2048  # bigger frames only slow the fuzzing down


class ProxiedBroker(Broker):
    """A broker that advertises the proxy in front of it, so that clients send
    every request (not only the bootstrap ones) through the proxy."""

    def __init__(self, data_dir, proxy_port: int):
        super().__init__(data_dir, overrides={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy_port}"})
        self.proxy_port = proxy_port

    def _ready(self) -> bool:
        assert self.proc is not None, "not started"
        if self.proc.poll() is not None:
            raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log_tail()}")
        return metadata_ping(self.host, self.proxy_port, timeout=1.0)


class RecordingProxy:
    """Forwards loopback connections to the broker, keeping client frames."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.frames: dict[tuple[str, int, int], bytes] = {}
        self.client: str | None = None  # frames arriving while None (readiness pings) are not kept
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            conn, _ = self.listener.accept()
            try:
                upstream = socket.create_connection(self.target)
            except OSError:  # the broker is not up yet
                conn.close()
                continue
            threading.Thread(target=self._pump_requests, args=(conn, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, conn), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            dst.close()

    def _pump_requests(self, src: socket.socket, dst: socket.socket) -> None:
        pending = b""
        try:
            while data := src.recv(65536):
                dst.sendall(data)
                pending += data
                while len(pending) >= 4 and len(pending) >= 4 + struct.unpack_from(">i", pending)[0]:
                    size = struct.unpack_from(">i", pending)[0]
                    self._keep(pending[4:4 + size])
                    pending = pending[4 + size:]
        except OSError:
            pass
        finally:
            dst.close()

    def _keep(self, frame: bytes) -> None:
        client = self.client
        if client is None or len(frame) > MAX_FRAME:
            return
        api_key, version = struct.unpack_from(">hh", frame)
        self.frames.setdefault((client, api_key, version), frame)


def run_confluent(bootstrap: str, topic: str) -> None:
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    admin.describe_configs([ConfigResource("topic", topic)])
    producer = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "compression.type": "lz4"})
    for i in range(10):
        producer.produce(topic, key=b"k%d" % i, value=b"v" * 20, headers=[("h", b"x")])
    assert producer.flush(30) == 0
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"cap-{topic}",
                            "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 30
    while got < 10 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got += 1
    consumer.commit(asynchronous=False)
    consumer.close()
    admin.list_consumer_groups().result()
    admin.delete_topics([topic])[topic].result(30)


def run_kafka_python(bootstrap: str, topic: str) -> None:
    import kafka
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, 2, 1)])
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip")
    for i in range(10):
        producer.send(topic, key=b"k%d" % i, value=b"v" * 20)
    producer.flush(30)
    producer.close()
    consumer = kafka.KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"cap-{topic}",
                                   auto_offset_reset="earliest", consumer_timeout_ms=5000)
    wait_for(lambda: len([m for _, ms in consumer.poll(500).items() for m in ms]) > 0, 30, "kafka-python records")
    consumer.commit()
    consumer.close()
    admin.list_groups()  # pyright: ignore[reportAttributeAccessIssue]  (typeshed's stubs are kafka-python 2.3's)
    admin.delete_topics([topic])
    admin.close()


def run_aiokafka(bootstrap: str, topic: str) -> None:
    import aiokafka

    async def go():
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        for i in range(10):
            await producer.send_and_wait(topic, b"v" * 20, key=b"k%d" % i)
        await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"cap-{topic}",
                                             auto_offset_reset="earliest")
        await consumer.start()
        await consumer.getone()
        await consumer.commit()
        await consumer.stop()

    asyncio.run(go())


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        proxy = RecordingProxy(("127.0.0.1", port))
        broker = ProxiedBroker(Path(tmp) / "data", proxy.port)
        broker.port = port
        broker.start()
        try:
            bootstrap = f"127.0.0.1:{proxy.port}"
            for client, run in (("confluent-kafka", run_confluent), ("kafka-python", run_kafka_python),
                                ("aiokafka", run_aiokafka)):
                proxy.client = client
                run(bootstrap, f"capture-{client}")
            time.sleep(0.5)  # the proxy threads hand over the last frames (a capture tool, not a test)
        finally:
            broker.stop()
    lines = [json.dumps({"client": client, "api_key": key, "api_version": version,
                         "frame": base64.b64encode(frame).decode()})
             for (client, key, version), frame in sorted(proxy.frames.items())]
    CAPTURED.write_text("\n".join(lines) + "\n")
    print(f"wrote {len(lines)} requests to {CAPTURED}")


if __name__ == "__main__":
    main()
