"""The README's configuration reference lists every key the broker accepts."""

from pathlib import Path

from hpbroker.server.config import known_keys

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_every_config_key_is_documented():
    missing = [k for k in known_keys() if f"`{k}`" not in README]
    assert not missing, f"README's configuration reference lacks {missing}"
