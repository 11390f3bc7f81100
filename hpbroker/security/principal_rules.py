"""``ssl.principal.mapping.rules``: the principal a client certificate names.

The certificate's subject is written as an RFC 2253 distinguished name, the
most specific part first (``CN=alice,OU=eng,O=Example,C=GB``), and the rules
are tried in order.  ``DEFAULT`` takes the whole name; ``RULE:pattern/
replacement/`` takes a name the pattern matches in full and rewrites it
(``$1`` for a group, as Java's regex replacement reads it), with an optional
``L`` or ``U`` after the last slash for lower or upper case.  A name no
rule matches is refused, as in Kafka.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cryptography import x509
from cryptography.x509.oid import NameOID

from hpbroker.storage.config import ConfigError

ANONYMOUS = "User:ANONYMOUS"  # a TLS client that showed no certificate
_ENTRY = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(?:,|$)")


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern | None  # None: DEFAULT
    replacement: tuple[str | int, ...] = ()  # literal text and group numbers, in order
    case: str = ""  # "", "L" or "U"

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        match = self.pattern.fullmatch(name)
        if match is None:
            return None
        mapped = "".join(part if isinstance(part, str) else match.group(part) or "" for part in self.replacement)
        return mapped.lower() if self.case == "L" else mapped.upper() if self.case == "U" else mapped


def _replacement(text: str, groups: int) -> tuple[str | int, ...]:
    """A replacement as Java's ``Matcher`` reads it, with Kafka's tolerance: a
    backslash takes the next character literally; ``$`` and digits name a
    group, as many digits as still name one; a ``$`` naming no group (beyond
    the pattern's) is kept as text."""
    parts: list[str | int] = []
    literal, i = "", 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            literal, i = literal + text[i + 1], i + 2
            continue
        if char == "$" and i + 1 < len(text) and text[i + 1].isdigit() and int(text[i + 1]) <= groups:
            number, i = int(text[i + 1]), i + 2
            while i < len(text) and text[i].isdigit() and number * 10 + int(text[i]) <= groups:
                number, i = number * 10 + int(text[i]), i + 1
            if literal:
                parts.append(literal)
            parts.append(number)
            literal = ""
            continue
        literal, i = literal + char, i + 1
    if literal:
        parts.append(literal)
    return tuple(parts)


def parse(text: str, key: str = "ssl.principal.mapping.rules") -> tuple[Rule, ...]:
    rules: list[Rule] = []
    position, text = 0, text.strip()
    while position < len(text):
        entry = _ENTRY.match(text, position)
        if entry is None or entry.end() == position:
            raise ConfigError(f"{key}: cannot read the rule at {text[position:position + 40]!r} (expected DEFAULT "
                              f"or RULE:pattern/replacement/[LU])")
        position = entry.end()
        if entry.group(1):
            rules.append(Rule(None))
            continue
        try:
            pattern = re.compile(entry.group(2))
        except re.error as exc:
            raise ConfigError(f"{key}: pattern {entry.group(2)!r}: {exc}") from None
        rules.append(Rule(pattern, _replacement(entry.group(3), pattern.groups), entry.group(4)))
    if not rules:
        raise ConfigError(f"{key}: give at least one rule (DEFAULT takes the certificate's whole name)")
    return tuple(rules)


# the attributes Java's RFC 2253 form names by keyword; any other is its OID and the value's DER in hex
_KEYWORDS = {NameOID.COMMON_NAME, NameOID.COUNTRY_NAME, NameOID.LOCALITY_NAME, NameOID.STATE_OR_PROVINCE_NAME,
             NameOID.ORGANIZATION_NAME, NameOID.ORGANIZATIONAL_UNIT_NAME, NameOID.STREET_ADDRESS,
             NameOID.DOMAIN_COMPONENT, NameOID.USER_ID}


def _der_length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(body)]) + body


def _attribute(attribute: x509.NameAttribute) -> str:
    if attribute.oid in _KEYWORDS:
        return attribute.rfc4514_string()
    value = attribute.value if isinstance(attribute.value, bytes) else attribute.value.encode()
    tag = getattr(getattr(attribute, "_type", None), "value", 12)  # the value's ASN.1 string type (UTF8String)
    return f"{attribute.oid.dotted_string}=#{(bytes([tag]) + _der_length(len(value)) + value).hex()}"


def subject_name(der: bytes) -> str:
    """A certificate's subject as Java's ``X500Principal.getName()`` writes it
    (RFC 2253): most specific part first, ``CN=alice,OU=eng,O=Example``."""
    subject = x509.load_der_x509_certificate(der).subject
    return ",".join("+".join(_attribute(a) for a in rdn) for rdn in reversed(subject.rdns))


def principal(rules: tuple[Rule, ...], der: bytes | None) -> str | None:
    """``User:<name>`` for a client certificate (ANONYMOUS without one); None
    when no rule maps its subject."""
    if der is None:
        return ANONYMOUS
    name = subject_name(der)
    for rule in rules:
        mapped = rule.apply(name)
        if mapped is not None:
            return f"User:{mapped}"
    return None
