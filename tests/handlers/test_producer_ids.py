"""InitProducerId (22): ids for idempotent producers, a new one for every
request, as Kafka answers it; and an idempotent producer's sequences.
Transactional ids (whose epochs are bumped) are tests/handlers/test_transactions.py's."""

import pytest

from hpbroker.errors import ErrorCode
from tests.handlers.conftest import INIT_PRODUCER_ID, request


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


def test_a_producer_naming_an_id_and_epoch_gets_a_new_id(broker):
    """Kafka ignores the id and epoch an idempotent producer names (v3+): two
    producers naming the same pair (@platformatic/kafka names 0 and 0 for every
    new producer) must not share one, or one's batches pass for the other's retries."""
    broker.create_topic("t")
    first = init_producer_id(broker, 4)
    named = [init_producer_id(broker, 4, producer_id=first.producer_id, producer_epoch=first.producer_epoch)
             for _ in range(2)]
    assert [(n.error_code, n.producer_epoch) for n in named] == [(ErrorCode.none, 0)] * 2
    assert len({first.producer_id, *(n.producer_id for n in named)}) == 3
    for i, pid in enumerate([first, *named]):  # each starts its sequences at 0, and each is stored
        answer = broker.produce("t", 0, b"from-%d" % i, base_sequence=0, producer_id=pid.producer_id,
                                producer_epoch=pid.producer_epoch)
        assert (answer.error_code, answer.base_offset) == (ErrorCode.none, i)
    assert broker.read("t") == (ErrorCode.none, [b"from-0", b"from-1", b"from-2"])


@pytest.mark.parametrize("transactional_id", [None, "tx"])
@pytest.mark.parametrize("producer_id, producer_epoch", [(-1, 0), (5, -1)])
def test_a_producer_named_by_half_is_an_invalid_request(broker, transactional_id, producer_id, producer_epoch):
    answer = init_producer_id(broker, 4, transactional_id, producer_id=producer_id, producer_epoch=producer_epoch)
    assert (answer.error_code, answer.producer_id) == (ErrorCode.invalid_request, -1)


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
