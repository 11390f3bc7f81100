"""Kafka-protocol requests the admin client of confluent-kafka cannot make
(DescribeTransactions, ListTransactions, DescribeProducers, ...), sent over a
blocking socket with the frames of ``protocol.client_codec`` (kio's classes).

Every failure is a ``CliError`` naming the broker (``cannot reach``, ``no
answer within``, ``does not support``), so a command built on this module
reports one line and never a traceback.  These requests do not go through
librdkafka, so of ``--command-config`` only the security settings are read,
as librdkafka names them: ``security.protocol``, the SASL login
(``sasl.mechanism``, ``sasl.username``, ``sasl.password``) and TLS
(``ssl.ca.location`` or ``ssl.ca.pem``, ``ssl.certificate.location``,
``ssl.key.location``, ``ssl.key.password``,
``ssl.endpoint.identification.algorithm``,
``enable.ssl.certificate.verification``).
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import os
import socket
import ssl
import struct
import time
from dataclasses import dataclass
from functools import cache

from kio.serial import entity_reader

from hpbroker.cli.connection import CliError
from hpbroker.errors import ErrorCode
from hpbroker.protocol.client_codec import MAX_RESPONSE_BYTES, decode_response, encode_request
from hpbroker.protocol.header import skip_tagged_fields
from hpbroker.protocol.schemas import request_type, response_header_version
from hpbroker.security.login import LoginFailed, log_in_blocking
from hpbroker.security.settings import MECHANISMS, PLAINTEXT, PROTOCOLS, SASL_SSL, SSL, Login
from hpbroker.security.tls import describe_failure

CLIENT_ID = "hpbroker-cli"
API_VERSIONS, METADATA, FIND_COORDINATOR = 18, 3, 10
_int32 = struct.Struct(">i")
_reader = cache(entity_reader)


@dataclass(frozen=True)
class Node:
    """A broker as Metadata and FindCoordinator name it."""
    node_id: int
    host: str
    port: int


class Unreachable(CliError):
    """No TCP connection to a broker; ``reason`` is the OS's, in lower case."""

    def __init__(self, where: str, reason: str):
        super().__init__(f"cannot reach {where} ({reason})")
        self.reason = reason


def error_name(code: ErrorCode | int) -> str:
    """``ErrorCode.transactional_id_not_found`` -> ``transactional id not found``."""
    try:
        return ErrorCode(code).name.replace("_", " ")
    except ValueError:
        return f"error code {int(code)}"


def request_module(api_key: int, version: int):
    """The kio module holding a request class and its nested entity classes."""
    cls = request_type(api_key, version)
    if cls is None:
        raise CliError(f"no schema for api key {api_key} v{version}")
    return importlib.import_module(cls.__module__)


