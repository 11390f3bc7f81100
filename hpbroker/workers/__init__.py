"""The worker processes: one per core, each running an asyncio loop over the
client connections the acceptor handed it, answering requests through one
handler module per Kafka API (``handlers/``), and the single writer of the
partitions and consumer groups it owns (``partitions.py``, ``groups/``); other
workers reach those through the peer channel (``peers.py``).
docs/architecture.md follows a request through them."""
