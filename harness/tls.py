"""Certificates for brokers with a TLS listener, for the tests and the
benchmarks: a certificate authority of their own, a broker certificate for the
loopback (and any other) addresses, client certificates, written as the files
Kafka's settings and the clients' settings name."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAY = datetime.timedelta(days=1)


def _name(common_name: str, unit: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COUNTRY_NAME, "GB"), x509.NameAttribute(NameOID.ORGANIZATION_NAME, "hpbroker")]
    if unit:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit))
    parts.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(parts)


def _pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


@dataclass
class Issued:
    """A key and certificate, written as PEM files (``key_file``, ``cert_file``)
    and as one file with both (``keystore_pem``), as Kafka's PEM keystore is."""
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate
    key_file: Path
    cert_file: Path
    keystore_pem: Path

    def pkcs12(self, path: Path, password: str) -> Path:
        path.write_bytes(pkcs12.serialize_key_and_certificates(
            b"broker", self.key, self.certificate, None,
            serialization.BestAvailableEncryption(password.encode())))
        return path


class Authority:
    """A CA that signs broker and client certificates, its own certificate in ``ca_file``."""

    def __init__(self, directory: Path, name: str = "hpbroker test CA"):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        self.certificate = (
            x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY).not_valid_after(now + 30 * _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256()))
        self.ca_file = self.directory / f"{name.replace(' ', '-')}.pem"
        self.ca_file.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))

    def client_context(self, client: Issued | None = None) -> ssl.SSLContext:
        """A Python client's context trusting this authority (showing ``client``'s certificate)."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if client is not None:
            context.load_cert_chain(str(client.cert_file), str(client.key_file))
        return context

    def issue(self, stem: str, common_name: str, hosts: tuple[str, ...] = (), unit: str | None = None,
              expires_in: datetime.timedelta = 30 * _DAY) -> Issued:
        """A certificate for ``hosts`` (addresses or names: a server's) or for
        none (a client's); files named after ``stem``."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (x509.CertificateBuilder().subject_name(_name(common_name, unit))
                   .issuer_name(self.certificate.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - _DAY).not_valid_after(now + expires_in))
        if hosts:
            names: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
            usage = ExtendedKeyUsageOID.SERVER_AUTH
            builder = builder.add_extension(x509.ExtendedKeyUsage([usage, ExtendedKeyUsageOID.CLIENT_AUTH]),
                                            critical=False)
        else:
            builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        certificate = builder.sign(self.key, hashes.SHA256())
        key_file, cert_file = self.directory / f"{stem}.key", self.directory / f"{stem}.crt"
        key_file.write_bytes(_pem(key))
        cert_pem = certificate.public_bytes(serialization.Encoding.PEM)
        cert_file.write_bytes(cert_pem)
        keystore = self.directory / f"{stem}.keystore.pem"
        keystore.write_bytes(_pem(key) + cert_pem)
        return Issued(key, certificate, key_file, cert_file, keystore)


def broker_settings(authority: Authority, broker: Issued, protocol: str = "SSL",
                    client_auth: str = "none") -> dict[str, str]:
    """A listener of ``protocol`` (SSL or SASL_SSL) with ``broker``'s PEM
    keystore and the authority as its truststore."""
    return {"listeners": f"{protocol}://127.0.0.1:0", "ssl.keystore.location": str(broker.keystore_pem),
            "ssl.truststore.location": str(authority.ca_file), "ssl.client.auth": client_auth}


def ck_conf(bootstrap: str, authority: Authority, client: Issued | None = None, protocol: str = "SSL") -> dict:
    """librdkafka's settings for the TLS listener (and a client certificate)."""
    conf = {"bootstrap.servers": bootstrap, "security.protocol": protocol, "ssl.ca.location": str(authority.ca_file)}
    if client is not None:
        conf.update({"ssl.certificate.location": str(client.cert_file), "ssl.key.location": str(client.key_file)})
    return conf
