"""Log lines for people, journald and shippers."""

import json
import logging

import pytest

from hpbroker.server import logging_setup


@pytest.fixture(autouse=True)
def restore_root_logger():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _emit(capsys, monkeypatch, fmt, journal=False, **extra):
    if journal:
        monkeypatch.setenv("JOURNAL_STREAM", "8:1234")
    else:
        monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    logging_setup.setup("INFO", fmt)
    logging.getLogger("hpbroker.test").error("request failed", extra=extra)
    return capsys.readouterr().err.strip()


def test_journald_lines_carry_the_syslog_priority(capsys, monkeypatch):
    line = _emit(capsys, monkeypatch, "text", journal=True)
    assert line.startswith("<3>[") and line.endswith("hpbroker.test: request failed")


def test_json_lines_carry_the_request_context(capsys, monkeypatch):
    line = _emit(capsys, monkeypatch, "json", context={"client": "127.0.0.1:5", "api_key": 0, "correlation_id": 7})
    entry = json.loads(line)
    assert entry["level"] == "error" and entry["msg"] == "request failed" and entry["logger"] == "hpbroker.test"
    assert (entry["client"], entry["api_key"], entry["correlation_id"]) == ("127.0.0.1:5", 0, 7)
    assert entry["ts"].endswith("Z")
