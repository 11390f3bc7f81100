"""TLS on a listener whose protocol is SSL or SASL_SSL, from Kafka's settings,
each also given per listener as ``listener.name.<listener>.ssl.<setting>``:

* the keystore and truststore (``keystores.py``);
* ``ssl.client.auth``: ``none``, ``requested`` (a client may show a
  certificate) or ``required`` (it must; mutual TLS).  Its authorities are
  the truststore's, never the system's: with no authorizer here, a
  certificate is the whole of a client's access.  On SASL_SSL only the
  listener's own ``listener.name.<l>.ssl.client.auth`` counts (KIP-684);
* ``ssl.enabled.protocols`` (TLSv1.2 and TLSv1.3 by default) and
  ``ssl.protocol`` (``TLSv1.2`` keeps this broker's own connections to the
  others at TLS 1.2);
* ``ssl.endpoint.identification.algorithm``: ``https`` (the default) checks
  the host name a broker connects to against the peer's certificate, on the
  connections brokers open to each other; empty does not;
* ``ssl.principal.mapping.rules`` (``principal_rules.py``).

The material is read and checked when the configuration is read, so a broker
that starts can serve TLS; reading it again (SIGHUP) takes a renewed
certificate for the connections made after.
"""

from __future__ import annotations

import asyncio
import functools
import os
import ssl
from dataclasses import dataclass

from hpbroker.security import keystores, principal_rules
from hpbroker.storage.config import ConfigError

SSL_KEYS = ("ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
            "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.truststore.type", "ssl.truststore.location",
            "ssl.truststore.password", "ssl.truststore.certificates", "ssl.client.auth", "ssl.enabled.protocols",
            "ssl.protocol", "ssl.endpoint.identification.algorithm", "ssl.principal.mapping.rules",
            *("ssl.keymanager.algorithm", "ssl.trustmanager.algorithm", "ssl.secure.random.implementation",
              "ssl.provider"))  # the last four name parts of Java's TLS: accepted as Kafka spells them, no effect
DEFAULTS = {"ssl.client.auth": "none", "ssl.enabled.protocols": "TLSv1.2,TLSv1.3", "ssl.protocol": "TLSv1.3",
            "ssl.endpoint.identification.algorithm": "https", "ssl.principal.mapping.rules": "DEFAULT"}
_VERSIONS = {"TLSV1.2": ssl.TLSVersion.TLSv1_2, "TLSV1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
HANDSHAKE_TIMEOUT_S = 10.0  # a client that connects and stalls holds nothing longer


@dataclass(frozen=True)
class TlsSettings:
    key: keystores.KeyMaterial
    trusted_pem: str | None  # None: the system's trusted authorities (for the other brokers' certificates)
    client_auth: str
    versions: tuple[ssl.TLSVersion, ssl.TLSVersion]  # lowest, highest
    check_hostname: bool
    rules: tuple[principal_rules.Rule, ...]
    client_highest: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3  # ssl.protocol's cap on our own connections

    @functools.cached_property
    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._common(context)
        context.verify_mode = _CLIENT_AUTH[self.client_auth]
        context.options |= ssl.OP_NO_RENEGOTIATION  # a client's renegotiations would cost us handshakes
        return context

    @functools.cached_property
    def client_context(self) -> ssl.SSLContext:
        """For the connections this broker opens to the others' listener."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = self.check_hostname
        self._common(context)
        context.maximum_version = min(context.maximum_version, self.client_highest)
        return context

    def _common(self, context: ssl.SSLContext) -> None:
        context.minimum_version, context.maximum_version = self.versions
        if self.trusted_pem is not None:
            context.load_verify_locations(cadata=self.trusted_pem)
        else:
            context.load_default_certs()
        _load_key(context, self.key)  # also shown to a peer that asks a broker for its certificate

    def principal(self, ssl_object) -> str | None:
        """``User:<name>`` for a connection's client certificate (ANONYMOUS
        without one); None when no rule maps it."""
        return principal_rules.principal(self.rules, ssl_object.getpeercert(binary_form=True))


def _load_key(context: ssl.SSLContext, key: keystores.KeyMaterial) -> None:
    """``load_cert_chain`` reads only files: the unencrypted key goes through
    a memory file, never the disk."""
    fd = os.memfd_create("hpbroker-keystore", os.MFD_CLOEXEC)
    try:
        with open(fd, "wb", closefd=False) as f:
            f.write(key.key_pem + key.chain_pem)
        context.load_cert_chain(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


def _versions(text: str, key: str) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    names = [n.strip().upper() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in _VERSIONS]
    if unknown or not names:
        raise ConfigError(f"{key}={text}: expected TLSv1.2 and/or TLSv1.3 (older versions are not served)")
    chosen = sorted(_VERSIONS[n] for n in names)
    return chosen[0], chosen[-1]


def describe_failure(exc: BaseException) -> str:
    """Why a TLS handshake failed, as OpenSSL or the OS put it, in a few words
    (the same words on the broker's side, a peer's and the CLI's)."""
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)) or (
            isinstance(exc, ConnectionAbortedError) and "taking longer" in str(exc)):  # asyncio's handshake timeout
        return f"no handshake within {HANDSHAKE_TIMEOUT_S:g} s"
    if isinstance(exc, ssl.SSLError):
        reason = (exc.reason or str(exc)).lower().replace("_", " ")
        verify = getattr(exc, "verify_message", None)
        return f"{reason}: {verify}" if verify else reason
    if isinstance(exc, (ConnectionResetError, BrokenPipeError)):
        return "the other side went away (connection reset)"
    return str(exc) or type(exc).__name__


