"""The ZooKeeper operations a worker makes, as coroutines.

Two implementations answer them alike: ``KazooOps`` over a kazoo client of
this process (its asynchronous API bridged into asyncio futures, so the loop
never blocks), and ``zk_proxy.ProxyOps``, which asks the acceptor to make
them on the broker's one session.  Failures are kazoo's exceptions either
way: ``NoNodeError``, ``NodeExistsError``, ``BadVersionError`` for the node
races a caller handles, any other ``KazooException`` for ZooKeeper trouble.

A transaction (``multi``) is a list of ``("create", path, data)``,
``("set", path, data, version)`` and ``("delete", path, version)``; its
answer has one entry per operation, the failed ones as exception instances
(kazoo's own convention: a failed transaction fails every operation, the
one at fault with its own error).
"""

from __future__ import annotations

import asyncio
from typing import NamedTuple

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


def _settle(future: asyncio.Future, value, error: BaseException | None) -> None:
    if not future.done():
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)


def bridged(async_result) -> asyncio.Future:
    """An asyncio future of a kazoo asynchronous call (its result or exception)."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(result) -> None:
        try:
            value = result.get_nowait()
        except Exception as exc:  # noqa: BLE001 - handed to the awaiting coroutine as is
            loop.call_soon_threadsafe(_settle, future, None, exc)
        else:
            loop.call_soon_threadsafe(_settle, future, value, None)
    async_result.rawlink(settle)
    return future


def transaction_of(client, ops: list[tuple]):
    """A kazoo transaction holding ``ops`` (see the module's docstring)."""
    transaction = client.transaction()
    for op in ops:
        if op[0] == "create":
            transaction.create(op[1], op[2])
        elif op[0] == "set":
            transaction.set_data(op[1], op[2], version=op[3])
        elif op[0] == "delete":
            transaction.delete(op[1], version=op[2])
        else:
            raise ValueError(f"no such transaction operation {op[0]!r}")
    return transaction


class KazooOps:
    """The operations over a kazoo client of this process (``client()`` returns
    it, or None once closed: then every call fails as ZooKeeper trouble)."""

    def __init__(self, client):
        self._client = client

    def _session(self):
        client = self._client()
        if client is None:
            raise KazooException("no ZooKeeper session (stopping)")
        return client

    async def get(self, path: str) -> tuple[bytes, Stat]:
        data, stat = await bridged(self._session().get_async(path))
        return data, Stat(stat.version, stat.mzxid)

    async def exists(self, path: str) -> bool:
        return await bridged(self._session().exists_async(path)) is not None

    async def children(self, path: str) -> list[str]:
        return list(await bridged(self._session().get_children_async(path)))

    async def create(self, path: str, data: bytes = b"", makepath: bool = False) -> None:
        await bridged(self._session().create_async(path, data, makepath=makepath))

    async def ensure_path(self, path: str) -> None:
        await bridged(self._session().ensure_path_async(path))

    async def set(self, path: str, data: bytes, version: int) -> Stat:
        stat = await bridged(self._session().set_async(path, data, version=version))
        return Stat(stat.version, stat.mzxid)

    async def multi(self, ops: list[tuple]) -> list:
        return list(await bridged(transaction_of(self._session(), ops).commit_async()))
