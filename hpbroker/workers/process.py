"""A worker process: pinned to one core, owning some partitions, serving the
client connections the acceptor hands it.

It talks with the acceptor over its control channel (the messages are
``hpbroker.server.control_channel``'s): it is handed connections (``conn``,
answered ``took`` or ``lost``), asked to ``drain``, ``stop`` and ``reload``,
and reports ``ready``, heartbeats, closed connections and a boot failure.
"""

import asyncio
import gc
import logging
import os
import resource
import signal
import socket
from typing import cast

from hpbroker.cluster.session_tracker import Session
from hpbroker.cluster.shared_link import SharedLink
from hpbroker.protocol.framing import LARGE_FRAMES
from hpbroker.replication import client
from hpbroker.replication.fetcher import FetcherSettings
from hpbroker.security.acl_store import ACLS_FILE, FileAcls
from hpbroker.security.sasl import SaslSession
from hpbroker.security.tls import HANDSHAKE_TIMEOUT_S, describe_failure
from hpbroker.server import control_channel
from hpbroker.server.config import BrokerConfig
from hpbroker.server.control_channel import BOOT_FAILURE_EXIT, Heartbeat, Kind, Moved, Peer
from hpbroker.server.logging_setup import Throttled
from hpbroker.server.ownership import OFFSETS_TOPIC, TRANSACTION_TOPIC
from hpbroker.shared.broker_memory import BrokerMemory
from hpbroker.shared.counters import TopicChanges
from hpbroker.storage import LogManager
from hpbroker.workers import observe
from hpbroker.workers.authorization import Access, authorizer_for, file_refresh
from hpbroker.workers.broker_clients import BrokerClients
from hpbroker.workers.cluster_topics import ClusterTopics
from hpbroker.workers.cluster_view import BrokerNode, ImageView, StandaloneView
from hpbroker.workers.connection import KafkaConnection
from hpbroker.workers.context import BrokerIdentity, WorkerContext
from hpbroker.workers.control_endpoint import ControlEndpoint
from hpbroker.workers.gathering import HOLD_S, Gathering
from hpbroker.workers.groups import GroupCoordinator
from hpbroker.workers.handlers import ROUTES
from hpbroker.workers.owners import LocalOwner, Owners
from hpbroker.workers.partition_moves import Placement
from hpbroker.workers.partitions import Partitions
from hpbroker.workers.peer_states import PeerStates
from hpbroker.workers.peers import PeerClient, PeerServer
from hpbroker.workers.producer_ids import ClusterProducerIds
from hpbroker.workers.publisher import Publisher
from hpbroker.workers.replicas import ReplicaManager, ReplicaSettings
from hpbroker.workers.topics import TopicRegistry
from hpbroker.workers.transactions import TransactionCoordinator, markers
from hpbroker.workers.zookeeper_acls import ZooKeeperAcls
from hpbroker.workers.zookeeper_credentials import ZooKeeperCredentials

log = logging.getLogger(__name__)

FD_RESERVE = 64  # descriptors kept for segment files, checkpoints and peers
TICK_S = 0.1
PRUNE_EVERY_TICKS = 50  # unlinked segments' descriptors are closed within ~5 s


