"""Marks for what a test needs beyond this venv, put on at collection so that no
test has to remember them (the markers are declared in pyproject.toml):

* ``zookeeper``: Debian's ZooKeeper, a real server: every test in tests/cluster/
  and every test using the ``zookeeper`` fixture (``chroot`` uses it too);
* ``java``: a Java runtime for Spark: every test in tests/spark/ and every test
  using the ``spark`` fixture (the session starts the JVM through pyspark).

``pytest -m "not zookeeper and not java"`` runs the rest."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
BY_DIRECTORY = {"cluster": "zookeeper", "spark": "java"}
BY_FIXTURE = {"zookeeper": "zookeeper", "spark": "java"}


def needs(item) -> set[str]:
    found = {mark for fixture, mark in BY_FIXTURE.items() if fixture in item.fixturenames}
    try:
        directory = item.path.resolve().relative_to(TESTS).parts[0]
    except (ValueError, IndexError):  # not under tests/
        directory = None
    if directory in BY_DIRECTORY:
        found.add(BY_DIRECTORY[directory])
    return found


def pytest_collection_modifyitems(config, items):
    for item in items:
        for mark in sorted(needs(item)):
            item.add_marker(mark)
