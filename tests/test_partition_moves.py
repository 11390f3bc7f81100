"""Two workers' partitions in process, over one log directory and one shared
map of moves (``workers/partition_moves.py``): when the owner hands a
partition over, what the other opens is what was written (records, the
idempotent producers' sequences, the recovery point); when it refuses, why;
and what reaches the old owner afterwards."""

import asyncio

import pytest

from hpbroker.errors import ErrorCode
from hpbroker.records import Record, encode_batch, iter_batches
from hpbroker.server.ownership import partition_owner
from hpbroker.shared.partition_moves import PartitionMoves
from hpbroker.storage import LogConfig, LogManager
from hpbroker.workers.owner_calls import Append, DeletePartition, Locate, MovePartition, WaitReplicated
from hpbroker.workers.partition_moves import CALLER, MoveRequests, Placement, connection_source
from hpbroker.workers.partitions import Partitions
from hpbroker.workers.topics import TopicRegistry

TOPIC = "moving"
HOME = partition_owner(TOPIC, 0, 2)  # the worker the hash gives partition 0
OTHER = 1 - HOME


class Worker:
    def __init__(self, dirs: list[str], index: int, moves: PartitionMoves, config: LogConfig):
        self.index = index
        self.placement = Placement(2, moves.reader())
        self.topics = TopicRegistry(dirs, config)
        self.logs = LogManager(dirs, config, owns=lambda t, p: self.placement.owner(t, p) == index,
                               manage_root=False).open(clean_shutdown=True)
        self.partitions = Partitions(self.logs, self.topics, placement=self.placement, index=index,
                                     moves=moves.writer(index))

    def append(self, records: bytearray, caller: int = -1):
        """An append as if from worker ``caller``'s connection (-1: this worker's own; below -2: a client
        connection of this worker, ``connection_source``)."""
        token = CALLER.set(caller)
        try:
            return self.partitions.produce(Append(TOPIC, 0, records))
        finally:
            CALLER.reset(token)


@pytest.fixture
def workers(tmp_path):
    dirs = [str(tmp_path)]
    asyncio.run(TopicRegistry(dirs, LogConfig()).create(TOPIC, 1))
    moves = PartitionMoves(2)
    made = {i: Worker(dirs, i, moves, LogConfig()) for i in (0, 1)}
    yield made
    for w in made.values():
        w.logs.close()


def idempotent(sequence: int, value: bytes) -> bytearray:
    return bytearray(encode_batch([Record(0, 0, None, value)], producer_id=7, producer_epoch=0,
                                  base_sequence=sequence))


def test_a_partition_only_another_worker_writes_moves_there_with_its_records_and_sequences(workers):
    home, other = workers[HOME], workers[OTHER]
    for sequence in range(3):
        assert home.append(idempotent(sequence, b"%d" % sequence), caller=OTHER).error == ErrorCode.none
    assert home.partitions.move_partition(MovePartition(TOPIC, 0, OTHER)).error == ErrorCode.none
    assert home.logs.get_log(TOPIC, 0) is None, "the old owner closed it"
    assert home.placement.owner(TOPIC, 0) == other.placement.owner(TOPIC, 0) == OTHER
    # the old owner refuses what reaches it late, so that it is asked again where the partition went
    assert home.append(idempotent(3, b"3"), caller=OTHER).error == ErrorCode.not_leader_or_follower
    assert home.partitions.locate(Locate(TOPIC, 0, 0, 1 << 20)).error == ErrorCode.not_leader_or_follower
    # the new owner goes on from where it was: the next sequence appends, and its retry is a duplicate
    # (answered as the first was; the producers' snapshot keeps each one's last batch, as after a restart)
    appended = other.append(idempotent(3, b"3"))
    assert (appended.error, appended.base_offset) == (ErrorCode.none, 3)
    again = other.append(idempotent(3, b"3"))
    assert (again.error, again.base_offset) == (ErrorCode.none, 3)
    adopted = other.partitions.log_of(TOPIC, 0)
    assert adopted is not None and adopted.log_end_offset == 4
    stored = iter_batches(adopted.read_records(0))
    assert [r.value for b in stored for r in b.records] == [b"0", b"1", b"2", b"3"]


def test_the_owner_keeps_a_partition_someone_else_wrote_lately(workers):
    home = workers[HOME]
    assert home.append(bytearray(encode_batch([Record(0, 0, None, b"mine")]))).error == ErrorCode.none
    assert home.append(bytearray(encode_batch([Record(0, 0, None, b"yours")])), caller=OTHER).error == ErrorCode.none
    refused = home.partitions.move_partition(MovePartition(TOPIC, 0, OTHER))
    assert refused.error == ErrorCode.reassignment_in_progress
    assert home.partitions.log_of(TOPIC, 0) is not None and home.placement.owner(TOPIC, 0) == HOME
    # nor to itself, nor to a worker that does not exist
    assert home.partitions.move_partition(MovePartition(TOPIC, 0, HOME)).error == ErrorCode.invalid_request
    assert home.partitions.move_partition(MovePartition(TOPIC, 0, 5)).error == ErrorCode.invalid_request


def test_a_connection_that_left_no_longer_keeps_the_partition(workers):
    """A client connection that wrote the partition here and then moved to the
    other worker (or closed) stops counting: the other worker, now its only
    writer, gets the partition at once rather than after ``QUIET_S``."""
    home = workers[HOME]
    mine = connection_source()
    assert home.append(bytearray(encode_batch([Record(0, 0, None, b"here")])), caller=mine).error == ErrorCode.none
    assert home.append(bytearray(encode_batch([Record(0, 0, None, b"there")])), caller=OTHER).error == ErrorCode.none
    refused = home.partitions.move_partition(MovePartition(TOPIC, 0, OTHER))
    assert refused.error == ErrorCode.reassignment_in_progress, "the connection still here writes it too"
    home.partitions.sources.left(mine)
    assert home.partitions.move_partition(MovePartition(TOPIC, 0, OTHER)).error == ErrorCode.none
    assert home.placement.owner(TOPIC, 0) == OTHER


