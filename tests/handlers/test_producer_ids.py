"""InitProducerId (22): ids for idempotent producers, epochs bumped on request
(KIP-360); and an idempotent producer's sequences.  Transactional ids are
tests/handlers/test_transactions.py's."""

import pytest

from hpbroker.errors import ErrorCode
from tests.handlers.conftest import INIT_PRODUCER_ID, request

MAX_EPOCH = 32767


def init_producer_id(broker, version: int, transactional_id=None, producer_id=-1, producer_epoch=-1):
    return broker.send(request(INIT_PRODUCER_ID, version, transactional_id=transactional_id,
                               transaction_timeout=60000, producer_id=producer_id, producer_epoch=producer_epoch))


@pytest.mark.parametrize("version", [0, 4])
def test_each_producer_gets_its_own_id(broker, version):
    first, second = (init_producer_id(broker, version) for _ in range(2))
    assert (first.error_code, second.error_code) == (ErrorCode.none, ErrorCode.none)
    assert first.producer_id >= 0 and second.producer_id >= 0 and first.producer_id != second.producer_id
    assert (first.producer_epoch, second.producer_epoch) == (0, 0)


def test_ids_are_not_handed_out_twice_by_two_workers_of_the_broker(make_broker):
    broker = make_broker()
    other = make_broker({"log.dirs": broker.log_dir})  # another worker over the same log dir
    ids = {init_producer_id(b, 4).producer_id for b in (broker, other, broker, other)}
    assert len(ids) == 4


def test_a_known_producer_gets_its_epoch_bumped(broker):
    first = init_producer_id(broker, 4)
    bumped = init_producer_id(broker, 4, producer_id=first.producer_id, producer_epoch=first.producer_epoch)
    assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (ErrorCode.none, first.producer_id, 1)
    # at the last epoch the producer starts over with a new id
    exhausted = init_producer_id(broker, 4, producer_id=first.producer_id, producer_epoch=MAX_EPOCH - 1)
    assert exhausted.producer_id not in (-1, first.producer_id) and exhausted.producer_epoch == 0


def test_an_idempotent_producers_sequences(broker):
    broker.create_topic("t")
    pid = init_producer_id(broker, 4)
    ids = {"producer_id": pid.producer_id, "producer_epoch": pid.producer_epoch}
    first = broker.produce("t", 0, b"a", b"b", base_sequence=0, **ids)
    again = broker.produce("t", 0, b"a", b"b", base_sequence=0, **ids)  # a retry of a batch already stored
    gap = broker.produce("t", 0, b"x", base_sequence=5, **ids)
    following = broker.produce("t", 0, b"c", base_sequence=2, **ids)
    assert [(p.error_code, p.base_offset) for p in (first, again, following)] == [
        (ErrorCode.none, 0), (ErrorCode.none, 0), (ErrorCode.none, 2)]
    assert gap.error_code == ErrorCode.out_of_order_sequence_number
    assert broker.read("t") == (ErrorCode.none, [b"a", b"b", b"c"])
