"""The messages between the acceptor and its workers, and their bytes.

Each worker has one SOCK_SEQPACKET socketpair with the acceptor, one message
per packet: the kind's name, then, for the kinds that carry something, a
space and the payload.  Both ends are the same program, so the format is
ours; ``encode`` and ``decode`` are its only writer and reader.

acceptor -> worker:

* ``conn``: a client socket, attached as SCM_RIGHTS (``socket.send_fds``);
  answered ``took`` (adopted) or ``lost`` (the descriptor did not arrive);
* ``drain``: take no more requests, finish those in flight, answer ``drained``;
* ``stop``: flush, write checkpoints, exit 0;
* ``reload <json>``: the new settings (a dict; the log settings apply live).

worker -> acceptor:

* ``ready`` once booted;
* ``hb C P I O`` every heartbeat interval (``Heartbeat``: open connections,
  open partitions, bytes in and out so far);
* ``took`` / ``lost``, ``drained``: the answers above;
* ``closed`` when a client connection ends;
* ``move <worker>``: a client socket (SCM_RIGHTS) to hand to that worker, whose
  partitions the connection's requests go to (``workers/affinity.py``);
  followed by the ``closed`` of the worker's own end of it;
* ``boot-failed <why>`` before exiting with ``BOOT_FAILURE_EXIT``.

A packet that is not one of these raises ``ControlMessageError``: the receiver
logs it and carries on, since a bad message must not stop either process.
"""

import enum
import json
from typing import NamedTuple

BOOT_FAILURE_EXIT = 3  # a worker's exit code when it could not boot: the acceptor stops instead of restarting it
MAX_MESSAGE = 1 << 16  # bytes in one packet; a reload carries the whole configuration
MAX_REASON = 200  # bytes of a boot failure's reason


class Kind(enum.Enum):
    CONN = "conn"
    TOOK = "took"
    LOST = "lost"
    DRAIN = "drain"
    DRAINED = "drained"
    STOP = "stop"
    RELOAD = "reload"
    READY = "ready"
    HEARTBEAT = "hb"
    CLOSED = "closed"
    MOVE = "move"
    BOOT_FAILED = "boot-failed"


class Heartbeat(NamedTuple):
    connections: int
    partitions: int
    bytes_in: int
    bytes_out: int


class Peer(NamedTuple):
    """A client connection's address and the listener it came in on: a CONN
    names them (the worker serves the connection with that listener's
    security), and the CLOSED and MOVE about it name them back (the
    acceptor's connection quotas count by them)."""
    ip: str
    listener: str


class Moved(NamedTuple):
    """A MOVE: the worker the connection goes to, and the connection's peer."""
    worker: int
    peer: Peer


class Message(NamedTuple):
    kind: Kind
    # HEARTBEAT, BOOT_FAILED's reason, RELOAD's settings, a MOVE's destination, a CONN's or CLOSED's peer
    payload: Heartbeat | str | dict | Moved | Peer | None = None


class ControlMessageError(ValueError):
    """Bytes that are no control message, or a message that cannot be sent."""


def _encode_heartbeat(beat: Heartbeat) -> bytes:
    return b"%d %d %d %d" % tuple(beat)


def _decode_heartbeat(body: bytes) -> Heartbeat:
    fields = body.split(b" ")
    if len(fields) != len(Heartbeat._fields) or not all(f.isdigit() for f in fields):
        raise ControlMessageError(f"a heartbeat needs {len(Heartbeat._fields)} counts, got {body[:80]!r}")
    return Heartbeat(*map(int, fields))


def _encode_reason(reason: str) -> bytes:
    return reason.encode()[:MAX_REASON]


def _decode_reason(body: bytes) -> str:
    return body.decode(errors="replace")  # the cut may have split a character


def _encode_settings(settings: dict) -> bytes:
    return json.dumps(settings).encode()


def _decode_settings(body: bytes) -> dict:
    try:
        settings = json.loads(body)
    except ValueError as exc:
        raise ControlMessageError(f"a reload's settings are not JSON: {exc}") from None
    if not isinstance(settings, dict):
        raise ControlMessageError(f"a reload's settings are a {type(settings).__name__}, not an object")
    return settings


def _encode_peer(peer: Peer) -> bytes:
    return f"{peer.ip} {peer.listener}".encode()


def _decode_peer(body: bytes) -> Peer:
    ip, space, listener = body.decode(errors="replace").partition(" ")
    if not ip or not space or not listener or " " in listener:
        raise ControlMessageError(f"a peer is an address and a listener, not {body[:80]!r}")
    return Peer(ip, listener)


def _encode_moved(moved: Moved) -> bytes:
    return b"%d " % moved.worker + _encode_peer(moved.peer)


def _decode_moved(body: bytes) -> Moved:
    worker, _, peer = body.partition(b" ")
    if not worker.isdigit():
        raise ControlMessageError(f"a move names a worker by its index, not {body[:80]!r}")
    return Moved(int(worker), _decode_peer(peer))


# kind -> (payload type, encode, decode); the other kinds carry nothing
_PAYLOADS = {
    Kind.HEARTBEAT: (Heartbeat, _encode_heartbeat, _decode_heartbeat),
    Kind.BOOT_FAILED: (str, _encode_reason, _decode_reason),
    Kind.RELOAD: (dict, _encode_settings, _decode_settings),
    Kind.MOVE: (Moved, _encode_moved, _decode_moved),
    Kind.CLOSED: (Peer, _encode_peer, _decode_peer),
    Kind.CONN: (Peer, _encode_peer, _decode_peer),
}
_BY_NAME = {kind.value.encode(): kind for kind in Kind}


def encode(kind: Kind, payload: Heartbeat | str | dict | Moved | Peer | None = None) -> bytes:
    """One packet's bytes; ``ControlMessageError`` when the payload does not
    fit the kind or the message would exceed ``MAX_MESSAGE``."""
    codec = _PAYLOADS.get(kind)
    if codec is None:
        if payload is not None:
            raise ControlMessageError(f"{kind.value} carries nothing, not {payload!r}")
        return kind.value.encode()
    payload_type, encode_payload, _decode = codec
    if not isinstance(payload, payload_type):
        raise ControlMessageError(f"{kind.value} carries a {payload_type.__name__}, not {payload!r}")
    data = kind.value.encode() + b" " + encode_payload(payload)
    if len(data) > MAX_MESSAGE:
        raise ControlMessageError(f"a {kind.value} message of {len(data)} bytes exceeds {MAX_MESSAGE}")
    return data


def decode(data: bytes) -> Message:
    """The message in one packet; ``ControlMessageError`` when it is none."""
    name, space, body = data.partition(b" ")
    kind = _BY_NAME.get(name)
    if kind is None:
        raise ControlMessageError(f"unknown control message {data[:80]!r}")
    codec = _PAYLOADS.get(kind)
    if codec is None:
        if space:
            raise ControlMessageError(f"{kind.value} carries nothing, got {data[:80]!r}")
        return Message(kind)
    return Message(kind, codec[2](body))
