"""What a request handler can reach: the config, the topics, the cluster view,
and the owners of partitions and groups (``owners``: this worker or a peer,
behind one client; see ``owners.py``)."""

import logging
import os
from collections import OrderedDict
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hpbroker.security.credentials import FileCredentials
from hpbroker.server.config import BrokerConfig
from hpbroker.storage import filenames
from hpbroker.workers.authorization import Access
from hpbroker.workers.client_identity import CLIENT_HOST
from hpbroker.workers.cluster_view import BrokerNode, StandaloneView
from hpbroker.workers.producer_ids import ProducerIdAllocator
from hpbroker.workers.topics import TopicRegistry

if TYPE_CHECKING:
    from hpbroker.workers.cluster_topics import ClusterTopics

_MAX_OPEN_SEGMENTS = 512
log = logging.getLogger(__name__)



class CloseConnection(Exception):
    """Raised by a handler whose only answer is closing the client's connection
    (a failed acks=0 produce: no response exists, and the close is how the
    client learns to refresh its metadata).  The message is logged as why."""


class Later:
    """A handler's answer that is owed, not ready: what the request changes is
    done (a produce's append), what is left is waiting (acks=all: for the
    replicas).  The connection goes on with the next request meanwhile and
    still answers in request order, so a producer's pipelined requests are
    appended while earlier ones wait, and one move of the high watermark
    answers them all."""

    __slots__ = ("rest", "request")

    def __init__(self, rest: Coroutine[Any, Any, list], request=None):
        self.rest = rest  # makes the response: a list of pieces
        # what an error answer mirrors if ``rest`` fails, in place of the request
        # handled, when that holds what the wait should not keep (a produce's records)
        self.request = request


@dataclass
class BrokerIdentity:
    broker_id: int
    cluster_id: str
    host: str
    port: int


class SegmentFiles:
    """Read-only descriptors of segment files, by path, for sendfile.

    A path can name a different file over time: compaction swaps a cleaned
    segment in under the old name, and a topic deleted and created again reuses
    its names.  So a cached descriptor is used only while it is still the file
    the path names (same device and inode).  A segment renamed to ``.deleted``
    by retention is still found under that name until it is unlinked."""

    def __init__(self):
        self._fds: OrderedDict[str, tuple[int, tuple[int, int]]] = OrderedDict()

    def fd(self, path: str, identity: tuple[int, int] | None = None) -> int | None:
        """A descriptor of the file ``path`` names now (or of its ``.deleted``
        successor); with ``identity``, None unless it is that very file."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            path_now = path + ".deleted"
            try:
                st = os.stat(path_now)
            except FileNotFoundError:
                return None  # deleted for good: the fetch is answered without these records
        else:
            path_now = path
        current = (st.st_dev, st.st_ino)
        if identity is not None and current != identity:
            return None
        cached = self._fds.get(path)
        if cached is not None and cached[1] == current:
            self._fds.move_to_end(path)
            return cached[0]
        if cached is not None:
            os.close(cached[0])
        try:
            fd = os.open(path_now, os.O_RDONLY)
        except FileNotFoundError:
            return None
        opened = os.fstat(fd)
        if identity is not None and (opened.st_dev, opened.st_ino) != identity:
            os.close(fd)  # swapped between the stat and the open
            return None
        self._fds[path] = (fd, (opened.st_dev, opened.st_ino))
        self._fds.move_to_end(path)
        while len(self._fds) > _MAX_OPEN_SEGMENTS:
            _, (old, _identity) = self._fds.popitem(last=False)
            os.close(old)
        return fd

    def prune(self) -> None:
        """Close descriptors of files that were unlinked (retention, compaction,
        deleted topics), so their disk space is freed."""
        for path, (fd, _identity) in list(self._fds.items()):
            try:
                gone = os.fstat(fd).st_nlink == 0
            except OSError:
                gone = True
            if gone:
                del self._fds[path]
                os.close(fd)

    def close(self) -> None:
        for fd, _identity in self._fds.values():
            os.close(fd)
        self._fds.clear()


class PartitionDirs:
    """Which log dir holds a partition, for reading another worker's segments
    by path (``handlers/fetch.py``); remembered, and forgotten when a file
    there turns out not to be the one expected."""

    _MAX = 1 << 16

    def __init__(self, log_dirs: list[str]):
        self.log_dirs = log_dirs
        self._known: dict[tuple[str, int], str] = {}

    def segment_path(self, topic: str, partition: int, base_offset: int) -> str | None:
        directory = self._known.get((topic, partition))
        if directory is None:
            name = filenames.partition_dir_name(topic, partition)
            directory = next((p for d in self.log_dirs if os.path.isdir(p := os.path.join(d, name))), None)
            if directory is None:
                return None
            if len(self._known) >= self._MAX:
                self._known.clear()
            self._known[(topic, partition)] = directory
        return filenames.segment_file(directory, base_offset, filenames.LOG_SUFFIX)

    def forget(self, topic: str, partition: int) -> None:
        self._known.pop((topic, partition), None)


class WorkerContext:
    def __init__(self, config: BrokerConfig, index: int, workers: int, identity: BrokerIdentity,
                 topics: "TopicRegistry | ClusterTopics", owners, *, groups=None, transactions=None, cluster=None,
                 producer_ids=None, partition_offsets=None, credentials=None):
        self.config = config
        self.index = index
        self.workers = workers
        self.identity = identity
        self.topics = topics
        self.owners = owners  # owners.Owners: ask the owner of a partition or a group
        self.groups = groups  # this worker's GroupCoordinator (FindCoordinator makes sure of its topic)
        # this worker's TransactionCoordinator (FindCoordinator makes sure of its topic)
        self.transactions = transactions
        self.segment_files = SegmentFiles()
        self.partition_dirs = PartitionDirs(topics.log_dirs)
        self.producer_ids = producer_ids or ProducerIdAllocator(topics.log_dirs[0])
        # users' SCRAM credentials: ZooKeeper's in a cluster, else a file beside the producer id counter
        self.credentials = credentials or FileCredentials(topics.log_dirs[0])
        # who leads what, who coordinates a group: this broker alone, or the cluster image
        self.cluster = cluster or StandaloneView(BrokerNode(identity.broker_id, identity.host, identity.port))
        # shared.partition_table.TableReader: every partition's offsets as its owner
        # published them, read without asking it (None: ask the owner)
        self.partition_offsets = partition_offsets
        # who may do what: everyone everything, unless an authorizer is set
        self.access = Access()
        self.acls: Any = None  # where ACLs live: security.acl_store.FileAcls or workers.zookeeper_acls.ZooKeeperAcls
        self.bytes_in = 0  # request bytes read from clients, for the acceptor's status line
        self.bytes_out = 0

    @property
    def client_host(self) -> str:
        return CLIENT_HOST.get()
