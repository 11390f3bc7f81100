"""Who sent the request being handled: context variables each connection
sets for its own requests (each connection serves from its own context)."""

import contextvars

# The client host of the connection whose request is being handled (each
# connection serves from its own task, hence its own context); DescribeGroups
# shows it per member, as Kafka does ("/127.0.0.1").
CLIENT_HOST: contextvars.ContextVar[str] = contextvars.ContextVar("client_host", default="")
# The listener that connection came in on: Metadata and FindCoordinator answer
# with the brokers' addresses on that listener (None: the brokers' own).
LISTENER: contextvars.ContextVar[str | None] = contextvars.ContextVar("listener", default=None)
# Who the client is before any SASL login: its certificate's principal on an SSL
# listener, else User:ANONYMOUS (a SASL login's principal is its session's)
PRINCIPAL: contextvars.ContextVar[str] = contextvars.ContextVar("principal", default="User:ANONYMOUS")
# The same client's address as ACLs name hosts (Java's form: IPv6 uncompressed), made once per connection
CLIENT_IP: contextvars.ContextVar[str] = contextvars.ContextVar("client_ip", default="")
