"""The acceptor process: binds the listener and hands sockets to workers (see issue #3)."""
