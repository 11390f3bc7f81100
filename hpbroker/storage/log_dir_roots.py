"""What lives at the root of each log directory and belongs to the broker as
a whole, not to a partition:

* ``.lock``: one broker per directory.  The lock is an ``flock`` on an open
  descriptor, so it lasts as long as some process holds that descriptor open;
  another broker gets ``LogDirInUseError``.
* ``meta.properties``: the broker id and cluster id, written on first use and
  checked on every start.
* ``.kafka_cleanshutdown``: written at a clean stop, after every partition
  was flushed and checkpointed; consumed at start, so that a crash from then
  on looks unclean and the next start recovers.

In a broker the acceptor holds these for the process tree's lifetime and the
workers only learn whether the last stop was clean.
"""

import fcntl
import os

from hpbroker.storage import checkpoints, filenames
from hpbroker.storage.errors import LogDirInUseError, StorageError


class LogDirRoots:
    def __init__(self, log_dirs: list[str], *, broker_id: int = 0, cluster_id: str | None = None):
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.broker_id = broker_id
        self.cluster_id = cluster_id  # None: taken from meta.properties, or a new one
        self.had_clean_shutdown = True
        self._locks: list[int] = []

    def lock(self) -> None:
        """Take every directory's lock (``LogDirInUseError`` when another broker has one)."""
        if self._locks:
            return
        for log_dir in self.log_dirs:
            os.makedirs(log_dir, exist_ok=True)
            self._lock(log_dir)

    def stored_ids(self) -> tuple[int | None, str | None]:
        """(broker id, cluster id) as ``meta.properties`` records them, or None
        where no directory has one yet: what a cluster member joins with."""
        broker_id = cluster_id = None
        for log_dir in self.log_dirs:
            path = os.path.join(log_dir, filenames.META_PROPERTIES)
            if os.path.exists(path):
                props = checkpoints.read_properties(path)
                found = props.get("broker.id", props.get("node.id"))
                broker_id = int(found) if found is not None and broker_id is None else broker_id
                cluster_id = cluster_id or props.get("cluster.id")
        return broker_id, cluster_id

    def open(self) -> bool:
        """Lock the directories (if not yet), check ``meta.properties``, and
        consume the clean-shutdown markers; returns whether the last stop was clean.
        ``cluster_id`` is set from then on."""
        self.lock()
        for log_dir in self.log_dirs:
            self._check_meta_properties(log_dir)
        if self.cluster_id is None:
            # Every meta.properties predates cluster ids (Kafka before 0.10.1 wrote
            # none): the broker gets one, recorded as Kafka does on upgrade (KIP-78).
            self.cluster_id = checkpoints.kafka_uuid_string(checkpoints.new_kafka_uuid())
            for log_dir in self.log_dirs:
                path = os.path.join(log_dir, filenames.META_PROPERTIES)
                props = {**checkpoints.read_properties(path), "cluster.id": self.cluster_id}
                checkpoints.write_properties(path, props, comment="written by hpbroker")
        for log_dir in self.log_dirs:
            marker = os.path.join(log_dir, filenames.CLEAN_SHUTDOWN_FILE)
            clean = os.path.exists(marker)
            self.had_clean_shutdown &= clean
            if clean:
                os.unlink(marker)  # from now on a crash must look unclean
        return self.had_clean_shutdown

    def close(self) -> None:
        """A clean stop: write the markers (only once every partition is flushed
        and checkpointed) and unlock."""
        for log_dir in self.log_dirs:
            checkpoints.write_clean_shutdown(os.path.join(log_dir, filenames.CLEAN_SHUTDOWN_FILE))
        self.unlock()

    def unlock(self) -> None:
        """Close the lock descriptors without writing a marker: after a stop
        that was not clean, the next start recovers.  In a forked child this
        closes only the child's copies: the parent's keep the locks held."""
        for fd in self._locks:
            os.close(fd)  # the flock is released once no process holds its descriptor
        self._locks.clear()

    def _lock(self, log_dir: str) -> None:
        fd = os.open(os.path.join(log_dir, filenames.LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            self.unlock()
            raise LogDirInUseError(f"{log_dir} is in use by another broker (its .lock is held)") from None
        self._locks.append(fd)

    def _check_meta_properties(self, log_dir: str) -> None:
        path = os.path.join(log_dir, filenames.META_PROPERTIES)
        if not os.path.exists(path):
            if self.cluster_id is None:
                self.cluster_id = checkpoints.kafka_uuid_string(checkpoints.new_kafka_uuid())
            props = {"version": "0", "broker.id": str(self.broker_id), "cluster.id": self.cluster_id}
            checkpoints.write_properties(path, props, comment="written by hpbroker")
            return
        props = checkpoints.read_properties(path)
        found_id = props.get("broker.id", props.get("node.id"))
        if found_id is not None and int(found_id) != self.broker_id:
            raise StorageError(
                f"{path} says broker.id={found_id} but this broker is {self.broker_id}: "
                "the directory belongs to another broker"
            )
        found_cluster = props.get("cluster.id")
        if self.cluster_id is not None and found_cluster and found_cluster != self.cluster_id:
            raise StorageError(f"{path} belongs to cluster {found_cluster}, not {self.cluster_id}")
        self.cluster_id = found_cluster or self.cluster_id
