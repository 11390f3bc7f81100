"""The acceptor <-> worker control messages: every kind survives its bytes,
and anything else is a ControlMessageError, never another exception."""

import json
import socket

import pytest

from hpbroker.server import control_channel
from hpbroker.server.control_channel import ControlMessageError, Heartbeat, Kind, Message, Moved, Peer, decode, encode

EXAMPLES = [
    Message(Kind.CONN, Peer("127.0.0.1", "PLAINTEXT")),
    Message(Kind.CONN, Peer("::1", "EXTERNAL")),
    Message(Kind.TOOK),
    Message(Kind.LOST),
    Message(Kind.DRAIN),
    Message(Kind.DRAINED),
    Message(Kind.STOP),
    Message(Kind.READY),
    Message(Kind.CLOSED, Peer("10.0.0.7", "INTERNAL")),
    Message(Kind.HEARTBEAT, Heartbeat(3, 12, 10_000_000_000, 0)),
    Message(Kind.BOOT_FAILED, "cannot open /data/t-0: Permission denied"),
    Message(Kind.BOOT_FAILED, ""),
    Message(Kind.RELOAD, {"log.retention.ms": "1000", "log.dirs": "/data"}),
    Message(Kind.MOVE, Moved(1, Peer("127.0.0.1", "PLAINTEXT"))),
]


def test_every_kind_has_an_example():
    assert {m.kind for m in EXAMPLES} == set(Kind)


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: m.kind.value)
def test_a_message_decodes_to_what_was_encoded(message):
    assert decode(encode(*message)) == message


def test_the_bytes_are_readable():
    assert encode(Kind.CONN, Peer("127.0.0.1", "SSL")) == b"conn 127.0.0.1 SSL"
    assert encode(Kind.MOVE, Moved(0, Peer("::1", "SSL"))) == b"move 0 ::1 SSL"
    assert encode(Kind.HEARTBEAT, Heartbeat(1, 2, 3, 4)) == b"hb 1 2 3 4"
    assert encode(Kind.BOOT_FAILED, "no disk") == b"boot-failed no disk"
    assert encode(Kind.RELOAD, {"a": "b"}) == b'reload {"a": "b"}'


def test_a_boot_failure_reason_is_cut_even_inside_a_character():
    reason = "é" * control_channel.MAX_REASON  # two bytes each: the cut lands inside one
    data = encode(Kind.BOOT_FAILED, reason)
    assert len(data) == len(b"boot-failed ") + control_channel.MAX_REASON
    got = decode(encode(Kind.BOOT_FAILED, "x" + reason)).payload
    assert isinstance(got, str)
    assert got.startswith("x" + "é" * 99) and got.endswith("\ufffd")


@pytest.mark.parametrize("data", [
    b"", b"hello", b"conn ", b"stop now", b"took\x00", b"HB 1 2 3 4",
    b"hb", b"hb 1 2 3", b"hb 1 2 3 4 5", b"hb 1 2 x 4", b"hb -1 2 3 4", b"hb 1  2 3",
    b"reload", b"reload not json", b"reload [1, 2]", b'reload "text"', b"reload {\xff}",
    b"\xff\xfe", b"boot_failed x", b"move", b"move ", b"move -1", b"move one", b"move 1", b"move 1 ip",
    b"conn", b"conn 127.0.0.1", b"conn  SSL", b"closed", b"closed a b c",
])
def test_anything_else_is_a_control_message_error(data):
    with pytest.raises(ControlMessageError):
        decode(data)


@pytest.mark.parametrize("kind, payload", [
    (Kind.STOP, "now"),
    (Kind.HEARTBEAT, None),
    (Kind.HEARTBEAT, (1, 2, 3, 4)),
    (Kind.RELOAD, "{}"),
    (Kind.BOOT_FAILED, b"bytes"),
    (Kind.MOVE, 1),
    (Kind.CONN, None),
    (Kind.CLOSED, ("127.0.0.1", "SSL")),
])
def test_a_payload_that_does_not_fit_the_kind_is_refused(kind, payload):
    with pytest.raises(ControlMessageError):
        encode(kind, payload)


def test_a_message_over_the_size_limit_is_refused_before_it_is_sent():
    too_big = {"k": "v" * control_channel.MAX_MESSAGE}
    with pytest.raises(ControlMessageError, match="exceeds"):
        encode(Kind.RELOAD, too_big)
    fits = {"k": "v" * (control_channel.MAX_MESSAGE - len(b'reload {"k": ""}'))}
    assert len(encode(Kind.RELOAD, fits)) == control_channel.MAX_MESSAGE


def test_a_connection_travels_with_its_descriptor():
    acceptor, worker = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    client, server = socket.socketpair()
    with acceptor, worker, client, server:
        peer = Peer("127.0.0.1", "PLAINTEXT")
        socket.send_fds(acceptor, [encode(Kind.CONN, peer)], [server.fileno()])
        data, fds, _flags, _addr = socket.recv_fds(worker, control_channel.MAX_MESSAGE, 8)
        assert decode(data) == Message(Kind.CONN, peer) and len(fds) == 1
        with socket.socket(fileno=fds[0]) as adopted:
            adopted.sendall(b"hi")
            assert client.recv(2) == b"hi"


def test_the_largest_message_arrives_whole_in_one_packet():
    acceptor, worker = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    acceptor.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * control_channel.MAX_MESSAGE)
    settings = {"k": "v" * (control_channel.MAX_MESSAGE - len(b'reload {"k": ""}'))}
    with acceptor, worker:
        acceptor.send(encode(Kind.RELOAD, settings))
        assert json.loads(worker.recv(control_channel.MAX_MESSAGE)[len(b"reload "):]) == settings