def read(props: dict[str, str], listener: str, sasl: bool = False) -> TlsSettings:
    """The listener's TLS settings (``sasl``: a SASL_SSL listener's);
    ConfigError naming the setting at fault."""
    prefix = f"listener.name.{listener.lower()}."

    def get(key: str) -> str | None:
        return props.get(prefix + key, props.get(key, DEFAULTS.get(key)))

    key = keystores.keystore(get)
    if key is None:
        raise ConfigError(f"listener {listener} serves TLS: set ssl.keystore.location (a PEM or PKCS12 file with "
                          f"the broker's key and certificate chain), or ssl.keystore.key and "
                          f"ssl.keystore.certificate.chain")
    # SASL_SSL: a client's login is its SASL one, so the broker-wide setting (meant for SSL listeners) is not read
    client_auth_text = props.get(prefix + "ssl.client.auth", "none") if sasl else get("ssl.client.auth") or "none"
    client_auth = client_auth_text.strip().lower()
    if client_auth not in _CLIENT_AUTH:
        raise ConfigError(f"ssl.client.auth={client_auth_text}: expected none, requested or required")
    trusted = keystores.truststore(get)
    if client_auth != "none" and trusted is None:
        raise ConfigError(f"ssl.client.auth={client_auth} needs ssl.truststore.location (or "
                          f"ssl.truststore.certificates): the authorities a client certificate must lead to (the "
                          f"system's would let any of theirs in)")
    protocol_text = get("ssl.protocol") or "TLS"
    protocol = protocol_text.strip().upper()
    if protocol not in ("TLS", *_VERSIONS):
        raise ConfigError(f"ssl.protocol={protocol_text}: expected TLSv1.3, TLSv1.2 or TLS")
    algorithm = (get("ssl.endpoint.identification.algorithm") or "").strip().lower()
    if algorithm not in ("", "https"):
        raise ConfigError(f"ssl.endpoint.identification.algorithm={algorithm}: expected https or empty")
    settings = TlsSettings(key, trusted, client_auth,
                           _versions(get("ssl.enabled.protocols") or "", "ssl.enabled.protocols"),
                           algorithm == "https", principal_rules.parse(get("ssl.principal.mapping.rules") or ""),
                           ssl.TLSVersion.TLSv1_2 if protocol == "TLSV1.2" else ssl.TLSVersion.TLSv1_3)
    try:  # what OpenSSL itself refuses (a key too weak for its security level, say) is said now
        settings.server_context  # noqa: B018
    except ssl.SSLError as exc:
        raise ConfigError(f"listener {listener}: TLS cannot use this keystore or truststore ({exc.reason or exc})") \
            from None
    return settings
