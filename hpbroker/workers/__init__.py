"""Worker processes, one per core, each serving the connections it was handed (see issue #3)."""
