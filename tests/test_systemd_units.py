"""The systemd units pass ``systemd-analyze verify``, and the acceptor speaks
sd_notify to a real NOTIFY_SOCKET: READY once booted, watchdog pings,
RELOADING/READY around a SIGHUP reload, STOPPING on SIGTERM."""

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harness.broker import free_port

REPO = Path(__file__).resolve().parent.parent
UNITS = ["hpbroker.service", "hpbroker.socket", "hpbroker@.service"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_units_verify(tmp_path):
    # The units name /opt/hpbroker; point them at this checkout so the
    # executable they start exists, as verify checks.
    for name in UNITS:
        text = (REPO / "systemd" / name).read_text().replace("/opt/hpbroker", str(REPO))
        (tmp_path / name.replace("@.", "@b1.")).write_text(text)
    (tmp_path / "hpbroker@.service").write_text((tmp_path / "hpbroker@b1.service").read_text())
    result = subprocess.run(["systemd-analyze", "verify", "hpbroker.service", "hpbroker.socket",
                             "./hpbroker@b1.service"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr


def _reap(broker: subprocess.Popen, stderr) -> None:
    """Whatever happened, leave no broker behind."""
    if broker.poll() is None:
        broker.kill()
        broker.wait()
    stderr.close()


def _datagrams(sock: socket.socket, until: str) -> list[str]:
    """Messages up to and including the first one containing ``until`` (the socket's timeout bounds the wait)."""
    seen = []
    while True:
        message = sock.recv(4096).decode()
        seen.append(message)
        if until in message:
            return seen


def test_sd_notify_lifecycle(tmp_path):
    notify_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(notify_path))
    sock.settimeout(60)
    config = tmp_path / "server.properties"
    config.write_text(f"log.dirs={tmp_path / 'data'}\nlog.retention.ms=100000\n")
    env = dict(os.environ, NOTIFY_SOCKET=str(notify_path), WATCHDOG_USEC="1000000")
    stderr = open(tmp_path / "stderr.log", "w")
    broker = subprocess.Popen([sys.executable, "-m", "hpbroker", "serve", "--config", str(config),
                               "--listen", f"127.0.0.1:{free_port()}"], env=env, stderr=stderr, cwd=REPO)
    try:
        ready = _datagrams(sock, "READY=1")
        assert "workers" in ready[-1] and "STATUS=" in ready[-1]
        assert "WATCHDOG=1" in "".join(_datagrams(sock, "WATCHDOG=1"))
        config.write_text(f"log.dirs={tmp_path / 'data'}\nlog.retention.ms=5000\nnum.workers=7\n")
        broker.send_signal(signal.SIGHUP)
        reload = _datagrams(sock, "RELOADING=1")
        assert "MONOTONIC_USEC=" in reload[-1]
        _datagrams(sock, "READY=1")
        broker.send_signal(signal.SIGTERM)
        assert "STOPPING=1" in _datagrams(sock, "STOPPING=1")[-1]
        assert broker.wait(60) == 0
    finally:
        _reap(broker, stderr)
    log = (tmp_path / "stderr.log").read_text()
    assert "reloaded: changed log.retention.ms, num.workers; num.workers need a restart" in log
    assert "applied the reloaded log settings" in log


def test_socket_activation_the_acceptor_adopts_the_passed_listener(tmp_path):
    """As systemd's hpbroker.socket does: the listener arrives as fd 3 with
    LISTEN_FDS=1 and LISTEN_PID naming the broker; it must serve on it."""
    from harness.broker import metadata_ping
    from harness.waiting import wait_for

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    stderr = open(tmp_path / "stderr.log", "w")

    # A launcher moves the socket to fd 3, names its own pid and execs the
    # broker in place (same pid), as systemd does.
    launcher = ("import os, sys; os.dup2(int(sys.argv[1]), 3); os.close(int(sys.argv[1])); "
                "os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS='1'); "
                "os.execv(sys.executable, [sys.executable, '-m', 'hpbroker', 'serve', *sys.argv[2:]])")
    fd = listener.fileno()
    broker = subprocess.Popen(
        [sys.executable, "-c", launcher, str(fd), "--data-dir", str(tmp_path / "data"),
         "--listen", f"127.0.0.1:{port}"],
        stderr=stderr, cwd=REPO, pass_fds=(fd,))
    listener.close()  # only the broker holds it now
    try:
        assert wait_for(lambda: metadata_ping("127.0.0.1", port), timeout=60, what="the broker on the passed socket")
        broker.send_signal(signal.SIGTERM)
        assert broker.wait(60) == 0
    finally:
        _reap(broker, stderr)


def test_socket_activation_with_a_socket_per_listener(tmp_path):
    """A unit with a ListenStream= per listener passes several sockets, in the
    unit's order: each is matched to its listener by port, whatever the order."""
    from harness.broker import metadata_ping
    from harness.waiting import wait_for

    sockets = []
    for _ in range(2):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        sockets.append(s)
    first, second = (s.getsockname()[1] for s in sockets)
    stderr = open(tmp_path / "stderr.log", "w")
    # the second listener's socket comes first, as fd 3
    launcher = ("import os, sys; a, b = int(sys.argv[1]), int(sys.argv[2]); os.dup2(b, 3); os.dup2(a, 4); "
                "os.close(a); os.close(b); os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS='2'); "
                "os.execv(sys.executable, [sys.executable, '-m', 'hpbroker', 'serve', *sys.argv[3:]])")
    fds = tuple(s.fileno() for s in sockets)
    broker = subprocess.Popen(
        [sys.executable, "-c", launcher, *map(str, fds), "--data-dir", str(tmp_path / "data"),
         "--set", f"listeners=PLAINTEXT://127.0.0.1:{first},INTERNAL://127.0.0.1:{second}",
         "--set", "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT"],
        stderr=stderr, cwd=REPO, pass_fds=fds)
    for s in sockets:
        s.close()
    try:
        for port in (first, second):
            assert wait_for(lambda: metadata_ping("127.0.0.1", port), timeout=60, what=f"the broker on {port}")
        broker.send_signal(signal.SIGTERM)
        assert broker.wait(60) == 0
    finally:
        _reap(broker, stderr)
    log = (tmp_path / "stderr.log").read_text()
    assert f"listening on PLAINTEXT 127.0.0.1:{first}, INTERNAL 127.0.0.1:{second}" in log