def build(cls, **values):
    """``cls(**values)`` keeping only the fields this version of the class has."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


class Connection:
    """One broker connection: ApiVersions first, so each request can be sent at
    a version both sides know, or refused with a readable line."""

    def __init__(self, host: str, port: int, timeout_s: float, security: ClientSecurity | None = None):
        self.where = f"{host}:{port}"
        self.timeout_s = timeout_s
        self._ids = itertools.count(1)
        login, tls = (security.login, security.tls) if security is not None else (None, None)
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as exc:
            raise Unreachable(self.where, _reason(exc)) from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            try:
                self._sock = tls.wrap_socket(self._sock, server_hostname=host)
            except ssl.SSLError as exc:
                self._sock.close()
                raise CliError(f"TLS handshake with {self.where} failed: {describe_failure(exc)}") from None
            except OSError as exc:
                self._sock.close()
                raise CliError(f"TLS handshake with {self.where} failed ({_reason(exc)})") from None
        try:
            answer = self.request(request_module(API_VERSIONS, 0).ApiVersionsRequest())
        except CliError:
            self.close()
            raise
        if answer.error_code != ErrorCode.none:
            self.close()
            raise CliError(f"{self.where} refused ApiVersions: {error_name(answer.error_code)}")
        self.versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys}
        if login is not None:
            try:
                log_in_blocking(self.request, login)
            except LoginFailed as exc:
                self.close()
                raise CliError(f"{self.where} refused the login: {exc}") from None
            except CliError:
                self.close()
                raise

    def version(self, api_key: int, name: str, lowest: int, highest: int) -> int:
        """The highest version of ``api_key`` in ``lowest..highest`` the broker takes."""
        low, high = self.versions.get(api_key, (0, -1))
        chosen = min(high, highest)
        if chosen < max(low, lowest):
            raise CliError(f"the broker at {self.where} does not support {name} (API {api_key})")
        return chosen

    def request(self, request, reads: type | None = None):
        """Send a kio request object and read its answer (one at a time): as
        kio's response class for it, or as ``reads``, a kio-style dataclass of
        the same wire layout (where kio's own class cannot read a valid answer)."""
        api_key, version = int(request.__api_key__), int(request.__version__)
        name = type(request).__name__.removesuffix("Request")
        correlation_id = next(self._ids)
        try:
            self._sock.sendall(encode_request(request, correlation_id, CLIENT_ID))
            size = _int32.unpack(self._read(4))[0]
            if not 0 <= size <= MAX_RESPONSE_BYTES:
                raise CliError(f"{self.where} sent a response of implausible size {size} to {name}")
            frame = self._read(size)
        except TimeoutError:
            raise CliError(f"no answer from {self.where} to {name} within {self.timeout_s:g} s") from None
        except OSError as exc:
            raise CliError(f"lost the connection to {self.where} ({_reason(exc)})") from None
        try:
            got, response = decode_response(api_key, version, frame) if reads is None else \
                _decode_as(reads, api_key, version, frame)
        except Exception as exc:  # a frame kio cannot read: say which, not how
            why = str(exc) or type(exc).__name__
            raise CliError(f"cannot read the answer of {self.where} to {name} v{version} ({why})") from None
        if got != correlation_id:
            raise CliError(f"{self.where} answered request {got} where {correlation_id} was due")
        return response

    def _read(self, n: int) -> bytes:
        chunks, left = [], n
        while left:
            chunk = self._sock.recv(min(left, 1 << 20))
            if not chunk:
                raise CliError(f"{self.where} closed the connection")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self._sock.close()


@dataclass(frozen=True)
class ClientSecurity:
    """How this command's connections are made: over TLS, logged in (or neither)."""
    login: Login | None = None
    tls: ssl.SSLContext | None = None


def security_of(settings: dict[str, str]) -> ClientSecurity:
    """What ``--command-config`` asks for, as librdkafka reads its keys."""
    protocol = settings.get("security.protocol", PLAINTEXT).upper()
    if protocol not in PROTOCOLS:
        raise CliError(f"security.protocol={protocol}: expected one of {', '.join(PROTOCOLS)}")
    login = None
    if protocol not in (PLAINTEXT, SSL):
        mechanism = settings.get("sasl.mechanism", settings.get("sasl.mechanisms", "GSSAPI")).upper()
        if mechanism not in MECHANISMS:
            raise CliError(f"sasl.mechanism={mechanism} is not supported by this command "
                           f"({', '.join(MECHANISMS)} are)")
        login = Login(mechanism, settings.get("sasl.username", ""), settings.get("sasl.password", ""))
    return ClientSecurity(login, _tls_context(settings) if protocol in (SSL, SASL_SSL) else None)


def _tls_context(settings: dict[str, str]) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    verify = settings.get("enable.ssl.certificate.verification", "true").lower() not in ("false", "0")
    context.check_hostname = verify and settings.get("ssl.endpoint.identification.algorithm", "https").lower() \
        == "https"
    context.verify_mode = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
    location, pem = settings.get("ssl.ca.location"), settings.get("ssl.ca.pem")
    try:
        if pem:
            context.load_verify_locations(cadata=pem)
        elif location and location != "probe":
            context.load_verify_locations(capath=location) if os.path.isdir(location) else \
                context.load_verify_locations(cafile=location)
        else:
            context.load_default_certs()
        certificate = settings.get("ssl.certificate.location")
        if certificate:
            context.load_cert_chain(certificate, settings.get("ssl.key.location"), settings.get("ssl.key.password"))
    except (OSError, ssl.SSLError) as exc:
        why = exc.reason if isinstance(exc, ssl.SSLError) and exc.reason else exc.strerror or exc
        raise CliError(f"--command-config: cannot use the TLS files ({why})") from None
    return context


def _decode_as(cls: type, api_key: int, version: int, frame: bytes):
    """``client_codec.decode_response`` reading the body as ``cls``."""
    correlation_id = _int32.unpack_from(frame, 0)[0]
    offset = 4
    if response_header_version(api_key, version) >= 1:
        offset = skip_tagged_fields(frame, offset)
    response, _size = _reader(cls)(frame, offset)
    return correlation_id, response


def _reason(exc: OSError) -> str:
    return (exc.strerror or str(exc) or type(exc).__name__).lower()


class Brokers:
    """Connections to a cluster: the first bootstrap server that answers, then
    any broker its Metadata names, each opened once."""

    def __init__(self, bootstrap: str, timeout_s: float, security: ClientSecurity | None = None):
        self.timeout_s = timeout_s
        self.security = security
        self._open: dict[tuple[str, int], Connection] = {}
        reasons: list[str] = []
        failures: list[CliError] = []
        for server in bootstrap.split(","):
            host, _, port = server.strip().rpartition(":")
            host = host.split("://")[-1].strip("[]")
            try:
                address = (host, int(port))
            except ValueError:
                raise CliError(f"bad --bootstrap-server {server!r}: want HOST:PORT") from None
            try:
                self.bootstrap = self._connect(*address)
                return
            except Unreachable as exc:
                reasons.append(exc.reason)
            except CliError as exc:  # reached, but no Kafka answer: that says more
                failures.append(exc)
        if failures:
            raise failures[0]
        # as connection.probe words it
        raise CliError(f"cannot reach {bootstrap} ({'; '.join(dict.fromkeys(reasons))})")

    def _connect(self, host: str, port: int) -> Connection:
        connection = self._open.get((host, port))
        if connection is None:
            connection = self._open[(host, port)] = Connection(host, port, self.timeout_s, self.security)
        return connection

    def to(self, node: Node) -> Connection:
        return self._connect(node.host, node.port)

    def metadata(self, topics: list[str] | None):
        """Metadata for ``topics`` ([]: brokers only), never creating a topic."""
        conn = self.bootstrap
        version = conn.version(METADATA, "Metadata", 1, 12)
        m = request_module(METADATA, version)
        wanted = tuple(build(m.MetadataRequestTopic, name=t, topic_id=None) for t in topics or ())
        return conn.request(build(m.MetadataRequest, topics=wanted, allow_auto_topic_creation=False,
                                  include_cluster_authorized_operations=False,
                                  include_topic_authorized_operations=False))

    def nodes(self, metadata) -> dict[int, Node]:
        return {int(b.node_id): Node(int(b.node_id), b.host, int(b.port)) for b in metadata.brokers}

    def close(self) -> None:
        for connection in self._open.values():
            connection.close()
        self._open.clear()

    def __enter__(self) -> Brokers:
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False


class Retry(Exception):
    """A retriable answer (coordinator loading, leader moving): try again until the deadline."""


def until_answered(attempt, timeout_s: float, pause_s: float = 0.1):
    """``attempt()``'s result, calling it again while it raises ``Retry``;
    past ``timeout_s`` the last Retry's text becomes a CliError."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return attempt()
        except Retry as exc:
            if time.monotonic() + pause_s > deadline:
                raise CliError(f"{exc} (still so after {timeout_s:g} s)") from None
        time.sleep(pause_s)
        pause_s = min(pause_s * 2, 1.0)
