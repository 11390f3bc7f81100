"""The broker-to-broker client connection against a real broker."""

import asyncio
import struct
import uuid

import pytest
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName

from harness.broker import free_port
from hpbroker.replication.client import ClientConnection


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 60))


def test_requests_are_answered_in_order_when_pipelined(broker_factory):
    broker = broker_factory()

    async def scenario():
        connection = await ClientConnection.open("127.0.0.1", broker.port, "test-client")
        try:
            versions = await connection.send(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
            assert versions.error_code == ErrorCode.none
            assert any(k.api_key == 1 and k.max_version >= 12 for k in versions.api_keys)
            create = MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=TopicName("client-topic")),),
                                     allow_auto_topic_creation=True, include_topic_authorized_operations=False)
            answers = await asyncio.gather(*(connection.send(create) for _ in range(50)))
            assert all(a.brokers[0].port == broker.port for a in answers)
            assert answers[-1].topics[0].name == "client-topic"
        finally:
            connection.close()

    run(scenario())


def test_a_lost_connection_fails_what_is_pending_and_refuses_more():
    async def scenario():
        accepted = asyncio.Event()

        async def serve(reader, writer):
            await reader.read(4)  # take part of a request, then hang up
            writer.close()
            accepted.set()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        connection = await ClientConnection.open("127.0.0.1", port, "t")
        with pytest.raises(ConnectionError, match="connection lost"):
            await connection.send(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        await accepted.wait()
        with pytest.raises(ConnectionError, match="closed"):
            await connection.send(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        server.close()

    run(scenario())


def test_an_unanswered_request_times_out_and_closes_the_connection():
    async def scenario():
        async def serve(reader, writer):
            await reader.read()  # never answers

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        connection = await ClientConnection.open("127.0.0.1", port, "t")
        with pytest.raises(ConnectionError, match="no answer within 0.2 s"):
            await connection.send(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 0.2)
        await connection.wait_closed()
        assert connection.closed
        server.close()

    run(scenario())


def test_connecting_where_nothing_listens_is_a_connection_error():
    with pytest.raises(OSError):
        run(ClientConnection.open("127.0.0.1", free_port(), "t"))


def test_metadata_for_an_unknown_topic_id_echoes_it_with_unknown_topic_id(broker_factory):
    broker = broker_factory()
    wanted = uuid.uuid4()

    async def scenario():
        connection = await ClientConnection.open("127.0.0.1", broker.port, "test-client")
        try:
            return await connection.send(MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=wanted, name=None),), allow_auto_topic_creation=True,
                include_topic_authorized_operations=False))
        finally:
            connection.close()

    (topic,) = run(scenario()).topics
    assert (topic.error_code, topic.topic_id, topic.name) == (ErrorCode.unknown_topic_id, wanted, None)


def test_an_answer_split_across_reads_and_one_whose_caller_gave_up_keep_the_stream_in_step():
    """A large answer arrives in pieces (received into a buffer of its own); the
    caller of the first request gives up before its answer comes, and the
    answers after it still reach their own callers."""
    keys = 20_000  # ApiVersions v0 entries of 6 bytes: an answer far larger than the reader's scratch

    def answer(correlation_id: int, error: int, entries: int) -> bytes:
        body = struct.pack(">ihi", correlation_id, error, entries) + struct.pack(">hhh", 0, 0, 9) * entries
        return struct.pack(">i", len(body)) + body

    async def scenario():
        async def serve(reader, writer):
            for correlation_id, error, entries in ((1, 0, 1), (2, 35, 0), (3, 0, keys)):
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                await reader.readexactly(size)
                frame = answer(correlation_id, error, entries)
                for i in range(0, len(frame), 7919):  # a few kilobytes at a time
                    writer.write(frame[i:i + 7919])
                    await writer.drain()
                    await asyncio.sleep(0)

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        connection = await ClientConnection.open("127.0.0.1", port, "t")
        try:
            abandoned = asyncio.ensure_future(connection.send(ApiVersionsRequestV0()))
            await asyncio.sleep(0)  # sent; its caller gives up before the answer is read
            abandoned.cancel()
            second = await connection.send(ApiVersionsRequestV0())
            third = await connection.send(ApiVersionsRequestV0())
        finally:
            connection.close()
            server.close()
        assert abandoned.cancelled()
        return second, third

    second, third = run(scenario())
    assert (second.error_code, len(second.api_keys)) == (ErrorCode.unsupported_version, 0)
    assert (third.error_code, len(third.api_keys)) == (ErrorCode.none, keys)
    assert third.api_keys[-1].max_version == 9


@pytest.mark.parametrize("answer, reason", [
    (struct.pack(">ihi", 999, 0, 0), "response 999 where 1 was due"),  # another request's correlation id
    (struct.pack(">i", 1) + b"\x00", "bad response"),  # its own id, then a body cut short
], ids=["another request's id", "its body cut short"])
def test_a_bad_answer_fails_its_own_request_at_once_with_the_reason(answer, reason):
    async def scenario():
        async def serve(reader, writer):
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            await reader.readexactly(size)
            writer.write(struct.pack(">i", len(answer)) + answer)
            await reader.read()  # holds the connection open: only the answer can end the wait

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        connection = await ClientConnection.open("127.0.0.1", port, "t")
        try:
            with pytest.raises(ConnectionError, match=reason):
                await connection.send(ApiVersionsRequestV0(), timeout=30)
        finally:
            connection.close()
            server.close()

    run(asyncio.wait_for(scenario(), 10))  # well inside the request's own 30 s timeout
