"""A worker's link to the broker's one ZooKeeper session, which the acceptor
holds: the cluster image and the session's state read from the cluster board
in shared memory, the worker's own writes (ISR changes, admin writes) made
through the acceptor's proxy.

The board wakes the worker's event loop through its eventfd; the image is
decoded once per generation.  Whether the session is still tracked (the
acceptor renews a deadline on the board) is part of whether the worker may
trust its leaderships: a stopped acceptor lets the deadline pass, and the
worker then doubts them as after a pause of its own, until the acceptor
answers a re-read (``confirm``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from kazoo.exceptions import BadVersionError, NoNodeError

from hpbroker.cluster import znodes
from hpbroker.cluster.admin import ClusterAdmin
from hpbroker.cluster.board_publisher import decode_image
from hpbroker.cluster.image import ClusterImage
from hpbroker.cluster.session_tracker import Session
from hpbroker.cluster.zk_proxy import ProxyOps
from hpbroker.shared.cluster_board import ClusterBoard

log = logging.getLogger(__name__)


class SharedLink:
    def __init__(self, board: ClusterBoard, index: int, broker_tag: str):
        self.board = board
        self.wakeup = board.wakeups[index]
        self.zk = ProxyOps(broker_tag)
        self.admin = ClusterAdmin(self)  # the admin writes, coroutines over the proxy
        self.session = Session.CONNECTED
        self._generation = -1
        self._image = ClusterImage()
        self._callbacks = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._read()

    # --- the board -------------------------------------------------------------------------------
    def _read(self) -> tuple[bool, bool]:
        """Take the board's current publication: (the image changed, the session changed)."""
        found = self.board.read(self._generation)
        if found is None:
            return False, False
        image_changed = found.image is not None
        if found.image is not None:
            try:
                self._image = decode_image(found.image)
            except Exception:  # noqa: BLE001 - never expected: the acceptor wrote it; keep the last one
                log.exception("the cluster image on the board could not be read")
                image_changed = False
        self._generation = found.generation
        session = Session(found.session)
        session_changed = session is not self.session
        self.session = session
        return image_changed, session_changed

    def image(self) -> ClusterImage:
        return self._image

    def tracked(self) -> bool:
        """The acceptor is tracking the session (its deadline on the board has not passed)."""
        return self.board.tracked()

    def tracked_until(self) -> float:
        return self.board.tracked_until()

    def publish_to(self, on_image, on_session) -> None:
        """From now on, on this loop: ``on_session(Session)`` when the session's
        state changed (its caller applies the image too), else ``on_image(image)``
        when the image did."""
        self._callbacks = (on_image, on_session)
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.wakeup, self._woken)
        if self.session is not Session.CONNECTED:
            on_session(self.session)

    def _woken(self) -> None:
        ClusterBoard.drain(self.wakeup)
        self.refresh()

    def refresh(self) -> None:
        image_changed, session_changed = self._read()
        if self._callbacks is None:
            return
        on_image, on_session = self._callbacks
        if session_changed:
            on_session(self.session)
        elif image_changed:
            on_image(self._image)

    async def confirm(self) -> None:
        """Have the acceptor read the partition states again; on return the image
        read here is at least that fresh."""
        await self.zk.reread()
        self.refresh()

    def close(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self.wakeup)
            self._loop = None
        self._callbacks = None
        self.zk.close()

    # --- the leader's writes -----------------------------------------------------------------
    async def propose_isr(self, topic: str, partition: int,
                          state: znodes.PartitionState) -> znodes.PartitionState | None:
        """Set the partition's state if nobody changed it since ``state.zk_version``;
        the state as written (its new version and zxid), or None when it had
        changed (the controller or a newer leader won: the image will show what
        is true)."""
        try:
            stat = await self.zk.set(znodes.partition_state_path(topic, partition), state.encode(),
                                     version=state.zk_version)
        except (BadVersionError, NoNodeError):
            return None
        return dataclasses.replace(state, zk_version=stat.version, zxid=stat.mzxid)
