"""The ZooKeeper operations a worker asks of its broker's one session, and
how they travel to the acceptor that holds it (``zk_proxy``).

A worker awaits them as coroutines (``zk_proxy.ProxyOps``: get, exists,
children, create, ensure_path, set, multi); failures are kazoo's exceptions:
``NoNodeError``, ``NodeExistsError``, ``BadVersionError`` for the node races
a caller handles, any other ``KazooException`` for ZooKeeper trouble.

A transaction (``multi``) is a list of ``("create", path, data)``,
``("create_sequential", path prefix, data)``, ``("set", path, data,
version)`` and ``("delete", path, version)``; its
answer has one entry per operation, the failed ones as exception instances
(kazoo's own convention: a failed transaction fails every operation, the
one at fault with its own error).

On the wire a frame is a 4-byte big-endian length and a msgpack-encoded
``Request`` (an id and one operation) or ``Reply`` (the id and its outcome).
The operations form a closed set of msgspec structs, so nothing but them is
ever built from a frame.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, TypeVar

import msgspec
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

# the node errors that pass between processes by name; anything else is ZooKeeper trouble
NODE_ERRORS = {cls.__name__: cls for cls in (NoNodeError, NodeExistsError, BadVersionError)}


class Stat(NamedTuple):
    """What callers read of a znode's stat."""
    version: int
    mzxid: int


def error_named(name: str, message: str = "") -> KazooException:
    cls = NODE_ERRORS.get(name)
    return cls() if cls is not None else KazooException(message or name)


def transaction_of(client, ops: list[tuple]):
    """A kazoo transaction holding ``ops`` (see the module's docstring)."""
    transaction = client.transaction()
    for op in ops:
        if op[0] == "create":
            transaction.create(op[1], op[2])
        elif op[0] == "create_sequential":
            transaction.create(op[1], op[2], sequence=True)
        elif op[0] == "set":
            transaction.set_data(op[1], op[2], version=op[3])
        elif op[0] == "delete":
            transaction.delete(op[1], version=op[2])
        else:
            raise ValueError(f"no such transaction operation {op[0]!r}")
    return transaction


FRAME_LENGTH = struct.Struct(">I")
MAX_FRAME = 16 << 20  # a znode is at most 1 MiB (jute.maxbuffer); a transaction a few of them


def proxy_address(broker_tag: str) -> str:
    return f"\0hpbroker-{broker_tag}-zookeeper"


# --- the operations ---------------------------------------------------------------------------
class Get(msgspec.Struct, tag=True):
    path: str


class Exists(msgspec.Struct, tag=True):
    path: str


class Children(msgspec.Struct, tag=True):
    path: str


class Create(msgspec.Struct, tag=True):
    path: str
    data: bytes
    makepath: bool


class EnsurePath(msgspec.Struct, tag=True):
    path: str


class SetData(msgspec.Struct, tag=True):
    path: str
    data: bytes
    version: int


class Multi(msgspec.Struct, tag=True):
    ops: list[tuple[str, str, bytes | None, int]]  # (kind, path, data or None, version or -1)


def wire_op(op: tuple) -> tuple[str, str, bytes | None, int]:
    """A ``zk_ops`` transaction operation as one shape, for the wire."""
    if op[0] in ("create", "create_sequential"):
        return (op[0], op[1], op[2], -1)
    if op[0] == "set":
        return ("set", op[1], op[2], op[3])
    return (op[0], op[1], None, op[2])


def unflat_op(op: tuple[str, str, bytes | None, int]) -> tuple:
    kind, path, data, version = op
    if kind in ("create", "create_sequential"):
        return (kind, path, data)
    if kind == "set":
        return (kind, path, data, version)
    return (kind, path, version)


class Reread(msgspec.Struct, tag=True):
    """Read the partition states again and publish the image: the worker
    doubted its leaderships and wants a view newer than its doubt."""


Operation = Get | Exists | Children | Create | EnsurePath | SetData | Multi | Reread


class Request(msgspec.Struct, array_like=True):
    id: int
    op: Operation


# --- the outcomes -------------------------------------------------------------------------------
class Node(msgspec.Struct, tag=True):
    data: bytes
    version: int
    mzxid: int


class Names(msgspec.Struct, tag=True):
    names: list[str]


class Done(msgspec.Struct, tag=True):
    found: bool = True  # Exists: whether the node is there


class Written(msgspec.Struct, tag=True):
    version: int
    mzxid: int


class MultiDone(msgspec.Struct, tag=True):
    errors: list[str]  # per operation: "" when it took, else its error's name


class Generation(msgspec.Struct, tag=True):
    generation: int  # the board's generation once the states were read again


class Refused(msgspec.Struct, tag=True):
    error: str  # a node error's name, else a description of ZooKeeper's trouble


Outcome = Node | Names | Done | Written | MultiDone | Generation | Refused


Answer = TypeVar("Answer", Node, Names, Done, Written, MultiDone, Generation)


class Reply(msgspec.Struct, array_like=True):
    id: int
    outcome: Outcome


REQUEST_DECODER = msgspec.msgpack.Decoder(Request)
REPLY_DECODER = msgspec.msgpack.Decoder(Reply)
_encoder = msgspec.msgpack.Encoder()


def frame(message: Request | Reply) -> bytes:
    body = _encoder.encode(message)
    return FRAME_LENGTH.pack(len(body)) + body


