"""What the tests (tests/) and the benchmarks (bench/) both run hpbroker with:
real processes and the data to feed them, no assertions and no pytest.

* ``harness.broker``: one broker (``python -m hpbroker serve``) as a subprocess,
  started when it answers, stopped only cleanly; its workers, their CPU time.
* ``harness.zookeeper``: Debian's ZooKeeper server, standalone on one port.
* ``harness.cluster``: several brokers on one ZooKeeper with short timeouts,
  and what ZooKeeper says of them (controller, leaders, ISRs).
* ``harness.netns``: running the calling thread in a network namespace.
* ``harness.waiting``: waiting on a condition (``wait_for``, ``until``).
* ``harness.fake_clock``: a clock whose time moves only when a test advances it.
* ``harness.request_samples``: a well-formed request for every advertised
  (api key, version); the kio classes of a version (``request_schema``,
  ``response_schema``).

It lives beside ``hpbroker/`` and is not part of the wheel; the tests import it
from the repository root (pytest's ``pythonpath``), the benchmark scripts put
that root on ``sys.path`` themselves.
"""
