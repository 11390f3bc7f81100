"""The acceptor process: it binds the listener (or adopts systemd's), forks one
pinned worker per core and hands each accepted connection to one of them over
a Unix socketpair (SCM_RIGHTS); it supervises the workers (heartbeats,
restarts), turns SIGTERM into a two-phase stop and SIGHUP into a reload, and
owns the log directories' locks.  docs/architecture.md shows where it sits."""
