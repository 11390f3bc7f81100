"""The broker-to-broker client connection against a real broker."""

import asyncio
import uuid

import pytest
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
