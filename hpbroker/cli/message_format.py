"""kcat-style output formats for consumed records.

Placeholders: %t topic, %p partition, %o offset, %k key, %s value, %K key
length, %S value length, %T timestamp (ms), %h headers (k=v,k=v), %% a percent
sign; escapes \\n \\t \\r \\\\.  A null key or value prints as nothing, its length as -1.
"""

import re

from hpbroker.cli.connection import CliError

_TOKEN = re.compile(r"%.|\\.|[^%\\]+", re.DOTALL)
_ESCAPES = {"\\n": b"\n", "\\t": b"\t", "\\r": b"\r", "\\\\": b"\\", "\\0": b"\0"}
_FIELDS = {
    "t": lambda m: m.topic().encode(),
    "p": lambda m: str(m.partition()).encode(),
    "o": lambda m: str(m.offset()).encode(),
    "k": lambda m: m.key() or b"",
    "s": lambda m: m.value() or b"",
    "K": lambda m: str(-1 if m.key() is None else len(m.key())).encode(),
    "S": lambda m: str(-1 if m.value() is None else len(m.value())).encode(),
    "T": lambda m: str(m.timestamp()[1]).encode(),
    "h": lambda m: b",".join(k.encode() + b"=" + (v or b"") for k, v in (m.headers() or [])),
    "%": lambda m: b"%",
}


def compile_format(fmt: str):
    """A function from a confluent-kafka Message to the bytes to print; a bad
    placeholder is a CliError now rather than on the first record."""
    tokens = _TOKEN.findall(fmt)
    if "".join(tokens) != fmt:
        raise CliError("--format ends in a lone % or \\")
    parts = []
    for token in tokens:
        if token.startswith("%"):
            field = _FIELDS.get(token[1:])
            if field is None:
                raise CliError(f"unknown placeholder {token!r} in --format (known: %t %p %o %k %s %K %S %T %h %%)")
            parts.append(field)
        elif token.startswith("\\"):
            literal = _ESCAPES.get(token, token.encode())
            parts.append(lambda m, b=literal: b)
        else:
            parts.append(lambda m, b=token.encode(): b)
    return lambda message: b"".join(part(message) for part in parts)


def as_json(message) -> dict:
    """One record as a JSON-friendly dict (bytes decoded as UTF-8, with replacement)."""
    def text(b):
        return None if b is None else b.decode("utf-8", errors="replace")
    return {
        "topic": message.topic(), "partition": message.partition(), "offset": message.offset(),
        "timestamp": message.timestamp()[1], "key": text(message.key()), "value": text(message.value()),
        "headers": [[k, text(v)] for k, v in (message.headers() or [])],
    }