class Worker:
    def __init__(self, index: int, workers: int, config: BrokerConfig, control: socket.socket, broker_tag: str,
                 clean_shutdown: bool, cluster_id: str, memory: BrokerMemory):
        self.index = index
        self.workers = workers
        self.config = config
        self.control = control
        self.broker_tag = broker_tag
        self.clean_shutdown = clean_shutdown
        self.cluster_id = cluster_id
        self.memory = memory
        self.connections: set[KafkaConnection] = set()
        self.stopping: asyncio.Event | None = None
        self.draining = self.drained = False
        self._tick_problems = Throttled(log)
        self._move_problems = Throttled(log)
        self._handshake_failures = Throttled(log)
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        self._fd_ceiling = soft - FD_RESERVE  # connections beyond leave segment files no descriptors

    # --- boot ----------------------------------------------------------------
    def boot(self) -> None:
        cfg = self.config
        observe.install()
        self.link = self.replicas = None
        if cfg["zookeeper.connect"]:
            self._join_cluster()
        else:
            self.topics = TopicRegistry(cfg.log_dirs, cfg.log, broker_id=cfg.broker_id,
                                        changes=TopicChanges(self.memory.topic_changes, self.index))
        self.publisher = Publisher(self.memory.partitions.writer(self.index))
        # standalone partitions follow their one writer between workers; a cluster's stay where they hash
        moving = self.link is None and cfg["partition.move.after.appends"] > 0
        # the writer first: it finishes a record an earlier incarnation of this worker died writing, so the
        # partitions this worker handed away are not among those it opens below
        moves = self.memory.moves.writer(self.index) if moving else None
        self.placement = Placement(self.workers, self.memory.moves.reader() if moving else None)
        # connections spread over workers gather where the partitions can follow them: standalone only
        gather_below = cfg["connection.gather.max.cpu.percent"] / 100
        spread_at = cfg["connection.gather.spread.cpu.percent"] / 100
        self.gathering = (Gathering(self.memory.loads, self.index, gather_below, spread_at)
                          if moving and gather_below > 0 else None)
        self.logs = LogManager(
            cfg.log_dirs, cfg.log, broker_id=cfg.broker_id, cluster_id=self.cluster_id,
            config_for=self.topics.config_for,
            retention_check_interval_ms=cfg["log.retention.check.interval.ms"],
            checkpoint_interval_ms=cfg["log.flush.offset.checkpoint.interval.ms"],
            owns=lambda topic, partition: self.placement.owner(topic, partition) == self.index,
            manage_root=False,
            background_io=True,
            replicated=self.link is not None,
        ).open(clean_shutdown=self.clean_shutdown)
        self.logs.start_cleaner()  # compaction of compact topics, off the event loop
        if self.link is not None:
            self.peer_states = PeerStates(cfg.broker_id, on_change=self._on_peer_states)
            self.replicas = ReplicaManager(self._replica_settings(), self.index, self.workers, self.logs, self.link,
                                           current_image=self._current_image, publisher=self.publisher)
        self.payloads = self.memory.payloads.receiver()  # other workers' records, appended from where they lie
        self.partitions = Partitions(self.logs, self.topics, replicas=self.replicas, publisher=self.publisher,
                                     payloads=self.payloads, placement=self.placement, index=self.index,
                                     moves=moves)
        in_cluster = self.replicas is not None
        self.groups = GroupCoordinator(self.partitions, self.topics, cfg, self.index, self.workers,
                                       leads=self.partitions.leads if in_cluster else None,
                                       fenced=self.partitions.in_doubt if in_cluster else None)
        self.transactions = TransactionCoordinator(self.partitions, self.topics, cfg, self.index, self.workers,
                                                   leads=self.partitions.leads if in_cluster else None,
                                                   fenced=self.partitions.in_doubt if in_cluster else None)
        self.partitions.on_marker = self._marker_written
        if self.replicas is not None:  # in_cluster
            self.replicas.changed = self.partitions.changed
            self.replicas.on_leadership = self._leadership_changed
        # what this worker answers, to its own handlers and to its peers alike
        self.local_owner = LocalOwner({**self.partitions.handlers(), **self.groups.handlers(),
                                       **self.transactions.handlers()})

    def _join_cluster(self) -> None:
        """Cluster mode: the broker's ZooKeeper session as the acceptor lends it
        (the image on the board, writes through its proxy), and the topics as
        ZooKeeper holds them."""
        cfg = self.config
        assert self.memory.board is not None, "cluster mode without a cluster board"
        self.link = SharedLink(self.memory.board, self.index, self.broker_tag)
        self.topics = ClusterTopics(cfg.log_dirs, cfg.log, self.link,
                                    default_replication_factor=cfg["default.replication.factor"],
                                    offsets_replication_factor=cfg["offsets.topic.replication.factor"],
                                    transaction_replication_factor=cfg["transaction.state.log.replication.factor"],
                                    transaction_min_isr=cfg["transaction.state.log.min.isr"])

    def _replica_settings(self) -> ReplicaSettings:
        cfg = self.config
        fetcher = FetcherSettings(cfg.broker_id, cfg["replica.fetch.wait.max.ms"], cfg["replica.fetch.min.bytes"],
                                  cfg["replica.fetch.response.max.bytes"], cfg["replica.fetch.max.bytes"],
                                  cfg["replica.fetch.backoff.ms"])
        return ReplicaSettings(cfg.broker_id, fetcher, cfg["replica.lag.time.max.ms"],
                               cfg["zookeeper.session.timeout.ms"])

    def _leadership_changed(self, topic: str, partition: int, leading: bool) -> None:
        if topic == OFFSETS_TOPIC:
            self.groups.leadership_changed(partition, leading)
        elif topic == TRANSACTION_TOPIC:
            self.transactions.leadership_changed(partition, leading)

    def _marker_written(self, topic: str, partition: int, producer_id: int, commit: bool) -> None:
        """A transaction's marker on an offsets partition settles the offsets it committed there."""
        if topic == OFFSETS_TOPIC:
            self.groups.transaction_ended(partition, producer_id, commit)

    def _broker_address(self, broker_id: int) -> tuple[str, int] | None:
        """Where another broker listens, as the cluster image has it."""
        if self.link is None:
            return None
        found = self.ctx.cluster.node(broker_id)
        return None if found is None else (found.host, found.port)

    def _current_image(self):
        """ZooKeeper's image, with what peers know of leaderships moved while it is out of reach."""
        assert self.link is not None  # cluster mode
        return self.peer_states.merged(self.link.image())

    def _authorize(self) -> None:
        """Where the ACLs live (ZooKeeper, or a file standalone) and, with an
        authorizer configured, this worker's copy of them."""
        authorizer = authorizer_for(self.config)
        if self.link is not None:
            link = self.link
            self.ctx.acls = ZooKeeperAcls(link.admin, lambda: cast(ImageView, self.ctx.cluster).image)
            self.ctx.access = Access(authorizer)
        else:
            changes = TopicChanges(self.memory.acl_changes, self.index)
            self.ctx.acls = FileAcls(os.path.join(self.topics.log_dirs[0], ACLS_FILE), changes)
            self.ctx.access = Access(authorizer, file_refresh(self.ctx.acls, changes))

    def _on_image(self, _image=None) -> None:
        """A new cluster image (on the event loop): topics, answers, then roles."""
        image = self._current_image()
        topics = self.topics
        assert isinstance(topics, ClusterTopics) and self.replicas is not None  # cluster mode
        topics.apply(image)
        cast(ImageView, self.ctx.cluster).image = image
        authorizer = self.ctx.access.authorizer
        if authorizer is not None and authorizer.version != image.acl_version:
            authorizer.load(image.acls, image.acl_version)
        cast(ZooKeeperAcls, self.ctx.acls).image_changed()
        self.replicas.apply(image)

    def _on_peer_states(self) -> None:
        self._on_image()

    def _on_session(self, session: Session) -> None:
        """Cut off from ZooKeeper, ask the peers what moved; back, ZooKeeper is the truth again."""
        assert self.link is not None and self.replicas is not None  # cluster mode
        if session is Session.CONNECTED:
            self.peer_states.stop()
        else:
            self.peer_states.start(self.link.image)
        self.replicas.set_session(session)
        self._on_image()

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        self.stopping = asyncio.Event()
        for sig in (signal.SIGTERM,):
            loop.add_signal_handler(sig, self.stopping.set)
        self.partitions.group_flushes_on(loop)  # a turn's flush.messages fsyncs shared
        sender = self.memory.payloads.sender(self.index)
        LARGE_FRAMES.share(sender)  # large requests land in the arena: records for a peer go by reference
        self.peers = PeerClient(self.broker_tag, sender, observe.peer_payload, index=self.index)
        self.peer_server = PeerServer(self.broker_tag, self.index, self.local_owner, self.payloads)
        await self.peer_server.start()
        listener = self.config.inter_broker_endpoint
        identity = BrokerIdentity(self.config.broker_id, self.cluster_id, listener.host, listener.port)
        cluster = producer_ids = credentials = None
        me = BrokerNode(identity.broker_id, identity.host, identity.port)
        if self.link is None:  # each listener's address, for the clients that come in through it
            cluster = StandaloneView(me, {a.name: BrokerNode(identity.broker_id, a.host, a.port)
                                          for a in self.config.advertised})
        else:
            cluster = ImageView(me)
            producer_ids = ClusterProducerIds(self.link, self.config.broker_id)
            credentials = ZooKeeperCredentials(self.link.admin)
        owners = Owners(self.index, self.workers, self.local_owner, self.peers,
                        self.config["offsets.topic.num.partitions"],
                        self.config["transaction.state.log.num.partitions"], placement=self.placement,
                        move_after=self.config["partition.move.after.appends"],
                        # a spread-out broker keeps its partitions where they are
                        moves_held_off=self.gathering.held if self.gathering is not None else None)
        self.ctx = WorkerContext(self.config, self.index, self.workers, identity, self.topics, owners,
                                 groups=self.groups, transactions=self.transactions, cluster=cluster,
                                 producer_ids=producer_ids, credentials=credentials,
                                 partition_offsets=self.memory.partitions.reader(owner_of=self.placement.owner))
        self._authorize()
        client.use_security(self.config.security)  # the other brokers' listener may ask for TLS and a login
        self.broker_clients = BrokerClients(self.config.broker_id, self._broker_address)
        self.transactions.attach(owners, self.ctx.producer_ids, self.ctx.cluster, self.broker_clients,
                                 self.config.broker_id)
        self.groups.verify = lambda call: markers.verify(self.ctx, call)
        if self.link is not None:
            self._on_image()
            self.link.publish_to(self._on_image, self._on_session)
        self.endpoint = ControlEndpoint(self.control, on_connection=self._on_connection, on_stop=self.stopping.set,
                                        on_drain=lambda: loop.create_task(self._drain(report=True)),
                                        on_reload=self._reload)
        self.endpoint.start()
        self.endpoint.send(Kind.READY)
        self.groups.start()
        self.transactions.start()
        ticker = loop.create_task(self._tick())
        heartbeat = loop.create_task(self._heartbeat())
        gauges = loop.create_task(observe.gauges_forever(self.ctx, self.logs, self.groups, self.connections))
        counters = loop.create_task(observe.flush_forever())
        await self.stopping.wait()
        self.endpoint.stop_reading()
        if not self.drained:
            await self._drain()
        ticker.cancel()
        heartbeat.cancel()
        gauges.cancel()
        counters.cancel()
        observe.flush()  # the counts since the last flush
        if self.replicas is not None:
            assert self.link is not None  # they come together
            self.peer_states.stop()
            await self.replicas.close()
            self.link.close()
        self.broker_clients.close()
        self.peer_server.close()
        self.peers.close()
        self.ctx.segment_files.close()
        self.logs.close()
        log.info("worker %d stopped: partitions flushed, checkpoints written", self.index)

    # --- what the acceptor says ----------------------------------------------------------
    def _on_connection(self, fds: list[int], flags: int, peer: Peer) -> None:
        """The acceptor keeps each connection until we answer: "took" (adopted
        once that answer has left) or "lost" when its descriptor did not
        arrive (MSG_CTRUNC: our nofile limit) or would eat into the reserve
        our own files need, so that it goes to another worker."""
        if flags & socket.MSG_CTRUNC or len(fds) != 1 or fds[0] >= self._fd_ceiling:
            for fd in fds:
                os.close(fd)
            self.endpoint.send(Kind.LOST)
            return
        fd = fds[0]
        self.endpoint.send(Kind.TOOK, then=lambda: self._adopt(fd, peer))

    def _reload(self, props: dict) -> None:
        """Apply new log settings (retention, flush, roll, ...) to every open log;
        new connections log in with the SASL settings read now, and shake
        hands with the keystore and truststore read now."""
        try:
            config = BrokerConfig.from_sources(overrides=props)
        except Exception as exc:
            log.error("reload refused: %s", exc)
            return
        self.config = config
        self.ctx.config = config
        self.topics.log_config = config.log
        self.logs.config = config.log
        self.logs.reconfigure()
        self.ctx.access.configure(config)
        client.use_security(config.security)
        log.info("worker %d applied the reloaded log settings", self.index)

    def _adopt(self, fd: int, peer: Peer) -> None:
        sock = socket.socket(fileno=fd)
        assert self.stopping is not None  # connections come once serve() runs
        if self.stopping.is_set() or self.draining:
            sock.close()
            return
        sock.setblocking(False)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for key, option in (("socket.send.buffer.bytes", socket.SO_SNDBUF),
                                ("socket.receive.buffer.bytes", socket.SO_RCVBUF)):
                if self.config[key] > 0:  # -1: the kernel's own sizing, as in Kafka
                    sock.setsockopt(socket.SOL_SOCKET, option, self.config[key])
        # the listener the acceptor took it on (an unknown name: the brokers' own, and the acceptor's bug)
        security = self.config.securities.get(peer.listener) or self.config.security
        delay_s = self.config["connection.failed.authentication.delay.ms"] / 1000
        session = SaslSession(security, self.ctx.credentials, delay_s) if security.sasl else None
        # a logged-in connection stays where it logged in: its next worker would not know its principal;
        # nor does a TLS connection move: its session's keys are in this process
        movable = self.workers > 1 and session is None and security.tls is None
        connection = KafkaConnection(self.ctx, ROUTES, self._closed, self._move if movable else None,
                                     self.gathering, sasl=session, tls=security.tls, peer=peer)
        self.connections.add(connection)
        asyncio.get_running_loop().create_task(self._attach(sock, connection))

    async def _attach(self, sock, connection: KafkaConnection) -> None:
        tls = connection.tls
        peer = _peer_of(sock) if tls is not None else None  # before the handshake: a failed one closes the socket
        try:
            if tls is None:
                await asyncio.get_running_loop().connect_accepted_socket(lambda: connection, sock)
            else:  # connection_made comes after the handshake
                await asyncio.get_running_loop().connect_accepted_socket(
                    lambda: connection, sock, ssl=tls.server_context, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError) as exc:
            if tls is None or peer is None:
                log.warning("could not adopt a connection: %s", exc)
            else:  # a client speaking plaintext, an untrusted certificate, a scan: a line a minute a host and reason
                why = describe_failure(exc)
                # one that only went away (a reachability probe, a client stopped mid-handshake) is no warning
                level = logging.DEBUG if isinstance(exc, (ConnectionResetError, BrokenPipeError)) else logging.WARNING
                self._handshake_failures.log(level, (peer[0], why), "TLS handshake with %s:%s failed: %s", *peer, why)
            sock.close()
            self._closed(connection)

    def _move(self, connection, worker: int) -> bool:
        """Hand a connection's socket to ``worker`` through the acceptor; ours
        closes (and is counted closed) without touching the TCP stream. False
        when it cannot go (no descriptor left for the copy): it stays."""
        transport = connection.transport
        try:
            fd = os.dup(transport.get_extra_info("socket").fileno())
        except OSError as exc:
            self._move_problems.log(logging.WARNING, "dup", "a connection stays on worker %d: %s", self.index, exc)
            return False
        self.endpoint.send(Kind.MOVE, Moved(worker, connection.origin), fd=fd)
        transport.abort()  # stops reading now; the descriptor closes, the stream lives on in the copy
        return True

    def _closed(self, connection) -> None:
        if connection in self.connections:
            self.connections.discard(connection)
            self.endpoint.send(Kind.CLOSED, connection.origin)  # the acceptor counts connections by it
            self.partitions.sources.left(connection.source)

    async def _drain(self, report: bool = False) -> None:
        """First half of a stop: no more requests; the ones in flight finish
        while the peers still serve (the acceptor sends ``stop`` once every
        worker has drained, so forwarded requests are not cut off)."""
        if self.draining:
            return
        self.draining = True
        self.groups.close()  # answers waiting joins, so connections can finish
        self.transactions.close()  # decided transactions are finished by the next start
        await self._close_connections()
        self.drained = True
        if report:
            self.endpoint.send(Kind.DRAINED)

    async def _close_connections(self) -> None:
        """Stop reading, let each connection finish the request it is on, close."""
        for connection in list(self.connections):
            connection.drain()
        tasks = [c.task for c in self.connections if c.task is not None]
        if tasks:
            _done, busy = await asyncio.wait(tasks, timeout=self.config["shutdown.timeout.ms"] / 1000)
            for connection in self.connections:
                if connection.task in busy and connection.busy_with() is not None:
                    # what kept the stop waiting, for whoever reads why it was slow
                    log.warning("stopping: %s did not finish in time", connection.busy_with())
        for connection in list(self.connections):
            connection.close()

    # --- periodic work ---------------------------------------------------------------
    async def _tick(self) -> None:
        ticks = failures = 0
        while True:
            await asyncio.sleep(TICK_S)
            ticks += 1
            try:
                if self.replicas is not None:
                    self.replicas.tick()
                self.partitions.tick()
                if ticks % PRUNE_EVERY_TICKS == 0:
                    self.ctx.segment_files.prune()
            except OSError as exc:
                # every 100 ms while the cause lasts (a full disk, no descriptors):
                # the first failure with its traceback, then once a minute
                if not failures:
                    log.exception("periodic flush / retention / checkpoint failed")
                else:
                    self._tick_problems.log(logging.ERROR, "tick", "periodic flush / retention / checkpoint still "
                                            "failing: %s", exc)
                failures += 1
                continue
            if failures:
                log.info("periodic flush / retention / checkpoint work succeeds again after %d failures", failures)
                failures = 0

    async def _heartbeat(self) -> None:
        """Reports to the acceptor; with gathering on, this worker's load to the
        other workers, and a spread when it stays saturated (``gathering.py``)."""
        interval = self.config["worker.heartbeat.interval.ms"] / 1000
        while True:
            self.endpoint.send(Kind.HEARTBEAT, Heartbeat(len(self.connections), len(self.logs.logs()),
                                                         self.ctx.bytes_in, self.ctx.bytes_out))
            if self.gathering is not None and self.gathering.beat():
                self._spread_out()
            await asyncio.sleep(interval)

    def _spread_out(self) -> None:
        """This worker stayed saturated with another core idle: the partitions
        that moved here go back where their hash says, and for a while nothing
        gathers or moves (``gathering.py``); the connections writing several
        workers' partitions meanwhile go each to its own worker (``affinity``)."""
        assert self.gathering is not None
        given = self.partitions.give_back()
        if given or any(c.route.spread() for c in self.connections):  # those connections go to their spots
            self.gathering.hold()
            log.warning("worker %d saturated (%.0f%% of its core) with another core idle: %d partitions go back "
                        "to their hashed owners; connections writing several workers' partitions spread over "
                        "the workers; no gathering for %.0f s", self.index,
                        100 * self.memory.loads.share(self.index), len(given), HOLD_S)


