"""Authentication and encryption: SASL on a listener whose security protocol
is SASL_PLAINTEXT or SASL_SSL, TLS on SSL and SASL_SSL.

* ``jaas``: the JAAS option strings Kafka's settings carry (the PLAIN users,
  the broker's own login for inter-broker connections).
* ``plain``: the PLAIN mechanism (RFC 4616), checked against those users.
* ``scram``: SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802 / 7677), the credential
  format Kafka stores, and both sides of the exchange.
* ``credentials``: SCRAM credentials standalone, a file in the first log dir
  (a cluster's are ZooKeeper's: ``workers/zookeeper_credentials.py``).
* ``sasl``: one connection's authentication, from SaslHandshake to a
  principal (``User:<name>``).
* ``login``: the client side, for the connections one broker opens to another.
* ``keystores``: the broker's key and certificate chain, and the trusted
  certificates, from PEM or PKCS12 files or inline PEM.
* ``tls``: the ``ssl.*`` settings, read into the server's and the client's
  ``SSLContext``.
* ``principal_rules``: ``ssl.principal.mapping.rules``, a client
  certificate's principal.
"""