def test_a_spreading_worker_gives_back_what_moved_to_it_even_while_its_own_connections_write_it(workers):
    home, other = workers[HOME], workers[OTHER]
    assert home.append(idempotent(0, b"0"), caller=OTHER).error == ErrorCode.none
    assert home.partitions.move_partition(MovePartition(TOPIC, 0, OTHER)).error == ErrorCode.none
    assert other.append(idempotent(1, b"1"), caller=connection_source()).error == ErrorCode.none
    assert home.partitions.give_back() == [], "it holds nothing that moved to it"
    assert other.partitions.give_back() == [(TOPIC, 0)]
    assert home.placement.owner(TOPIC, 0) == other.placement.owner(TOPIC, 0) == HOME
    assert other.append(idempotent(2, b"2")).error == ErrorCode.not_leader_or_follower, "asked again at home"
    appended = home.append(idempotent(2, b"2"))
    assert (appended.error, appended.base_offset) == (ErrorCode.none, 2), "the sequences came back with it"


def test_a_partition_with_an_open_transaction_stays(workers):
    home = workers[HOME]
    transactional = bytearray(encode_batch([Record(0, 0, None, b"t")], producer_id=9, producer_epoch=0,
                                           base_sequence=0, transactional=True))
    home.partitions.log_of(TOPIC, 0).append(transactional)  # as the owner appends a verified batch
    assert home.partitions.move_partition(MovePartition(TOPIC, 0, OTHER)).error == ErrorCode.reassignment_in_progress


def test_a_group_commit_owed_when_the_partition_moves_is_fsynced_and_answered(tmp_path):
    """flush.messages=1: the append's answer waits for its fsync; the move
    makes it, so a wait that reaches the old owner after the move is answered
    from the record of it, and the new owner opens the log fsynced."""
    dirs = [str(tmp_path)]
    config = LogConfig(flush_messages=1)
    asyncio.run(TopicRegistry(dirs, config).create(TOPIC, 1))
    moves = PartitionMoves(2)
    home, other = Worker(dirs, HOME, moves, config), Worker(dirs, OTHER, moves, config)
    try:
        home.logs.group_flush = lambda partition_log: None  # the turn's end never comes here
        appended = home.append(bytearray(encode_batch([Record(0, 0, None, b"x")])), caller=OTHER)
        assert appended.error == ErrorCode.none and not appended.durable
        assert home.partitions.move_partition(MovePartition(TOPIC, 0, OTHER)).error == ErrorCode.none
        waited = asyncio.run(home.partitions.wait_replicated(
            WaitReplicated([(TOPIC, 0, appended.end_offset)], 1000, durable_only=True)))
        assert waited.errors == [ErrorCode.none]
        adopted = other.partitions.log_of(TOPIC, 0)
        assert adopted is not None and adopted.flushed_offset == 1
    finally:
        home.logs.close()
        other.logs.close()


def test_a_deleted_partition_that_moved_goes_home_empty(workers):
    home, other = workers[HOME], workers[OTHER]
    assert home.append(bytearray(encode_batch([Record(0, 0, None, b"x")])), caller=OTHER).error == ErrorCode.none
    assert home.partitions.move_partition(MovePartition(TOPIC, 0, OTHER)).error == ErrorCode.none
    other.append(bytearray(encode_batch([Record(0, 0, None, b"y")])))
    assert other.partitions.delete_partition(DeletePartition(TOPIC, 0)).error == ErrorCode.none
    assert home.placement.owner(TOPIC, 0) == HOME
    move = home.placement.moves.move(TOPIC, 0)
    assert move is not None and (move.to, move.recovery_point, move.log_start) == (HOME, 0, 0)


def test_a_refused_asker_asks_again_soon_then_ever_less_often():
    """Half a second after the first refusal, twice as long after each next one
    (up to ``RETRY_AFTER_S``), and after a grant from the start again."""
    now = [0.0]
    answers: list[bool] = []
    asked_at: list[float] = []

    async def ask(_topic, _partition, _owner) -> bool:
        asked_at.append(now[0])
        return answers.pop(0)

    async def scenario() -> None:
        requests = MoveRequests(after=1, ask=ask, clock=lambda: now[0])
        answers.extend([False] * 7 + [True, False])
        for _ in range(400):  # one forwarded append every 0.25 s of the clock
            requests.forwarded(TOPIC, 0, OTHER)
            await requests.held([(TOPIC, 0)])
            now[0] += 0.25
            if not answers:
                break

    asyncio.run(scenario())
    assert [b - a for a, b in zip(asked_at, asked_at[1:])] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 0.25]


def test_a_broker_held_off_asks_for_no_partition_until_the_hold_ends():
    asked, holding = [], [True]

    async def ask(topic, partition, owner):
        asked.append((topic, partition, owner))
        return False

    async def scenario() -> None:
        requests = MoveRequests(after=2, ask=ask, held_off=lambda: holding[0])
        for _ in range(10):
            requests.forwarded(TOPIC, 0, OTHER)
            await requests.held([(TOPIC, 0)])
        assert asked == [], "a spread-out broker keeps its partitions where they are"
        holding[0] = False
        for _ in range(2):
            requests.forwarded(TOPIC, 0, OTHER)
            await requests.held([(TOPIC, 0)])

    asyncio.run(scenario())
    assert asked == [(TOPIC, 0, OTHER)], "the hold over, it asks after move.after appends"
