"""The README's configuration reference lists every key the broker accepts."""

from pathlib import Path

from hpbroker.server.config import _BROKER_KEYS
from hpbroker.storage.config import _KEYS

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_every_config_key_is_documented():
    keys = list(_BROKER_KEYS) + [k.broker_key for k in _KEYS] + [k.topic_key for k in _KEYS if k.topic_key]
    missing = [k for k in keys if f"`{k}`" not in README]
    assert not missing, f"README's configuration reference lacks {missing}"