def run_worker(index: int, workers: int, config: BrokerConfig, control: socket.socket, broker_tag: str,
               clean_shutdown: bool, cluster_id: str, cpu: int | None, memory: BrokerMemory) -> int:
    """The body of a forked worker; returns its exit code."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # ^C reaches the acceptor, which stops us in order
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    if cpu is not None:
        try:
            os.sched_setaffinity(0, {cpu})
        except OSError as exc:
            log.warning("worker %d: could not pin to CPU %d: %s", index, cpu, exc)
    worker = Worker(index, workers, config, control, broker_tag, clean_shutdown, cluster_id, memory)
    try:
        worker.boot()
    except Exception as exc:
        log.exception("worker %d failed to boot", index)
        try:
            control.send(control_channel.encode(Kind.BOOT_FAILED, str(exc)))
        except OSError:
            pass
        return BOOT_FAILURE_EXIT
    gc.freeze()  # the booted state stays for good: no collector pauses walking it (see the acceptor)
    log.info("worker %d up on CPU %s, owning %d partitions", index, cpu, len(worker.logs.logs()))
    asyncio.run(worker.serve())
    return 0


def _peer_of(sock: socket.socket) -> tuple[str, object]:
    try:
        return sock.getpeername()[:2]
    except (OSError, ValueError):  # gone already, or not an address with a host (a socket pair)
        return "?", "?"
