"""What the acceptor and the workers share: the broker's configuration and the
partition-to-worker ownership rule."""
