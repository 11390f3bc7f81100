"""Kafka's replication, on the worker that owns a partition.

``isr`` is the leader's side: where each follower is, who is in sync, the
high watermark.  ``fetcher`` is the follower's side: fetch from the leader,
append at the leader's offsets, truncate a divergent tail by leader epochs.
Who leads is decided elsewhere (``hpbroker.cluster``); these only act on it.
"""
