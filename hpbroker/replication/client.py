"""The client side of the wire: one connection that sends kio requests and
awaits their responses, as a broker talks to another (a follower fetching
from its leader).  This is its asyncio part; the frames are
``protocol.client_codec``'s.

Requests are pipelined: each gets a correlation id and a future; the reader
task matches responses to them in order (Kafka answers a connection's
requests in the order they came).  A failed connection fails every pending
request with ``ConnectionError`` and the owner connects anew.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from collections import deque

from hpbroker.protocol.client_codec import MAX_RESPONSE_BYTES, decode_response, encode_request

_int32 = struct.Struct(">i")


class ClientConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str):
        self.reader, self.writer = reader, writer
        self.client_id = client_id
        self._ids = itertools.count(1)
        self._pending: deque[tuple[int, int, int, asyncio.Future]] = deque()
        self._task = asyncio.get_running_loop().create_task(self._read_responses())

    @classmethod
    async def open(cls, host: str, port: int, client_id: str, timeout: float = 5.0) -> "ClientConnection":
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        return cls(reader, writer, client_id)

    @property
    def closed(self) -> bool:
        return self._task.done()

    async def send(self, request, timeout: float = 30.0):
        """The response to ``request``; ConnectionError when the connection fails
        or the answer does not come within ``timeout`` seconds."""
        if self.closed:
            raise ConnectionError("connection closed")
        correlation_id = next(self._ids) & 0x7FFFFFFF
        future = asyncio.get_running_loop().create_future()
        self._pending.append((correlation_id, int(request.__api_key__), int(request.__version__), future))
        encode = getattr(request, "encode", None)  # a request that writes itself (fetch_request.py); else kio's
        self.writer.write(encode(correlation_id, self.client_id) if encode is not None
                          else encode_request(request, correlation_id, self.client_id))
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except asyncio.TimeoutError:
            future.cancel()
            self.close()  # later answers on this stream could no longer be matched
            raise ConnectionError(f"no answer within {timeout:g} s") from None
        except asyncio.CancelledError:
            future.cancel()  # nobody is left to take its answer or its error
            raise

    async def _read_responses(self) -> None:
        error: Exception = ConnectionError("connection closed")
        try:
            while True:
                size = _int32.unpack(await self.reader.readexactly(4))[0]
                if not 0 <= size <= MAX_RESPONSE_BYTES:
                    raise ConnectionError(f"response size {size} is not plausible")
                frame = await self.reader.readexactly(size)
                if not self._pending:
                    raise ConnectionError("a response nobody asked for")
                correlation_id, api_key, version, future = self._pending.popleft()
                got_id, response = decode_response(api_key, version, frame)
                if got_id != correlation_id:
                    raise ConnectionError(f"response {got_id} where {correlation_id} was due")
                if not future.done():
                    future.set_result(response)
        except (asyncio.IncompleteReadError, OSError) as exc:
            # ConnectionError itself is ours (a response out of place) and says why; the
            # socket's errors (ConnectionResetError, ... also OSErrors) are a lost connection
            error = exc if type(exc) is ConnectionError else ConnectionError(f"connection lost: {exc!r}")
        except Exception as exc:  # an undecodable response: the stream cannot be trusted
            error = ConnectionError(f"bad response: {exc!r}")
        finally:
            self.writer.close()
            while self._pending:
                future = self._pending.popleft()[3]
                if not future.done():
                    future.set_exception(error)

    def close(self) -> None:
        self._task.cancel()
        self.writer.close()

    async def wait_closed(self) -> None:
        await asyncio.gather(self._task, return_exceptions=True)
